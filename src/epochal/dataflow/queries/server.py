"""A dataflow worker's query server: the thin driver of its :class:`QueryMachine`.

It owns a listening socket and the clients' connections, and is polled by the worker's
processing thread at safe points only: between two batches, and in every turn of the mailbox
loop (:meth:`QueryServer.poll`, a non-blocking ``epoll`` of a few microseconds). So a
``read_uncommitted`` query reads the live state while no operator is in the middle of changing
it: never a torn value, and no lock on the hot path. Answers are pickled there too, before the
state can change again; a lone ``read_uncommitted`` lookup of a heap state is answered whole by
the native answer path (:mod:`epochal.dataflow.queries.native`) where it is built, everything else
by the machine. ``read_committed`` queries are answered from the committed views the
worker hands over at each barrier (:meth:`QueryServer.snapshot_taken`), which no operator
touches: a heap backend's full snapshot shared with the snapshot itself, a RocksDB backend's
local checkpoint, a PostgreSQL backend's committed rows; the other heap snapshots' queryable
states are copied at the barrier (:func:`~epochal.dataflow.queries.shown.views_of`).
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from epochal.dataflow.checkpointing.messages import CheckpointAbort, CheckpointComplete
from epochal.dataflow.queries import native
from epochal.dataflow.queries.committed import CommittedViews, Views
from epochal.dataflow.queries.machine import (
    CloseConnection,
    Event,
    FrameArrived,
    QueryMachine,
    ReadLive,
    Reply,
    Restored,
    ScanLive,
    Served,
    Serving,
    SnapshotTaken,
    StatesDeclared,
    lookup,
    page,
)
from epochal.dataflow.queries.shown import GONE, views_of, visible
from epochal.runtime.host.frames import frames_received, plain_frame
from epochal.runtime.host.mailbox import Mailbox
from epochal.runtime.queries import local
from epochal.runtime.queries.wire import (
    BAD_REQUEST,
    RECV_BYTES,
    Page,
    QueryFailed,
    Values,
    encode,
    query_token,
)
from epochal.state.ttl import CLOCK

#: Seconds between looks for queryable states declared since (a function's first record).
REFRESH_S = 0.2
#: Seconds a reply may wait for a client that does not read.
SEND_TIMEOUT_S = 2.0
#: False answers queries on a thread of their own, at once, while the processing thread may be in
#: the middle of an update: the safe points switched off, for the test that shows they are needed
#: (tests/integration/test_queryable_state.py, whose job switches it off in its workers). Every new
#: server switches it on again: PySpark reuses worker processes.
SAFE_POINTS = True


@dataclass
class KeyedSource:
    """One keyed operator of one of the worker's subtasks, whose backend may hold queryable states."""

    uid: str
    subtask: int
    parallelism: int
    backend: Any
    #: query names of this backend already declared to the machine
    declared: set[str] = field(default_factory=set)


