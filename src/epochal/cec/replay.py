"""A producer's side of its output channels: what each consumer was sent, its replays and its credit.

A CEC stage instance forwards only what its persisted output queue holds durably (papers/002
§II.C, Appendix), so the queue is also the buffer of every channel: :class:`OutputChannels` is
a pure machine that decides, per consumer, whether a new durable frame goes out at once or
waits in the queue. Per consumer it tracks the newest frame sent, the frames in flight (sent,
not yet acknowledged by the consumer's :meth:`credit`), and whether it is

- *current*: a new durable frame goes to it at once (:meth:`durable`), while fewer than
  ``window`` frames are in flight;
- *behind*: it lacks frames the queue holds (it was out of credit, or asked for a replay with
  :meth:`request` because it or this producer was replaced); the driver reads the queue after
  :meth:`replay_from` and sends frame by frame (:meth:`replayed`) while it has credit, until
  the newest durable frame (:meth:`caught_up`);
- *waiting*: a replacement producer sends nothing until the consumer says where it stands.

Consumers also say how far they will never ask again (:meth:`trim`); :meth:`trim_before` is the
frame sequence number below which whole segments can go. A consumer drops what it already had
by sequence number, so a frame sent twice is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochal.cec.tuples import split_seq


@dataclass
class _Consumer:
    sent: int = -1  # newest frame sent
    inflight: int = 0
    behind: bool = False
    waiting: bool = False
    replaying: bool = False  # behind because it asked for a replay (not only out of credit)
    after: int = -1  # items at or before this sequence number are not sent
    acked: int = -1  # items at or before this sequence number are never needed again


class OutputChannels:
    """The channels to ``consumers`` (worker indices); ``live=False`` for a replacement."""

    def __init__(self, consumers: list[int], live: bool = True, window: int = 16) -> None:
        self.consumers = list(consumers)
        self.window = window
        self.of = {c: _Consumer(waiting=not live) for c in consumers}

    def durable(self, frame_seq: int) -> list[int]:
        """Frame ``frame_seq`` is durable: the consumers to send it to now (the others are
        behind: it waits in the queue for them)."""
        out = []
        for c, state in self.of.items():
            if state.waiting or state.behind or state.sent >= frame_seq:
                continue
            if state.inflight < self.window:
                state.sent, state.inflight = frame_seq, state.inflight + 1
                out.append(c)
            else:
                state.behind = True
        return out

    def request(self, consumer: int, after: int) -> None:
        """``consumer`` (new, or replaced) wants everything after item sequence number ``after``."""
        state = self.of[consumer]
        state.waiting, state.behind, state.replaying, state.inflight = False, True, True, 0
        state.after = after
        state.sent = split_seq(after)[0] - 1 if after >= 0 else -1
        state.acked = max(state.acked, after)

    def behind(self) -> list[int]:
        """Consumers to send queued frames to now (behind, with credit)."""
        return [c for c, s in self.of.items() if s.behind and s.inflight < self.window]

    def replay_from(self, consumer: int) -> tuple[int, int]:
        """``(frame, after)``: send ``consumer`` the frames with a sequence number above
        ``frame``, without the items at or before sequence number ``after``."""
        state = self.of[consumer]
        return state.sent, state.after

    def replayed(self, consumer: int, frame_seq: int) -> None:
        state = self.of[consumer]
        state.sent, state.inflight = max(state.sent, frame_seq), state.inflight + 1

    def caught_up(self, consumer: int) -> None:
        """``consumer`` was sent every durable frame: current from now on."""
        state = self.of[consumer]
        state.behind = state.replaying = False

    def credit(self, consumer: int, frames: int) -> None:
        """``consumer`` processed ``frames`` frames."""
        state = self.of.get(consumer)
        if state is not None:
            state.inflight = max(0, state.inflight - frames)

    def lost(self, consumer: int) -> None:
        """``consumer``'s connection ended: send it nothing until its replacement asks."""
        self.of[consumer].waiting = True

    def trim(self, consumer: int, through: int) -> None:
        state = self.of.get(consumer)
        if state is not None:
            state.acked = max(state.acked, through)

    def trim_before(self) -> int:
        """Frames with a smaller sequence number than this are needed by no consumer."""
        if not self.consumers:
            return -1
        return min(split_seq(s.acked)[0] if s.acked >= 0 else -1 for s in self.of.values())

    def slowest(self) -> int:
        """The oldest frame some consumer was sent (back-pressure on the producer)."""
        return min((s.sent for s in self.of.values()), default=-1)
