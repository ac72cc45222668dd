"""The JobMaster: the driver-side coordinator of one job.

It listens on a TCP port whose address travels to the workers inside the Spark task closure,
admits only connections that present the job's token, registers the workers, deploys the
execution graph to them, tells them to start, and then watches: heartbeats, finished and failed
reports, lost connections and the Spark job itself. The first failure wins (after a short grace
period in which a more specific cause, such as a user exception, may still arrive), every worker
is told to cancel, and the Spark job is killed if workers do not stop by themselves.

All decisions are taken on one coordinator thread; socket readers only enqueue events.
"""

from __future__ import annotations

import enum
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from epochal.config import EngineConfig
from epochal.errors import EpochalError, InsufficientSlotsError, JobCancelledError, JobFailedError
from epochal.runtime import protocol


class JobStatus(enum.Enum):
    """Where a job is in its life."""

    CREATED = "created"
    DEPLOYING = "deploying"
    RUNNING = "running"
    FINISHING = "finishing"
    FINISHED = "finished"
    FAILING = "failing"
    FAILED = "failed"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass
class WorkerInfo:
    """A registered worker: where it runs and how to reach it."""

    index: int
    attempt: int
    pid: int
    host: str
    hostname: str
    data_port: int
    connection: socket.socket
    last_seen: float
    ready: bool = False
    finished: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)


# Which failure explains a job best when several arrive together (lower is more specific).
_FAILURE_RANK = {"user": 0, "worker_lost": 1, "internal": 2, "spark": 3, "heartbeat": 4, "peer_lost": 5}


