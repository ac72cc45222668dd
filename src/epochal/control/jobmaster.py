"""The JobMaster: the driver-side coordinator of one job, a thin driver around its state machine.

Every decision is :class:`~epochal.control.jobmaster_machine.JobMasterMachine`'s (registration,
deployment, readiness, failures, restarts, cancel, the end of the job) or its job kind's
coordinator's; this module owns only what they may not: the
:class:`~epochal.control.server.ControlServer` (the TCP listener and the workers' control
connections), the coordinator thread, the clock, the Spark job (submitted and killed through the
two callbacks it is given), the I/O of finding what an attempt restores and the checkpoint files
(:class:`~epochal.control.checkpoint_files.CheckpointFiles`).

The coordinator thread loops: take an event from the inbox (:mod:`epochal.control.inbox`; the
server's readers, the Spark launcher thread and ``cancel`` put them there) for up to 50 ms, stamp
it with the time and hand it to the machine, then hand it a :class:`TimePassed`; it carries out the
instructions the machine returns, and once the job's status is terminal it closes every connection
and sets ``done``. The machine is changed only under ``_lock``, held while ``handle`` runs; the
query methods that other threads (``JobClient``) call take the same lock. Instructions are carried
out outside it, in order; the answer to a :class:`ResolveRestore`, a ``WriteCheckpoint`` or a
``ReserveCheckpointId`` is handed to the machine at once, and its instructions are carried out
before the rest.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from epochal.config import EngineConfig
from epochal.control.checkpoint_files import (
    CheckpointFence,
    CheckpointFiles,
    CheckpointIdReserved,
    CheckpointWritten,
    DeleteCheckpoints,
    DiscardCheckpoint,
    RecordStats,
    ReserveCheckpointId,
    WriteCheckpoint,
)
from epochal.control.inbox import CancelAsked, Disconnected, InboxEvent, Received, SavepointAsked, SparkEnded
from epochal.control.jobmaster_events import (
    Broadcast,
    CancelRequested,
    CloseConnections,
    Event,
    Instruction,
    JobStarted,
    KillSparkJob,
    ResolveRestore,
    Restarting,
    RestoreFailed,
    RestoreResolved,
    SavepointDone,
    SavepointRequest,
    SavepointRequested,
    SendTo,
    SparkJobEnded,
    SubmitSparkJob,
    SubmitWorker,
    WorkerDisconnected,
    WorkerMessage,
)
from epochal.control.jobmaster_machine import DEFAULT_RESTORE_HINT, MESSAGES, JobMasterMachine, WorkerInfo
from epochal.control.kinds import KindCoordinator
from epochal.control.lifecycle import JobStatus
from epochal.control.restart import RestartStrategy
from epochal.control.savepoints import IN_PROGRESS, SavepointStatus, check_writable, new_request
from epochal.control.server import ControlServer
from epochal.errors import EpochalError
from epochal.machines import TimePassed
from epochal.messages import Dispatch, Metrics, RestorePoint, ToWorker
from epochal.runtime.queries.wire import query_token
from epochal.state.storage import CheckpointStorage

__all__ = ["JobMaster", "JobStatus", "WorkerInfo", "summarize_spark_error"]

_log = logging.getLogger("epochal")

#: The driver's tables: inbox event type -> the machine event it becomes, and instruction type ->
#: how it is carried out. ``_ON`` is the machine's message table (tests/unit/test_messages.py).
_INBOX = Dispatch("JobMaster inbox")
_DO = Dispatch("JobMaster instructions")
_ON = MESSAGES
T = TypeVar("T")


class JobMaster:
    """Coordinates one job's workers; ``submit_spark_job`` starts the Spark job of W tasks."""

    def __init__(self, job_name: str, job_id: str, deployment: bytes, num_workers: int, config: EngineConfig,
                 token: bytes, bind_host: str, kind: KindCoordinator,
                 submit_spark_job: Callable[[JobMaster], None], cancel_spark_job: Callable[[], None],
                 slots_hint: str = "", restart: RestartStrategy | None = None,
                 submit_worker: Callable[[int], None] | None = None,
                 fence: CheckpointFence | None = None) -> None:
        self.job_name = job_name
        #: submits one Spark task for a worker index (task-local recovery); None: not supported
        self.submit_worker = submit_worker
        self.job_id = job_id
        self.num_workers = num_workers
        self.config = config
        self.submit_spark_job = submit_spark_job
        self.cancel_spark_job = cancel_spark_job
        #: the job kind's coordination, part of the machine (read through :meth:`query`)
        self.kind = kind
        #: Every decision, and the state it is taken on; changed only under ``_lock``.
        self.machine = JobMasterMachine(job_name, deployment, num_workers, config, kind, slots_hint, restart)
        #: the checkpoint I/O; ``fence``: with high availability, what a deposed leader may not write
        self.files = CheckpointFiles(fence)
        #: the savepoint requests of this job, by request id
        self.savepoints: dict[str, SavepointStatus] = {}
        self.events: queue.SimpleQueue[InboxEvent] = queue.SimpleQueue()
        self.server = ControlServer(bind_host, token, self.events.put)
        #: the token queries of the job's queryable states carry (derived from ``token``)
        self.query_token = query_token(token)
        self.address = self.server.address
        self.started_at = 0.0
        #: the wall-clock time (``time.time()``) of ``start``; ``started_at``/``ended_at`` are monotonic
        self.start_time = 0.0
        self.ended_at = 0.0
        self.done = threading.Event()
        #: the job's page on its driver's dashboard, token included (set by the REST server; "": none)
        self.dashboard_url = ""
        #: called once the job ended, before ``done`` is set (e.g. giving up its sinks' claims,
        #: so a job started right after this one ended finds them free)
        self.on_end: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ public
    def start(self) -> None:
        """Open for registrations, submit the Spark job, and coordinate on a background thread."""
        self.started_at = time.monotonic()
        self.start_time = time.time()
        instructions = self._handle(JobStarted(self.started_at))
        self.server.start()
        threading.Thread(target=self._coordinate, name="epochal-jm", daemon=True).start()
        self._carry_out(instructions)  # submits the Spark job

    def cancel(self, reason: str = "cancelled by the user") -> None:
        """Ask every worker to stop; the job ends as CANCELLED."""
        self.events.put(CancelAsked(reason))

    def request_savepoint(self, target_dir: str, format: str = "canonical", stop: bool = False,
                          drain: bool = False) -> SavepointStatus:
        """Ask for a savepoint in a directory of its own under ``target_dir`` (created and
        checked writable here, so a bad target fails at once); returns its status, which the
        machine's ``SavepointDone`` ends (``SavepointStatus.wait``)."""
        status = new_request(self.job_id, target_dir, format, stop, drain)
        with self._lock:
            self.savepoints[status.request_id] = status
        error = check_writable(status.location)
        if error is not None:
            status.end(None, error)
            status.decide("target")
            return status
        self.events.put(SavepointAsked(SavepointRequest(status.request_id, status.location, format, stop, drain)))
        return status

    def savepoint_status(self, request_id: str) -> SavepointStatus | None:
        with self._lock:
            return self.savepoints.get(request_id)

    def spark_finished(self, results: list[Any] | None, error: BaseException | None) -> None:
        """Called by the Spark launcher thread when the Spark job returns or fails."""
        self.events.put(SparkEnded(results, error))

    def broadcast(self, message: ToWorker) -> None:
        """Send ``message`` to every registered worker."""
        with self._lock:
            connections = self.machine.connections()
        for connection in connections:
            self.server.send(connection, message)

    # Status, attempt, error and spark_done are single references to immutable values, read
    # as they are; the containers behind the query methods change under the lock they take.
    @property
    def status(self) -> JobStatus:
        return self.machine.status

    @property
    def attempt(self) -> int:
        return self.machine.attempt

    @property
    def error(self) -> EpochalError | None:
        return self.machine.error

    @property
    def spark_done(self) -> bool:
        return self.machine.spark_done

    @property
    def spark_results(self) -> list[Any]:
        return self.machine.spark_results

    @property
    def restarts(self) -> list[dict[str, Any]]:
        return self.machine.restarting.restarts

    # ------------------------------------------------------------------ queries (any thread)
    def snapshot_metrics(self) -> dict[int, Metrics]:
        with self._lock:
            return {i: dict(w.metrics) for i, w in self.machine.workers.items()}

    def worker_infos(self) -> dict[int, dict[str, Any]]:
        """Registered workers: pid, host, hostname, data port and Spark task attempt of each."""
        with self._lock:
            return {i: {"pid": w.pid, "host": w.host, "hostname": w.hostname, "data_port": w.data_port,
                        "attempt": w.task_attempt} for i, w in self.machine.workers.items()}

    def registered_workers(self) -> int:
        with self._lock:
            return len(self.machine.workers)

    def all_running(self) -> bool:
        """Every worker registered and ready, and the job running."""
        with self._lock:
            return self.machine.all_running()

    def query(self, read: Callable[[KindCoordinator], T]) -> T:
        """``read(kind coordinator)`` under the lock: what a client reads of the kind's state."""
        with self._lock:
            return read(self.kind)

    def restart_history(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self.restarts]

    # ------------------------------------------------------------------ the coordinator thread
    def _coordinate(self) -> None:
        while not self.machine.status.is_terminal:
            try:
                event = self.events.get(timeout=0.05)
            except queue.Empty:
                event = None
            if event is not None:
                self._process(event)
            self._tick(time.monotonic())
        self.ended_at = time.monotonic()
        with self._lock:
            cleanup = self.kind.job_ended()  # e.g. files of checkpoints that can never complete
            unfinished = [s for s in self.savepoints.values() if s.status == IN_PROGRESS]
        self._carry_out(cleanup)
        for status in unfinished:
            status.end(None, f"the job ended ({self.machine.status.value}) before the savepoint completed")
            status.decide()
        self.server.close_all()
        for hook in self.on_end:
            try:
                hook()
            except Exception:  # noqa: BLE001 - one failing hook must not keep the job from ending
                _log.exception("job %s: an end-of-job hook failed", self.job_name)
        self.done.set()

    def _process(self, event: InboxEvent) -> None:
        """Hand one inbox event, stamped with the time, to the machine; carry out what it says."""
        self._carry_out(self._handle(_INBOX.handlers[type(event)](self, event)))
        if isinstance(event, SavepointAsked):  # the machine took the request up, or refused it
            status = self.savepoint_status(event.request.request_id)
            if status is not None:
                status.decide()

    def _tick(self, now: float) -> None:
        """Let the machine check its timers at ``now``; carry out what it says."""
        self._carry_out(self._handle(TimePassed(now, time.time())))

    def _handle(self, event: Event) -> list[Instruction]:
        with self._lock:
            return self.machine.handle(event)

    def _carry_out(self, instructions: list[Instruction]) -> None:
        for instruction in instructions:
            _DO.handlers[type(instruction)](self, instruction)

    # ------------------------------------------------------------------ inbox -> machine events
    @_INBOX.on(Received)
    def _received(self, event: Received) -> Event:
        return WorkerMessage(event.worker, event.connection, event.message, time.monotonic(), time.time())

    @_INBOX.on(Disconnected)
    def _disconnected(self, event: Disconnected) -> Event:
        return WorkerDisconnected(event.worker, event.connection, time.monotonic())

    @_INBOX.on(SavepointAsked)
    def _savepoint_asked(self, event: SavepointAsked) -> Event:
        return SavepointRequested(event.request, time.monotonic(), time.time())

    @_INBOX.on(SparkEnded)
    def _spark_ended(self, event: SparkEnded) -> Event:
        error = None if event.error is None else summarize_spark_error(event.error)
        return SparkJobEnded(event.results, error, time.monotonic())

    @_INBOX.on(CancelAsked)
    def _cancel_asked(self, event: CancelAsked) -> Event:
        return CancelRequested(event.reason, time.monotonic())

    # ------------------------------------------------------------------ instructions
    @_DO.on(SendTo)
    def _send_to(self, instruction: SendTo) -> None:
        self.server.send(instruction.connection, instruction.message)

    @_DO.on(Broadcast)
    def _broadcast(self, instruction: Broadcast) -> None:
        for connection in instruction.connections:
            self.server.send(connection, instruction.message)

    @_DO.on(SubmitSparkJob)
    def _submit(self, instruction: SubmitSparkJob) -> None:
        self.submit_spark_job(self)

    @_DO.on(SubmitWorker)
    def _submit_worker(self, instruction: SubmitWorker) -> None:
        assert self.submit_worker is not None, "task-local recovery needs a launcher that submits single tasks"
        self.submit_worker(instruction.worker)

    @_DO.on(KillSparkJob)
    def _kill(self, instruction: KillSparkJob) -> None:
        self.cancel_spark_job()

    @_DO.on(Restarting)
    def _restarting(self, instruction: Restarting) -> None:
        _log.warning("job '%s' restarts in %gs (restart %d; %s) after attempt %d failed: %s", self.job_name,
                     instruction.delay, instruction.number, instruction.strategy, instruction.attempt,
                     instruction.cause)

    @_DO.on(CloseConnections)
    def _close(self, instruction: CloseConnections) -> None:
        self.server.close(instruction.connections)

    @_DO.on(ResolveRestore)
    def _resolve_restore(self, instruction: ResolveRestore) -> None:
        self._carry_out(self._handle(resolve_restore(instruction)))

    @_DO.on(SavepointDone)
    def _savepoint_done(self, instruction: SavepointDone) -> None:
        with self._lock:
            status = self.savepoints.get(instruction.request_id)
        if status is not None:
            status.end(instruction.location, instruction.error)

    @_DO.on(WriteCheckpoint)
    def _write_checkpoint(self, instruction: WriteCheckpoint) -> None:
        error = self.files.write(instruction)
        self._carry_out(self._handle(CheckpointWritten(instruction.checkpoint_id, error, time.monotonic())))

    @_DO.on(ReserveCheckpointId)
    def _reserve_checkpoint_id(self, instruction: ReserveCheckpointId) -> None:
        refused = self.files.reserve(instruction.checkpoint_id)
        if refused:  # not started: no worker sees its id (aborted; a deposed leader stops)
            _log.warning("checkpoint %d of job '%s' not started: %s", instruction.checkpoint_id, self.job_name,
                         refused)
        self._carry_out(self._handle(CheckpointIdReserved(instruction.checkpoint_id, refused, time.monotonic())))

    @_DO.on(DeleteCheckpoints)
    @_DO.on(DiscardCheckpoint)
    @_DO.on(RecordStats)
    def _checkpoint_files(self, instruction: DeleteCheckpoints | DiscardCheckpoint | RecordStats) -> None:
        self.files.carry_out(instruction)


