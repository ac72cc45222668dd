"""What every worker body shares, whatever its job kind: the shell around its machine.

:class:`WorkerShell` owns a worker's process-level plumbing: the mailbox, the control link to
the JobMaster and the registration, the data port and the peer mesh, the heartbeat thread, the
fault-injection hook, and the end of a run (a failure reported once, then a moment for the
JobMaster to cancel everyone; sockets closed). A job kind's worker body (the dataflow
:class:`~epochal.dataflow.worker.Worker`, the graph worker) subclasses it and supplies its machine
(``_handle``, ``_tick``), its work (``_serve``), its counters (``metrics``) and its clean-up.
The shell also holds the process to ``EngineConfig.worker_memory_limit_bytes`` while the task
runs (:class:`MemoryLimit`, applied by a body through ``_limit_memory``).
"""

from __future__ import annotations

import gc
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from epochal.errors import UserFunctionError
from epochal.machines import TimePassed
from epochal.messages import Dispatch, Failed, Heartbeat, Register, Stop, ToJobMaster
from epochal.runtime.host.entry import WARMED_FOR, task_started
from epochal.runtime.host.events import FailPeerLost, ReachPoint, Send, StopWorker
from epochal.runtime.host.hooks import HookPoint, WorkerHook
from epochal.runtime.host.links import Bootstrap, ControlLink, accept_replacements, connect_peers
from epochal.runtime.host.mailbox import JobMasterLost, Mailbox, PeerClosed, PeerJoined
from epochal.runtime.host.memory_limit import MemoryLimit, WorkerMemoryLimitError, data_bytes
from epochal.runtime.host.peers import PeerConnection
from epochal.runtime.host.reports import PeerLost, WorkerStopped, failure_report, rss_bytes


