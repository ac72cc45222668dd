"""Event time: watermark generation and tumbling windows (Flink's event-time windowing).

Records do not carry timestamps: :class:`WatermarkGenerator` reads each record's event time with
the user's timestamp function and, at most every ``interval`` seconds, emits a watermark
``max event time seen - max_out_of_orderness - 1`` as an in-band event. A subtask's event time is
the minimum watermark over its live input channels (ended channels and loop back-edges do not
hold it back); when it advances, every operator of the chain sees ``on_watermark`` and the
watermark travels on. :class:`TumblingWindowOperator` keeps one accumulator per (key, window) in
managed keyed state, so windows are part of checkpoints and rescale with their key groups, and
fires a window ``[start, start + size)`` once the event time reaches ``start + size - 1``. At
the end of a bounded input every window still open fires.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from epochal.runtime.aggregates import CountAggregate
from epochal.runtime.events import NO_WATERMARK
from epochal.runtime.functions import RuntimeContext
from epochal.runtime.operators import KeyedReduceOperator, Operator, keys_of


class WatermarkGenerator(Operator):
    """Passes records through and emits watermarks from their event times (``with_watermarks``)."""

    emits_watermarks = True

    def __init__(self, timestamp: Callable[[Any], Any], max_out_of_orderness: float = 0,
                 interval: float = 0.2) -> None:
        self.timestamp = timestamp
        self.max_out_of_orderness = max_out_of_orderness
        self.interval = interval
        self.max_seen: Any = NO_WATERMARK
        self.emitted: Any = NO_WATERMARK
        self.next_emit = 0.0

    def process_batch(self, batch: list[Any]) -> list[Any]:
        if batch:
            latest = max(map(self.timestamp, batch))
            if latest > self.max_seen:
                self.max_seen = latest
        return batch

    def take_watermark(self) -> Any:
        """The watermark to emit now, or None (nothing new, or the interval has not passed)."""
        now = time.monotonic()
        if now < self.next_emit:
            return None
        watermark = self.max_seen - self.max_out_of_orderness - 1
        if watermark <= self.emitted:
            return None
        self.next_emit = now + self.interval
        self.emitted = watermark
        return watermark


class TumblingWindowOperator(Operator):
    """Aggregates each key's records per tumbling event-time window; emits ``(key, start, result)``.

    ``aggregate`` is one of the rolling aggregates of :mod:`epochal.runtime.operators` (``count``,
    ``reduce``, ``sum``...): ``aggregate(accumulator or MISSING, record)``. Records of a window
    that has already fired (event time at or below the watermark at its end) are late: they are
    dropped and counted in ``late_records``, as Flink does with zero allowed lateness.
    """

    keyed = True
    STATE = "window-contents"

    def __init__(self, key_selector: Callable[[Any], Any], timestamp: Callable[[Any], Any], size: Any,
                 aggregate: Callable[[Any, Any], Any]) -> None:
        self.key_selector = key_selector
        self.timestamp = timestamp
        self.size = size
        self.aggregate = aggregate
        self.backend: Any = None
        #: The window contents, accessed inline: key group -> key -> {window start: accumulator}.
        self.groups: Any = None
        self.watermark: Any = NO_WATERMARK
        #: window start -> (key group, key) of every open window with that start; rebuilt on restore
        self.open_windows: dict[Any, list[tuple[int, Any]]] = {}
        self.late_records = 0

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        from epochal.state.descriptors import MapStateDescriptor

        self.backend = context.keyed_state
        self.backend.get_state(MapStateDescriptor(self.STATE))  # per key: {window start: accumulator}
        self.groups = self.backend.owned_table(self.STATE)
        for group, entries in self.groups.items():
            for key, windows in entries.items():
                for start in windows:
                    self.open_windows.setdefault(start, []).append((group, key))

    def process_batch(self, batch: list[Any]) -> list[Any]:
        groups = self.groups
        keys, key_groups = keys_of(self.key_selector, batch, self.backend.max_parallelism, self.name)
        size = self.size
        last_fired = self.watermark - size + 1  # windows starting at or below this have fired
        open_windows = self.open_windows
        aggregate = self.aggregate
        counting = type(aggregate) is CountAggregate
        missing = KeyedReduceOperator.MISSING
        for record, key, group, event_time in zip(batch, keys, key_groups, map(self.timestamp, batch), strict=True):
            start = event_time - event_time % size
            if start <= last_fired:
                self.late_records += 1
                continue
            entries = groups[group]
            windows = entries.get(key)
            if windows is None:
                windows = {}
            if counting:
                count = windows.get(start, 0)
                if not count:
                    open_windows.setdefault(start, []).append((group, key))
                windows[start] = count + 1
            else:
                accumulator = windows.get(start, missing)
                if accumulator is missing:
                    open_windows.setdefault(start, []).append((group, key))
                windows[start] = aggregate(accumulator, record)
            entries[key] = windows  # written back (see KeyedStateBackend.owned_table)
        return []

    def counters(self) -> dict[str, int]:
        return {"late_records_dropped": self.late_records}

    def on_watermark(self, watermark: Any) -> list[Any]:
        if watermark <= self.watermark:
            return []
        self.watermark = watermark
        due = sorted(start for start in self.open_windows if start + self.size - 1 <= watermark)
        return self._fire(due)

    def end_input(self) -> list[Any]:
        return self._fire(sorted(self.open_windows))

    def _fire(self, starts: list[Any]) -> list[Any]:
        """Emit and forget the windows with these starts, in order of start."""
        groups = self.groups
        out: list[Any] = []
        append = out.append
        for start in starts:
            for group, key in self.open_windows.pop(start):
                entries = groups[group]
                windows = entries[key]
                append((key, start, windows.pop(start)))
                if windows:
                    entries[key] = windows
                else:
                    del entries[key]
        return out