def resolve_restore(instruction: ResolveRestore) -> RestoreResolved | RestoreFailed:
    """Carry out ``instruction``: read and check the checkpoint it names (metadata, and the sizes
    of its state files: cheap, the workers verify checksums as they read), or take the given
    restore; answer with the restore point and the hint for a damaged checkpoint."""
    restore = instruction.given
    if instruction.storage is not None and instruction.checkpoint_id is not None:
        storage, checkpoint_id = instruction.storage, instruction.checkpoint_id
        try:
            metadata = storage.read_metadata(checkpoint_id)
            storage.verify_files(checkpoint_id, metadata)
        except EpochalError as error:
            return RestoreFailed(error, time.monotonic())
        restore = {"storage": storage.uri, "checkpoint_id": checkpoint_id, "metadata": metadata}
    if restore is None:
        return RestoreResolved(None, DEFAULT_RESTORE_HINT)
    point = RestorePoint(restore["storage"], restore["checkpoint_id"], restore["metadata"])
    return RestoreResolved(point, earlier_checkpoints_hint(restore))


def earlier_checkpoints_hint(restore: dict[str, Any]) -> str:
    """Should the checkpoint ``restore`` names be damaged: which older ones could be used. Best
    effort (it lists the storage before anything failed): any error gives the general hint."""
    try:
        storage = CheckpointStorage(restore["storage"])
        return storage.earlier_checkpoints_hint(restore["checkpoint_id"])
    except Exception:
        return DEFAULT_RESTORE_HINT


def summarize_spark_error(error: BaseException) -> str:
    """The meaningful line(s) of a Py4J/Spark exception instead of the JVM stack."""
    text = str(error)
    for marker in ("PythonException:", "SparkException:", "Exception:"):
        if marker in text:
            tail = text.split(marker, 1)[1].strip()
            lines = [ln for ln in tail.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
            return " ".join(lines[:6])[:1500]
    return text.splitlines()[0][:1500] if text else type(error).__name__
