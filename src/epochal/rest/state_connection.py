"""The client's side of one connection to a worker's query server
(:class:`~epochal.rest.state_client.QueryableStateClient` keeps one per worker it asks): frames
out, answers in by request id, read into one reused buffer (:mod:`epochal.runtime.queries.wire`)."""

from __future__ import annotations

import collections
import socket
import struct
from typing import Any

from epochal.runtime.queries.wire import RECV_BYTES, decode, frames_received


class WorkerConnection:
    """One connection to a worker's query server; answers arrive in request order."""

    def __init__(self, address: tuple[str, int], timeout: float) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Blocking, with the timeout kept by the kernel: a socket with a Python timeout polls
        # before every send and recv (two more system calls per lookup). A send or recv that
        # times out raises BlockingIOError, an OSError like the others.
        self.sock.settimeout(None)
        seconds = max(timeout, 0.001)
        interval = struct.pack("ll", int(seconds), int((seconds % 1) * 1_000_000))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, interval)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, interval)
        self.buffer = bytearray()
        self.answers: collections.deque[bytes] = collections.deque()
        #: what each recv reads into (a recv of a fresh bytes object that large would cost an mmap
        #: and munmap per call: about 20 µs of CPU, see RECV_BYTES)
        self.scratch = memoryview(bytearray(RECV_BYTES))

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def receive(self, request_id: int) -> Any:
        """The answer to request ``request_id`` (answers to earlier requests not waited for are
        skipped), or a refusal of an unreadable request (id 0)."""
        while True:
            while self.answers:
                answer = decode(self.answers.popleft())
                if answer.request_id in (request_id, 0):
                    return answer
            received = self.sock.recv_into(self.scratch)
            if not received:
                raise EOFError("the connection closed")
            self.answers.extend(frames_received(self.buffer, self.scratch, received))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
