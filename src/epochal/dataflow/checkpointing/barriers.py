"""Barrier handling of one subtask, the input side of Asynchronous Barrier Snapshotting, as pure machines.

Three small machines, each with one owner and explicit states, fed events with the time passed
in and returning what happened (:data:`BarrierOutput`) instead of calling back; the subtask
that owns them (:class:`~epochal.dataflow.dataplane.tasks.Subtask`) carries the outputs out
(:class:`~epochal.dataflow.dataplane.subtask_barriers.SubtaskBarriers` blocks and releases its input
channels and feeds the worker machine). Channels are named by
their ids.

- :class:`BarrierAligner` (``exactly_once``, papers/000 Algorithm 1; Flink's
  ``SingleCheckpointBarrierHandler`` with its ``BarrierHandlerState``): WAITING for a first
  barrier, or ALIGNING one checkpoint: an input whose barrier *n* arrived is blocked (nothing
  more from it is processed; the worker moves what it delivers into an alignment buffer, see
  :mod:`~epochal.dataflow.checkpointing.alignment`) until every input delivered *n*; then the
  subtask snapshots (:class:`Aligned`), forwards *n*, and every input is released, its buffer
  replayed first.
- :class:`BarrierTracker` (``at_least_once``): only counts barriers and never blocks, so
  records after a barrier may be processed before the snapshot and replayed after a restore.
- :class:`BackEdgeLogs`: a loop's head (papers/000 Algorithm 2) also has *back-edge* inputs,
  never blocked and never awaited: once the regular inputs delivered *n* the head snapshots and
  forwards *n* into the loop (so no deadlock), then *logs* what arrives on its back-edges until
  *n* comes back on all of them (:class:`LogClosed`); the log is the loop's in-transit records,
  part of snapshot *n*. A head whose regular inputs all ended starts checkpoints itself
  (``start``), as a source does.

Both aligner and tracker give a pending checkpoint up when a newer barrier arrives first or the
coordinator aborts it, and *remember aborted checkpoints*: a barrier of a checkpoint aborted
before it arrived (the abort overtook it) starts nothing, so an aborted checkpoint is never
aligned, snapshotted or uploaded. Inputs that ended (end of partition) count as having
delivered every barrier.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


# ---------------------------------------------------------------------- outputs
@dataclass(frozen=True)
class Block:
    """Block input ``channel``: what it delivers waits in its alignment buffer."""

    channel: int


@dataclass(frozen=True)
class Unblock:
    """Unblock ``channels`` (their buffered data is processed first)."""

    channels: tuple[int, ...]


@dataclass(frozen=True)
class Aligned:
    """Every input delivered barrier ``checkpoint_id``: snapshot now (alignment took ``alignment_s``)."""

    checkpoint_id: int
    alignment_s: float


@dataclass(frozen=True)
class Aborted:
    """The pending ``checkpoint_id`` was given up (``reason``); its alignment was released."""

    checkpoint_id: int
    reason: str


@dataclass(frozen=True)
class LogClosed:
    """Barrier ``checkpoint_id`` came back on every open back-edge: its back-edge log is complete."""

    checkpoint_id: int


BarrierOutput = Block | Unblock | Aligned | Aborted | LogClosed


class BarrierState(enum.Enum):
    #: no checkpoint pending: the next barrier (or ``start``) begins one
    WAITING = "waiting"
    #: one checkpoint pending: some inputs delivered its barrier, the others are awaited
    ALIGNING = "aligning"


class _Barriers:
    """What aligner and tracker share: the pending checkpoint, the inputs that delivered its
    barrier or ended, and the checkpoints that may start no more (done or aborted)."""

    blocks = False

    def __init__(self, inputs: Iterable[int]) -> None:
        self.inputs = frozenset(inputs)
        self.ended: set[int] = set()
        self.state = BarrierState.WAITING
        #: the pending checkpoint (ALIGNING), when it began, and the inputs that delivered it
        self.pending: int | None = None
        self.since = 0.0
        self.arrived: set[int] = set()
        #: checkpoints at or below ``done`` never start again (aligned, or superseded)
        self.done = 0
        #: checkpoints above ``done`` that were aborted before they were aligned here
        self.aborted: set[int] = set()

    def _stale(self, checkpoint_id: int) -> bool:
        return checkpoint_id <= self.done or checkpoint_id in self.aborted

    # ---------------------------------------------------------------- events
    def on_barrier(self, channel: int, checkpoint_id: int, now: float) -> list[BarrierOutput]:
        """Barrier ``checkpoint_id`` arrived on input ``channel``."""
        if self._stale(checkpoint_id) or (self.pending is not None and checkpoint_id < self.pending):
            return []  # a barrier of an aborted, superseded or completed checkpoint
        out: list[BarrierOutput] = []
        if self.pending is not None and checkpoint_id > self.pending:
            out += self._give_up(f"barrier {checkpoint_id} arrived before {self.pending} was aligned")
        if self.pending is None:
            self._begin(checkpoint_id, now)
        self.arrived.add(channel)
        if self.blocks:
            out.append(Block(channel))
        return out + self._check(now)

    def on_input_ended(self, channel: int, now: float) -> list[BarrierOutput]:
        """Input ``channel`` ended: it can no longer hold up a pending checkpoint."""
        self.ended.add(channel)
        return self._check(now) if self.pending is not None else []

    def start(self, checkpoint_id: int, now: float) -> list[BarrierOutput]:
        """Take ``checkpoint_id`` now if no barrier can bring it any more: every input ended
        (a loop head whose sources are exhausted while the loop still runs)."""
        if self._stale(checkpoint_id) or self.pending is not None or not self.inputs <= self.ended:
            return []
        self._begin(checkpoint_id, now)
        return self._check(now)

    def abort(self, checkpoint_id: int, reason: str) -> list[BarrierOutput]:
        """The coordinator gave ``checkpoint_id`` up: release it if pending; its barriers, should
        they still come, start nothing."""
        if checkpoint_id <= self.done:
            return []
        self.aborted.add(checkpoint_id)
        if self.pending == checkpoint_id:
            return self._give_up(reason)
        return []

    # ---------------------------------------------------------------- transitions
    def _begin(self, checkpoint_id: int, now: float) -> None:
        self.state, self.pending, self.since, self.arrived = BarrierState.ALIGNING, checkpoint_id, now, set()

    def _end(self) -> list[BarrierOutput]:
        """Back to WAITING: release what was blocked."""
        released = tuple(sorted(self.arrived)) if self.blocks else ()
        self.state, self.pending, self.arrived = BarrierState.WAITING, None, set()
        return [Unblock(released)] if released else []

    def _give_up(self, reason: str) -> list[BarrierOutput]:
        assert self.pending is not None
        aborted = self.pending
        self.aborted.add(aborted)
        return [*self._end(), Aborted(aborted, reason)]

    def _check(self, now: float) -> list[BarrierOutput]:
        if self.pending is None or not self.inputs <= self.arrived | self.ended:
            return []
        checkpoint_id = self.pending
        self.done = checkpoint_id
        self.aborted = {c for c in self.aborted if c > checkpoint_id}
        aligned = Aligned(checkpoint_id, now - self.since)
        # the snapshot is taken while every input is still blocked, then all are released
        return [aligned, *self._end()]


class BarrierAligner(_Barriers):
    """Exactly-once alignment over the inputs (channel ids) of one subtask; see the module docstring."""

    blocks = True


class BarrierTracker(_Barriers):
    """At-least-once: counts barriers per checkpoint and never blocks an input."""

    blocks = False


class BackEdgeLogs:
    """A loop head's back-edge logs: per checkpoint aligned on the regular inputs, the back-edges
    that still owe its barrier. Logs complete in checkpoint order."""

    def __init__(self, back_edges: Iterable[int]) -> None:
        self.back_edges = frozenset(back_edges)
        self.ended: set[int] = set()
        #: checkpoint -> back-edges whose barrier has not come back yet
        self.owing: dict[int, set[int]] = {}

    def open(self, checkpoint_id: int) -> list[BarrierOutput]:
        """The head snapshotted ``checkpoint_id`` and sent its barrier into the loop: log until it returns."""
        self.owing[checkpoint_id] = set(self.back_edges)
        return self._close()

    def on_barrier(self, channel: int, checkpoint_id: int) -> list[BarrierOutput]:
        owing = self.owing.get(checkpoint_id)
        if owing is None:
            return []
        owing.discard(channel)
        return self._close()

    def on_input_ended(self, channel: int) -> list[BarrierOutput]:
        self.ended.add(channel)
        return self._close()

    def abort(self, checkpoint_id: int) -> None:
        """Forget ``checkpoint_id``'s log; older logs still complete on their own barriers."""
        self.owing.pop(checkpoint_id, None)

    def _close(self) -> list[BarrierOutput]:
        out: list[BarrierOutput] = []
        for checkpoint_id in sorted(self.owing):
            if self.owing[checkpoint_id] - self.ended:
                break
            del self.owing[checkpoint_id]
            out.append(LogClosed(checkpoint_id))
        return out
