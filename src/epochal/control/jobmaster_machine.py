"""The heart of the JobMaster: a pure state machine, ``handle(event) -> list[Instruction]``.

:class:`JobMasterMachine` owns what every job kind shares: the registered workers' records
(:class:`WorkerInfo`, each with the id of its control
connection), the job lifecycle (:class:`~epochal.control.lifecycle.JobLifecycle`), the restart
sub-machine (:class:`~epochal.control.restart.RestartMachine`), the failures of the current
attempt (ranked by :mod:`epochal.control.job_failures`), the attempt counter, the lost workers
being replaced or retired (task-local recovery), and the deadlines (registration, stop).
Everything of the job's kind (a dataflow job's checkpoints, loops and ``collect()`` ledger; a
graph job's barrier; a CEC job's replacements) is its :class:`~epochal.control.kinds.KindCoordinator`'s,
whose outputs the machine carries out (``kind_outputs``). No sockets, threads or clocks inside:
the events and instructions of :mod:`epochal.control.jobmaster_events` carry time in and effects
out, and the driver (:class:`~epochal.control.jobmaster.JobMaster`) owns the sockets, threads and
timers.

Events are dispatched by type (``EVENTS``); a :class:`WorkerMessage` goes on by its message's type
to ``MESSAGES`` (the handlers at the end of this module), which registers workers and handles
the reports every kind shares, and hands the kind's own messages to its coordinator. Every timer
(registration, heartbeats, the kind's timers, failure grace, restart delay, stop deadlines) is
checked on :class:`TimePassed`.

The first failure wins, after a grace period in which a more specific cause may still arrive;
then either the restart strategy allows another attempt (every worker is told to cancel, and the
next attempt starts once the Spark job is gone) or the job fails: the machine broadcasts
``Cancel`` and *stops*: it waits for the Spark job to end, or for ``cancel_timeout`` to pass (at
once if no worker registered; then it instructs to kill the Spark job), before the terminal
transition. While stopping only :class:`SparkJobEnded` and :class:`TimePassed` matter; every other
event is dropped. Not thread safe: the driver calls ``handle`` and the queries under one lock.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from epochal.config import EngineConfig
from epochal.control import job_failures, lifecycle
from epochal.control.jobmaster_events import (
    Broadcast,
    CancelRequested,
    CheckpointIdReserved,
    CheckpointWritten,
    CloseConnections,
    Event,
    Instruction,
    JobStarted,
    KillSparkJob,
    Restarting,
    RestoreFailed,
    RestoreResolved,
    SavepointDone,
    SavepointRequested,
    SendTo,
    SparkJobEnded,
    SubmitSparkJob,
    SubmitWorker,
    WorkerDisconnected,
    WorkerMessage,
)
from epochal.control.kinds import EndJob, KindCoordinator, KindOutput, ReplaceWorker, RetireWorker, TaskLocalRecovery
from epochal.control.lifecycle import JobLifecycle, JobStatus
from epochal.control.restart import RestartMachine, RestartStrategy
from epochal.errors import EpochalError, JobCancelledError, JobFailedError
from epochal.machines import TimePassed
from epochal.messages import (
    Cancel,
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
    ToWorker,
)

__all__ = ["DEFAULT_RESTORE_HINT", "EVENTS", "MESSAGES", "JobMasterMachine", "WorkerInfo"]

_ACTIVE = (JobStatus.DEPLOYING, JobStatus.RUNNING)
#: What a damaged checkpoint's error suggests when nothing better is known.
DEFAULT_RESTORE_HINT = "Restore from an earlier checkpoint of the job, if one is retained"
#: Event type -> handler (``WorkerMessage``s go on to ``MESSAGES``).
EVENTS = Dispatch("JobMaster events")


@dataclass(frozen=True)
class _Stopping:
    """The job fails for good once the Spark job ended or ``deadline`` passed (then it is killed)."""

    failed: lifecycle.RestoreUnreadable | lifecycle.RegistrationTimedOut | lifecycle.RestartsExhausted
    deadline: float


class JobMasterMachine:
    """The decisions of one job's JobMaster; see the module docstring."""

    def __init__(self, job_name: str, deployment: bytes, num_workers: int, config: EngineConfig,
                 kind: KindCoordinator, slots_hint: str = "", restart: RestartStrategy | None = None) -> None:
        self.job_name = job_name
        self.deployment = deployment
        self.num_workers = num_workers
        self.config = config
        self.slots_hint = slots_hint
        self.workers: dict[int, WorkerInfo] = {}
        #: the job kind's coordination (checkpoints, a graph's barrier, CEC's replacements)
        self.kind = kind
        self.lifecycle = JobLifecycle()
        self.failures: list[Failed] = []
        self.registration_deadline = 0.0
        self.stop_deadline = 0.0
        self.spark_done = False
        self.spark_results: list[Any] = []
        self.error: EpochalError | None = None
        self.restart = restart or RestartStrategy()
        #: whether and when a failed attempt is followed by another (the job restarts)
        self.restarting = RestartMachine(self.restart, config.cancel_timeout)
        #: What to suggest should the current attempt's checkpoint turn out damaged.
        self.restore_hint = DEFAULT_RESTORE_HINT
        self.resolving = False  # a ResolveRestore is out, not answered yet
        self.attempt = 0
        self.started_running = False
        #: task-local recovery: lost workers being replaced (index -> registration deadline), and
        #: lost workers the job goes on without
        self.replacing: dict[int, float] = {}
        self.retired: set[int] = set()
        self._stopping: _Stopping | None = None
        self._out: list[Instruction] = []

    @property
    def status(self) -> JobStatus:
        return self.lifecycle.status

    def handle(self, event: Event) -> list[Instruction]:
        """Take one event; return the instructions to carry out, in order."""
        if self._stopping is None or isinstance(event, (SparkJobEnded, TimePassed)):
            EVENTS.handlers[type(event)](self, event)
        out, self._out = self._out, []
        return out

    # ------------------------------------------------------------------ queries
    def connections(self) -> tuple[int, ...]:
        """The registered workers' connection ids, in registration order."""
        return tuple(w.connection for w in self.workers.values())

    def all_running(self) -> bool:
        """Every worker registered and ready, and the job running."""
        return self.status == JobStatus.RUNNING and len(self.workers) == self.live_workers and \
            all(w.ready for w in self.workers.values())

    @property
    def live_workers(self) -> int:
        """Workers the job has now: all but those retired by task-local recovery."""
        return self.num_workers - len(self.retired)

    def task_local(self) -> TaskLocalRecovery | None:
        """The kind's task-local recovery, if it has one and the job is past its start."""
        if self.started_running and self.status == JobStatus.RUNNING:
            return self.kind.local_recovery
        return None

    def kind_outputs(self, outputs: Iterable[KindOutput], now: float) -> None:
        """Carry out what the kind's coordinator returned, in order: messages for every worker,
        a failure of the attempt, workers to replace or retire, the end of the job (while it
        runs), and I/O for the driver."""
        for output in outputs:
            if isinstance(output, ToWorker):
                self.broadcast([output])
            elif isinstance(output, Failed):
                self.fail(output, now)
            elif isinstance(output, ReplaceWorker):
                self.replacing[output.worker] = now + self.config.registration_timeout
                self.emit(SubmitWorker(output.worker))
            elif isinstance(output, RetireWorker):
                self.retired.add(output.worker)
            elif isinstance(output, EndJob):
                if self.status == JobStatus.RUNNING:
                    self.shutdown(lifecycle.FinalCheckpointCommitted() if output.final_checkpoint
                                  else lifecycle.AllFinished(), now)
            else:
                self.emit(output)

    # ------------------------------------------------------------------ events
    @EVENTS.on(JobStarted)
    def _on_started(self, event: JobStarted) -> None:
        self._transition(lifecycle.Started())
        self.registration_deadline = event.now + self.config.registration_timeout
        self.emit(SubmitSparkJob())

    @EVENTS.on(WorkerDisconnected)
    def _on_disconnected(self, event: WorkerDisconnected) -> None:
        worker = self.workers.get(event.worker)
        if worker is None or worker.connection != event.connection:
            self.emit(CloseConnections((event.connection,)))  # no registered worker's: nothing uses it
        elif not worker.finished and (local := self.task_local()) is not None:
            del self.workers[event.worker]  # the others keep running; the kind recovers it
            self.emit(CloseConnections((event.connection,)))
            self.kind_outputs(local.worker_lost(event.worker, event.now), event.now)
            if local.recovering:  # every worker writes its output again once it is done
                for other in self.workers.values():
                    other.finished = False
        elif not worker.finished and self.status in (JobStatus.DEPLOYING, JobStatus.RUNNING, JobStatus.FAILING):
            self.restarting.failure_seen(event.now)
            self.fail(job_failures.worker_lost(worker.index, worker.task_attempt, worker.pid, worker.hostname),
                      event.now)

    @EVENTS.on(SparkJobEnded)
    def _on_spark_ended(self, event: SparkJobEnded) -> None:
        self.spark_done = True
        if self._stopping is not None:
            self._end_stop()
            return
        self.spark_results = event.results or []
        if self.status in _ACTIVE:
            ended = job_failures.spark_ended_early() if event.error is None else job_failures.spark_failed(event.error)
            self.fail(ended, event.now)

    @EVENTS.on(CancelRequested)
    def _on_cancel(self, event: CancelRequested) -> None:
        cancel = lifecycle.CancelDecided(event.reason)
        if self.lifecycle.accepts(cancel):  # else: not started yet, or already stopping
            self.error = JobCancelledError(f"job '{self.job_name}' was cancelled: {event.reason}")
            self._transition(cancel)
            # no worker registered yet (e.g. waiting for slots): nothing can stop by itself
            self.stop_deadline = event.now + (self.config.cancel_timeout if self.workers else 0.0)

    @EVENTS.on(WorkerMessage)
    def _on_message(self, event: WorkerMessage) -> None:
        worker = self.workers.get(event.worker)
        if worker is not None and worker.connection == event.connection:
            worker.last_seen = event.now
        MESSAGES.handlers.get(type(event.message), kind_message)(self, event)

    @EVENTS.on(RestoreResolved)
    def _on_restore_resolved(self, event: RestoreResolved) -> None:
        if not self.resolving or self.status != JobStatus.DEPLOYING:
            return
        self.resolving = False
        self.restore_hint = event.hint
        peers = {i: (w.host, w.data_port) for i, w in self.workers.items()}
        self._transition(lifecycle.AllRegistered())
        self.broadcast([Deploy(self.deployment, peers, event.point)])

    @EVENTS.on(RestoreFailed)
    def _on_restore_failed(self, event: RestoreFailed) -> None:
        if not self.resolving or self.status != JobStatus.DEPLOYING:
            return
        self.resolving = False
        self.error = event.error
        self._stop(lifecycle.RestoreUnreadable(), event.now)

    @EVENTS.on(SavepointRequested)
    def _on_savepoint(self, event: SavepointRequested) -> None:
        request = event.request
        if self.status != JobStatus.RUNNING or not self.started_running:
            state = ("restarting" if self.status in (JobStatus.FAILING, JobStatus.RESTARTING)
                     else "starting (its workers are restoring their state)" if self.status == JobStatus.RUNNING
                     else self.status.value)
            self.emit(SavepointDone(request.request_id, None, f"job '{self.job_name}' is {state}: a savepoint "
                                    "is taken only while every worker runs; try again once it runs"))
            return
        self.kind_outputs(self.kind.request_savepoint(request, event.now, event.wall), event.now)

    @EVENTS.on(CheckpointIdReserved)
    def _on_checkpoint_id_reserved(self, event: CheckpointIdReserved) -> None:
        self.kind_outputs(self.kind.checkpoint_reserved(event.checkpoint_id, event.refused, event.now), event.now)

    @EVENTS.on(CheckpointWritten)
    def _on_checkpoint_written(self, event: CheckpointWritten) -> None:
        self.kind_outputs(self.kind.checkpoint_written(event.checkpoint_id, event.error, event.now), event.now)

    @EVENTS.on(TimePassed)
    def _on_tick(self, event: TimePassed) -> None:
        now = event.now
        if self._stopping is not None:
            if now >= self._stopping.deadline:
                self._end_stop()
        elif self.status == JobStatus.DEPLOYING and now > self.registration_deadline and not self.resolving:
            self.error = job_failures.too_few_slots(self.job_name, self.num_workers, len(self.workers),
                                                    self.config.registration_timeout, self.slots_hint)
            self._stop(lifecycle.RegistrationTimedOut(), now)
        elif self.status == JobStatus.RUNNING:
            self._check_running(now, event.wall)
        elif self.lifecycle.grace_over(now):
            self._decide(now)
        elif self.status == JobStatus.RESTARTING:
            for instruction in self.restarting.tick(now, self.spark_done):
                if isinstance(instruction, lifecycle.StartAttempt):
                    self._new_attempt(now)
                else:
                    self.emit(instruction)
        elif self.status in (JobStatus.FINISHING, JobStatus.CANCELLING):
            if self.spark_done:
                self._transition(lifecycle.SparkStopped())
            elif now > self.stop_deadline:
                self._transition(lifecycle.StopDeadlinePassed())  # kills the Spark job

    # ------------------------------------------------------------------ decisions
    def _check_running(self, now: float, wall: float) -> None:
        """While RUNNING: the kind's timers (a dataflow job's checkpoints), replacements that did
        not register in time, then the workers' heartbeats."""
        if self.started_running:
            self.kind_outputs(self.kind.tick(now, wall), now)
            if self.status != JobStatus.RUNNING:
                return
        for index, deadline in self.replacing.items():
            if now > deadline and index not in self.workers:
                self.fail(job_failures.replacement_missing(index, self.config.registration_timeout,
                                                           self.slots_hint), now)
                return
        timeout = self.config.heartbeat_timeout
        for worker in self.workers.values():
            if not worker.finished and now - worker.last_seen > timeout:
                self.fail(job_failures.heartbeat_missed(worker.index, worker.pid, worker.hostname, timeout), now)
                break

    def fail(self, failure: Failed, now: float) -> None:
        """Record ``failure`` of the current attempt; the first one starts the grace period."""
        self.failures.append(failure)
        if self.status in (JobStatus.DEPLOYING, JobStatus.RUNNING, JobStatus.FINISHING):
            self._transition(lifecycle.FailureReported(now))
            self.restarting.failure_seen(self.lifecycle.failing_since)

    def _decide(self, now: float) -> None:
        """The grace period is over: restart, or fail for good with the best-ranked failure."""
        error = self.failure_error()
        refusal = self.kind.restart_refusal()
        delay = self.restarting.decide(error.category, now) if refusal is None else None
        if refusal is not None:
            error.args = (f"{error.args[0]}\n({refusal})",)
        if delay is None:
            if self.restarting.restarts:
                error.args = (f"{error.args[0]}{self.restarting.give_up_note()}",)
            self.error = error
            self._stop(lifecycle.RestartsExhausted(), now)
            return
        # stop this attempt's workers; the next attempt starts once its Spark job is gone
        cause = str(error).splitlines()[0]
        self.restarting.begin(self.attempt, cause, delay, now, str(error), getattr(error, "category", ""))
        self.emit(Restarting(self.attempt, cause.removeprefix(f"job '{self.job_name}' failed: "), delay,
                             len(self.restarting.restarts), self.restarting.strategy.describe()))
        self.kind_outputs(self.kind.attempt_failed(f"job attempt {self.attempt} failed", now), now)
        self._transition(lifecycle.RestartDecided(str(error)))  # broadcasts Cancel

    def _new_attempt(self, now: float) -> None:
        """The failed attempt is gone: forget its workers and failures, submit the next one."""
        self.emit(CloseConnections(self.connections()))
        self.workers = {}
        self.failures = []
        self.restarting.new_attempt()
        self.spark_done = False
        self.started_running = False
        self.replacing, self.retired = {}, set()
        self.attempt += 1
        self.kind.new_attempt(self.attempt)
        self._transition(lifecycle.NewAttempt())
        self.registration_deadline = now + self.config.registration_timeout
        self.emit(SubmitSparkJob())

    def shutdown(self, event: lifecycle.AllFinished | lifecycle.FinalCheckpointCommitted, now: float) -> None:
        """The job finished: tell the workers to shut down; they have ``cancel_timeout`` to stop."""
        self._transition(event)  # broadcasts Shutdown
        self.stop_deadline = now + self.config.cancel_timeout

    def _stop(self, failed: lifecycle.RestoreUnreadable | lifecycle.RegistrationTimedOut
              | lifecycle.RestartsExhausted, now: float) -> None:
        """Tell the workers to stop; the job fails once the Spark job ended, or when
        ``cancel_timeout`` passed (at once if no worker could stop by itself), killing it."""
        self.broadcast([Cancel(str(self.error))])
        self._stopping = _Stopping(failed, now + self.config.cancel_timeout if self.workers else now)
        if self.spark_done or not self.workers:
            self._end_stop()

    def _end_stop(self) -> None:
        assert self._stopping is not None
        failed, self._stopping = self._stopping.failed, None
        if not self.spark_done:
            self.emit(KillSparkJob())
        self._transition(failed)

    def failure_error(self) -> JobFailedError:
        """The error that explains the current attempt's failures best (``job_failures.FAILURE_RANK``)."""
        return job_failures.failure_error(self.failures, self.job_name, self.restore_hint)

    # ------------------------------------------------------------------ instructions
    def emit(self, *instructions: Instruction) -> None:
        """Add instructions to those ``handle`` returns."""
        self._out.extend(instructions)

    def broadcast(self, messages: Iterable[ToWorker]) -> None:
        """Instruct to send each of ``messages`` to the workers registered now."""
        connections = self.connections()
        self._out.extend(Broadcast(message, connections) for message in messages)

    def _transition(self, event: lifecycle.LifecycleEvent) -> None:
        """Feed the lifecycle one event and turn its instructions into the machine's."""
        for instruction in self.lifecycle.handle(event):
            if isinstance(instruction, lifecycle.TellWorkers):
                self.broadcast([instruction.message])
            elif isinstance(instruction, lifecycle.KillSparkJob):
                self.emit(instruction)
            else:
                raise AssertionError(f"the JobMaster machine starts attempts itself, not via {instruction}")


# ---------------------------------------------------------------------------------------------------
# The machine's handlers of worker messages, and its record of each worker.
#
# ``MESSAGES`` is the table from each :class:`~epochal.messages.ToJobMaster` message type every job
# kind shares to what :class:`JobMasterMachine` does with it, and :class:`WorkerInfo`, what the
# machine knows of a registered worker. Any other message of a registered worker goes to the job
# kind's coordinator (:meth:`~epochal.control.kinds.KindCoordinator.on_message`): a
# :class:`~epochal.messages.KindReport` only while the job runs, the kind's own message types
# (:attr:`~epochal.control.kinds.KindCoordinator.messages`) always. A registration is checked here
# (the job attempt it belongs to, its worker index, duplicates); every other message counts only
# from a registered worker on its current connection (``_from_registered``): a message on a
# connection the worker no longer uses (it registered again, or its attempt was replaced) is
# ignored. Handlers are functions of the machine (``handler(machine, event)``), pure like it: they
# change its state (``jm``: the machine) and add instructions through its ``emit``, ``broadcast``,
# ``fail`` and ``shutdown``.


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
