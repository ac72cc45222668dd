"""The JobMaster: the driver-side coordinator of one job.

It listens on a TCP port whose address travels to the workers inside the Spark task closure,
admits only connections that present the job's token, registers the workers, deploys the
execution graph to them, tells them to start, and then watches: heartbeats, finished and failed
reports, lost connections and the Spark job itself. The first failure wins (after a short grace
period in which a more specific cause, such as a user exception, may still arrive), every worker
is told to cancel, and the Spark job is killed if workers do not stop by themselves. The job's
status belongs to the lifecycle machine (:mod:`epochal.control.lifecycle`) and restart decisions
and timing to the restart machine (:class:`epochal.control.restart.RestartMachine`): the
JobMaster feeds them events and carries out the instructions they return.

All decisions are taken on one coordinator thread; socket readers only enqueue events
(:mod:`epochal.control.inbox`), and messages are the typed ones of :mod:`epochal.messages`,
dispatched by type (``_INBOX``, ``_ON``). Other threads (``JobClient``) read the job's state
through the query methods, which take the lock under which the coordinator thread changes it.
"""

from __future__ import annotations

import functools
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from epochal.config import EngineConfig
from epochal.control import lifecycle
from epochal.control.checkpointing import CheckpointCoordinator
from epochal.control.collect import CollectLedger
from epochal.control.inbox import CancelRequested, Disconnected, InboxEvent, Received, SparkEnded
from epochal.control.lifecycle import JobLifecycle, JobStatus
from epochal.control.loops import LoopTermination
from epochal.control.restart import RestartMachine, RestartStrategy
from epochal.errors import EpochalError, InsufficientSlotsError, JobCancelledError, JobFailedError
from epochal.messages import (
    Ack,
    Cancel,
    Collect,
    Committed,
    Decline,
    Deploy,
    Dispatch,
    Failed,
    Finished,
    Heartbeat,
    LoopReady,
    LoopVote,
    Metrics,
    Processing,
    Ready,
    Register,
    Reject,
    RestorePoint,
    Start,
    ToWorker,
)
from epochal.runtime import protocol
from epochal.state.storage import CheckpointStorage

__all__ = ["JobMaster", "JobStatus", "WorkerInfo", "summarize_spark_error"]


@dataclass
class WorkerInfo:
    """A registered worker: where it runs and how to reach it."""

    index: int
    #: Spark's attempt number of the task running the worker.
    task_attempt: int
    pid: int
    host: str
    hostname: str
    data_port: int
    connection: socket.socket
    last_seen: float
    ready: bool = False
    finished: bool = False
    metrics: Metrics = field(default_factory=dict)


# Which failure explains a job best when several arrive together (lower is more specific).
# A damaged checkpoint ("restore") explains everything after it and is never restarted.
_FAILURE_RANK = {"restore": -1, "user": 0, "worker_lost": 1, "internal": 2, "checkpoint": 3, "spark": 4,
                 "heartbeat": 5, "peer_lost": 6}
_ACTIVE = (JobStatus.DEPLOYING, JobStatus.RUNNING)
#: The coordinator thread's handlers: inbox event type -> handler, and message type -> handler.
_INBOX = Dispatch("JobMaster inbox")
_ON = Dispatch("JobMaster messages")
_WorkerHandler = Callable[["JobMaster", WorkerInfo, Any], None]


def _from_registered(handler: _WorkerHandler) -> Callable[[JobMaster, Received], None]:
    """Only messages of a registered worker, on its current connection, reach ``handler``."""

    @functools.wraps(handler)
    def checked(self: JobMaster, event: Received) -> None:
        worker = self.workers.get(event.worker)
        if worker is not None and worker.connection is event.connection:
            handler(self, worker, event.message)

    return checked


