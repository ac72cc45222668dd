"""Wire format shared by data connections (worker <-> worker) and control connections
(worker <-> JobMaster).

Every frame is ``type:u8 | channel:u32 | length:u32 | payload``. The first frame on any
connection is a HELLO whose payload is the job's secret token followed by the sender's worker
index; it is checked with a constant-time comparison *before* anything on that connection is
unpickled, so a stray process that does not know the token cannot inject frames (or code).
"""

from __future__ import annotations

import hmac
import socket
import struct
from typing import Any, Protocol

from epochal import serialization

HEADER = struct.Struct("!BII")
HELLO_INDEX = struct.Struct("!i")

HELLO = 1  # payload: token bytes + worker index (i32); -1 for the JobMaster
DATA = 2  # payload: pickled list of records for logical channel ``channel``
EVENT = 3  # payload: pickled in-band control event (end of partition, barrier, ...)
CREDIT = 4  # payload: u32 batches the consumer grants on ``channel``, u32 the batch size it wants (0: same)
CONTROL = 5  # payload: pickled control message (dict) between a worker and the JobMaster

CREDIT_VALUE = struct.Struct("!II")
TOKEN_BYTES = 32


class ProtocolError(Exception):
    """A peer broke the protocol (bad token, unknown frame type, truncated frame)."""


def send_frame(sock: socket.socket, frame_type: int, channel: int, payload: bytes) -> None:
    """Send one frame; header and payload go out in one system call without concatenation."""
    header = HEADER.pack(frame_type, channel, len(payload))
    if len(payload) < 4096:
        sock.sendall(header + payload)
        return
    sent = sock.sendmsg([header, payload])
    total = HEADER.size + len(payload)
    if sent < total:  # rare: kernel buffer full; finish with sendall
        rest = memoryview(header + payload)[sent:] if sent < HEADER.size else memoryview(payload)[sent - HEADER.size:]
        sock.sendall(rest)


class Readable(Protocol):
    """A buffered binary stream, e.g. ``socket.makefile("rb")``."""

    def read(self, size: int = ..., /) -> bytes | None: ...


def read_frame(stream: Readable) -> tuple[int, int, bytes] | None:
    """Read one frame from a buffered stream; ``None`` at a clean end of stream."""
    header = stream.read(HEADER.size)
    if not header:
        return None
    if len(header) < HEADER.size:
        raise ProtocolError("connection closed in the middle of a frame header")
    frame_type, channel, length = HEADER.unpack(header)
    payload = (stream.read(length) or b"") if length else b""
    if len(payload) < length:
        raise ProtocolError("connection closed in the middle of a frame")
    return frame_type, channel, payload


def hello_payload(token: bytes, index: int) -> bytes:
    """The HELLO payload that proves knowledge of the job's token."""
    return token + HELLO_INDEX.pack(index)


def check_hello(frame: tuple[int, int, bytes] | None, token: bytes) -> int:
    """Verify a HELLO frame against ``token``; return the sender's index or raise ProtocolError."""
    if frame is None:
        raise ProtocolError("connection closed before HELLO")
    frame_type, _, payload = frame
    if frame_type != HELLO or len(payload) != TOKEN_BYTES + HELLO_INDEX.size:
        raise ProtocolError("first frame is not a HELLO")
    if not hmac.compare_digest(payload[:TOKEN_BYTES], token):
        raise ProtocolError("wrong job token")
    return HELLO_INDEX.unpack(payload[TOKEN_BYTES:])[0]


def dumps(obj: Any) -> bytes:
    """Serialise a batch, event or control message (see :mod:`epochal.serialization`)."""
    return serialization.dumps(obj)


loads = serialization.loads


def configure_socket(sock: socket.socket) -> None:
    """Low latency and large buffers for data and control connections."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, 1 << 20)
        except OSError:
            pass
