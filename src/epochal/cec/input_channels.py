"""A consumer's side of its input channels: positions, dedup by sequence number, replays, trims, credit.

The pure machine beside :class:`~epochal.cec.replay.OutputChannels` (the producer's side).
Channel ``c`` of a stage instance is its ``c``-th producer. :class:`InputChannels` owns, per
channel, how far the instance has read (``received``: the sequence number of the last item it
took; a frame read whole is at ``item_seq(frame, ITEM_LAST)``, whether or not it held items for
this consumer), the newest frame seen and where the producer's stream ends; and what the
instance may tell its producers:

- every :class:`~epochal.cec.protocol.StreamEvent` is answered with one
  :class:`~epochal.cec.protocol.Credit`; a frame seen before, and every item at or before the
  channel's position, is dropped (producers re-send after a replay: a frame sent twice is
  harmless);
- a replacement (or a consumer whose producer was replaced) asks for a replay after its
  position (:class:`~epochal.cec.protocol.ReplayRequest`);
- :class:`~epochal.cec.protocol.TrimRequest` s say how far the instance will never ask again,
  sent only once the output that makes it so is durable: a stateless stage trims its input up
  to the input position of its newest durable frame (:meth:`emitted`, then :meth:`durable`); a
  window stage trims to its oldest footprint once the frame holding it is durable
  (:meth:`trim_when_durable`); a sink stage trims to its commit at once (:meth:`trim_now`).

Events in, :class:`ToProducer` instructions out (and :class:`Deliver` for the items to process);
no sockets, no clocks. The driver is :class:`~epochal.cec.worker.CecWorker`.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochal.cec.protocol import Credit, ReplayRequest, TrimRequest
from epochal.cec.tuples import ITEM_LAST, item_seq


@dataclass(frozen=True, slots=True)
class ToProducer:
    """Send ``event`` to producer (worker) ``producer``."""

    producer: int
    event: Credit | ReplayRequest | TrimRequest


@dataclass(frozen=True, slots=True)
class Deliver:
    """Process the items at ``positions`` of the frame's item list, with sequence numbers
    ``seqs``, on ``channel``; then the frame's end, ``end`` (the channel's new position)."""

    channel: int
    positions: tuple[int, ...]
    seqs: tuple[int, ...]
    end: int


class InputChannels:
    """The input channels of consumer ``me`` from ``producers`` (worker indices, one channel each).

    ``after``: per channel the position to resume after (a replacement's rebuilt positions);
    fresh channels start at -1 (nothing read)."""

    def __init__(self, me: int, producers: list[int], after: list[int] | None = None) -> None:
        self.me = me
        self.producers = list(producers)
        self.received: list[int] = list(after) if after is not None else [-1] * len(producers)
        #: the newest frame seen per channel (a frame sent again after a replay is dropped)
        self.frames_seen: list[int] = [-1] * len(producers)
        #: where each producer's stream ends (its last frame), once it said so
        self.ends: list[int | None] = [None] * len(producers)
        #: a stateless stage's input position per own frame not yet durable
        self.metas: dict[int, tuple[int, ...]] = {}
        #: trims to send once own frame ``[0]`` is durable: per channel how far
        self.pending_trim: tuple[int, list[int]] | None = None

    def channel_of(self, producer: int) -> int | None:
        return self.producers.index(producer) if producer in self.producers else None

    @property
    def positions(self) -> tuple[int, ...]:
        return tuple(self.received)

    @property
    def ended(self) -> bool:
        """Every producer's stream ended and every frame of it was seen (an instance with no
        inputs never ends by its channels)."""
        return bool(self.producers) and all(end is not None and seen >= end
                                            for end, seen in zip(self.ends, self.frames_seen, strict=True))

    # ---------------------------------------------------------------- events
    def replay_all(self) -> list[ToProducer]:
        """A replacement starts: every producer is asked to replay after the rebuilt position."""
        return [ToProducer(p, ReplayRequest(self.me, self.received[c])) for c, p in enumerate(self.producers)]

    def producer_replaced(self, producer: int) -> list[ToProducer]:
        """A replacement of ``producer`` connected: tell it where this instance stands."""
        channel = self.channel_of(producer)
        return [] if channel is None else [ToProducer(producer, ReplayRequest(self.me, self.received[channel]))]

    def stream_event(self, producer: int, frame_seq: int, indices: list[int]) -> tuple[list[ToProducer],
                                                                                       Deliver | None]:
        """A frame of ``producer`` arrived holding items ``indices`` for this consumer: the credit
        to return, and what to process (None: the frame was seen before)."""
        channel = self.producers.index(producer)
        credit = [ToProducer(producer, Credit(self.me, 1))]
        if frame_seq <= self.frames_seen[channel]:
            return credit, None
        self.frames_seen[channel] = frame_seq
        last = self.received[channel]
        kept = [(k, item_seq(frame_seq, index)) for k, index in enumerate(indices)]
        kept = [(k, seq) for k, seq in kept if seq > last]
        end = max(last, item_seq(frame_seq, ITEM_LAST))
        self.received[channel] = end
        return credit, Deliver(channel, tuple(k for k, _ in kept), tuple(seq for _, seq in kept), end)

    def end_of_stream(self, producer: int, last: int) -> None:
        """``producer`` sent everything, up to frame ``last``."""
        channel = self.channel_of(producer)
        if channel is not None:
            self.ends[channel] = last

    # ---------------------------------------------------------------- trims
    def emitted(self, frame_seq: int) -> None:
        """A stateless stage emitted own frame ``frame_seq`` covering its input up to now."""
        self.metas[frame_seq] = self.positions

    def trim_when_durable(self, frame_seq: int, through: list[int]) -> None:
        """Trim each channel ``through`` its position once own frame ``frame_seq`` is durable
        (a window stage: its oldest footprints, held in that frame)."""
        self.pending_trim = (frame_seq, list(through))

    def durable(self, frame_seq: int) -> list[ToProducer]:
        """Own frame ``frame_seq`` is durable: the trims that waited for it."""
        meta = self.metas.pop(frame_seq, None)
        if meta is not None:  # a stateless stage never needs its input before a durable frame's
            self.pending_trim = (frame_seq, list(meta))
        pending = self.pending_trim
        if pending is None or frame_seq < pending[0]:
            return []
        self.pending_trim = None
        return self.trim_now(pending[1])

    def trim_now(self, through: list[int] | tuple[int, ...]) -> list[ToProducer]:
        """Trims for what needs no durable output first (a sink's commit, CRB's full checkpoint)."""
        return [ToProducer(p, TrimRequest(self.me, through[c])) for c, p in enumerate(self.producers)]
