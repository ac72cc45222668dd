"""A worker's connections: the control link to the JobMaster and the data mesh to its peers.

:class:`Bootstrap` is what a Spark task needs to find its JobMaster (it travels in the task
closure). :class:`ControlLink` connects to the JobMaster, proves the job token (HELLO), and runs
a reader thread that turns every control frame into a mailbox event (a typed message of
:mod:`epochal.messages`, or :class:`~epochal.runtime.host.mailbox.JobMasterLost` when the
connection ends); ``send`` is safe from any thread. :func:`connect_peers` builds the mesh of one
TCP connection per pair of workers, checking the token before anything is unpickled. Both are
the worker host's, used by every kind's worker through
:class:`~epochal.runtime.host.shell.WorkerShell`; no protocol decisions here.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from epochal.messages import ToJobMaster
from epochal.runtime.host import frames as protocol
from epochal.runtime.host.mailbox import JobMasterLost, MailboxEvent, PeerJoined
from epochal.runtime.host.peers import PeerConnection


@dataclass(frozen=True)
class Bootstrap:
    """What a Spark task needs to find its JobMaster; travels in the Spark task closure."""

    jobmaster_host: str
    jobmaster_port: int
    token: bytes
    job_id: str
    registration_timeout: float
    #: Interface the worker's data port listens on: loopback for Spark local mode.
    bind_host: str = ""
    #: Job attempt this Spark job belongs to (0 first, +1 per restart).
    job_attempt: int = 0
    #: The worker body the task runs, by its job kind (a class, pickled by reference: the task
    #: imports its module; :mod:`epochal.runtime.host.entry`).
    worker_body: type | None = None
    #: 0 for a worker's first task in the attempt, k for the k-th replacement of it (task-local
    #: recovery), so that a fault meant for the first task does not crash its replacement too
    incarnation: int = 0


class ControlLink:
    """The worker's control connection to the JobMaster."""

    def __init__(self, host: str, port: int, token: bytes, worker: int,
                 deliver: Callable[[MailboxEvent], None]) -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.settimeout(None)
        protocol.configure_socket(self.sock)
        protocol.send_frame(self.sock, protocol.HELLO, 0, protocol.hello_payload(token, worker))
        self._lock = threading.Lock()
        self._deliver = deliver
        threading.Thread(target=self._read, name="epochal-control", daemon=True).start()

    @property
    def local_host(self) -> str:
        """The address this worker reaches the driver from (peers reach it there too)."""
        return str(self.sock.getsockname()[0])

    def send(self, message: ToJobMaster) -> None:
        """Send one message (thread safe: mailbox loop, heartbeat and uploader send)."""
        payload = protocol.dumps(message)
        with self._lock:
            protocol.send_frame(self.sock, protocol.CONTROL, 0, payload)

    def _read(self) -> None:
        try:
            stream = self.sock.makefile("rb")
            while True:
                frame = protocol.read_frame(stream)
                if frame is None:
                    break
                self._deliver(protocol.loads(frame[2]))  # a ToWorker message
        except (OSError, protocol.ProtocolError):
            pass
        self._deliver(JobMasterLost("the driver closed the control connection"))

    def close(self) -> None:
        """Close the connection and end the reader thread. ``shutdown`` first: the reader's
        file object keeps the descriptor open past ``close``, and a reader blocked in it would
        stay there, a thread left behind in a Python worker that Spark reuses for the next task."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def _hello(worker: int, host: str, port: int, token: bytes, timeout: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.settimeout(None)
    protocol.configure_socket(sock)
    protocol.send_frame(sock, protocol.HELLO, 0, protocol.hello_payload(token, worker))
    return sock


def _accepted_hello(sock: socket.socket, token: bytes) -> int:
    """The index a new connection says HELLO with (raises OSError or ProtocolError)."""
    sock.settimeout(5)
    peer = protocol.check_hello(protocol.read_frame(sock.makefile("rb", buffering=0)), token)
    sock.settimeout(None)
    protocol.configure_socket(sock)
    return peer


def connect_peers(worker: int, listener: socket.socket, addresses: dict[int, tuple[str, int]], token: bytes,
                  timeout: float, deliver: Callable[[MailboxEvent], None], joining: bool = False,
                  keep_listener: bool = False) -> dict[int, PeerConnection]:
    """One connection per pair: connect to lower-numbered workers, accept higher ones on
    ``listener`` (closed once the mesh is complete, unless ``keep_listener``: then replacements
    may connect later, see :func:`accept_replacements`). A ``joining`` worker replaces a lost
    one while the others run: it connects to every peer and accepts none; a peer that refuses
    is itself lost (the JobMaster had not seen it yet), and its replacement will connect to this
    one, so it is left out rather than failing the replacement."""
    sockets: dict[int, socket.socket] = {}
    for peer, (host, port) in sorted(addresses.items()):
        if joining and peer != worker:
            try:
                sockets[peer] = _hello(worker, host, port, token, timeout)
            except OSError:
                if not keep_listener:
                    raise
        elif peer < worker:
            sockets[peer] = _hello(worker, host, port, token, timeout)
    expected = set() if joining else {p for p in addresses if p > worker}
    deadline = time.monotonic() + timeout
    while expected:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"workers {sorted(expected)} did not connect within {timeout:.0f} s")
        listener.settimeout(remaining)
        sock, _ = listener.accept()
        try:
            peer = _accepted_hello(sock, token)
            if peer not in expected:
                raise protocol.ProtocolError(f"unexpected worker index {peer}")
        except (OSError, protocol.ProtocolError):
            sock.close()  # a stray or foreign connection: ignore it and keep waiting
            continue
        sockets[peer] = sock
        expected.discard(peer)
    if not keep_listener:
        listener.close()
    return {peer: PeerConnection(peer, sock, deliver) for peer, sock in sockets.items()}


def accept_replacements(listener: socket.socket, token: bytes, num_workers: int,
                        deliver: Callable[[MailboxEvent], None]) -> threading.Thread:
    """Start a thread that accepts replacement workers on ``listener`` until it is closed: each
    valid HELLO becomes a :class:`~epochal.runtime.host.mailbox.PeerJoined` (the body decides what to
    do with it); foreign connections are dropped. Generations count per peer from 1."""
    generations: dict[int, int] = {}

    def serve() -> None:
        listener.settimeout(None)
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return  # the listener was closed: the worker is stopping
            try:
                peer = _accepted_hello(sock, token)
                if not 0 <= peer < num_workers:
                    raise protocol.ProtocolError(f"unexpected worker index {peer}")
            except (OSError, protocol.ProtocolError):
                sock.close()
                continue
            generations[peer] = generations.get(peer, 0) + 1
            deliver(PeerJoined(peer, sock, generations[peer]))

    thread = threading.Thread(target=serve, name="epochal-accept-replacements", daemon=True)
    thread.start()
    return thread
