"""Keyed aggregations of batch streams: running aggregates per key (``agg``) and aggregates per
key and event-time window (``window(...).agg``), a whole batch at a time.

Both keep real keyed state: one value state entry per key (per key and window for windows),
in the key's key group, in whatever backend the job uses (heap, incremental heap, RocksDB,
PostgreSQL), so checkpoints, savepoints, restores at another parallelism, queryable state and
the state DataFrame reader see them as any keyed state. The per-row work is Arrow's: a batch is
grouped by key once (:mod:`epochal.runtime.columnar.aggregates`); only each distinct key of a
batch is read and written in Python, and the merge of its accumulators is vectorised.

Key of a row: its key column's value (``as_py()``), or the tuple of its key columns' values;
the same key, and so the same key group, a row job's ``key_by`` returning those values has.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from epochal.plan.column_keygroups import column_keys, key_groups_of_columns
from epochal.runtime.columnar.aggregates import Aggregate, Aggregation, check_schema
from epochal.runtime.columnar.batches import SchemaGuard
from epochal.runtime.columnar.operators import ColumnTimestamps
from epochal.runtime.operators.base import Operator
from epochal.runtime.operators.functions import RuntimeContext
from epochal.runtime.operators.inband import NO_WATERMARK


class _KeyedBatchOperator(Operator):
    """What both keyed batch operators share: the aggregation, the schema check, the state."""

    keyed = True
    STATE = "aggregates"
    #: the name clients query each key's value by (``as_queryable_state``); None: none
    queryable_name: str | None = None
    input_schema: pa.Schema | None = None
    #: False only in tests that show the state must be checkpointed: the accumulators then live
    #: in plain dicts outside keyed state, which no checkpoint holds and no restore brings back
    checkpointed = True

    def __init__(self, keys: list[str], aggregates: tuple[Aggregate, ...]) -> None:
        self.keys = list(keys)
        self.aggregates = aggregates
        self.aggregation = Aggregation(keys, aggregates)
        #: the partial fields' Arrow types, known from the first batch
        self.types: list[pa.DataType] | None = None
        self.key_types: list[pa.DataType] | None = None

    def _extra_columns(self) -> list[str]:
        return []

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        from epochal.state.descriptors import ValueStateDescriptor

        self.backend = context.keyed_state
        self.max_parallelism = self.backend.max_parallelism
        self.backend.get_state(ValueStateDescriptor(self.STATE, queryable=self.queryable_name))
        self.groups, self.log_batch = self.backend.batch_logged_table(self.STATE)
        if not self.checkpointed:
            self.groups, self.log_batch = {group: {} for group in context.key_groups}, None
        self.guard = SchemaGuard(f"operator '{self.name}'", self.input_schema)
        self.checked: pa.Schema | None = None
        # The input schema is operator state: a restored subtask knows its accumulators' types
        # (to fire windows or emit final results) before its first batch arrives.
        self.schema_state = context.get_list_state("batch-schema", "union")
        if self.schema_state:
            restored = pa.ipc.read_schema(pa.py_buffer(self.schema_state[0]))
            if self.guard.schema is None:
                self.guard.schema = restored
            self._learn(self.guard.schema)
        self.schema_state[:] = []

    def _check(self, element: Any) -> pa.RecordBatch:
        batch = self.guard.check(element)
        if self.checked is None:
            self._learn(batch.schema)
        return batch

    def _learn(self, schema: pa.Schema) -> None:
        check_schema(schema, self.keys, self.aggregates, f"operator '{self.name}'", self._extra_columns())
        self.checked = schema
        self._learn_types(schema)
        self.schema_state[:] = [schema.serialize().to_pybytes()]  # every subtask's: any may have state

    def _learn_types(self, schema: pa.Schema) -> None:
        """The partial fields' and key columns' types, from an empty batch's partial aggregation."""
        empty = self.aggregation.partial(schema.empty_table(), self._group_columns())
        width = len(self._group_columns())
        self.key_types = [empty.schema.field(i).type for i in range(width)]
        self.types = [empty.schema.field(i).type for i in range(width, empty.num_columns)]

    def _group_columns(self) -> list[str]:
        return self.keys

    def _read(self, keys: list[Any], groups: list[int]) -> list[Any]:
        """The stored value of every key (None: none), and the keys logged for this write."""
        if self.log_batch is not None:
            self.log_batch(keys, groups)
        self.backend.prefetch(keys, groups)
        tables = self.groups
        return [tables[group].get(key) for key, group in zip(keys, groups, strict=True)]

    def _runs(self, partial: pa.Table, width: int) -> tuple[pa.Table, list[Any], list[int], list[tuple[int, int, int]]]:
        """``partial``'s rows ordered by key group, their Python keys and key groups, and the runs
        ``(key group, start, stop)`` of rows of one group: each group's dict is then read and
        written with one C-level call per run (``map(get)``, ``update(zip)``), not one Python
        statement per key."""
        key_arrays = [_array(partial.column(i)) for i in range(width)]
        groups = key_groups_of_columns(key_arrays, self.max_parallelism)
        order = np.argsort(groups, kind="stable")
        partial = partial.take(pa.array(order))
        groups = groups[order]
        bounds = np.flatnonzero(np.diff(groups)) + 1
        starts = [0, *bounds.tolist()]
        stops = [*bounds.tolist(), len(groups)]
        group_list = groups.tolist()
        runs = [(group_list[start], start, stop) for start, stop in zip(starts, stops, strict=True)]
        keys = column_keys([_array(partial.column(i)) for i in range(width)])
        return partial, keys, group_list, runs