class QueryServer:
    """The query server of worker ``worker`` of a job whose token is ``job_token``.

    While the processing thread works it polls the server between batches (:meth:`poll`). When
    it has no work it sleeps in :meth:`wait`, one ``epoll`` over the query sockets and the
    ``mailbox``'s eventfd, so a query that arrives then is answered at once, and no other thread
    is woken (or takes the interpreter lock) for a query that arrives while it works.

    It listens on a TCP port of ``bind_host`` and, where the host has them, on a local Unix socket
    for clients of the same host (:mod:`epochal.runtime.queries.local`); both serve alike."""

    def __init__(self, job_token: bytes, worker: int, bind_host: str, max_parallelism: int,
                 mailbox: Mailbox | None = None) -> None:
        global SAFE_POINTS
        SAFE_POINTS = True
        self.machine = QueryMachine(query_token(job_token), worker)
        self.max_parallelism = max_parallelism
        self.listener = socket.create_server((bind_host, 0), backlog=128)
        self.listener.setblocking(False)
        self.port: int = self.listener.getsockname()[1]
        #: the listening sockets by descriptor (TCP, and the local one where there is one)
        self.listeners = {self.listener.fileno(): self.listener}
        #: the local socket's name (None: none on this system)
        self.local_name: str | None = None
        if (local_listener := local.listen()) is not None:
            sock, self.local_name = local_listener
            self.listeners[sock.fileno()] = sock
        self.poller = select.epoll()
        self.connections: dict[int, socket.socket] = {}
        self.buffers: dict[int, bytearray] = {}
        #: answers of the current poll not yet sent, per connection (sent at its end: one write
        #: for every answer to a client's pipelined requests)
        self.outgoing: dict[int, list[bytes]] = {}
        self.sources: list[KeyedSource] = []
        self.next_refresh = 0.0
        #: what the heartbeats tell the JobMaster (replaced whole, read by the heartbeat thread)
        self.routes: dict[str, Any] = {"port": self.port, "max_parallelism": max_parallelism, "states": {}}
        if self.local_name is not None:
            self.routes["local"] = {"host": local.host_identity(), "socket": self.local_name}
        self.answered = 0
        self._scratch = memoryview(bytearray(RECV_BYTES))
        #: the states the native answer path may answer (kept current in place: :meth:`_plain`)
        self._answerable: native.Answerable = {}
        #: the native answer path (:mod:`epochal.dataflow.queries.native`; None: not in use)
        self._native = native.answerer(self._scratch, self.machine.token, self._answerable)
        #: connections whose last read left part of a frame: read in Python until it is whole
        self._partial: set[int] = set()
        self._do: dict[type, Callable[[Any], None]] = {
            Reply: self._reply, ReadLive: self._read_live, ScanLive: self._scan_live,
            CloseConnection: self._close_connection}
        self.mailbox = mailbox
        self.closed = False
        #: what :meth:`wait` sleeps on: the same sockets as :attr:`poller`, and the mailbox's eventfd
        self.idle_poller = select.epoll()
        for fd in self.listeners:
            self.poller.register(fd, select.EPOLLIN)
            self.idle_poller.register(fd, select.EPOLLIN)
        if mailbox is not None:
            self.idle_poller.register(mailbox.wakeup_fd(), select.EPOLLIN)
        #: the thread answering at once while :data:`SAFE_POINTS` is off (the test switch)
        self._unsafe: int | None = None

    def wait(self, timeout: float) -> None:
        """On the processing thread, which has no work: sleep up to ``timeout`` seconds, until a
        mailbox event, a query or a client arrives. The caller then drains its mailbox and polls."""
        if self.mailbox is None:
            self.idle_poller.poll(timeout)
        else:
            self.mailbox.sleep(self.idle_poller, timeout)

    def _answer_unsafely(self) -> None:
        """The test switch (:data:`SAFE_POINTS` off): answer every query at once on this thread,
        whatever the processing thread is doing, as Flink's queryable state did."""
        self._unsafe = threading.get_ident()
        while not self.closed and not SAFE_POINTS:
            time.sleep(0.0005)
            try:
                self.poll()
            except (OSError, ValueError):  # closed
                return
        self._unsafe = None

    # ------------------------------------------------------------------ set-up and checkpoints
    def attach(self, sources: Iterable[KeyedSource], restored: int | None) -> None:
        """The worker's keyed operators, opened (restored from checkpoint ``restored``, if any)."""
        self.sources = list(sources)
        self.refresh()
        if restored is not None:
            for source in self.sources:
                self._feed(Restored(restored, views_of(source.backend)))

    def serving(self) -> None:
        self._feed(Serving())
        self._plain()

    def _plain(self) -> None:
        """Tell the native answer path which states it may answer now."""
        if self._native is not None:
            self._answerable.clear()
            self._answerable.update(native.answerable(self.machine.states, self.machine.serving, self._backend))

    def refresh(self) -> None:
        """Declare queryable states the backends gained since the last look."""
        declared: dict[str, Served] = {}
        for source in self.sources:
            backend = source.backend
            if len(backend.queryable) == len(source.declared):
                continue
            for query_name, state_name in backend.queryable.items():
                if query_name not in source.declared:
                    source.declared.add(query_name)
                    declared[query_name] = Served(source.uid, state_name, source.subtask, source.parallelism,
                                                  backend.key_groups, self.max_parallelism)
        if declared:
            self._feed(StatesDeclared(declared))
            self.routes = {**self.routes, "states": {name: [s.subtask, s.parallelism]
                                                     for name, s in self.machine.states.items()}}
            self._plain()

    def snapshot_taken(self, checkpoint_id: int, backends: Iterable[Any], captured: Mapping[str, Any]) -> None:
        """At checkpoint ``checkpoint_id``'s barrier, on the processing thread: hand over the views
        of the queryable states of one subtask's ``backends`` (``captured``: its snapshot's copy by
        uid, shared where it is a plain copy of every group)."""
        views: Views = {}
        for backend, uid in backends:
            if backend.queryable:
                keyed = captured.get(uid, {}).get("keyed") if captured else None
                views.update(views_of(backend, keyed if type(keyed) is dict else None))
        if views:
            self._feed(SnapshotTaken(checkpoint_id, views))

    def checkpoint_completed(self, checkpoint_id: int, savepoint: bool) -> None:
        self._feed(CheckpointComplete(checkpoint_id, savepoint))

    def checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._feed(CheckpointAbort(checkpoint_id))

    # ------------------------------------------------------------------ serving (processing thread)
    @property
    def has_clients(self) -> bool:
        return bool(self.connections)

    def poll(self) -> None:
        """Accept connections and answer every complete request received (never blocks). Until a
        state is declared queryable, only every :data:`REFRESH_S` (a clock read otherwise)."""
        if not SAFE_POINTS and threading.get_ident() != self._unsafe:
            if self._unsafe is None:  # (the test switch was just turned off)
                self._unsafe = -1
                threading.Thread(target=self._answer_unsafely, name="epochal-queries-unsafe", daemon=True).start()
            return
        if not self.machine.states:
            now = time.monotonic()
            if now < self.next_refresh:
                return
            self.next_refresh = now + REFRESH_S
            self.refresh()
        ready = self.poller.poll(0)
        if not ready:
            if self.sources:
                now = time.monotonic()
                if now >= self.next_refresh:
                    self.next_refresh = now + REFRESH_S
                    self.refresh()
            return
        listeners = self.listeners
        answer = self._native if SAFE_POINTS else None
        for fd, _ in ready:
            if fd in listeners:
                self._accept(listeners[fd])
            elif answer is None or fd in self._partial:
                self._receive(fd)
            else:  # the native path answers a lone lookup whole, or hands over what it read
                result = answer.answer(fd)
                if result is None:
                    self.answered += 1
                elif type(result) is bytes:  # answered; the socket took part of it
                    self.answered += 1
                    self.outgoing.setdefault(fd, []).append(result)
                elif result >= 0:
                    self._received(fd, result)
        if self.outgoing:
            self._flush()

    def _flush(self) -> None:
        outgoing, self.outgoing = self.outgoing, {}
        for conn, frames in outgoing.items():
            sock = self.connections.get(conn)
            if sock is None:
                continue
            try:
                send_all(sock, frames[0] if len(frames) == 1 else b"".join(frames))
            except OSError:
                self._close_connection(CloseConnection(conn))

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            sock.setblocking(False)  # read when epoll says so; see send_all
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            fd = sock.fileno()
            self.connections[fd] = sock
            self.buffers[fd] = bytearray()
            self.poller.register(fd, select.EPOLLIN)
            self.idle_poller.register(fd, select.EPOLLIN)

    def _receive(self, fd: int) -> None:
        sock = self.connections.get(fd)
        if sock is None:
            return
        try:
            received = sock.recv_into(self._scratch)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError:
            received = 0
        self._received(fd, received)

    def _received(self, fd: int, received: int) -> None:
        """Handle a read of ``received`` bytes (0: the peer closed) from connection ``fd`` into
        the scratch buffer: answer every request it completes."""
        if fd not in self.connections:
            return
        if not received:
            self._close_connection(CloseConnection(fd))
            return
        buffer = self.buffers[fd]
        try:
            frames = frames_received(buffer, self._scratch, received)
        except ValueError as error:
            self._send(fd, QueryFailed(0, BAD_REQUEST, str(error)))
            self._close_connection(CloseConnection(fd))
            return
        if buffer:
            self._partial.add(fd)
        else:
            self._partial.discard(fd)
        if frames and self.sources:
            self.refresh()
        for body in frames:
            self._feed(FrameArrived(fd, body))
            if fd not in self.connections:
                return

    def _feed(self, event: Event) -> None:
        for instruction in self.machine.handle(event):
            self._do[type(instruction)](instruction)

    # ------------------------------------------------------------------ the machine's instructions
    def _reply(self, instruction: Reply) -> None:
        self._send(instruction.conn, instruction.answer)

    def _read_live(self, instruction: ReadLive) -> None:
        request, served = instruction.request, instruction.served
        backend = self._backend(served)
        found, values = lookup(backend.owned_table(served.state_name), request.keys, instruction.groups)
        ttl = backend.ttl_configs.get(served.state_name)
        if ttl is not None:  # stored with their timestamps: the user's values, unexpired ones only
            state_type, horizon = backend.state_types[served.state_name], CLOCK.now() - ttl.ttl
            shown = [visible(v, state_type, horizon) if f else GONE for f, v in zip(found, values, strict=True)]
            found = tuple(v is not GONE for v in shown)
            values = tuple(None if v is GONE else v for v in shown)
        self._send(instruction.conn, Values(request.request_id, found, values))

    def _scan_live(self, instruction: ScanLive) -> None:
        request, served = instruction.request, instruction.served
        backend = self._backend(served)
        items, cursor = page(backend.owned_table(served.state_name), served.key_groups, request.cursor, request.limit)
        ttl = backend.ttl_configs.get(served.state_name)
        if ttl is not None:
            state_type, horizon = backend.state_types[served.state_name], CLOCK.now() - ttl.ttl
            shown = [(k, visible(v, state_type, horizon)) for k, v in items]
            items = [(k, v) for k, v in shown if v is not GONE]
        self._send(instruction.conn, Page(request.request_id, items, cursor))

    def _close_connection(self, instruction: CloseConnection) -> None:
        frames = self.outgoing.pop(instruction.conn, None)
        sock = self.connections.pop(instruction.conn, None)
        if frames and sock is not None:  # (a refusal before closing)
            try:
                send_all(sock, b"".join(frames))
            except OSError:
                pass
        self.buffers.pop(instruction.conn, None)
        self._partial.discard(instruction.conn)
        if sock is not None:
            for poller in (self.poller, self.idle_poller):
                try:
                    poller.unregister(instruction.conn)
                except (OSError, ValueError):
                    pass
            sock.close()

    def _backend(self, served: Served) -> Any:
        for source in self.sources:
            if source.uid == served.uid and source.subtask == served.subtask:
                return source.backend
        raise LookupError(f"no backend for {served.uid}#{served.subtask}")  # (declared states come from them)

    def _send(self, conn: int, answer: Any) -> None:
        if conn not in self.connections:
            return
        try:
            payload = encode(answer)
        except Exception as error:  # a value that cannot be pickled
            payload = encode(QueryFailed(getattr(answer, "request_id", 0), BAD_REQUEST,
                                         f"the value cannot be sent: {type(error).__name__}: {error}"))
        self.outgoing.setdefault(conn, []).append(plain_frame(payload))
        self.answered += 1

    def close(self) -> None:
        """Close every socket and drop the committed views (a RocksDB view's checkpoint is closed
        and deleted with it, before the backends are disposed)."""
        self.closed = True
        self.machine.committed = CommittedViews()
        for conn in list(self.connections):
            self._close_connection(CloseConnection(conn))
        try:
            self.poller.close()
            self.idle_poller.close()
        finally:
            for listener in self.listeners.values():
                listener.close()


def send_all(sock: socket.socket, data: bytes) -> None:
    """Send ``data`` on non-blocking ``sock``: one ``send`` call where the socket's buffer takes
    it all (an answer always does, unless the client stopped reading), else wait for the rest up to
    :data:`SEND_TIMEOUT_S`. A socket with a timeout would ``poll`` before every ``send`` and
    ``recv``: two more system calls per query, each a turn of the interpreter lock for the other
    threads of a busy worker. Raises OSError (TimeoutError past the timeout)."""
    try:
        sent = sock.send(data)
    except BlockingIOError:
        sent = 0
    if sent < len(data):
        sock.settimeout(SEND_TIMEOUT_S)
        try:
            sock.sendall(memoryview(data)[sent:])
        finally:
            sock.setblocking(False)
