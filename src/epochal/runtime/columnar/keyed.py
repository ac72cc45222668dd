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
        restored = [pa.ipc.read_schema(pa.py_buffer(data)) for data in self.schema_state[:1]]
        self.schema_state[:] = []  # (a union list: every subtask's entries came back to each)
        if restored:  # learning it stores it again: the next checkpoint has it too
            if self.guard.schema is None:
                self.guard.schema = restored[0]
            self._learn(self.guard.schema)

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
            merged = self.aggregation.merge(self.aggregation.stored_fields(stored, self.types or []), fields)
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
    counted (``late_records_dropped``).

    The open windows are a table (one row per key and window: key columns, start, partial
    accumulators), merged with each batch's partial aggregation in one hash aggregation and cut
    by each watermark, so no Python runs per key or window between checkpoints. Keyed state
    ``"aggregates"`` (key -> ``{window start: accumulator tuple}``, the key's open windows) is
    written at each snapshot's barrier (``prepare_snapshot``) for the keys whose windows changed
    or fired since the last one; the table is rebuilt from it on restore."""

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
        self.watermark: Any = NO_WATERMARK
        #: the open windows (None: none), and the keys and starts of windows fired since the last snapshot
        self.windows: pa.Table | None = None
        self.fired: list[pa.Table] = []
        super().open(context, send_to_driver)
        self._restore()

    def _restore(self) -> None:
        """The open windows' table from keyed state (a restored subtask's; empty on a fresh start)."""
        entries = [(key, start, acc) for values in self.groups.values() for key, windows in values.items()
                   for start, acc in windows.items()]
        if not entries or self.types is None:
            return
        width = len(self.keys)
        columns = _key_columns([key for key, _, _ in entries], width, self.key_types)
        columns.append(pa.array([start for _, start, _ in entries], type=self.start_type))
        columns += self.aggregation.stored_fields([acc for _, _, acc in entries], self.types)
        columns.append(pa.array([False] * len(entries)))
        self.windows = pa.Table.from_arrays(columns, names=self._layout())

    def _layout(self) -> list[str]:
        return [*self._group_columns(), *(f"__partial{i}" for i in range(len(self.aggregation.fields))), "__dirty"]

    def _windowed(self, rows: pa.RecordBatch) -> pa.Table:
        """``rows`` with the column ``__window_start``: one row per row and window it belongs to,
        rows of windows that already fired left out (and counted late)."""
        times = self.timestamp.values(rows)
        size, slide = self.size, self.slide
        last = times - np.mod(times, slide)  # the latest window start at or before each time
        table = pa.Table.from_batches([rows])
        if slide == size:
            starts = last
        else:
            starts_list, index_list = [], []
            offset = 0
            while offset < size:
                start = last - offset
                inside = start + size > times
                starts_list.append(start[inside])
                index_list.append(np.nonzero(inside)[0])
                offset += slide
            starts = np.concatenate(starts_list)
            table = table.take(pa.array(np.concatenate(index_list)))
        starts = starts.astype(np.float64 if pa.types.is_floating(self.start_type) else np.int64, copy=False)
        windowed = table.append_column("__window_start", pa.array(starts, type=self.start_type))
        if self.watermark is not NO_WATERMARK:
            alive = starts + size - 1 > self.watermark
            if not alive.all():
                windowed = windowed.filter(pa.array(alive))
                latest_start = times - np.mod(times, slide)  # a row whose latest window fired is late
                self.late_records += int(np.count_nonzero(latest_start + size - 1 <= self.watermark))
        return windowed

    def process_batch(self, batch: list[Any]) -> list[Any]:
        for element in batch:
            rows = self._check(element)
            if rows.num_rows == 0:
                continue
            windowed = self._windowed(rows)
            if windowed.num_rows == 0:
                continue
            partial = self.aggregation.partial(windowed, self._group_columns())
            partial = partial.append_column("__dirty", pa.array(np.ones(partial.num_rows, dtype=bool)))
            tables = [partial] if self.windows is None else [self.windows, partial]
            self.windows = self.aggregation.combine(tables, self._group_columns())
        return []

    def on_watermark(self, watermark: Any) -> list[Any]:
        if self.watermark is not NO_WATERMARK and watermark <= self.watermark:
            return []
        self.watermark = watermark
        return self._fire(watermark)

    def end_input(self) -> list[Any]:
        self.watermark = float("inf")
        return self._fire(float("inf"))

    def _fire(self, watermark: Any) -> list[Any]:
        """Emit and drop the open windows whose last instant the watermark reached."""
        windows = self.windows
        if windows is None or windows.num_rows == 0:
            return []
        starts = windows.column("__window_start")
        due = pc.less_equal(pc.add(starts, pa.scalar(self.size - 1, self.start_type)), watermark)
        if not pc.any(due).as_py():
            return []
        fired = windows.filter(due)
        self.windows = windows.filter(pc.invert(due))
        self.fired.append(fired.select(self._group_columns()))
        width = len(self.keys)
        start_array = _array(fired.column(width))
        columns = [_array(fired.column(i)) for i in range(width)]
        columns += [start_array, pc.add(start_array, pa.scalar(self.size, self.start_type))]
        fields = [_array(fired.column(width + 1 + i)) for i in range(len(self.aggregation.fields))]
        columns += self.aggregation.results(fields)
        names = [*self.keys, "window_start", "window_end", *(a.name for a in self.aggregates)]
        return [pa.RecordBatch.from_arrays(columns, names=names)]

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        """Write the keyed state of every key whose windows changed or fired since the last
        snapshot: its open windows' accumulators, or nothing (deleted) when none is open."""
        windows, width = self.windows, len(self.keys)
        changed: list[pa.Table] = list(self.fired)
        if windows is not None and windows.num_rows:
            dirty = windows.column("__dirty")
            if pc.any(dirty).as_py():
                changed.append(windows.filter(dirty).select(self._group_columns()))
        if not changed:
            return
        touched = pa.concat_tables(changed)
        distinct = touched.group_by(self.keys, use_threads=False).aggregate([])
        key_arrays = [_array(distinct.column(name)) for name in self.keys]
        keys = column_keys(key_arrays)
        groups = key_groups_of_columns(key_arrays, self.max_parallelism).tolist()
        states: dict[Any, dict[Any, Any]] = {key: {} for key in keys}
        if windows is not None and windows.num_rows:
            open_keys = column_keys([_array(windows.column(i)) for i in range(width)])
            starts = windows.column(width).to_pylist()
            fields = [_array(windows.column(width + 1 + i)) for i in range(len(self.aggregation.fields))]
            accumulators = self.aggregation.accumulators(fields)
            for key, start, acc in zip(open_keys, starts, accumulators, strict=True):
                state = states.get(key)
                if state is not None:
                    state[start] = acc
            self.windows = windows.set_column(windows.num_columns - 1, "__dirty",
                                              pa.array(np.zeros(windows.num_rows, dtype=bool)))
        if self.log_batch is not None:
            self.log_batch(keys, groups)
        self.backend.prefetch(keys, groups)
        tables = self.groups
        for key, group in zip(keys, groups, strict=True):
            state = states[key]
            if state:
                tables[group][key] = state
            elif key in tables[group]:
                del tables[group][key]
        self.fired = []

    def counters(self) -> dict[str, int]:
        return {"late_records_dropped": self.late_records}
