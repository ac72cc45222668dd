"""Channels with credit-based flow control, over TCP between workers or in memory inside one.

A consumer grants each producer ``channel_credits`` batches per channel and returns one credit
each time it has *processed* a batch. A producer without credit keeps further batches in its
``pending`` queue, and a subtask with pending output is not scheduled: that is backpressure,
and it stops at the sources. Because credit is only returned after processing, a consumer can
*block* one channel (stop processing batches from it) while the others keep flowing; during
checkpoint alignment the worker moves a blocked channel's batches into an alignment buffer and
returns their credit, so its producer is not stalled (see :mod:`epochal.dataflow.checkpointing.alignment`).
In-band events (end of partition, and later barriers)
need no credit but queue behind pending batches, so they stay in FIFO order with the data.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from epochal.errors import UserFunctionError
from epochal.runtime.host.peers import RecordNotPicklable
from epochal.runtime.operators.inband import NO_WATERMARK


class Transport(Protocol):
    """Moves batches and events of output channels to their consumers."""

    def send_batch(self, channel: int, batch: list[Any]) -> None: ...

    def send_event(self, channel: int, event: Any) -> None: ...


#: A channel's batch size before its consumer announced one: no bound but the edge's own.
UNANNOUNCED = 1 << 62


class OutputChannel:
    """The producer's end of one channel: credit, batches waiting for credit, and the batch size
    its consumer last asked for (:mod:`epochal.dataflow.dataplane.batch_sizing`)."""

    __slots__ = ("id", "credit", "pending", "transport", "batches_sent", "records_sent", "edge", "batch_size")

    def __init__(self, channel_id: int, credit: int, transport: Transport,
                 edge: tuple[str, str] = ("", ""), batch_size: int = UNANNOUNCED) -> None:
        self.id = channel_id
        self.credit = credit
        #: records per batch the consumer wants (announced with its credit)
        self.batch_size = batch_size
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

    def add_credit(self, credit: int, batch_size: int = 0) -> None:
        """The consumer processed batches (and, ``batch_size`` > 0, wants batches of that many
        records from now on): send what was waiting for credit."""
        if batch_size:
            self.batch_size = batch_size
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

    def __init__(self, channel_id: int, subtask: Any, return_credit: Callable[[int, int], None],
                 buffered: Any = None) -> None:
        self.id = channel_id
        self.subtask = subtask
        #: ``return_credit(batches, batch_size)``: to the producer, with the batch size this
        #: consumer wants (0: no change)
        self.return_credit = return_credit
        self.queue: deque[tuple[bool, Any]] = deque()
        self.blocked = False
        self.ended = False
        self.scheduled = False
        #: The :class:`~epochal.dataflow.checkpointing.alignment.AlignmentBuffer` of aligned modes, else None:
        #: what arrived while blocked, credit already returned, replayed before ``queue``.
        self.buffered = buffered
        #: A loop's tail -> head channel (never blocked; logged during snapshots).
        self.back_edge = False
        #: Event time of this channel: the last watermark it delivered.
        self.watermark: Any = NO_WATERMARK
        #: Which input of the subtask's head operator its batches feed (1: a two-input
        #: operator's second input).
        self.input_index = 0


class LocalTransport:
    """Channels inside one worker: batches are handed over as objects, never serialised."""

    def __init__(self, deliver_local: Callable[[int, bool, Any], None]) -> None:
        self.deliver_local = deliver_local

    def send_batch(self, channel: int, batch: list[Any]) -> None:
        self.deliver_local(channel, True, batch)

    def send_event(self, channel: int, event: Any) -> None:
        self.deliver_local(channel, False, event)
