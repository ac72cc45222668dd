"""Event time: watermark generation and time windows (Flink's event-time windowing).

Records do not carry timestamps: :class:`WatermarkGenerator` reads each record's event time with
the user's timestamp function and, at most every ``interval`` seconds, emits a watermark
``max event time seen - max_out_of_orderness - 1`` as an in-band event. A subtask's event time is
the minimum watermark over its live input channels (ended channels and loop back-edges do not
hold it back); when it advances, every operator of the chain sees ``on_watermark`` and the
watermark travels on. :class:`TimeWindowOperator` keeps one accumulator per (key, window) in
managed keyed state, so windows are part of checkpoints and rescale with their key groups; its
windows are tumbling or sliding (:class:`~epochal.runtime.windows.shapes.TimeWindows`), and a
window ``[start, start + size)`` fires once the event time reaches ``start + size - 1``. At the
end of a bounded input every window still open fires. Count windows are in
:mod:`epochal.runtime.windows.count_windows`.

Both window operators fold records with a rolling aggregate of :mod:`epochal.runtime.operators.aggregates`
(``aggregate(accumulator or MISSING, record)``, the accumulator being the result) or with an
AggregateFunction wrapped in :class:`FunctionAggregate`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from epochal.errors import each, note_record
from epochal.runtime.operators.aggregates import BUILTIN_FUNCTIONS, MISSING, CountAggregate
from epochal.runtime.operators.base import Operator, keys_of
from epochal.runtime.operators.functions import RuntimeContext
from epochal.runtime.operators.inband import NO_WATERMARK
from epochal.runtime.windows.assigners import TimeWindow, WindowResult
from epochal.runtime.windows.shapes import TimeWindows


class WatermarkGenerator(Operator):
    """Passes records through and emits watermarks from their event times (``with_watermarks``,
    or an event-time window's ``timestamp=`` when its input has none). ``origin`` says which, in
    words, for ``JobGraph.describe``."""

    emits_watermarks = True

    def __init__(self, timestamp: Callable[[Any], Any], max_out_of_orderness: float = 0,
                 interval: float = 0.2, origin: str = "") -> None:
        self.timestamp = timestamp
        self.max_out_of_orderness = max_out_of_orderness
        self.interval = interval
        self.origin = origin or f"with_watermarks, max_out_of_orderness={max_out_of_orderness:g}"
        self.max_seen: Any = NO_WATERMARK
        self.emitted: Any = NO_WATERMARK
        self.next_emit = 0.0

    def process_batch(self, batch: list[Any]) -> list[Any]:
        if batch:
            latest = max(each(self.timestamp, batch))
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


class FunctionAggregate:
    """An AggregateFunction (``create_accumulator``/``add``/``merge``/``get_result``) as a rolling
    aggregate of a window: ``self(accumulator or MISSING, record)`` adds the record, and
    :meth:`result` turns the accumulator into the window's output when it fires."""

    def __init__(self, function: Any) -> None:
        self.function = function
        #: Whether accumulators may be changed in place by ``add`` (user functions may; the
        #: built-ins never do), so the window operators copy them before changing a captured one.
        self.mutable = type(function) not in BUILTIN_FUNCTIONS.values()

    def __call__(self, accumulator: Any, record: Any) -> Any:
        function = self.function
        return function.add(record, function.create_accumulator() if accumulator is MISSING else accumulator)

    def result(self, accumulator: Any) -> Any:
        return self.function.get_result(accumulator)


class WindowFolding:
    """What both window operators share: the aggregate, its result, and copy-on-write of the
    accumulators of user AggregateFunctions.

    A snapshot's synchronous part copies each key's ``{window: accumulator}`` map but not the
    accumulators (``HeapKeyedStateBackend.capture``), and the copy is serialised later on another
    thread. Rolling aggregates and built-in functions never change an accumulator in place; a
    user's ``add`` may (the AggregateFunction protocol allows it), so after each snapshot the first
    ``add`` to a window works on a deep copy of its accumulator (:meth:`private`).
    """

    def __init__(self, aggregate: Callable[[Any, Any], Any]) -> None:
        self.aggregate = aggregate
        #: accumulator -> output; None: the accumulator is the output (rolling aggregates)
        self.finish: Callable[[Any], Any] | None = getattr(aggregate, "result", None)
        #: windows ``(key, window)`` whose accumulator no snapshot shares; None: no copy needed
        self.unshared: set[Any] | None = None

    def open_folding(self, context: RuntimeContext) -> None:
        if context.checkpointing and getattr(self.aggregate, "mutable", False):
            self.unshared = set()

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        if self.unshared is not None:
            self.unshared.clear()  # every accumulator is now shared with the captured copy

    def private(self, window: Any, accumulator: Any) -> Any:
        """``accumulator`` of ``window``, copied if a snapshot may still hold it (copy-on-write)."""
        unshared = self.unshared
        if unshared is None or window in unshared:
            return accumulator
        unshared.add(window)
        return accumulator if accumulator is MISSING else copy.deepcopy(accumulator)


class TimeWindowOperator(WindowFolding, Operator):
    """Aggregates each key's records per event-time window; emits a ``WindowResult`` (equal to
    ``(key, start, result)``, with ``.end``).

    ``windows`` is a :class:`TimeWindows` (tumbling or sliding) or a size (tumbling).
    ``aggregate`` is a rolling aggregate of :mod:`epochal.runtime.operators.aggregates` (``count``,
    ``reduce``, ``sum``...: ``aggregate(accumulator or MISSING, record)``) or a
    :class:`FunctionAggregate`. A record goes to every window of ``windows.starts(event time)``.
    A window fires when the watermark reaches ``start + size - 1`` (``TimeWindows.closes``), in
    order of start. Records of windows that have already fired are late: left out of those
    windows, and dropped and counted in ``late_records`` when every window they belong to has
    fired, as Flink does with zero allowed lateness.
    """

    keyed = True
    event_time = True
    STATE = "window-contents"

    def __init__(self, key_selector: Callable[[Any], Any], timestamp: Callable[[Any], Any], windows: Any,
                 aggregate: Callable[[Any, Any], Any]) -> None:
        super().__init__(aggregate)
        self.key_selector = key_selector
        self.timestamp = timestamp
        self.windows = windows if isinstance(windows, TimeWindows) else TimeWindows(windows)
        self.size = self.windows.size
        self.backend: Any = None
        #: The window contents, accessed inline: key group -> key -> {window start: accumulator}.
        self.groups: Any = None
        self.watermark: Any = NO_WATERMARK
        #: window start -> (key group, key) of every open window with that start; rebuilt on restore
        self.open_windows: dict[Any, list[tuple[int, Any]]] = {}
        self.late_records = 0

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        from epochal.state.descriptors import MapStateDescriptor

        self.open_folding(context)
        self.backend = context.keyed_state
        self.backend.get_state(MapStateDescriptor(self.STATE))  # per key: {window start: accumulator}
        self.groups = self.backend.owned_table(self.STATE)
        for group, entries in self.groups.items():
            for key, windows in entries.items():
                for start in windows:
                    self.open_windows.setdefault(start, []).append((group, key))
        # The batch loop, chosen once: tumbling windows without copy-on-write keep the plain loop.
        simple = not self.windows.sliding and self.unshared is None
        self._loop = self._tumbling_batch if simple else self._windows_batch

    def process_batch(self, batch: list[Any]) -> list[Any]:
        keys, key_groups = keys_of(self.key_selector, batch, self.backend.max_parallelism, self.name)
        self.backend.prefetch(keys, key_groups)  # an external backend reads the batch's keys at once
        self._loop(batch, keys, key_groups, each(self.timestamp, batch))
        return []

    def _tumbling_batch(self, batch: list[Any], keys: list[Any], key_groups: list[int], times: list[Any]) -> None:
        """One window per record (``start = t - t % size``); ``count()`` has its own branch."""
        groups = self.groups
        size = self.size
        last_fired = self.watermark - size + 1  # windows starting at or below this have fired
        open_windows = self.open_windows
        aggregate = self.aggregate
        counting = type(aggregate) is CountAggregate
        missing = MISSING
        record = None
        try:
            for record, key, group, event_time in zip(batch, keys, key_groups, times, strict=True):
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
        except Exception as error:  # (an aggregate of the user's)
            note_record(error, record)
            raise

    def _windows_batch(self, batch: list[Any], keys: list[Any], key_groups: list[int], times: list[Any]) -> None:
        """Any windows (a record in every window of ``starts(t)``), with copy-on-write if needed."""
        groups = self.groups
        last_fired = self.watermark - self.size + 1
        open_windows = self.open_windows
        aggregate = self.aggregate
        starts_of = self.windows.starts
        private = self.private if self.unshared is not None else None
        missing = MISSING
        record = None
        try:
            for record, key, group, event_time in zip(batch, keys, key_groups, times, strict=True):
                starts = starts_of(event_time)
                if starts[-1] <= last_fired:  # the newest window of the record has fired: all have
                    self.late_records += 1
                    continue
                entries = groups[group]
                windows = entries.get(key)
                if windows is None:
                    windows = {}
                for start in starts:
                    if start <= last_fired:
                        continue
                    accumulator = windows.get(start, missing)
                    if accumulator is missing:
                        open_windows.setdefault(start, []).append((group, key))
                    if private is not None:
                        accumulator = private((key, start), accumulator)
                    windows[start] = aggregate(accumulator, record)
                entries[key] = windows  # written back (see KeyedStateBackend.owned_table)
        except Exception as error:  # (an aggregate of the user's)
            note_record(error, record)
            raise

    def counters(self) -> dict[str, int]:
        return {"late_records_dropped": self.late_records}

    def on_watermark(self, watermark: Any) -> list[Any]:
        if watermark <= self.watermark:
            return []
        self.watermark = watermark
        closes = self.windows.closes
        return self._fire(sorted(start for start in self.open_windows if closes(start, watermark)))

    def end_input(self) -> list[Any]:
        return self._fire(sorted(self.open_windows))

    def _fire(self, starts: list[Any]) -> list[Any]:
        """Emit and forget the windows with these starts, in order of start."""
        groups = self.groups
        finish = self.finish
        unshared = self.unshared
        size = self.size
        out: list[Any] = []
        append = out.append
        for start in starts:
            for group, key in self.open_windows.pop(start):
                entries = groups[group]
                windows = entries[key]
                accumulator = windows.pop(start)
                if unshared is not None:
                    unshared.discard((key, start))
                append(WindowResult(key, TimeWindow(start, start + size),
                                    accumulator if finish is None else finish(accumulator)))
                if windows:
                    entries[key] = windows
                else:
                    del entries[key]
        return out


#: The name of the time window operator before sliding windows existed; it takes a size or a
#: :class:`TimeWindows`, so ``TumblingWindowOperator(key, ts, size, aggregate)`` still works.
TumblingWindowOperator = TimeWindowOperator
