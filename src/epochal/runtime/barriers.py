"""Barrier handling of one subtask: the input side of Asynchronous Barrier Snapshotting.

``exactly_once`` aligns (papers/000 Algorithm 1): an input whose barrier *n* arrived is blocked
(the mailbox takes nothing more from it; what is already there waits, bounded by the credit it
granted) until every input delivered *n*; then the subtask snapshots, forwards *n* and every
input is unblocked, in order. ``at_least_once`` only counts barriers and never blocks, so
records after a barrier may be processed before the snapshot and replayed after a restore.

A newer barrier arriving while *n* is pending aborts *n* (its alignment is released) and
starts the newer one; so does the coordinator's abort. Inputs that ended (end of partition)
count as having delivered every barrier: nothing more can come from them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

EXACTLY_ONCE = "exactly_once"
AT_LEAST_ONCE = "at_least_once"
SYNCHRONOUS = "synchronous"
NONE = "none"
MODES = (EXACTLY_ONCE, AT_LEAST_ONCE, SYNCHRONOUS, NONE)


class BlockableInput(Protocol):
    """What the handler needs of an input channel."""

    blocked: bool
    ended: bool


class BarrierHandler:
    """Tracks barriers over a subtask's inputs and says when to snapshot.

    Args:
        inputs: the subtask's input channels.
        aligned: block inputs whose barrier arrived (exactly-once and synchronous modes).
        on_aligned: ``on_aligned(checkpoint_id, alignment_seconds)`` once all inputs delivered it.
        on_aborted: ``on_aborted(checkpoint_id, reason)`` when a pending checkpoint is given up.
    """

    def __init__(self, inputs: Sequence[BlockableInput], aligned: bool,
                 on_aligned: Callable[[int, float], None],
                 on_aborted: Callable[[int, str], None] | None = None) -> None:
        self.inputs = list(inputs)
        self.aligned = aligned
        self.on_aligned = on_aligned
        self.on_aborted = on_aborted or (lambda checkpoint_id, reason: None)
        self.pending: int | None = None
        self.arrived: set[int] = set()
        self.started = 0.0
        self.last_completed = 0

    def on_barrier(self, channel: Any, checkpoint_id: int) -> None:
        """Barrier ``checkpoint_id`` arrived on ``channel`` (which is one of ``inputs``)."""
        if checkpoint_id <= self.last_completed:
            return  # a barrier of an aborted or superseded checkpoint
        if self.pending is not None and checkpoint_id < self.pending:
            return
        if self.pending is not None and checkpoint_id > self.pending:
            self._release()
            self.on_aborted(self.pending, f"barrier {checkpoint_id} arrived before {self.pending} was aligned")
            self.pending = None
        if self.pending is None:
            self.pending = checkpoint_id
            self.arrived = set()
            self.started = time.monotonic()
        self.arrived.add(id(channel))
        if self.aligned:
            channel.blocked = True
        self._check()

    def on_input_ended(self) -> None:
        """An input ended: it can no longer hold up a pending alignment."""
        if self.pending is not None:
            self._check()

    def abort(self, checkpoint_id: int, reason: str) -> None:
        """The coordinator gave ``checkpoint_id`` up (timeout, failure elsewhere)."""
        if self.pending is not None and self.pending <= checkpoint_id:
            aborted = self.pending
            self._release()
            self.pending = None
            self.last_completed = max(self.last_completed, checkpoint_id)
            self.on_aborted(aborted, reason)

    def _check(self) -> None:
        for channel in self.inputs:
            if id(channel) not in self.arrived and not channel.ended:
                return
        checkpoint_id = self.pending
        assert checkpoint_id is not None
        alignment = time.monotonic() - self.started
        self.pending = None
        self.last_completed = checkpoint_id
        self.on_aligned(checkpoint_id, alignment)
        self._release()

    def _release(self) -> None:
        for channel in self.inputs:
            channel.blocked = False
        self.arrived = set()
