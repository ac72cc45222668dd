"""The window join: both sides of two keyed streams buffered per key and event-time window
(Flink's ``a.join(b).where(k1).equalTo(k2).window(w).apply(f)``, and ``co_group``).

Both sides are buffered per key and window (``window-join``, per key ``{window start: [lefts,
rights]}``, managed keyed state read and written inline through ``owned_table``); when the
watermark closes a window (``windows.closes``) its pairs are emitted (every left with every
right, in arrival order) and the window is dropped. A record whose windows have all closed is
late: dropped and counted. Windows are any assigner with ``starts(t)`` and ``closes(start,
watermark)``, such as :class:`~epochal.runtime.windows.shapes.TimeWindows`. At the end of the
input every open window fires.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from epochal.runtime.operators.base import Operator, keys_of
from epochal.runtime.operators.functions import RuntimeContext
from epochal.runtime.operators.inband import NO_WATERMARK
from epochal.runtime.windows.shapes import TimeWindows

_END_OF_TIME = float("inf")


class JoinWindows(Protocol):
    """What a window join needs of its windows (:class:`TimeWindows` has it): the starts of the
    windows that hold event time ``ts``, and whether window ``start`` is complete once the event
    time reached ``watermark``."""

    def starts(self, ts: Any) -> list[Any]: ...

    def closes(self, start: Any, watermark: Any) -> bool: ...


#: What a window join emits for a window: one record per pair, any number per pair, or any
#: number per key and window (``co_group``).
JOIN, FLAT_JOIN, CO_GROUP = "join", "flat_join", "co_group"


class WindowJoinOperator(Operator):
    """Joins both sides' records of each key and event-time window (see the module docstring).

    ``mode`` :data:`JOIN`: ``function(left, right)`` is emitted for every pair of a window;
    :data:`FLAT_JOIN`: every record of ``function(left, right)`` (an iterable or None);
    :data:`CO_GROUP`: every record of ``function(key, lefts, rights)``, for every window with a
    record on either side (lists in arrival order). Windows fire in order of start when the
    watermark closes them, and all at the end of the input. ``windows``: a
    :class:`JoinWindows` or a size (tumbling :class:`TimeWindows`).
    """

    keyed = True
    input_count = 2
    event_time = True
    STATE = "window-join"

    def __init__(self, key_selector: Callable[[Any], Any], key_selector2: Callable[[Any], Any],
                 timestamp: Callable[[Any], Any], timestamp2: Callable[[Any], Any], windows: JoinWindows | Any,
                 function: Callable[..., Any], mode: str = JOIN) -> None:
        if mode not in (JOIN, FLAT_JOIN, CO_GROUP):
            raise ValueError(f"mode is one of {JOIN!r}, {FLAT_JOIN!r}, {CO_GROUP!r}, not {mode!r}")
        self.key_selector = key_selector
        self.key_selector2 = key_selector2
        self.timestamp = timestamp
        self.timestamp2 = timestamp2
        self.windows: JoinWindows = windows if hasattr(windows, "starts") else TimeWindows(windows)
        self.function = function
        self.mode = mode
        self.watermark: Any = NO_WATERMARK
        self.late_records = 0
        self.backend: Any = None
        #: key group -> key -> {window start: [lefts, rights]}
        self.groups: Any = None
        #: window start -> (key group, key) of every open window with that start; rebuilt on restore
        self.open_windows: dict[Any, list[tuple[int, Any]]] = {}
        #: windows ``(key, start)`` whose lists no snapshot shares; None: no copy-on-write needed
        self.unshared: set[Any] | None = None

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        from epochal.state.descriptors import MapStateDescriptor

        self.backend = context.keyed_state
        self.backend.get_state(MapStateDescriptor(self.STATE))
        self.groups = self.backend.owned_table(self.STATE)
        for group, entries in self.groups.items():
            for key, windows in entries.items():
                for start in windows:
                    self.open_windows.setdefault(start, []).append((group, key))
        # A heap snapshot copies a key's map but not the lists in it, and may serialise it after
        # the barrier: the first append to a window after a snapshot copies its lists. Values
        # read from RocksDB are copies already (its tables are not dicts).
        heap = all(isinstance(entries, dict) for entries in self.groups.values())
        self.unshared = set() if context.checkpointing and heap else None

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        if self.unshared is not None:
            self.unshared.clear()  # every window's lists are now shared with the captured copy

    def process_batch(self, batch: list[Any]) -> list[Any]:
        return self._buffer(batch, 0, self.key_selector, self.timestamp)

    def process_batch2(self, batch: list[Any]) -> list[Any]:
        return self._buffer(batch, 1, self.key_selector2, self.timestamp2)

    def _buffer(self, batch: list[Any], side: int, key_selector: Callable[[Any], Any],
                timestamp: Callable[[Any], Any]) -> list[Any]:
        """Add each record of input ``side`` to every open window of its key that holds it."""
        keys, key_groups = keys_of(key_selector, batch, self.backend.max_parallelism, self.name)
        self.backend.prefetch(keys, key_groups)  # an external backend reads the batch's keys at once
        groups = self.groups
        watermark = self.watermark
        starts_of, closes = self.windows.starts, self.windows.closes
        open_windows = self.open_windows
        unshared = self.unshared
        for record, key, group, t in zip(batch, keys, key_groups, map(timestamp, batch), strict=True):
            entries = groups[group]
            windows = entries.get(key)
            if windows is None:
                windows = {}
            added = False
            for start in starts_of(t):
                if closes(start, watermark):
                    continue  # fired already
                pair = windows.get(start)
                if pair is None:
                    pair = [[], []]
                    open_windows.setdefault(start, []).append((group, key))
                    if unshared is not None:
                        unshared.add((key, start))
                elif unshared is not None and (key, start) not in unshared:
                    pair = [list(pair[0]), list(pair[1])]
                    unshared.add((key, start))
                pair[side].append(record)
                windows[start] = pair
                added = True
            if added:
                entries[key] = windows  # written back (see KeyedStateBackend.owned_table)
            else:
                self.late_records += 1
        return []

    def on_watermark(self, watermark: Any) -> list[Any]:
        if watermark <= self.watermark:
            return []
        self.watermark = watermark
        closes = self.windows.closes
        return self._fire(sorted(start for start in self.open_windows if closes(start, watermark)))

    def end_input(self) -> list[Any]:
        self.watermark = _END_OF_TIME
        return self._fire(sorted(self.open_windows))

    def _fire(self, starts: list[Any]) -> list[Any]:
        """Emit and forget the windows with these starts, in order of start."""
        groups = self.groups
        function, mode = self.function, self.mode
        unshared = self.unshared
        out: list[Any] = []
        append, extend = out.append, out.extend
        for start in starts:
            for group, key in self.open_windows.pop(start):
                entries = groups[group]
                windows = entries[key]
                lefts, rights = windows.pop(start)
                if windows:
                    entries[key] = windows
                else:
                    del entries[key]
                if unshared is not None:
                    unshared.discard((key, start))
                if mode == CO_GROUP:
                    produced = function(key, lefts, rights)
                    if produced is not None:
                        extend(produced)
                elif mode == JOIN:
                    for left in lefts:
                        for right in rights:
                            append(function(left, right))
                else:
                    for left in lefts:
                        for right in rights:
                            produced = function(left, right)
                            if produced is not None:
                                extend(produced)
        return out

    def counters(self) -> dict[str, int]:
        return {"late_records_dropped": self.late_records}
