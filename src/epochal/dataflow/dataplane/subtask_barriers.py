"""The thin driver of one subtask's barrier machines (:mod:`epochal.dataflow.checkpointing.barriers`).

:class:`SubtaskBarriers` owns what the pure machines may not: the input channels themselves
(their ``blocked`` flags), the clock, and the worker's callbacks. It routes a barrier to the
back-edge logs (a loop head's back-edge inputs) or to the aligner (``exactly_once`` and the
synchronous mode) or the tracker (``at_least_once``), and carries out what they return in
order: block an input, release inputs (their buffered data is scheduled again), snapshot an
aligned checkpoint (then open its back-edge log), complete a back-edge log.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from epochal.dataflow.checkpointing.barriers import (
    Aborted,
    Aligned,
    BackEdgeLogs,
    BarrierAligner,
    BarrierOutput,
    BarrierTracker,
    Block,
    LogClosed,
    Unblock,
)


class SubtaskBarriers:
    """Barrier handling of one subtask over its input channels (objects with ``id``, ``blocked``
    and ``back_edge``).

    Args:
        inputs: the subtask's input channels, back-edges included.
        aligned: block inputs whose barrier arrived (exactly-once and synchronous modes).
        on_aligned: ``on_aligned(checkpoint_id, alignment_seconds, savepoint)``: snapshot now
            (``savepoint``: the target a barrier of the checkpoint carried, or None).
        on_released: ``on_released(channels)`` after blocked channels were unblocked.
        on_loop_closed: ``on_loop_closed(checkpoint_id)``: the back-edge log is complete.
        clock: monotonic seconds (the alignment time).
    """

    def __init__(self, inputs: Sequence[Any], aligned: bool, on_aligned: Callable[[int, float, Any], None],
                 on_released: Callable[[list[Any]], None] = lambda channels: None,
                 on_loop_closed: Callable[[int], None] = lambda checkpoint_id: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.channels = {channel.id: channel for channel in inputs}
        regular = [channel.id for channel in inputs if not channel.back_edge]
        back_edges = [channel.id for channel in inputs if channel.back_edge]
        self.machine = BarrierAligner(regular) if aligned else BarrierTracker(regular)
        self.logs = BackEdgeLogs(back_edges) if back_edges else None
        self.on_aligned = on_aligned
        self.on_released = on_released
        self.on_loop_closed = on_loop_closed
        self.clock = clock
        #: the savepoint targets barriers brought, by checkpoint, until it is aligned or aborted
        self.savepoints: dict[int, Any] = {}

    @property
    def pending(self) -> int | None:
        """The checkpoint being aligned, if any."""
        return self.machine.pending

    def on_barrier(self, channel: Any, checkpoint_id: int, savepoint: Any = None) -> None:
        """Barrier ``checkpoint_id`` arrived on ``channel`` (``savepoint``: the target it carries)."""
        if savepoint is not None:
            self.savepoints[checkpoint_id] = savepoint
        if self.logs is not None and channel.id in self.logs.back_edges:
            self._apply(self.logs.on_barrier(channel.id, checkpoint_id))
        else:
            self._apply(self.machine.on_barrier(channel.id, checkpoint_id, self.clock()))

    def on_input_ended(self, channel: Any) -> None:
        if self.logs is not None and channel.id in self.logs.back_edges:
            self._apply(self.logs.on_input_ended(channel.id))
        else:
            self._apply(self.machine.on_input_ended(channel.id, self.clock()))

    def start(self, checkpoint_id: int) -> None:
        self._apply(self.machine.start(checkpoint_id, self.clock()))

    def abort(self, checkpoint_id: int, reason: str) -> None:
        self.savepoints.pop(checkpoint_id, None)
        if self.logs is not None:
            self.logs.abort(checkpoint_id)
        self._apply(self.machine.abort(checkpoint_id, reason))

    def _apply(self, outputs: list[BarrierOutput]) -> None:
        for output in outputs:
            if isinstance(output, Block):
                self.channels[output.channel].blocked = True
            elif isinstance(output, Unblock):
                released = [self.channels[c] for c in output.channels]
                for channel in released:
                    channel.blocked = False
                self.on_released(released)
            elif isinstance(output, Aligned):
                savepoint = self.savepoints.pop(output.checkpoint_id, None)
                if self.savepoints:  # older ones will never align here any more
                    self.savepoints = {c: s for c, s in self.savepoints.items() if c > output.checkpoint_id}
                self.on_aligned(output.checkpoint_id, output.alignment_s, savepoint)
                if self.logs is not None:
                    self._apply(self.logs.open(output.checkpoint_id))
            elif isinstance(output, LogClosed):
                self.on_loop_closed(output.checkpoint_id)
            else:
                assert isinstance(output, Aborted)  # the coordinator or a newer barrier gave it up: nothing to do