class KeyedAggregateOperator(_KeyedBatchOperator):
    """``key_by(columns).agg(...)``: for each input batch, one output row per key the batch
    changed, holding that key's running aggregates (Spark's update mode): the key columns, then
    the aggregates in the order given. Keyed state ``"aggregates"``: key -> accumulator tuple."""

    #: emit only each key's final aggregates when the input ends (``final_results()``)
    final_only = False

    def process_batch(self, batch: list[Any]) -> list[Any]:
        out = []
        for element in batch:
            rows = self._check(element)
            if rows.num_rows == 0:
                continue
            width = len(self.keys)
            partial, keys, groups, runs = self._runs(self.aggregation.partial(rows), width)
            if self.log_batch is not None:
                self.log_batch(keys, groups)
            self.backend.prefetch(keys, groups)
            tables, empty = self.groups, self.aggregation.empty
            stored: list[Any] = []
            for group, start, stop in runs:
                stored += map(tables[group].get, keys[start:stop], repeat(empty, stop - start))
            fields = [partial.column(width + i) for i in range(len(self.aggregation.fields))]
            merged = self.aggregation.merge(self.aggregation.stored_fields(stored, self.types), fields)
            values = self.aggregation.accumulators(merged)
            for group, start, stop in runs:
                tables[group].update(zip(keys[start:stop], values[start:stop], strict=True))
            if not self.final_only:
                key_arrays = [_array(partial.column(i)) for i in range(width)]
                out.append(self._output(key_arrays, self.aggregation.results(merged)))
        return out

    def _output(self, key_arrays: list[Any], results: list[Any]) -> pa.RecordBatch:
        names = self.keys + [aggregate.name for aggregate in self.aggregates]
        return pa.RecordBatch.from_arrays([_array(a) for a in [*key_arrays, *results]], names=names)

    def end_input(self) -> list[Any]:
        """Final results only: each key's final aggregates, key group by key group."""
        if not self.final_only or self.types is None:
            return []
        entries = [(key, value) for values in self.groups.values() for key, value in values.items()]
        if not entries:
            return []
        return [self._output(_key_columns([k for k, _ in entries], len(self.keys), self.key_types),
                             self.aggregation.stored_results([v for _, v in entries], self.types))]


