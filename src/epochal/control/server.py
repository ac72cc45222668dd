"""The JobMaster's TCP side: the listening socket, the workers' control connections and their readers.

:class:`ControlServer` owns the listener (its address travels to the workers in the Spark task
closure), the accept thread, one reader thread per connection, and the accepted connections by
*connection id*: an int it assigns once a connection proved the job's token, so that nothing
above it holds a socket. A connection whose first frame is not a HELLO with the right token is
closed before anything on it is unpickled. Every later frame must be a CONTROL frame; each
becomes an inbox event (:class:`~epochal.control.inbox.Received`) handed to ``deliver``, and the
end of a connection (closed by the peer, broken, or a bad frame) becomes
:class:`~epochal.control.inbox.Disconnected`. Connections are closed only when told to
(``close``, ``close_all``). Sending is thread safe; a send that fails is ignored, since the
reader reports the connection's end.
"""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Callable, Iterable

from epochal.control.inbox import Disconnected, InboxEvent, Received
from epochal.messages import ToWorker
from epochal.runtime.host import frames as protocol

__all__ = ["ControlServer"]


class ControlServer:
    """The listener and the control connections of one job, on ``bind_host`` at a free port.

    Args:
        bind_host: where to listen ("127.0.0.1" in local mode, "" for every interface).
        token: the job's secret; a connection must present it in its HELLO.
        deliver: takes every inbox event (called on the reader threads).
    """

    def __init__(self, bind_host: str, token: bytes, deliver: Callable[[InboxEvent], None]) -> None:
        self.token = token
        self.deliver = deliver
        self.listener = socket.create_server((bind_host, 0), backlog=128)
        self.address: tuple[str, int] = self.listener.getsockname()[:2]
        self._connections: dict[int, socket.socket] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards _connections
        self._send_lock = threading.Lock()  # one frame at a time, whichever thread sends

    def start(self) -> None:
        """Accept connections on a background thread until ``close_all``."""
        threading.Thread(target=self._accept_loop, name="epochal-jm-accept", daemon=True).start()

    def add(self, sock: socket.socket) -> int:
        """Take ``sock`` (whose HELLO was checked) as a control connection; returns its id."""
        with self._lock:
            connection = next(self._ids)
            self._connections[connection] = sock
        return connection

    def send(self, connection: int, message: ToWorker) -> None:
        """Send ``message`` on ``connection``; nothing if it is closed or the send fails."""
        payload = protocol.dumps(message)
        with self._lock:
            sock = self._connections.get(connection)
        if sock is None:
            return
        with self._send_lock:
            try:
                protocol.send_frame(sock, protocol.CONTROL, 0, payload)
            except OSError:
                pass  # the disconnect event reports it

    def close(self, connections: Iterable[int]) -> None:
        """Close these connections (their readers then report them ended)."""
        with self._lock:
            socks = [self._connections.pop(c) for c in connections if c in self._connections]
        for sock in socks:
            try:
                sock.close()
            except OSError:
                pass

    def close_all(self) -> None:
        """Stop listening and close every connection."""
        try:
            self.listener.close()
        except OSError:
            pass
        with self._lock:
            ids = list(self._connections)
        self.close(ids)

    # ------------------------------------------------------------------ threads
    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
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
        connection = self.add(sock)
        try:
            while True:
                frame = protocol.read_frame(stream)
                if frame is None:
                    break
                if frame[0] != protocol.CONTROL:
                    raise protocol.ProtocolError(f"unexpected frame type {frame[0]}")
                self.deliver(Received(index, connection, protocol.loads(frame[2])))
        except Exception:
            pass
        self.deliver(Disconnected(index, connection))
