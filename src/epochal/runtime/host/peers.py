"""The one TCP connection between two workers, shared by every channel and exchange between them.

:class:`PeerConnection` is the worker host's: every job kind's workers exchange data over it (a
dataflow job's batches, events and credit; a graph job's superstep exchanges; a CEC job's
frames). A reader thread turns incoming frames into mailbox events
(:mod:`epochal.runtime.host.mailbox`); the mailbox thread is the only writer, so sends need no
lock. A batch that cannot be serialised fails as the producing operator's error
(:func:`unpicklable_record`).

A batch of a batch stream (its elements ``pyarrow.RecordBatch``es of one schema) travels as an
Arrow IPC stream (frame ``ARROW``), not pickled: the columns' buffers are written as they are,
and read back without a copy.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from epochal.runtime.host import frames as protocol
from epochal.runtime.host.mailbox import MailboxEvent, PeerClosed, PeerCredit, PeerData, PeerEvent


class RecordNotPicklable(TypeError):
    """A batch bound for another worker holds a record that pickle cannot serialise."""

    def __init__(self, message: str, record: Any) -> None:
        super().__init__(message)
        self.record = record


def unpicklable_record(batch: list[Any], error: BaseException) -> RecordNotPicklable:
    """Name the first record of ``batch`` that cannot be pickled (``error`` came from the batch)."""
    culprit, cause = batch, error
    for record in batch:
        try:
            protocol.dumps(record)
        except Exception as record_error:
            culprit, cause = record, record_error
            break
    text = repr(culprit)
    text = text if len(text) <= 80 else text[:77] + "..."
    return RecordNotPicklable(f"a {type(culprit).__name__} ({text}), which pickle cannot serialise "
                              f"({type(cause).__name__}: {cause})", culprit)


def arrow_payload(batch: list[Any]) -> memoryview | None:
    """``batch`` as an Arrow IPC stream if it is a batch of record batches of one schema, else
    None (then it is pickled). pyarrow is looked up, not imported: a process that never loaded
    it holds no record batch."""
    pa = sys.modules.get("pyarrow")
    if pa is None or not batch or type(batch[0]) is not pa.RecordBatch:
        return None
    schema = batch[0].schema
    for element in batch:
        if type(element) is not pa.RecordBatch or not (element.schema is schema or element.schema.equals(schema)):
            return None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for element in batch:
            writer.write_batch(element)
    return memoryview(sink.getvalue())


def record_batches(payload: bytes) -> list[Any]:
    """The record batches of an ``ARROW`` frame's payload (they point into ``payload``)."""
    import pyarrow as pa

    return list(pa.ipc.open_stream(payload))


class PeerConnection:
    """The one TCP connection to another worker, shared by all channels between the two.

    A reader thread turns incoming frames into mailbox events (:mod:`epochal.runtime.host.mailbox`);
    the mailbox thread is the only writer, so sends need no lock.
    """

    def __init__(self, peer: int, sock: socket.socket, deliver: Callable[[MailboxEvent], None],
                 generation: int = 0) -> None:
        self.peer = peer
        self.generation = generation
        self.sock = sock
        self.deliver = deliver
        self.closing = False
        self.bytes_sent = 0
        self.thread = threading.Thread(target=self._read_loop, name=f"epochal-peer-{peer}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _read_loop(self) -> None:
        deliver = self.deliver
        loads = protocol.loads
        credit_value = protocol.CREDIT_VALUE.unpack
        reason = "closed the connection"
        try:
            stream = self.sock.makefile("rb", buffering=1 << 16)
            while True:
                frame = protocol.read_frame(stream)
                if frame is None:
                    break
                frame_type, channel, payload = frame
                if frame_type == protocol.DATA:
                    deliver(PeerData(channel, loads(payload)))
                elif frame_type == protocol.ARROW:
                    deliver(PeerData(channel, record_batches(payload)))
                elif frame_type == protocol.CREDIT:
                    deliver(PeerCredit(channel, *credit_value(payload)))
                elif frame_type == protocol.EVENT:
                    deliver(PeerEvent(channel, loads(payload)))
                else:
                    raise protocol.ProtocolError(f"unexpected frame type {frame_type}")
        except Exception as error:  # socket errors, protocol violations, undecodable payloads
            reason = f"connection error: {type(error).__name__}: {error}"
        if not self.closing:
            deliver(PeerClosed(self.peer, reason, self.generation))

    def send_batch(self, channel: int, batch: list[Any]) -> None:
        columnar = arrow_payload(batch)
        if columnar is not None:
            self.bytes_sent += len(columnar)
            protocol.send_frame(self.sock, protocol.ARROW, channel, columnar)
            return
        try:
            payload = protocol.dumps(batch)
        except Exception as error:
            raise unpicklable_record(batch, error) from error
        self.bytes_sent += len(payload)
        protocol.send_frame(self.sock, protocol.DATA, channel, payload)

    def send_event(self, channel: int, event: Any) -> None:
        protocol.send_frame(self.sock, protocol.EVENT, channel, protocol.dumps(event))

    def send_credit(self, channel: int, credit: int, batch_size: int = 0) -> None:
        protocol.send_frame(self.sock, protocol.CREDIT, channel, protocol.CREDIT_VALUE.pack(credit, batch_size))

    def close(self) -> None:
        self.closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