class WorkerShell:
    """The plumbing of worker ``index`` (``task_attempt``: Spark's attempt of the task).

    A body sets ``machine`` (its pure machine, ``handle(event) -> instructions``) and the class
    attribute ``instructions`` (the :class:`~epochal.messages.Dispatch` of its executors)."""

    instructions: ClassVar[Dispatch]
    machine: Any
    #: the garbage collector's thresholds while the body runs (None: Python's). A body that keeps
    #: many long-lived objects (a window operator's open windows) sets larger ones: with Python's
    #: (700, 10, 10), full collections rescanning 100,000 open windows took a third of a CEC
    #: window operator's time per tuple. The process's own thresholds are restored at the end
    #: (PySpark reuses the process for other tasks).
    gc_thresholds: ClassVar[tuple[int, int, int] | None] = None

    def __init__(self, bootstrap: Bootstrap, index: int, task_attempt: int = 0) -> None:
        self.bootstrap = bootstrap
        self.index = index
        self.task_attempt = task_attempt
        self.job_attempt = bootstrap.job_attempt
        self.mailbox = Mailbox()
        self.link: ControlLink | None = None
        self.listener: socket.socket | None = None
        self.peers: dict[int, PeerConnection] = {}
        self.started = time.monotonic()
        self.tasks_before = task_started()  # 0: PySpark forked this process for this task
        self.processing_started = 0.0
        self.stopped = threading.Event()
        #: The deployment's hook (fault injection) and the points it asked for on this worker.
        self.hook: WorkerHook | None = None
        self.hook_points: frozenset[str] = frozenset()
        #: ``EngineConfig.worker_memory_limit_bytes`` once applied (:meth:`_limit_memory`)
        self.memory_limit: MemoryLimit | None = None

    # ------------------------------------------------------------------ what a body supplies
    def _handle(self, event: Any) -> None:
        """Handle one mailbox event (feed it to the body's machine)."""
        raise NotImplementedError

    def _feed(self, event: Any) -> None:
        """Hand ``event`` to the body's machine and carry out what it returns, each instruction
        by the body's executor for its type (:attr:`instructions`)."""
        for instruction in self.machine.handle(event):
            self.instructions.handlers[type(instruction)](self, instruction)

    def _tick(self, now: float) -> None:
        """Time passed: let the machine check its deadlines."""
        self._feed(TimePassed(now, time.time()))

    def _serve(self) -> None:
        """After registration: everything until the job ends (raises :class:`WorkerStopped`)."""
        raise NotImplementedError

    def _records(self) -> int:
        """Records (or vertices) processed so far, for hook points."""
        return 0

    def metrics(self) -> dict[str, Any]:
        """Counters sent with heartbeats and at the end."""
        return {"worker": self.index, "pid": os.getpid(), "tasks_before": self.tasks_before,
                "spare": self.bootstrap.job_id in WARMED_FOR,
                "rss_bytes": rss_bytes(), "data_bytes": data_bytes(),
                **({"memory_limit_bytes": self.memory_limit.limit, "data_bytes_at_start": self.memory_limit.at_start}
                   if self.memory_limit is not None else {}),
                "uptime": time.monotonic() - self.started,
                "bytes_sent": sum(p.bytes_sent for p in list(self.peers.values()))}

    def _close_body(self) -> None:
        """Release the body's own resources (operators, partitions); errors are ignored."""

    # ------------------------------------------------------------------ plumbing
    def send_control(self, message: ToJobMaster) -> None:
        """Send one message to the JobMaster (thread safe)."""
        self.link.send(message)  # type: ignore[union-attr]

    def _limit_memory(self, limit: int | None) -> None:
        """Apply ``EngineConfig.worker_memory_limit_bytes`` until the task ends (:class:`MemoryLimit`);
        a body calls it as soon as it has the job's configuration, before it builds any state."""
        if limit is not None and self.memory_limit is None:
            self.memory_limit = MemoryLimit(limit, self.index)
            self.memory_limit.apply()

    def _register(self) -> None:
        """Open the data port, connect to the JobMaster and register."""
        b = self.bootstrap
        self.listener = socket.create_server((b.bind_host, 0), backlog=64)
        self.link = ControlLink(b.jobmaster_host, b.jobmaster_port, b.token, self.index, self.mailbox.put)
        self.send_control(Register(
            worker=self.index, task_attempt=self.task_attempt, job_attempt=self.job_attempt, pid=os.getpid(),
            host=self.link.local_host, data_port=self.listener.getsockname()[1], hostname=socket.gethostname()))

    def _pump(self, until: Callable[[], bool]) -> None:
        """Handle mailbox events (and the machine's deadlines) until ``until()`` holds."""
        while not until():
            try:
                event = self.mailbox.get(timeout=0.05)
            except queue.Empty:
                pass
            else:
                self._handle(event)
            self._tick(time.monotonic())

    def _connect_mesh(self, addresses: dict[int, tuple[str, int]], timeout: float, joining: bool = False,
                      replaceable: bool = False, num_workers: int = 0) -> None:
        """Connect to every peer and start reading from them. Then nobody else may connect,
        unless the job is ``replaceable``: a replacement of a lost peer may connect later
        (:class:`~epochal.runtime.host.mailbox.PeerJoined`, installed by :meth:`_install_peer`).
        A ``joining`` worker is such a replacement: it connects to every peer it was given."""
        assert self.listener is not None
        self.peers = connect_peers(self.index, self.listener, addresses, self.bootstrap.token, timeout,
                                   self.mailbox.put, joining=joining, keep_listener=replaceable)
        if replaceable:
            accept_replacements(self.listener, self.bootstrap.token, num_workers, self.mailbox.put)
        else:
            self.listener = None
        for peer in self.peers.values():
            peer.start()

    def _install_peer(self, event: PeerJoined) -> None:
        """Use the connection a replacement of ``event.peer`` opened (the old one is lost)."""
        old = self.peers.get(event.peer)
        if old is not None:
            old.close()
        connection = PeerConnection(event.peer, event.sock, self.mailbox.put, event.generation)
        self.peers[event.peer] = connection
        connection.start()

    def _current_peer(self, event: PeerClosed) -> bool:
        """Whether ``event`` is about the connection in use (not one a replacement superseded)."""
        connection = self.peers.get(event.peer)
        return connection is not None and connection.generation == event.generation

    def _use_hook(self, hook: WorkerHook | None) -> None:
        if hook is not None:
            self.hook = hook
            self.hook_points = hook.points(self.index, self.job_attempt, self.bootstrap.incarnation)

    def _reach(self, point: str, checkpoint_id: int | None = None) -> None:
        """Tell the hook (fault injection in chaos tests) that this worker reached ``point``."""
        if point in self.hook_points:
            self.hook.reached(HookPoint(  # type: ignore[union-attr]
                point, self.index, self.job_attempt, checkpoint_id, time.monotonic() - self.processing_started,
                self._records(), self.bootstrap.incarnation))

    # -- instructions every worker machine returns (see register_shell_executors)
    def _do_send(self, instruction: Send) -> None:
        self.send_control(instruction.message)

    def _do_stop(self, instruction: StopWorker) -> None:
        raise WorkerStopped(instruction.reason)

    def _do_peer_lost(self, instruction: FailPeerLost) -> None:
        raise PeerLost(instruction.peer, instruction.reason)

    def _do_reach(self, instruction: ReachPoint) -> None:
        self._reach(instruction.point, instruction.checkpoint_id)

    def _start_heartbeats(self, interval: float) -> None:
        def beat() -> None:
            while not self.stopped.wait(interval):
                try:
                    self.send_control(Heartbeat(self.metrics()))
                except OSError:
                    return

        threading.Thread(target=beat, name="epochal-heartbeat", daemon=True).start()

    def _report_failure(self, error: Exception) -> None:
        """Report ``error``, then give the JobMaster a moment to cancel everyone, so that peers
        do not report this worker as lost. An allocation that failed under the memory limit is
        reported as that, after the limit is lifted (room to report and clean up)."""
        limit = self.memory_limit
        if limit is not None and limit.caused(error):
            limit.restore()
            inner = error.error if isinstance(error, UserFunctionError) else error
            where = error.where if isinstance(error, UserFunctionError) else "the worker"
            error = limit.exceeded(f"{where} ({type(inner).__name__}{f': {inner}' if str(inner) else ''})")
        report = Failed("internal", str(error), self.index) if isinstance(error, WorkerMemoryLimitError) \
            else failure_report(error, self.index)
        try:
            self.send_control(report)
        except OSError:
            return
        deadline = time.monotonic() + 5.0
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                event = self.mailbox.get(timeout=remaining)
            except queue.Empty:
                return
            if isinstance(event, (Stop, JobMasterLost, PeerClosed)):
                return

    def _finished(self) -> bool:
        """Whether the worker told the JobMaster it finished (a stop is then the normal end)."""
        return False

    def run(self) -> dict[str, Any]:
        """Run until the job ends; returns a summary for the Spark task result."""
        status = "finished"
        thresholds = gc.get_threshold()
        if self.gc_thresholds is not None:
            gc.set_threshold(*self.gc_thresholds)
        try:
            self._register()
            self._serve()
        except WorkerStopped as stop:
            status = "finished" if self._finished() else f"stopped: {stop}"
        except Exception as error:  # a user function, a damaged checkpoint, a lost peer, or a bug
            status = "failed"
            if self.link is None:
                raise
            self._report_failure(error)
        finally:
            self.stopped.set()
            self._close()
            if self.memory_limit is not None:
                self.memory_limit.restore()
            gc.set_threshold(*thresholds)
        return {"worker": self.index, "attempt": self.task_attempt, "status": status, "metrics": self.metrics()}

    def _close(self) -> None:
        try:
            self._close_body()
        except Exception:
            pass
        for peer in self.peers.values():
            peer.close()
        if self.listener is not None:
            self.listener.close()
        if self.link is not None:
            self.link.close()
        self.mailbox.close()


def register_shell_executors(table: Dispatch) -> None:
    """Carry out, through ``table``, the instructions every worker machine returns: send a
    message, stop, fail on a lost peer, reach a hook point."""
    table.on(Send)(WorkerShell._do_send)
    table.on(StopWorker)(WorkerShell._do_stop)
    table.on(FailPeerLost)(WorkerShell._do_peer_lost)
    table.on(ReachPoint)(WorkerShell._do_reach)