class JobMaster:
    """Coordinates one job's workers; ``submit_spark_job`` starts the Spark job of W tasks."""

    def __init__(self, job_name: str, job_id: str, deployment: bytes, num_workers: int, config: EngineConfig,
                 token: bytes, bind_host: str, collect_ids: list[str],
                 submit_spark_job: Callable[[JobMaster], None], cancel_spark_job: Callable[[], None],
                 slots_hint: str = "", coordinator: CheckpointCoordinator | None = None,
                 restart: RestartStrategy | None = None, restore: dict[str, Any] | None = None,
                 loops: dict[int, int] | None = None) -> None:
        self.job_name = job_name
        self.job_id = job_id
        self.deployment = deployment
        self.num_workers = num_workers
        self.config = config
        self.token = token
        self.submit_spark_job = submit_spark_job
        self.cancel_spark_job = cancel_spark_job
        self.slots_hint = slots_hint
        self.events: queue.SimpleQueue[InboxEvent] = queue.SimpleQueue()
        #: Registered workers; changed under ``_lock`` (JobClient reads them from its thread).
        self.workers: dict[int, WorkerInfo] = {}
        #: collect() sinks' records: staged per writer epoch, published when committed; under ``_lock``.
        self.collects = CollectLedger(collect_ids)
        #: The job lifecycle (``status``) and the restart sub-machine: see docs/architecture.md.
        self.lifecycle = JobLifecycle()
        self.failures: list[Failed] = []
        self.stop_deadline = 0.0
        self.spark_done = False
        self.spark_results: list[Any] = []
        self.error: EpochalError | None = None
        self.started_at = 0.0
        self.ended_at = 0.0
        self.done = threading.Event()
        self.coordinator = coordinator
        self.restart = restart or RestartStrategy()
        #: Restart decisions and timing; its ``restarts`` (one entry per restart) change under ``_lock``.
        self.restarting = RestartMachine(self.restart, config.cancel_timeout)
        self.restore = restore
        #: What the current attempt's workers restore (for errors about a damaged checkpoint).
        self.restoring: dict[str, Any] | None = None
        self.attempt = 0
        self.started_running = False
        self.final_checkpoint: int | None = None
        self.committed: set[int] = set()
        self.loops = LoopTermination(loops or {})
        self.server = socket.create_server((bind_host, 0), backlog=128)
        self.address = self.server.getsockname()[:2]
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ public
    def start(self) -> None:
        """Open for registrations, submit the Spark job, and coordinate on a background thread."""
        self.started_at = time.monotonic()
        self._transition(lifecycle.Started())
        self.registration_deadline = self.started_at + self.config.registration_timeout
        threading.Thread(target=self._accept_loop, name="epochal-jm-accept", daemon=True).start()
        threading.Thread(target=self._coordinate, name="epochal-jm", daemon=True).start()
        self.submit_spark_job(self)

    def cancel(self, reason: str = "cancelled by the user") -> None:
        """Ask every worker to stop; the job ends as CANCELLED."""
        self.events.put(CancelRequested(reason))

    def spark_finished(self, results: list[Any] | None, error: BaseException | None) -> None:
        """Called by the Spark launcher thread when the Spark job returns or fails."""
        self.events.put(SparkEnded(results, error))

    @property
    def status(self) -> JobStatus:
        return self.lifecycle.status

    @property
    def restarts(self) -> list[dict[str, Any]]:
        return self.restarting.restarts

    def broadcast(self, message: ToWorker) -> None:
        """Send ``message`` to every registered worker. Only on the coordinator thread, which
        is where the checkpoint coordinator and the loop detector call it."""
        for worker in list(self.workers.values()):
            self._send(worker, message)

    # ------------------------------------------------------------------ queries (any thread)
    # Status, attempt, error and spark_done are single references to immutable values, read
    # as they are; the containers below change under the lock these methods take.
    def snapshot_metrics(self) -> dict[int, Metrics]:
        with self._lock:
            return {i: dict(w.metrics) for i, w in self.workers.items()}

    def worker_infos(self) -> dict[int, dict[str, Any]]:
        """Registered workers: pid, host, hostname, data port and Spark task attempt of each."""
        with self._lock:
            return {i: {"pid": w.pid, "host": w.host, "hostname": w.hostname, "data_port": w.data_port,
                        "attempt": w.task_attempt} for i, w in self.workers.items()}

    def registered_workers(self) -> int:
        with self._lock:
            return len(self.workers)

    def all_running(self) -> bool:
        """Every worker registered and ready, and the job running."""
        with self._lock:
            return self.status == JobStatus.RUNNING and len(self.workers) == self.num_workers and \
                all(w.ready for w in self.workers.values())

    def published(self, collect_id: str) -> list[Any]:
        """A copy of the records collect sink ``collect_id`` published so far."""
        with self._lock:
            return list(self.collects.published.get(collect_id, []))

    def published_all(self) -> dict[str, list[Any]]:
        with self._lock:
            return {cid: list(records) for cid, records in self.collects.published.items()}

    def restart_history(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self.restarts]

    def checkpoint_stats(self) -> list[dict[str, Any]]:
        return self.coordinator.stats_snapshot() if self.coordinator is not None else []

    # ------------------------------------------------------------------ sockets
    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._read_connection, args=(sock,), daemon=True,
                             name="epochal-jm-conn").start()

    def _read_connection(self, sock: socket.socket) -> None:
        try:
            sock.settimeout(10)
            stream = sock.makefile("rb")
            index = protocol.check_hello(protocol.read_frame(stream), self.token)
            sock.settimeout(None)
            protocol.configure_socket(sock)
        except (OSError, protocol.ProtocolError):
            sock.close()  # no token, no entry: nothing it sent was unpickled
            return
        try:
            while True:
                frame = protocol.read_frame(stream)
                if frame is None:
                    break
                if frame[0] != protocol.CONTROL:
                    raise protocol.ProtocolError(f"unexpected frame type {frame[0]}")
                self.events.put(Received(index, sock, protocol.loads(frame[2])))
        except Exception:
            pass
        self.events.put(Disconnected(index, sock))

    def _send(self, worker: WorkerInfo, message: ToWorker) -> None:
        try:
            protocol.send_frame(worker.connection, protocol.CONTROL, 0, protocol.dumps(message))
        except OSError:
            pass  # the disconnect event reports it

    # ------------------------------------------------------------------ coordination
    def _coordinate(self) -> None:
        while not self.status.is_terminal:
            try:
                event = self.events.get(timeout=0.05)
            except queue.Empty:
                event = None
            if event is not None:
                self._handle(event)
            self._check_timers(time.monotonic())
        self.ended_at = time.monotonic()
        try:
            self.server.close()
        except OSError:
            pass
        for worker in self.workers.values():
            try:
                worker.connection.close()
            except OSError:
                pass
        self.done.set()

    def _handle(self, event: InboxEvent) -> None:
        _INBOX.handlers[type(event)](self, event)

    @_INBOX.on(Disconnected)
    def _on_disconnected(self, event: Disconnected) -> None:
        worker = self.workers.get(event.worker)
        if worker is not None and worker.connection is event.connection and not worker.finished \
                and self.status in (JobStatus.DEPLOYING, JobStatus.RUNNING, JobStatus.FAILING):
            self.restarting.failure_seen(time.monotonic())
            self._fail(Failed("worker_lost", worker=worker.index, error=(
                f"worker {worker.index} (Spark task attempt {worker.task_attempt}, pid {worker.pid} on "
                f"{worker.hostname}) died or lost its connection to the driver")))

    @_INBOX.on(SparkEnded)
    def _on_spark_ended(self, event: SparkEnded) -> None:
        self.spark_done = True
        self.spark_results = event.results or []
        if event.error is not None and self.status in _ACTIVE:
            self._fail(Failed("spark", f"the Spark job running the workers failed: "
                                       f"{summarize_spark_error(event.error)}"))
        elif event.error is None and self.status in _ACTIVE:
            self._fail(Failed("internal", "the Spark job ended before the workers reported finished"))

    @_INBOX.on(CancelRequested)
    def _on_cancel(self, event: CancelRequested) -> None:
        cancel = lifecycle.CancelRequested(event.reason)
        if self.lifecycle.accepts(cancel):  # else: not started yet, or already stopping
            self.error = JobCancelledError(f"job '{self.job_name}' was cancelled: {event.reason}")
            self._transition(cancel)
            # no worker registered yet (e.g. waiting for slots): nothing can stop by itself
            self.stop_deadline = time.monotonic() + (self.config.cancel_timeout if self.workers else 0.0)

    @_INBOX.on(Received)
    def _on_received(self, event: Received) -> None:
        worker = self.workers.get(event.worker)
        if worker is not None and worker.connection is event.connection:
            worker.last_seen = time.monotonic()
        handler = _ON.handlers.get(type(event.message))
        if handler is not None:  # a message of another version of epochal: ignored
            handler(self, event)

    # ------------------------------------------------------------------ messages
    @_ON.on(Heartbeat)
    @_from_registered
    def _on_heartbeat(self, worker: WorkerInfo, message: Heartbeat) -> None:
        with self._lock:
            worker.metrics = message.metrics

    @_ON.on(Collect)
    @_from_registered
    def _on_collect(self, worker: WorkerInfo, message: Collect) -> None:
        with self._lock:
            self.collects.receive(message.collect_id, message.payload)

    @_ON.on(Ready)
    @_from_registered
    def _on_ready(self, worker: WorkerInfo, message: Ready) -> None:
        with self._lock:
            worker.ready = True
        if self.status == JobStatus.RUNNING and all(w.ready for w in self.workers.values()) \
                and len(self.workers) == self.num_workers:
            self.broadcast(Start())
            self.started_running = True
            with self._lock:
                self.restarting.all_ready(time.monotonic())

    @_ON.on(Finished)
    @_from_registered
    def _on_finished(self, worker: WorkerInfo, message: Finished) -> None:
        worker.finished = True
        with self._lock:
            worker.metrics = message.metrics
        if self.status == JobStatus.RUNNING and all(w.finished for w in self.workers.values()):
            if self.coordinator is None:
                self._shutdown(lifecycle.AllFinished())
            elif self.final_checkpoint is None:
                # every record is processed: one last checkpoint commits the sinks' final epoch
                self.coordinator.paused = True
                self.final_checkpoint = self.coordinator.trigger(time.monotonic(), time.time())

    @_ON.on(Ack)
    @_from_registered
    def _on_ack(self, worker: WorkerInfo, message: Ack) -> None:
        if self.coordinator is not None:
            self.coordinator.on_ack(message, time.monotonic())

    @_ON.on(Decline)
    @_from_registered
    def _on_decline(self, worker: WorkerInfo, message: Decline) -> None:
        if self.coordinator is not None and not self.coordinator.on_decline(message, time.monotonic()):
            self._fail(Failed("checkpoint", (
                f"checkpoint {message.checkpoint_id} failed ({message.reason}) and more than "
                f"{self.coordinator.config.tolerable_failures} consecutive checkpoint failures are tolerated")))

    @_ON.on(Processing)
    @_from_registered
    def _on_processing(self, worker: WorkerInfo, message: Processing) -> None:
        if self.started_running:
            with self._lock:
                self.restarting.processing(time.monotonic())

    @_ON.on(LoopReady)
    @_from_registered
    def _on_loop_ready(self, worker: WorkerInfo, message: LoopReady) -> None:
        for reply in self.loops.on_ready(message.loop, message.subtask):
            self.broadcast(reply)

    @_ON.on(LoopVote)
    @_from_registered
    def _on_loop_vote(self, worker: WorkerInfo, message: LoopVote) -> None:
        for reply in self.loops.on_vote(message.loop, message.round, message.subtask, message.quiet):
            self.broadcast(reply)

    @_ON.on(Committed)
    @_from_registered
    def _on_committed(self, worker: WorkerInfo, message: Committed) -> None:
        if message.checkpoint_id == self.final_checkpoint:
            self.committed.add(worker.index)
            if len(self.committed) == self.num_workers and self.status == JobStatus.RUNNING:
                self._shutdown(lifecycle.FinalCheckpointCommitted())

    @_ON.on(Failed)
    @_from_registered
    def _on_failed(self, worker: WorkerInfo, message: Failed) -> None:
        self._fail(message)

    def _shutdown(self, event: lifecycle.AllFinished | lifecycle.FinalCheckpointCommitted) -> None:
        self._transition(event)  # broadcasts Shutdown
        self.stop_deadline = time.monotonic() + self.config.cancel_timeout

    def _restore_info(self) -> dict[str, Any] | None:
        """What the workers of this attempt restore: the latest completed checkpoint, else the
        checkpoint the user asked to start from, else nothing."""
        if self.coordinator is not None and self.coordinator.latest_completed is not None and (
                self.attempt > 0 or self.restore is None):
            checkpoint_id = self.coordinator.latest_completed
            storage = self.coordinator.storage
            metadata = storage.read_metadata(checkpoint_id)
            storage.verify_files(checkpoint_id, metadata)  # cheap: sizes only; workers check checksums
            return {"storage": storage.uri, "checkpoint_id": checkpoint_id, "metadata": metadata}
        return self.restore

    def _earlier_checkpoints_hint(self) -> str:
        """After a restore failed on a damaged checkpoint: which older ones could be used."""
        restoring = self.restoring or {}
        try:
            storage = CheckpointStorage(restoring["storage"])
            return storage.earlier_checkpoints_hint(restoring["checkpoint_id"])
        except (KeyError, EpochalError, OSError):
            return "Restore from an earlier checkpoint of the job, if one is retained"

    @_ON.on(Register)
    def _on_register(self, event: Received) -> None:
        index, message = event.worker, event.message
        assert isinstance(message, Register)
        info = WorkerInfo(index=index, task_attempt=message.task_attempt, pid=message.pid, host=message.host,
                          hostname=message.hostname, data_port=message.data_port, connection=event.connection,
                          last_seen=time.monotonic())
        if self.status != JobStatus.DEPLOYING or not 0 <= index < self.num_workers or index in self.workers \
                or message.job_attempt != self.attempt:
            self._send(info, Reject(f"job is {self.status.value}; worker {index} "
                                    f"attempt {info.task_attempt} is not needed"))
            return
        with self._lock:
            self.workers[index] = info
        if len(self.workers) == self.num_workers:
            peers = {i: (w.host, w.data_port) for i, w in self.workers.items()}
            try:
                restore = self._restore_info()
                self.restoring = restore
            except EpochalError as error:
                self.error = error
                self._stop(lifecycle.RestoreUnreadable())
                return
            self._transition(lifecycle.AllRegistered())
            point = None if restore is None else RestorePoint(restore["storage"], restore["checkpoint_id"],
                                                              restore["metadata"])
            self.broadcast(Deploy(self.deployment, peers, point))

    def _fail(self, failure: Failed) -> None:
        self.failures.append(failure)
        if self.status in (JobStatus.DEPLOYING, JobStatus.RUNNING, JobStatus.FINISHING):
            self._transition(lifecycle.FailureReported(time.monotonic()))
            self.restarting.failure_seen(self.lifecycle.failing_since)

    def _check_timers(self, now: float) -> None:
        if self.status == JobStatus.DEPLOYING and now > self.registration_deadline:
            registered = len(self.workers)
            self.error = InsufficientSlotsError(
                f"job '{self.job_name}' needs {self.num_workers} workers running at the same time, but only "
                f"{registered} started within {self.config.registration_timeout:g} s: Spark has too few free "
                f"task slots{self.slots_hint}. Lower the parallelism, give Spark more cores or executors "
                "(e.g. master 'local[N]' with N >= the parallelism), wait for other jobs to finish, or raise "
                "registration_timeout")
            self._stop(lifecycle.RegistrationTimedOut())
        elif self.status == JobStatus.RUNNING:
            if self.coordinator is not None and self.started_running:
                self.coordinator.maybe_trigger(now, time.time())
                if not self.coordinator.check_timeouts(now):
                    self._fail(Failed("checkpoint", (
                        f"checkpoints keep failing (more than {self.coordinator.config.tolerable_failures} "
                        "consecutive timeouts or declines)")))
                    return
            timeout = self.config.heartbeat_timeout
            for worker in self.workers.values():
                if not worker.finished and now - worker.last_seen > timeout:
                    self._fail(Failed("heartbeat", worker=worker.index, error=(
                        f"worker {worker.index} (pid {worker.pid} on {worker.hostname}) sent no heartbeat for "
                        f"{timeout:g} s; it is hung or unreachable")))
                    break
        elif self.lifecycle.grace_over(now):
            error = self._failure_error()
            delay = self.restarting.decide(error.kind or "", now)
            if delay is None:
                if self.restarts:
                    error.args = (f"{error.args[0]}{self.restarting.give_up_note()}",)
                self.error = error
                self._stop(lifecycle.RestartsExhausted())
            else:
                self._begin_restart(error, delay, now)
        elif self.status == JobStatus.RESTARTING:
            for instruction in self.restarting.tick(now, self.spark_done):
                if isinstance(instruction, lifecycle.StartAttempt):
                    self._new_attempt(now)
                else:
                    self._carry_out([instruction])
        elif self.status in (JobStatus.FINISHING, JobStatus.CANCELLING):
            if self.spark_done:
                self._transition(lifecycle.SparkStopped())
            elif now > self.stop_deadline:
                self._transition(lifecycle.StopDeadlinePassed())  # kills the Spark job

    def _begin_restart(self, error: JobFailedError, delay: float, now: float) -> None:
        """Stop this attempt's workers; a new attempt starts once its Spark job is gone."""
        with self._lock:
            self.restarting.begin(self.attempt, str(error).splitlines()[0], delay, now)
        if self.coordinator is not None:
            self.coordinator.abort_all(f"job attempt {self.attempt} failed", now)
        self._transition(lifecycle.RestartDecided(str(error)))  # broadcasts Cancel

    def _new_attempt(self, now: float) -> None:
        for worker in self.workers.values():
            try:
                worker.connection.close()
            except OSError:
                pass
        with self._lock:
            self.workers = {}
        self.failures = []
        self.restarting.new_attempt()
        self.spark_done = False
        self.started_running = False
        self.committed = set()
        self.final_checkpoint = None
        self.loops.reset()
        if self.coordinator is not None:
            self.coordinator.paused = False
            # the new attempt's sources resume at the latest checkpoint: what it covers is counted
            latest = self.coordinator.latest_completed
            self.coordinator.records_base = self.coordinator.source_records.get(latest, 0) if latest else 0
        self.attempt += 1
        # collected epochs the restored checkpoint does not cover can never be published
        with self._lock:
            self.collects.new_attempt(self.attempt, self.coordinator.latest_completed if self.coordinator else None,
                                      checkpointing=self.coordinator is not None)
        self._transition(lifecycle.NewAttempt())
        self.registration_deadline = now + self.config.registration_timeout
        self.submit_spark_job(self)

    def _stop(self, failed: lifecycle.RestoreUnreadable | lifecycle.RegistrationTimedOut
              | lifecycle.RestartsExhausted) -> None:
        """Tell workers to stop, wait (bounded) for the Spark job to end, kill it otherwise; the
        job is then FAILED."""
        self.broadcast(Cancel(str(self.error)))
        deadline = time.monotonic() + self.config.cancel_timeout
        if not self.workers:
            deadline = time.monotonic()  # nothing runs that could stop by itself
        while not self.spark_done and time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.05)
            except queue.Empty:
                continue
            if isinstance(event, SparkEnded):
                self.spark_done = True
        if not self.spark_done:
            self.cancel_spark_job()
        self._transition(failed)

    def _transition(self, event: lifecycle.LifecycleEvent) -> None:
        """Feed the lifecycle one event and carry out its instructions."""
        self._carry_out(self.lifecycle.handle(event))

    def _carry_out(self, instructions: list[lifecycle.Instruction]) -> None:
        for instruction in instructions:
            if isinstance(instruction, lifecycle.Broadcast):
                self.broadcast(instruction.message)
            elif isinstance(instruction, lifecycle.KillSparkJob):
                self.cancel_spark_job()
            else:
                raise AssertionError(f"the JobMaster starts attempts itself, not via {instruction}")

    def _failure_error(self) -> JobFailedError:
        failure = min(self.failures, key=lambda f: _FAILURE_RANK.get(f.kind, 9))
        worker = failure.worker
        if failure.kind == "user":
            where = failure.where or f"operator '{failure.operator}'"
            message = (f"job '{self.job_name}' failed: {where} (worker {worker}) raised "
                       f"{failure.error}\n{failure.traceback}".rstrip())
            return JobFailedError(message, operator=failure.operator, worker=worker, kind="user")
        text = f"job '{self.job_name}' failed: {failure.error}"
        if failure.kind == "restore":
            text += f"\n{self._earlier_checkpoints_hint()}\n(a damaged checkpoint is not a transient failure: " \
                    "the job was not restarted)"
        if failure.kind == "internal" and failure.traceback:
            text += f"\n{failure.traceback}".rstrip()
        return JobFailedError(text, worker=worker, kind=failure.kind)


def summarize_spark_error(error: BaseException) -> str:
    """The meaningful line(s) of a Py4J/Spark exception instead of the JVM stack."""
    text = str(error)
    for marker in ("PythonException:", "SparkException:", "Exception:"):
        if marker in text:
            tail = text.split(marker, 1)[1].strip()
            lines = [ln for ln in tail.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
            return " ".join(lines[:6])[:1500]
    return text.splitlines()[0][:1500] if text else type(error).__name__