class JobMaster:
    """Coordinates one job's workers; ``submit_spark_job`` starts the Spark job of W tasks."""

    def __init__(self, job_name: str, job_id: str, deployment: bytes, num_workers: int, config: EngineConfig,
                 token: bytes, bind_host: str, collect_ids: list[str],
                 submit_spark_job: Callable[[JobMaster], None], cancel_spark_job: Callable[[], None],
                 slots_hint: str = "") -> None:
        self.job_name = job_name
        self.job_id = job_id
        self.deployment = deployment
        self.num_workers = num_workers
        self.config = config
        self.token = token
        self.submit_spark_job = submit_spark_job
        self.cancel_spark_job = cancel_spark_job
        self.slots_hint = slots_hint
        self.events: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self.workers: dict[int, WorkerInfo] = {}
        self.collected: dict[str, list[Any]] = {cid: [] for cid in collect_ids}
        self.status = JobStatus.CREATED
        self.failures: list[dict[str, Any]] = []
        self.failing_since = 0.0
        self.stop_deadline = 0.0
        self.spark_done = False
        self.spark_results: list[Any] = []
        self.error: EpochalError | None = None
        self.started_at = 0.0
        self.ended_at = 0.0
        self.done = threading.Event()
        self.server = socket.create_server((bind_host, 0), backlog=128)
        self.address = self.server.getsockname()[:2]
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ public
    def start(self) -> None:
        """Open for registrations, submit the Spark job, and coordinate on a background thread."""
        self.started_at = time.monotonic()
        self.status = JobStatus.DEPLOYING
        self.registration_deadline = self.started_at + self.config.registration_timeout
        threading.Thread(target=self._accept_loop, name="epochal-jm-accept", daemon=True).start()
        threading.Thread(target=self._coordinate, name="epochal-jm", daemon=True).start()
        self.submit_spark_job(self)

    def cancel(self, reason: str = "cancelled by the user") -> None:
        """Ask every worker to stop; the job ends as CANCELLED."""
        self.events.put(("cancel", reason))

    def spark_finished(self, results: list[Any] | None, error: BaseException | None) -> None:
        """Called by the Spark launcher thread when the Spark job returns or fails."""
        self.events.put(("spark", results, error))

    def snapshot_metrics(self) -> dict[int, dict[str, Any]]:
        with self._lock:
            return {i: dict(w.metrics) for i, w in self.workers.items()}

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
                self.events.put(("message", index, sock, protocol.loads(frame[2])))
        except Exception:
            pass
        self.events.put(("disconnected", index, sock))

    def _send(self, worker: WorkerInfo, message: dict[str, Any]) -> None:
        try:
            protocol.send_frame(worker.connection, protocol.CONTROL, 0, protocol.dumps(message))
        except OSError:
            pass  # the disconnect event reports it

    def _broadcast(self, message: dict[str, Any]) -> None:
        for worker in list(self.workers.values()):
            self._send(worker, message)

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

    def _handle(self, event: tuple) -> None:
        kind = event[0]
        if kind == "message":
            self._on_message(event[1], event[2], event[3])
        elif kind == "disconnected":
            worker = self.workers.get(event[1])
            if worker is not None and worker.connection is event[2] and not worker.finished \
                    and self.status in (JobStatus.DEPLOYING, JobStatus.RUNNING, JobStatus.FAILING):
                self._fail("worker_lost", worker=worker.index, error=(
                    f"worker {worker.index} (Spark task attempt {worker.attempt}, pid {worker.pid} on "
                    f"{worker.hostname}) died or lost its connection to the driver"))
        elif kind == "spark":
            _, results, error = event
            self.spark_done = True
            self.spark_results = results or []
            if error is not None and self.status in (JobStatus.DEPLOYING, JobStatus.RUNNING):
                self._fail("spark", error=f"the Spark job running the workers failed: {summarize_spark_error(error)}")
            elif error is None and self.status in (JobStatus.DEPLOYING, JobStatus.RUNNING):
                self._fail("internal", error="the Spark job ended before the workers reported finished")
        elif kind == "cancel":
            if self.status in (JobStatus.DEPLOYING, JobStatus.RUNNING, JobStatus.FINISHING):
                self.status = JobStatus.CANCELLING
                self.error = JobCancelledError(f"job '{self.job_name}' was cancelled: {event[1]}")
                self._broadcast({"type": "cancel", "reason": event[1]})
                self.stop_deadline = time.monotonic() + self.config.cancel_timeout

    def _on_message(self, index: int, sock: socket.socket, message: dict[str, Any]) -> None:
        kind = message["type"]
        worker = self.workers.get(index)
        if worker is not None and worker.connection is sock:
            worker.last_seen = time.monotonic()
        if kind == "register":
            self._on_register(index, sock, message)
            return
        if worker is None or worker.connection is not sock:
            return
        if kind == "heartbeat":
            with self._lock:
                worker.metrics = message["metrics"]
        elif kind == "collect":
            self.collected.setdefault(message["id"], []).extend(message["records"])
        elif kind == "ready":
            worker.ready = True
            if self.status == JobStatus.RUNNING and all(w.ready for w in self.workers.values()) \
                    and len(self.workers) == self.num_workers:
                self._broadcast({"type": "start"})
        elif kind == "finished":
            worker.finished = True
            with self._lock:
                worker.metrics = message["metrics"]
            if self.status == JobStatus.RUNNING and all(w.finished for w in self.workers.values()):
                self.status = JobStatus.FINISHING
                self._broadcast({"type": "shutdown"})
                self.stop_deadline = time.monotonic() + self.config.cancel_timeout
        elif kind == "failed":
            self._fail(message.get("kind", "internal"), **{k: v for k, v in message.items()
                                                         if k not in ("type", "kind")})

    def _on_register(self, index: int, sock: socket.socket, message: dict[str, Any]) -> None:
        info = WorkerInfo(index=index, attempt=message["attempt"], pid=message["pid"], host=message["host"],
                          hostname=message["hostname"], data_port=message["data_port"], connection=sock,
                          last_seen=time.monotonic())
        if self.status != JobStatus.DEPLOYING or not 0 <= index < self.num_workers or index in self.workers:
            self._send(info, {"type": "reject", "reason": f"job is {self.status.value}; worker {index} "
                                                          f"attempt {info.attempt} is not needed"})
            return
        self.workers[index] = info
        if len(self.workers) == self.num_workers:
            peers = {i: (w.host, w.data_port) for i, w in self.workers.items()}
            self.status = JobStatus.RUNNING
            self._broadcast({"type": "deploy", "deployment": self.deployment, "peers": peers})

    def _fail(self, kind: str, **details: Any) -> None:
        self.failures.append({"kind": kind, **details})
        if self.status in (JobStatus.DEPLOYING, JobStatus.RUNNING, JobStatus.FINISHING):
            self.status = JobStatus.FAILING
            self.failing_since = time.monotonic()

    def _check_timers(self, now: float) -> None:
        if self.status == JobStatus.DEPLOYING and now > self.registration_deadline:
            registered = len(self.workers)
            self.error = InsufficientSlotsError(
                f"job '{self.job_name}' needs {self.num_workers} workers running at the same time, but only "
                f"{registered} started within {self.config.registration_timeout:g} s: Spark has too few free "
                f"task slots{self.slots_hint}. Lower the parallelism, give Spark more cores or executors "
                "(e.g. master 'local[N]' with N >= the parallelism), wait for other jobs to finish, or raise "
                "registration_timeout")
            self._stop(JobStatus.FAILED)
        elif self.status == JobStatus.RUNNING:
            timeout = self.config.heartbeat_timeout
            for worker in self.workers.values():
                if not worker.finished and now - worker.last_seen > timeout:
                    self._fail("heartbeat", worker=worker.index, error=(
                        f"worker {worker.index} (pid {worker.pid} on {worker.hostname}) sent no heartbeat for "
                        f"{timeout:g} s; it is hung or unreachable"))
                    break
        elif self.status == JobStatus.FAILING and now - self.failing_since > 0.5:
            self.error = self._failure_error()
            self._stop(JobStatus.FAILED)
        elif self.status in (JobStatus.FINISHING, JobStatus.CANCELLING):
            target = JobStatus.FINISHED if self.status == JobStatus.FINISHING else JobStatus.CANCELLED
            if self.spark_done:
                self.status = target
            elif now > self.stop_deadline:
                self.cancel_spark_job()
                self.status = target

    def _stop(self, final: JobStatus) -> None:
        """Tell workers to stop, wait (bounded) for the Spark job to end, kill it otherwise."""
        self._broadcast({"type": "cancel", "reason": str(self.error)})
        deadline = time.monotonic() + self.config.cancel_timeout
        if final == JobStatus.FAILED and not self.workers:
            deadline = time.monotonic()  # nothing runs that could stop by itself
        while not self.spark_done and time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.05)
            except queue.Empty:
                continue
            if event[0] == "spark":
                self.spark_done = True
        if not self.spark_done:
            self.cancel_spark_job()
        self.status = final

    def _failure_error(self) -> JobFailedError:
        failure = min(self.failures, key=lambda f: _FAILURE_RANK.get(f["kind"], 9))
        worker = failure.get("worker")
        if failure["kind"] == "user":
            message = (f"job '{self.job_name}' failed: operator '{failure['operator']}' (worker {worker}) raised "
                       f"{failure['error']}\n{failure.get('traceback', '')}".rstrip())
            return JobFailedError(message, operator=failure["operator"], worker=worker)
        text = f"job '{self.job_name}' failed: {failure['error']}"
        if failure["kind"] == "internal" and failure.get("traceback"):
            text += f"\n{failure['traceback']}".rstrip()
        return JobFailedError(text, worker=worker)


def summarize_spark_error(error: BaseException) -> str:
    """The meaningful line(s) of a Py4J/Spark exception instead of the JVM stack."""
    text = str(error)
    for marker in ("PythonException:", "SparkException:", "Exception:"):
        if marker in text:
            tail = text.split(marker, 1)[1].strip()
            lines = [ln for ln in tail.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
            return " ".join(lines[:6])[:1500]
    return text.splitlines()[0][:1500] if text else type(error).__name__
