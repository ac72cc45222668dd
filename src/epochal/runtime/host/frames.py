"""Framing: how every epochal connection cuts its bytes into frames and proves the job's token.

Two layouts, each a header that ends with the length of what follows (:data:`LENGTH`, a u32):

* *typed frames*, on data connections (worker <-> worker) and control connections (worker <->
  JobMaster): ``type:u8 | channel:u32 | length:u32 | payload`` (:data:`HEADER`), sent with
  :func:`send_frame` and read from a blocking stream with :func:`read_frame`. The first frame on
  any such connection is a HELLO whose payload is the job's secret token followed by the sender's
  worker index (:func:`hello_payload`, :func:`check_hello`).
* *plain frames*, on queryable-state connections (client <-> worker; their messages are
  :mod:`epochal.runtime.queries.wire`'s): ``length:u32 | body`` (:func:`plain_frame`), read from
  non-blocking sockets, where a frame may come in parts or several at once, with
  :func:`frames_received` and :func:`split_frames`. A request's body starts with the job's query
  token. The worker's native answer path (``dataflow/queries/_answer.c``) reads and writes the same
  layout: its ``HEADER`` and ``TOKEN`` are :data:`LENGTH`'s size and :data:`TOKEN_BYTES`.

A token is :data:`TOKEN_BYTES` long and checked in constant time (:func:`token_matches`) *before*
anything on that connection is unpickled, so a stray process that does not know the token cannot
inject frames (or code).
"""

from __future__ import annotations

import hmac
import socket
import struct
from typing import Any, Protocol

from epochal import serialization

#: The length every header ends with: how many bytes of the frame follow it.
LENGTH = struct.Struct("!I")
#: A typed frame's header: its type, its logical channel, then :data:`LENGTH`.
HEADER = struct.Struct("!BII")
HELLO_INDEX = struct.Struct("!i")

HELLO = 1  # payload: token bytes + worker index (i32); -1 for the JobMaster
DATA = 2  # payload: pickled list of records for logical channel ``channel``
EVENT = 3  # payload: pickled in-band control event (end of partition, barrier, ...)
CREDIT = 4  # payload: u32 batches the consumer grants on ``channel``, u32 the batch size it wants (0: same)
CONTROL = 5  # payload: pickled control message between a worker and the JobMaster
ARROW = 6  # payload: an Arrow IPC stream: a batch of record batches (a batch stream's) for ``channel``

CREDIT_VALUE = struct.Struct("!II")
#: The length of every token: the job's, and the query token derived from it.
TOKEN_BYTES = 32
#: The largest plain frame either side accepts.
MAX_FRAME = 64 << 20


class ProtocolError(ValueError):
    """A peer broke the protocol (bad token, unknown frame type, truncated or oversized frame)."""


def token_matches(presented: bytes | memoryview, token: bytes) -> bool:
    """Whether ``presented`` is ``token``, compared in constant time (no timing tells how much of
    it was right)."""
    return hmac.compare_digest(presented, token)


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
    if not token_matches(payload[:TOKEN_BYTES], token):
        raise ProtocolError("wrong job token")
    return HELLO_INDEX.unpack(payload[TOKEN_BYTES:])[0]


def plain_frame(body: bytes) -> bytes:
    """A plain frame of ``body``."""
    return LENGTH.pack(len(body)) + body


def frames_received(buffer: bytearray, scratch: memoryview, received: int) -> list[bytes]:
    """The bodies of the plain frames complete after a read of ``received`` bytes into ``scratch``
    (the connection's reused read buffer), ``buffer`` holding what earlier reads left incomplete.
    The usual read, one whole frame with nothing pending, is taken without passing through
    ``buffer``. Raises :class:`ProtocolError` as :func:`split_frames` does."""
    if not buffer and received > LENGTH.size and LENGTH.unpack_from(scratch)[0] == received - LENGTH.size:
        return [bytes(scratch[LENGTH.size:received])]
    buffer += scratch[:received]
    return split_frames(buffer)


def split_frames(buffer: bytearray) -> list[bytes]:
    """Take every complete plain frame's body off the front of ``buffer`` (what a connection
    received); an incomplete frame stays. Raises :class:`ProtocolError` for a frame longer than
    :data:`MAX_FRAME`."""
    frames = []
    start = 0
    size = len(buffer)
    prefix = LENGTH.size
    while size - start >= prefix:
        (length,) = LENGTH.unpack_from(buffer, start)
        if length > MAX_FRAME:
            raise ProtocolError(f"a frame of {length} bytes, more than {MAX_FRAME}")
        if size - start - prefix < length:
            break
        frames.append(bytes(buffer[start + prefix:start + prefix + length]))
        start += prefix + length
    if start:
        del buffer[:start]
    return frames


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
