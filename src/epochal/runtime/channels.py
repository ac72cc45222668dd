"""Channels with credit-based flow control, over TCP between workers or in memory inside one.

A consumer grants each producer ``channel_credits`` batches per channel and returns one credit
each time it has *processed* a batch. A producer without credit keeps further batches in its
``pending`` queue, and a subtask with pending output is not scheduled: that is backpressure,
and it stops at the sources. Because credit is only returned after processing, a consumer can
*block* one channel (stop processing batches from it) while the others keep flowing; during
checkpoint alignment the worker moves a blocked channel's batches into an alignment buffer and
returns their credit, so its producer is not stalled (see :mod:`epochal.runtime.alignment`).
In-band events (end of partition, and later barriers)
need no credit but queue behind pending batches, so they stay in FIFO order with the data.
"""

from __future__ import annotations

import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from epochal.runtime import protocol
from epochal.runtime.events import NO_WATERMARK
from epochal.runtime.mailbox import MailboxEvent, PeerClosed, PeerCredit, PeerData, PeerEvent
from epochal.runtime.operators import UserFunctionError


class Transport(Protocol):
    """Moves batches and events of output channels to their consumers."""

    def send_batch(self, channel: int, batch: list[Any]) -> None: ...

    def send_event(self, channel: int, event: Any) -> None: ...


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


class OutputChannel:
    """The producer's end of one channel: credit, and batches waiting for credit."""

    __slots__ = ("id", "credit", "pending", "transport", "batches_sent", "records_sent", "edge")

    def __init__(self, channel_id: int, credit: int, transport: Transport,
                 edge: tuple[str, str] = ("", "")) -> None:
        self.id = channel_id
        self.credit = credit
        self.pending: deque[tuple[bool, Any]] = deque()
        self.transport = transport
        self.batches_sent = 0
        self.records_sent = 0
        #: (producing operator, consuming operator): named in errors about records on this channel
        self.edge = edge

    def send_batch(self, batch: list[Any]) -> None:
        """Send now if credit allows and nothing is queued, else queue behind what is."""
        if self.credit > 0 and not self.pending:
            self._transmit(batch)
        else:
            self.pending.append((True, batch))

    def send_event(self, event: Any) -> None:
        """Send an in-band event after every batch sent before it."""
        if self.pending:
            self.pending.append((False, event))
        else:
            self.transport.send_event(self.id, event)

    def add_credit(self, credit: int) -> None:
        """The consumer processed batches: send what was waiting for credit."""
        self.credit += credit
        pending = self.pending
        while pending and (self.credit > 0 or not pending[0][0]):
            is_batch, item = pending.popleft()
            if is_batch:
                self._transmit(item)
            else:
                self.transport.send_event(self.id, item)

    def _transmit(self, batch: list[Any]) -> None:
        self.credit -= 1
        self.batches_sent += 1
        self.records_sent += len(batch)
        try:
            self.transport.send_batch(self.id, batch)
        except RecordNotPicklable as error:
            producer, consumer = self.edge
            raise UserFunctionError(producer, RecordNotPicklable(
                f"records sent to another worker must be picklable, but the edge '{producer}' -> '{consumer}' "
                f"carried {error}. Emit plain data instead (e.g. a list or tuple, not a generator, lambda, "
                "lock, file or socket)", error.record)) from None

    @property
    def backlogged(self) -> bool:
        return bool(self.pending)


class InputChannel:
    """The consumer's end of one channel: what arrived and was not processed yet."""

    __slots__ = ("id", "subtask", "queue", "blocked", "ended", "return_credit", "scheduled", "buffered",
                 "back_edge", "watermark", "input_index")

    def __init__(self, channel_id: int, subtask: Any, return_credit: Callable[[int], None],
                 buffered: Any = None) -> None:
        self.id = channel_id
        self.subtask = subtask
        self.queue: deque[tuple[bool, Any]] = deque()
        self.blocked = False
        self.ended = False
        self.return_credit = return_credit
        self.scheduled = False
        #: The :class:`~epochal.runtime.alignment.AlignmentBuffer` of aligned modes, else None:
        #: what arrived while blocked, credit already returned, replayed before ``queue``.
        self.buffered = buffered
        #: A loop's tail -> head channel (never blocked; logged during snapshots).
        self.back_edge = False
        #: Event time of this channel: the last watermark it delivered.
        self.watermark: Any = NO_WATERMARK
        #: Which input of the subtask's head operator its batches feed (1: a two-input
        #: operator's second input).
        self.input_index = 0


class PeerConnection:
    """The one TCP connection to another worker, shared by all channels between the two.

    A reader thread turns incoming frames into mailbox events (:mod:`epochal.runtime.mailbox`);
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
                elif frame_type == protocol.CREDIT:
                    deliver(PeerCredit(channel, credit_value(payload)[0]))
                elif frame_type == protocol.EVENT:
                    deliver(PeerEvent(channel, loads(payload)))
                else:
                    raise protocol.ProtocolError(f"unexpected frame type {frame_type}")
        except Exception as error:  # socket errors, protocol violations, undecodable payloads
            reason = f"connection error: {type(error).__name__}: {error}"
        if not self.closing:
            deliver(PeerClosed(self.peer, reason, self.generation))

    def send_batch(self, channel: int, batch: list[Any]) -> None:
        try:
            payload = protocol.dumps(batch)
        except Exception as error:
            raise unpicklable_record(batch, error) from error
        self.bytes_sent += len(payload)
        protocol.send_frame(self.sock, protocol.DATA, channel, payload)

    def send_event(self, channel: int, event: Any) -> None:
        protocol.send_frame(self.sock, protocol.EVENT, channel, protocol.dumps(event))

    def send_credit(self, channel: int, credit: int) -> None:
        protocol.send_frame(self.sock, protocol.CREDIT, channel, protocol.CREDIT_VALUE.pack(credit))

    def close(self) -> None:
        self.closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class LocalTransport:
    """Channels inside one worker: batches are handed over as objects, never serialised."""

    def __init__(self, deliver_local: Callable[[int, bool, Any], None]) -> None:
        self.deliver_local = deliver_local

    def send_batch(self, channel: int, batch: list[Any]) -> None:
        self.deliver_local(channel, True, batch)

    def send_event(self, channel: int, event: Any) -> None:
        self.deliver_local(channel, False, event)
