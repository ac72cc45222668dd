"""Count windows (Flink's ``countWindow``): windows of a key's consecutive records.

:class:`CountWindowOperator` windows each key's records by arrival
(:class:`~epochal.runtime.windows.shapes.CountWindows`): the key's ``n``-th record (from 0)
opens a window when ``n % slide == 0``, and a window emits ``(key, result)`` with its ``size``-th
record. Per key, the number of records seen and the accumulators of the open windows are managed
keyed state, so checkpoints hold them and a restore at another parallelism moves them with their
key groups. Event time plays no part: watermarks pass through, and nothing is ever late.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from epochal.runtime.operators.aggregates import MISSING
from epochal.runtime.operators.base import Operator, keys_of
from epochal.runtime.operators.functions import RuntimeContext
from epochal.runtime.windows.shapes import CountWindows
from epochal.runtime.windows.time_windows import WindowFolding


class CountWindowOperator(WindowFolding, Operator):
    """Aggregates each key's records per count window; emits ``(key, result)`` per full window.

    ``windows`` is a :class:`CountWindows` (tumbling or sliding) or a size (tumbling);
    ``aggregate`` is a rolling aggregate or a ``FunctionAggregate`` (see
    :class:`~epochal.runtime.windows.time_windows.TimeWindowOperator`). A window emits as soon as it holds
    ``size`` records; a key's windows emit in the order they opened (one at most per record). At
    the end of a bounded input, windows that are not full do not emit (Flink's count trigger
    never fires a partial window): their records stay in state.

    State: ``"window-contents"`` maps a key to ``{position of the window's first record:
    accumulator}`` (positions count the key's records from 0), ``"window-records"`` a key to
    the number of its records so far.
    """

    keyed = True
    STATE = "window-contents"
    RECORDS = "window-records"

    def __init__(self, key_selector: Callable[[Any], Any], windows: Any, aggregate: Callable[[Any, Any], Any]) -> None:
        super().__init__(aggregate)
        self.key_selector = key_selector
        self.windows = windows if isinstance(windows, CountWindows) else CountWindows(windows)
        self.backend: Any = None
        #: accessed inline: key group -> key -> {first position: accumulator}
        self.groups: Any = None
        #: accessed inline: key group -> key -> records of the key so far
        self.records: Any = None

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        from epochal.state.descriptors import MapStateDescriptor, ValueStateDescriptor

        self.open_folding(context)
        self.backend = context.keyed_state
        self.backend.get_state(MapStateDescriptor(self.STATE))
        self.backend.get_state(ValueStateDescriptor(self.RECORDS, default=0))
        self.groups = self.backend.owned_table(self.STATE)
        self.records = self.backend.owned_table(self.RECORDS)

    def process_batch(self, batch: list[Any]) -> list[Any]:
        keys, key_groups = keys_of(self.key_selector, batch, self.backend.max_parallelism, self.name)
        self.backend.prefetch(keys, key_groups)  # an external backend reads the batch's keys at once
        size = self.windows.size
        step = self.windows.step
        groups = self.groups
        records = self.records
        aggregate = self.aggregate
        finish = self.finish
        unshared = self.unshared
        private = self.private
        missing = MISSING
        out: list[Any] = []
        append = out.append
        for record, key, group in zip(batch, keys, key_groups, strict=True):
            counts = records[group]
            n = counts.get(key, 0)
            entries = groups[group]
            windows = entries.get(key)
            if windows is None:
                windows = {}
            if unshared is None:
                for first, accumulator in windows.items():  # replaces values only: no resize
                    windows[first] = aggregate(accumulator, record)
            else:
                for first, accumulator in windows.items():
                    windows[first] = aggregate(private((key, first), accumulator), record)
            if n % step == 0:  # the record opens a window
                windows[n] = aggregate(private((key, n), missing), record)
            counts[key] = n + 1
            full = windows.pop(n - size + 1, missing)  # the window this record fills, if any
            if full is not missing:
                if unshared is not None:
                    unshared.discard((key, n - size + 1))
                append((key, full if finish is None else finish(full)))
            if windows:
                entries[key] = windows  # written back (see KeyedStateBackend.owned_table)
            else:
                entries.pop(key, None)
        return out