def _array(values: Any) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _key_columns(keys: list[Any], width: int, types: list[pa.DataType] | None) -> list[pa.Array]:
    """Python keys back as key columns (one key column: the keys themselves; several: tuples)."""
    kinds = types or [None] * width
    if width == 1:
        return [pa.array(keys, type=kinds[0])]
    return [pa.array([key[i] for key in keys], type=kinds[i]) for i in range(width)]


class WindowAggregateOperator(_KeyedBatchOperator):
    """``key_by(columns).window(size, timestamp="column", slide=None).agg(...)``: aggregates per
    key and event-time window, one output row per key and window when the watermark passes the
    window's end: key columns, ``window_start``, ``window_end``, the aggregates.

    A window ``[start, start + size)`` starts at a multiple of ``slide`` (of ``size`` when
    tumbling) and fires once the watermark reaches ``start + size - 1``; every open window fires
    at the end of a bounded input. A row all of whose windows have fired is late: dropped and
    counted (``late_records_dropped``). Keyed state ``"aggregates"``: key -> ``{window start:
    accumulator tuple}``; which windows are open is rebuilt from it on restore."""

    event_time = True

    def __init__(self, keys: list[str], aggregates: tuple[Aggregate, ...], size: Any, slide: Any,
                 timestamp: ColumnTimestamps) -> None:
        super().__init__(keys, aggregates)
        self.size = size
        self.slide = slide if slide is not None else size
        self.timestamp = timestamp
        self.late_records = 0

    def _extra_columns(self) -> list[str]:
        return [self.timestamp.column]

    def _group_columns(self) -> list[str]:
        return [*self.keys, "__window_start"]

    def _learn_types(self, schema: pa.Schema) -> None:
        kind = schema.field(self.timestamp.column).type
        start = pa.float64() if pa.types.is_floating(kind) else pa.int64()
        self.start_type = start
        super()._learn_types(schema.append(pa.field("__window_start", start)))

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        super().open(context, send_to_driver)
        self.watermark: Any = NO_WATERMARK
        #: open windows: window start -> keys (with their groups) that have it; and a heap of starts
        self.open_windows: dict[Any, dict[Any, int]] = {}
        self.starts: list[Any] = []
        for group, values in self.groups.items():
            for key, windows in values.items():
                for start in windows:
                    self._opened(start, key, group)

    def _opened(self, start: Any, key: Any, group: int) -> None:
        keys = self.open_windows.get(start)
        if keys is None:
            keys = self.open_windows[start] = {}
            heapq.heappush(self.starts, start)
        keys[key] = group

    def _windowed(self, rows: pa.RecordBatch) -> pa.Table:
        """``rows`` with the column ``__window_start``: one row per row and window it belongs to,
        rows of windows that already fired left out (and counted late)."""
        times = self.timestamp.values(rows)
        size, slide = self.size, self.slide
        last = times - np.mod(times, slide)  # the latest window start at or before each time
        table = pa.Table.from_batches([rows])
        if slide == size:
            starts_list = [last]
            indices = None
        else:
            starts_list, index_list = [], []
            offset = 0
            while offset < size:
                start = last - offset
                inside = start + size > times
                starts_list.append(start[inside])
                index_list.append(np.nonzero(inside)[0])
                offset += slide
            indices = np.concatenate(index_list)
        starts = np.concatenate(starts_list) if len(starts_list) > 1 else starts_list[0]
        if indices is not None:
            table = table.take(pa.array(indices))
        starts = starts.astype(np.float64 if pa.types.is_floating(self.start_type) else np.int64, copy=False)
        windowed = table.append_column("__window_start", pa.array(starts, type=self.start_type))
        if self.watermark is not NO_WATERMARK:
            alive = starts + size - 1 > self.watermark
            if not alive.all():
                windowed = windowed.filter(pa.array(alive))
                self._count_late(times, size, slide)
        return windowed

    def _count_late(self, times: np.ndarray, size: Any, slide: Any) -> None:
        """Rows whose every window fired: their latest window (the last to fire) ended too."""
        latest_start = times - np.mod(times, slide)
        self.late_records += int(np.count_nonzero(latest_start + size - 1 <= self.watermark))

    def process_batch(self, batch: list[Any]) -> list[Any]:
        for element in batch:
            rows = self._check(element)
            if rows.num_rows == 0:
                continue
            windowed = self._windowed(rows)
            if windowed.num_rows == 0:
                continue
            partial = self.aggregation.partial(windowed, self._group_columns())
            width = len(self.keys)
            key_arrays = [_array(partial.column(i)) for i in range(width)]
            keys = column_keys(key_arrays)
            starts = partial.column(width).to_pylist()
            groups = key_groups_of_columns(key_arrays, self.max_parallelism).tolist()
            windows = self._read(keys, groups)
            empty = self.aggregation.empty
            stored = [empty if w is None else w.get(s, empty) for w, s in zip(windows, starts, strict=True)]
            fields = [partial.column(width + 1 + i) for i in range(len(self.aggregation.fields))]
            merged = self.aggregation.merge(self.aggregation.stored_fields(stored, self.types), fields)
            tables = self.groups
            written: dict[Any, dict[Any, Any]] = {}
            for key, group, start, value in zip(keys, groups, starts, self.aggregation.accumulators(merged),
                                                strict=True):
                mine = written.get(key)
                if mine is None:  # a new dict per key and batch: a snapshot may share the old one
                    before = tables[group].get(key)
                    mine = written[key] = {} if before is None else dict(before)
                mine[start] = value
                self._opened(start, key, group)
            for key, group in zip(keys, groups, strict=True):
                mine = written.pop(key, None)
                if mine is not None:
                    tables[group][key] = mine
        return []

    def on_watermark(self, watermark: Any) -> list[Any]:
        if self.watermark is not NO_WATERMARK and watermark <= self.watermark:
            return []
        self.watermark = watermark
        return self._fire(lambda start: start + self.size - 1 <= watermark)

    def end_input(self) -> list[Any]:
        self.watermark = float("inf")
        return self._fire(lambda start: True)

    def _fire(self, due: Callable[[Any], bool]) -> list[Any]:
        keys: list[Any] = []
        groups: list[int] = []
        starts: list[Any] = []
        if self.types is None:  # no input yet and nothing restored: no window is open
            return []
        while self.starts and due(self.starts[0]):
            start = heapq.heappop(self.starts)
            for key, group in self.open_windows.pop(start).items():
                keys.append(key)
                groups.append(group)
                starts.append(start)
        if not keys:
            return []
        if self.log_batch is not None:
            self.log_batch(keys, groups)
        self.backend.prefetch(keys, groups)
        tables = self.groups
        accumulators = []
        changed: dict[Any, tuple[int, dict[Any, Any]]] = {}
        for key, group, start in zip(keys, groups, starts, strict=True):
            entry = changed.get(key)
            if entry is None:
                entry = changed[key] = (group, dict(tables[group][key]))
            accumulators.append(entry[1].pop(start))
        for key, (group, windows) in changed.items():
            if windows:
                tables[group][key] = windows
            else:
                del tables[group][key]
        columns = _key_columns(keys, len(self.keys), self.key_types)
        start_array = pa.array(starts, type=self.start_type)
        columns += [start_array, pc.add(start_array, pa.scalar(self.size, self.start_type))]
        columns += self.aggregation.stored_results(accumulators, self.types)
        names = [*self.keys, "window_start", "window_end", *(a.name for a in self.aggregates)]
        return [pa.RecordBatch.from_arrays(columns, names=names)]

    def counters(self) -> dict[str, int]:
        return {"late_records_dropped": self.late_records}
