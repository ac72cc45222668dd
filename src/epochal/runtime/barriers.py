"""Barrier handling of one subtask: the input side of Asynchronous Barrier Snapshotting.

``exactly_once`` aligns (papers/000 Algorithm 1): an input whose barrier *n* arrived is blocked
(nothing more from it is processed; the worker moves what it delivers into an alignment buffer,
see :mod:`epochal.runtime.alignment`) until every input delivered *n*; then the subtask
snapshots, forwards *n* and every input is unblocked, its buffer replayed first.
``at_least_once`` only counts barriers and never blocks, so
records after a barrier may be processed before the snapshot and replayed after a restore.

A loop's head (papers/000 Algorithm 2) also has *back-edge* inputs. They are never blocked and
never awaited: once the regular inputs delivered *n* the head snapshots and forwards *n* into
the loop (so no deadlock), then *logs* what arrives on its back-edges until *n* comes back on
all of them (``on_loop_closed``); the log is the loop's in-transit records, part of snapshot *n*.
A head whose regular inputs all ended starts checkpoints itself (:meth:`start`), as a source does.

A newer barrier arriving while *n* is pending aborts *n* (its alignment is released) and
starts the newer one; so does the coordinator's abort. Inputs that ended (end of partition)
count as having delivered every barrier: nothing more can come from them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol


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
        on_released: ``on_released(inputs)`` after blocked inputs were unblocked, so their
            buffered data can be scheduled again.
        back_edges: a loop head's back-edge inputs (a subset of ``inputs``).
        on_loop_closed: ``on_loop_closed(checkpoint_id)`` when barrier ``checkpoint_id`` came
            back on every back-edge (or they ended): the back-edge log is complete.
    """

    def __init__(self, inputs: Sequence[BlockableInput], aligned: bool,
                 on_aligned: Callable[[int, float], None],
                 on_aborted: Callable[[int, str], None] | None = None,
                 on_released: Callable[[list[Any]], None] | None = None,
                 back_edges: Sequence[BlockableInput] = (),
                 on_loop_closed: Callable[[int], None] | None = None) -> None:
        self.back_edges = list(back_edges)
        self.back_ids = {id(c) for c in self.back_edges}
        self.inputs = [c for c in inputs if id(c) not in self.back_ids]
        self.on_loop_closed = on_loop_closed or (lambda checkpoint_id: None)
        #: Checkpoints whose back-edge log is being recorded, with the back-edges still owing the barrier.
        self.logging: dict[int, set[int]] = {}
        self.aligned = aligned
        self.on_aligned = on_aligned
        self.on_aborted = on_aborted or (lambda checkpoint_id, reason: None)
        self.on_released = on_released or (lambda inputs: None)
        self.pending: int | None = None
        self.arrived: set[int] = set()
        self.started = 0.0
        self.last_completed = 0

    def on_barrier(self, channel: Any, checkpoint_id: int) -> None:
        """Barrier ``checkpoint_id`` arrived on ``channel`` (which is one of ``inputs``)."""
        if id(channel) in self.back_ids:
            owing = self.logging.get(checkpoint_id)
            if owing is not None:
                owing.discard(id(channel))
                self._close_logs()
            return
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
        """An input ended: it can no longer hold up a pending alignment (or a back-edge log)."""
        if self.pending is not None:
            self._check()
        self._close_logs()

    def start(self, checkpoint_id: int) -> None:
        """Take checkpoint ``checkpoint_id`` now if no barrier can bring it any more: every regular
        input ended (a loop head whose sources are exhausted while the loop still runs)."""
        if checkpoint_id <= self.last_completed or self.pending is not None:
            return
        if all(channel.ended for channel in self.inputs):
            self.pending = checkpoint_id
            self.arrived = set()
            self.started = time.monotonic()
            self._check()


    def abort(self, checkpoint_id: int, reason: str) -> None:
        """The coordinator gave ``checkpoint_id`` up (timeout, failure elsewhere)."""
        self.logging.pop(checkpoint_id, None)  # older logs still complete on their own barriers
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
        if self.back_edges:
            self.logging[checkpoint_id] = {id(c) for c in self.back_edges}
            self._close_logs()
        self._release()

    def _close_logs(self) -> None:
        """Complete (in order) the logs whose barrier came back on every back-edge that is open."""
        for checkpoint_id in sorted(self.logging):
            owing = self.logging[checkpoint_id]
            if any(id(c) in owing and not c.ended for c in self.back_edges):
                return
            del self.logging[checkpoint_id]
            self.on_loop_closed(checkpoint_id)

    def _release(self) -> None:
        released = [channel for channel in self.inputs if channel.blocked]
        for channel in released:
            channel.blocked = False
        self.arrived = set()
        if released:
            self.on_released(released)
