"""The JobMaster machine's handlers of worker messages, and its record of each worker.

Owns ``MESSAGES``, the table from each :class:`~epochal.messages.ToJobMaster` message type to
what :class:`~epochal.control.jobmaster_machine.JobMasterMachine` does with it, and
:class:`WorkerInfo`, what the machine knows of a registered worker. A registration is checked
here (the job attempt it belongs to, its worker index, duplicates); every other message counts
only from a registered worker on its current connection (``_from_registered``): a message on a
connection the worker no longer uses (it registered again, or its attempt was replaced) is
ignored. Handlers are functions of the machine (``handler(machine, event)``), pure like it:
they change its state (``jm``: the machine) and add instructions through its ``emit``,
``broadcast``, ``fail`` and ``shutdown``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from epochal.control import job_failures, lifecycle
from epochal.control.jobmaster_events import ResolveRestore, SendTo, WorkerMessage
from epochal.control.lifecycle import JobStatus
from epochal.messages import (
    Ack,
    Collect,
    Committed,
    Decline,
    Deploy,
    Dispatch,
    Failed,
    Finished,
    Heartbeat,
    KindCommand,
    KindReport,
    LoopReady,
    LoopVote,
    Metrics,
    Processing,
    Ready,
    Register,
    Reject,
    Start,
)

if TYPE_CHECKING:
    from epochal.control.jobmaster_machine import JobMasterMachine

__all__ = ["MESSAGES", "WorkerInfo"]


@dataclass
class WorkerInfo:
    """A registered worker: where it runs, the id of its control connection, what it reported."""

    index: int
    #: Spark's attempt number of the task running the worker.
    task_attempt: int
    pid: int
    host: str
    hostname: str
    data_port: int
    connection: int
    last_seen: float
    ready: bool = False
    finished: bool = False
    metrics: Metrics = field(default_factory=dict)


#: Message type -> handler(machine, event).
MESSAGES = Dispatch("JobMaster messages")
_WorkerHandler = Callable[["JobMasterMachine", WorkerInfo, Any, WorkerMessage], None]


def _from_registered(handler: _WorkerHandler) -> Callable[[JobMasterMachine, WorkerMessage], None]:
    """Only messages of a registered worker, on its current connection, reach ``handler``."""

    @functools.wraps(handler)
    def checked(jm: JobMasterMachine, event: WorkerMessage) -> None:
        worker = jm.workers.get(event.worker)
        if worker is not None and worker.connection == event.connection:
            handler(jm, worker, event.message, event)

    return checked


@MESSAGES.on(Register)
def _on_register(jm: JobMasterMachine, event: WorkerMessage) -> None:
    """Admit a worker of the current attempt, once per index, while DEPLOYING (else reject it); when
    the last one registered, ask what the attempt restores (the answer deploys the job)."""
    index, message = event.worker, event.message
    assert isinstance(message, Register)
    if index in jm.replacing and index not in jm.workers and message.job_attempt == jm.attempt \
            and jm.status == JobStatus.RUNNING:  # the replacement of a lost worker (task-local recovery)
        jm.workers[index] = WorkerInfo(index, message.task_attempt, message.pid, message.host, message.hostname,
                                       message.data_port, event.connection, last_seen=event.now)
        peers = {i: (w.host, w.data_port) for i, w in jm.workers.items()}
        jm.emit(SendTo(event.connection, Deploy(jm.deployment, peers, None, joining=True)))
        return
    if jm.status != JobStatus.DEPLOYING or not 0 <= index < jm.num_workers or index in jm.workers \
            or message.job_attempt != jm.attempt:
        jm.emit(SendTo(event.connection, Reject(f"job is {jm.status.value}; worker {index} "
                                                f"attempt {message.task_attempt} is not needed")))
        return
    jm.workers[index] = WorkerInfo(index, message.task_attempt, message.pid, message.host, message.hostname,
                                   message.data_port, event.connection, last_seen=event.now)
    if len(jm.workers) == jm.num_workers:
        jm.resolving = True
        coordinator = jm.coordinator
        if jm.kind is not None:
            jm.emit(jm.kind.restore_request(jm.attempt))
        elif coordinator is not None and coordinator.latest_completed is not None and (
                jm.attempt > 0 or jm.restore is None):
            # a restarted attempt (or a job run again) resumes at its own latest checkpoint
            jm.emit(ResolveRestore(coordinator.storage, coordinator.latest_completed, None))
        else:
            jm.emit(ResolveRestore(None, None, jm.restore))


@MESSAGES.on(Heartbeat)
@_from_registered
def _on_heartbeat(jm: JobMasterMachine, worker: WorkerInfo, message: Heartbeat, event: WorkerMessage) -> None:
    worker.metrics = message.metrics


@MESSAGES.on(Collect)
@_from_registered
def _on_collect(jm: JobMasterMachine, worker: WorkerInfo, message: Collect, event: WorkerMessage) -> None:
    jm.collects.receive(message.collect_id, message.payload)


@MESSAGES.on(Ready)
@_from_registered
def _on_ready(jm: JobMasterMachine, worker: WorkerInfo, message: Ready, event: WorkerMessage) -> None:
    worker.ready = True
    if worker.index in jm.replacing:  # a replacement joins the running job
        del jm.replacing[worker.index]
        jm.emit(SendTo(worker.connection, Start()))
        local = jm.task_local()
        if local is not None:
            jm.kind_commands(local.worker_rejoined(worker.index, event.now), event.now)
        return
    if jm.all_running():
        jm.broadcast([Start()])
        jm.started_running = True
        jm.restarting.all_ready(event.now)
        if jm.kind is not None:
            jm.broadcast([KindCommand(p) for p in jm.kind.started(event.now)])


@MESSAGES.on(Finished)
@_from_registered
def _on_finished(jm: JobMasterMachine, worker: WorkerInfo, message: Finished, event: WorkerMessage) -> None:
    local = jm.task_local()
    if local is not None and local.recovering:
        return  # sent before the recovery under way: the worker writes its output and reports again
    worker.finished = True
    worker.metrics = message.metrics
    if jm.status == JobStatus.RUNNING and len(jm.workers) == jm.live_workers and not jm.replacing \
            and all(w.finished for w in jm.workers.values()):
        if jm.coordinator is None:
            jm.shutdown(lifecycle.AllFinished(), event.now)
        elif jm.final_checkpoint is None:
            # every record is processed: one last checkpoint commits the sinks' final epoch
            jm.coordinator.paused = True
            jm.final_checkpoint, messages = jm.coordinator.trigger(event.now, event.wall)
            jm.broadcast(messages)


@MESSAGES.on(Ack)
@_from_registered
def _on_ack(jm: JobMasterMachine, worker: WorkerInfo, message: Ack, event: WorkerMessage) -> None:
    if jm.coordinator is not None:
        jm.broadcast(jm.coordinator.on_ack(message, event.now)[1])


@MESSAGES.on(Decline)
@_from_registered
def _on_decline(jm: JobMasterMachine, worker: WorkerInfo, message: Decline, event: WorkerMessage) -> None:
    if jm.coordinator is None:
        return
    tolerable, messages = jm.coordinator.on_decline(message, event.now)
    jm.broadcast(messages)
    if not tolerable:
        jm.fail(job_failures.checkpoint_declined(message.checkpoint_id, message.reason,
                                                 jm.coordinator.config.tolerable_failures), event.now)
    else:
        jm.retry_final_checkpoint(messages, event.now, event.wall)


@MESSAGES.on(Processing)
@_from_registered
def _on_processing(jm: JobMasterMachine, worker: WorkerInfo, message: Processing, event: WorkerMessage) -> None:
    if jm.started_running:
        jm.restarting.processing(event.now)


@MESSAGES.on(LoopReady)
@_from_registered
def _on_loop_ready(jm: JobMasterMachine, worker: WorkerInfo, message: LoopReady, event: WorkerMessage) -> None:
    jm.broadcast(jm.loops.on_ready(message.loop, message.subtask))


@MESSAGES.on(LoopVote)
@_from_registered
def _on_loop_vote(jm: JobMasterMachine, worker: WorkerInfo, message: LoopVote, event: WorkerMessage) -> None:
    jm.broadcast(jm.loops.on_vote(message.loop, message.round, message.subtask, message.quiet))


@MESSAGES.on(Committed)
@_from_registered
def _on_committed(jm: JobMasterMachine, worker: WorkerInfo, message: Committed, event: WorkerMessage) -> None:
    if message.checkpoint_id == jm.final_checkpoint:
        jm.committed.add(worker.index)
        if len(jm.committed) == jm.num_workers and jm.status == JobStatus.RUNNING:
            jm.shutdown(lifecycle.FinalCheckpointCommitted(), event.now)


@MESSAGES.on(KindReport)
@_from_registered
def _on_kind_report(jm: JobMasterMachine, worker: WorkerInfo, message: KindReport, event: WorkerMessage) -> None:
    if jm.kind is not None and jm.status == JobStatus.RUNNING:
        jm.kind_commands(jm.kind.on_report(worker.index, message.payload, event.now), event.now)


@MESSAGES.on(Failed)
@_from_registered
def _on_failed(jm: JobMasterMachine, worker: WorkerInfo, message: Failed, event: WorkerMessage) -> None:
    jm.fail(message, event.now)
