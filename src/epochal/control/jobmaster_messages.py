"""The JobMaster machine's handlers of worker messages, and its record of each worker.

Owns ``MESSAGES``, the table from each :class:`~epochal.messages.ToJobMaster` message type every
job kind shares to what :class:`~epochal.control.jobmaster_machine.JobMasterMachine` does with
it, and :class:`WorkerInfo`, what the machine knows of a registered worker. Any other message of
a registered worker goes to the job kind's coordinator
(:meth:`~epochal.control.kinds.KindCoordinator.on_message`): a
:class:`~epochal.messages.KindReport` only while the job runs, the kind's own message types
(:attr:`~epochal.control.kinds.KindCoordinator.messages`) always. A registration is checked
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

from epochal.control.jobmaster_events import SendTo, WorkerMessage
from epochal.control.lifecycle import JobStatus
from epochal.messages import (
    Deploy,
    Dispatch,
    Failed,
    Finished,
    Heartbeat,
    KindReport,
    Metrics,
    Processing,
    Ready,
    Register,
    Reject,
    Start,
    ToJobMaster,
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
        jm.emit(jm.kind.restore_request(jm.attempt))


@MESSAGES.on(Heartbeat)
@_from_registered
def _on_heartbeat(jm: JobMasterMachine, worker: WorkerInfo, message: Heartbeat, event: WorkerMessage) -> None:
    worker.metrics = message.metrics


@MESSAGES.on(Ready)
@_from_registered
def _on_ready(jm: JobMasterMachine, worker: WorkerInfo, message: Ready, event: WorkerMessage) -> None:
    worker.ready = True
    if worker.index in jm.replacing:  # a replacement joins the running job
        del jm.replacing[worker.index]
        jm.emit(SendTo(worker.connection, Start()))
        local = jm.task_local()
        if local is not None:
            jm.kind_outputs(local.worker_rejoined(worker.index, event.now), event.now)
        return
    if jm.all_running():
        jm.broadcast([Start()])
        jm.started_running = True
        jm.restarting.all_ready(event.now)
        jm.kind_outputs(jm.kind.started(event.now, event.wall), event.now)


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
        jm.kind_outputs(jm.kind.all_finished(event.now, event.wall), event.now)


@MESSAGES.on(Processing)
@_from_registered
def _on_processing(jm: JobMasterMachine, worker: WorkerInfo, message: Processing, event: WorkerMessage) -> None:
    if jm.started_running:
        jm.restarting.processing(event.now)


@MESSAGES.on(Failed)
@_from_registered
def _on_failed(jm: JobMasterMachine, worker: WorkerInfo, message: Failed, event: WorkerMessage) -> None:
    jm.fail(message, event.now)


def kind_message(jm: JobMasterMachine, event: WorkerMessage) -> None:
    """A message of a type not in ``MESSAGES``, from a registered worker on its current connection:
    the kind's coordinator takes its own message types, and its reports while the job runs."""
    worker, message = jm.workers.get(event.worker), event.message
    if worker is None or worker.connection != event.connection:
        return
    running = jm.status == JobStatus.RUNNING
    if type(message) in jm.kind.messages or (isinstance(message, KindReport) and running):
        assert isinstance(message, ToJobMaster)
        jm.kind_outputs(jm.kind.on_message(worker.index, message, event.now, event.wall, running), event.now)
