"""Batch-stream operators against plain-Python oracles, on batches hypothesis generates (empty
batches, nulls, one row, many keys, int, str and binary keys, keys of several columns), run in
the operator harness (no Spark): keyed running aggregates, windows, the keyed exchange, the
conversions, and the errors of bad input."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochal.plan.column_keygroups import ColumnKeys, KeyGroupBatchPartitioner, column_keys
from epochal.plan.keygroups import key_group_of, subtask_for_key_group
from epochal.runtime.columnar.aggregates import parse_aggregates
from epochal.runtime.columnar.batches import batch_of_rows, rows_of
from epochal.runtime.columnar.keyed import KeyedAggregateOperator, WindowAggregateOperator
from epochal.runtime.columnar.operators import (
    ColumnTimestamps,
    FilterBatchesOperator,
    MapBatchesOperator,
    RowsOperator,
    ToBatchesOperator,
)
from epochal.testing import OperatorHarness

KEY_TYPES = {"int": (pa.int64(), st.integers(-3, 3)), "str": (pa.string(), st.sampled_from(["a", "b", "é", ""])),
             "bytes": (pa.binary(), st.sampled_from([b"x", b"", b"\0y"]))}
AGGREGATES = {"total": ("v", "sum"), "n": ("v", "count"), "low": ("v", "min"), "high": ("v", "max"),
              "avg": ("v", "mean"), "first": ("s", "first"), "last": ("s", "last")}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def batches(draw: Any, key_kinds: tuple[str, ...] | None = None) -> tuple[list[str], list[pa.RecordBatch]]:
    """Key columns of drawn types, then batches of rows (key values, v int or null, s str or null)."""
    kinds = key_kinds or tuple(draw(st.lists(st.sampled_from(sorted(KEY_TYPES)), min_size=1, max_size=2)))
    names = [f"k{i}" for i in range(len(kinds))]
    fields = [pa.field(name, KEY_TYPES[kind][0]) for name, kind in zip(names, kinds, strict=True)]
    schema = pa.schema([*fields, pa.field("v", pa.int64()), pa.field("s", pa.string()), pa.field("ts", pa.int64())])
    made = []
    for _ in range(draw(st.integers(1, 5))):
        size = draw(st.integers(0, 12))
        columns = [[draw(st.one_of(st.none(), KEY_TYPES[kind][1])) for _ in range(size)] for kind in kinds]
        columns.append([draw(st.one_of(st.none(), st.integers(-100, 100))) for _ in range(size)])
        columns.append([draw(st.one_of(st.none(), st.sampled_from(["p", "q", "r"]))) for _ in range(size)])
        columns.append([draw(st.integers(0, 40)) for _ in range(size)])
        made.append(pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)],
                                               schema=schema))
    return names, made


def oracle_fold(state: dict[str, Any] | None, v: Any, s: Any) -> dict[str, Any]:
    """The running aggregates of AGGREGATES after one more row (nulls skipped)."""
    acc = dict(state) if state else {"total": None, "n": 0, "low": None, "high": None, "sum": None, "first": None,
                                     "last": None}
    if v is not None:
        acc["total"] = v if acc["total"] is None else acc["total"] + v
        acc["n"] += 1
        acc["low"] = v if acc["low"] is None else min(acc["low"], v)
        acc["high"] = v if acc["high"] is None else max(acc["high"], v)
    if s is not None:
        acc["first"] = s if acc["first"] is None else acc["first"]
        acc["last"] = s
    return acc


def oracle_row(key: Any, acc: dict[str, Any]) -> tuple[Any, ...]:
    avg = None if acc["n"] == 0 else acc["total"] / acc["n"]
    parts = key if isinstance(key, tuple) else (key,)
    return (*parts, acc["total"], acc["n"], acc["low"], acc["high"], avg, acc["first"], acc["last"])


def same_rows(got: list[tuple[Any, ...]], expected: list[tuple[Any, ...]]) -> None:
    def norm(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(round(v, 9) if isinstance(v, float) else v for v in row)
    assert sorted(map(norm, got), key=repr) == sorted(map(norm, expected), key=repr)


@SETTINGS
@given(batches())
def test_running_aggregates_equal_the_oracle_batch_by_batch(drawn: tuple[list[str], list[pa.RecordBatch]]) -> None:
    keys, made = drawn
    operator = KeyedAggregateOperator(keys, parse_aggregates(AGGREGATES, "agg"))
    state: dict[Any, dict[str, Any]] = {}
    with OperatorHarness(operator, max_parallelism=16) as harness:
        for batch in made:
            out = harness.process(batch)
            changed = []
            for key, row in zip(column_keys([batch.column(k) for k in keys]), rows_of(batch), strict=True):
                state[key] = oracle_fold(state.get(key), row[len(keys)], row[len(keys) + 1])
                if key not in changed:
                    changed.append(key)
            got = [r for b in out for r in rows_of(b)]
            same_rows(got, [oracle_row(k, state[k]) for k in changed])
            if out:  # the output's key columns keep their types
                assert out[0].schema.names == [*keys, *AGGREGATES]
                assert [out[0].schema.field(k).type for k in keys] == [batch.schema.field(k).type for k in keys]
        stored = harness.keyed_state("aggregates")
        assert set(stored) == set(state)


@SETTINGS
@given(batches(), st.integers(1, 4), st.integers(1, 3))
def test_the_state_restores_at_another_parallelism_and_continues_exactly(
        drawn: tuple[list[str], list[pa.RecordBatch]], old_parallelism: int, new_parallelism: int) -> None:
    keys, made = drawn
    half = len(made) // 2
    aggregates = parse_aggregates(AGGREGATES, "agg")
    partitioner = KeyGroupBatchPartitioner(ColumnKeys(keys), 16)
    snapshots = []
    for index in range(old_parallelism):
        with OperatorHarness(KeyedAggregateOperator(keys, aggregates), max_parallelism=16,
                             parallelism=old_parallelism, subtask_index=index) as harness:
            for batch in made[:half]:
                harness.process(*partitioner.split([batch], old_parallelism)[index])
            snapshots.append(harness.snapshot(1))
    state: dict[Any, dict[str, Any]] = {}
    for batch in made:
        for key, row in zip(column_keys([batch.column(k) for k in keys]), rows_of(batch), strict=True):
            state[key] = oracle_fold(state.get(key), row[len(keys)], row[len(keys) + 1])
    final: dict[Any, tuple[Any, ...]] = {}
    touched = set()
    for batch in made[half:]:
        touched.update(column_keys([batch.column(k) for k in keys]))
    for index in range(new_parallelism):
        with OperatorHarness(KeyedAggregateOperator(keys, aggregates), max_parallelism=16,
                             parallelism=new_parallelism, subtask_index=index, restore_from=snapshots) as harness:
            for batch in made[half:]:
                for out in harness.process(*partitioner.split([batch], new_parallelism)[index]):
                    for row in rows_of(out):
                        final[row[0] if len(keys) == 1 else tuple(row[:len(keys)])] = row
    same_rows(list(final.values()), [oracle_row(k, state[k]) for k in touched])


def test_final_results_emit_each_key_once_at_the_end() -> None:
    operator = KeyedAggregateOperator(["k"], parse_aggregates({"n": ("v", "count")}, "agg"))
    operator.final_only = True
    with OperatorHarness(operator) as harness:
        assert harness.process(pa.record_batch({"k": ["a", "b", "a"], "v": [1, 2, 3]})) == []
        harness.process(pa.record_batch({"k": ["a"], "v": pa.array([None], pa.int64())}))
        out = harness.end_input()
    assert sorted(r for b in out for r in rows_of(b)) == [("a", 2), ("b", 1)]


def window_oracle(made: list[pa.RecordBatch], keys: list[str], size: int, slide: int) -> dict[Any, tuple[Any, ...]]:
    contents: dict[tuple[Any, int], list[Any]] = defaultdict(list)
    for batch in made:
        for key, row in zip(column_keys([batch.column(k) for k in keys]), batch.to_pylist(), strict=True):
            ts = row["ts"]
            start = ts - ts % slide
            while start + size > ts:
                contents[(key, start)].append(row["v"])
                start -= slide
    return {window: (sum(v for v in vs if v is not None) if any(v is not None for v in vs) else None,
                     sum(v is not None for v in vs)) for window, vs in contents.items()}


@SETTINGS
@given(batches(), st.sampled_from([(10, 10), (10, 5), (7, 3), (4, 4)]))
def test_windows_fire_once_each_with_the_oracles_aggregates(drawn: tuple[list[str], list[pa.RecordBatch]],
                                                             shape: tuple[int, int]) -> None:
    keys, made = drawn
    size, slide = shape
    operator = WindowAggregateOperator(keys, parse_aggregates({"total": ("v", "sum"), "n": ("v", "count")}, "w"),
                                       size, slide, ColumnTimestamps("ts"))
    with OperatorHarness(operator, max_parallelism=16) as harness:
        out = []
        for batch in made:
            out += harness.process(batch)
        out += harness.end_input()
    fired: dict[Any, tuple[Any, ...]] = {}
    for batch in out:
        assert batch.schema.names == [*keys, "window_start", "window_end", "total", "n"]
        for row in rows_of(batch):
            key = row[0] if len(keys) == 1 else tuple(row[:len(keys)])
            start, end = row[len(keys)], row[len(keys) + 1]
            assert end == start + size
            assert (key, start) not in fired  # each window fires once
            fired[(key, start)] = tuple(row[len(keys) + 2:])
    assert fired == window_oracle(made, keys, size, slide)


def test_a_watermark_fires_due_windows_and_later_rows_of_them_are_late() -> None:
    operator = WindowAggregateOperator(["k"], parse_aggregates({"n": ("v", "count")}, "w"), 10, None,
                                       ColumnTimestamps("ts"))
    with OperatorHarness(operator) as harness:
        harness.process(pa.record_batch({"k": ["a", "a", "b"], "v": [1, 2, 3], "ts": [1, 12, 5]}))
        fired = harness.watermark(9)
        assert sorted(r for b in fired for r in rows_of(b)) == [("a", 0, 10, 1), ("b", 0, 10, 1)]
        assert harness.process(pa.record_batch({"k": ["a", "a"], "v": [1, 1], "ts": [3, 15]})) == []
        assert harness.counters()["late_records_dropped"] == 1
        snapshot = harness.snapshot(1)
    with OperatorHarness(WindowAggregateOperator(["k"], parse_aggregates({"n": ("v", "count")}, "w"), 10, None,
                                                 ColumnTimestamps("ts")), restore_from=snapshot) as restored:
        # the open window [10, 20) of "a" is rebuilt from the state and fires on the next watermark
        assert [r for b in restored.watermark(19) for r in rows_of(b)] == [("a", 10, 20, 2)]


@SETTINGS
@given(batches(), st.integers(1, 5))
def test_the_keyed_exchange_sends_each_row_to_the_owner_of_its_key_group(
        drawn: tuple[list[str], list[pa.RecordBatch]], parallelism: int) -> None:
    keys, made = drawn
    partitioner = KeyGroupBatchPartitioner(ColumnKeys(keys), 128)
    for batch in made:
        parts = partitioner.split([batch], parallelism)
        assert len(parts) == parallelism
        seen = []
        for index, part in enumerate(parts):
            for piece in part:
                assert piece.schema == batch.schema
                for key in column_keys([piece.column(k) for k in keys]):
                    assert subtask_for_key_group(key_group_of(key, 128), parallelism, 128) == index
                seen += rows_of(piece)
        assert sorted(seen, key=repr) == sorted(rows_of(batch), key=repr)


@pytest.mark.parametrize("batch_format", ["pyarrow", "pandas", "polars", "numpy"])
def test_map_batches_hands_each_format_and_takes_it_back(batch_format: str) -> None:
    def double(batch: Any) -> Any:
        if batch_format == "pyarrow":
            return batch.set_column(1, "v", pc.multiply(batch["v"], 2))
        if batch_format == "pandas":
            return batch.assign(v=batch["v"] * 2)
        if batch_format == "polars":
            import polars

            return batch.with_columns(polars.col("v") * 2)
        return {"k": batch["k"], "v": batch["v"] * 2}

    with OperatorHarness(MapBatchesOperator(double, batch_format)) as harness:
        out = harness.process(pa.record_batch({"k": ["a", "b"], "v": [1, 2]}))
    assert [r for b in out for r in rows_of(b)] == [("a", 2), ("b", 4)]


@pytest.mark.parametrize("mask", [lambda b: pc.greater(b["v"], 1), lambda b: b["v"].to_numpy() > 1,
                                  lambda b: pa.array([False, True, None])])
def test_filter_batches_takes_arrow_and_numpy_masks(mask: Any) -> None:
    with OperatorHarness(FilterBatchesOperator(mask)) as harness:
        out = harness.process(pa.record_batch({"v": [1, 2, 0]}))
    assert [r for b in out for r in rows_of(b)] in ([(2,)],)


def test_rows_and_to_batches_convert_both_ways() -> None:
    schema = pa.schema([("k", pa.string()), ("v", pa.int32())])
    with OperatorHarness(ToBatchesOperator(schema, max_rows=2)) as harness:
        out = harness.process(("a", 1), ("b", 2), ("c", None))
    assert [b.num_rows for b in out] == [2, 1] and all(b.schema == schema for b in out)
    with OperatorHarness(RowsOperator()) as harness:
        assert harness.process(*out) == [("a", 1), ("b", 2), ("c", None)]
    assert rows_of(batch_of_rows([{"x": 1, "y": "p"}], None, "t")) == [(1, "p")]
    assert batch_of_rows([5, 6], None, "t").schema.names == ["value"]


# ------------------------------------------------------------------ bad input


def test_a_schema_change_mid_stream_names_the_operator_and_the_column() -> None:
    operator = KeyedAggregateOperator(["k"], parse_aggregates({"n": ("v", "count")}, "agg"))
    operator.name = "Totals"
    with OperatorHarness(operator) as harness:
        harness.process(pa.record_batch({"k": ["a"], "v": [1]}))
        with pytest.raises(ValueError, match=r"operator 'Totals'.*schema changed.*column 'v' was int64 and is now "
                                             r"string"):
            harness.process(pa.record_batch({"k": ["a"], "v": ["1"]}))


def test_a_missing_column_or_an_aggregate_of_the_wrong_type_is_named() -> None:
    with OperatorHarness(KeyedAggregateOperator(["user"], parse_aggregates({"n": ("v", "count")}, "agg"))) as h:
        with pytest.raises(ValueError, match=r"no column 'user' \(they have k, v\)"):
            h.process(pa.record_batch({"k": ["a"], "v": [1]}))
    with OperatorHarness(KeyedAggregateOperator(["k"], parse_aggregates({"t": ("v", "sum")}, "agg"))) as h:
        with pytest.raises(ValueError, match=r"aggregate 't': sum does not apply to column 'v' of type string"):
            h.process(pa.record_batch({"k": ["a"], "v": ["x"]}))
    with pytest.raises(ValueError, match=r"names the function 'median'"):
        parse_aggregates({"m": ("v", "median")}, "agg()")
    with pytest.raises(ValueError, match=r"must be a pair"):
        parse_aggregates({"m": "v"}, "agg()")


def test_map_batches_returning_something_else_says_what_it_must_return() -> None:
    with OperatorHarness(MapBatchesOperator(lambda b: b.to_pylist())) as harness:
        with pytest.raises(TypeError, match=r"returned a list; with batch_format=\"pyarrow\" it must return a "
                                            r"pyarrow.RecordBatch"):
            harness.process(pa.record_batch({"v": [1]}))
    with OperatorHarness(FilterBatchesOperator(lambda b: np.array([1, 0]))) as harness:
        with pytest.raises(TypeError, match=r"numpy array of int64; it must return a boolean mask"):
            harness.process(pa.record_batch({"v": [1, 2]}))


def test_a_row_where_a_batch_is_expected_and_null_event_times_are_refused() -> None:
    with OperatorHarness(RowsOperator()) as harness:
        with pytest.raises(TypeError, match=r"takes pyarrow.RecordBatch elements, got a tuple"):
            harness.process((1, 2))
    operator = WindowAggregateOperator(["k"], parse_aggregates({"n": ("v", "count")}, "w"), 10, None,
                                       ColumnTimestamps("ts"))
    with OperatorHarness(operator) as harness:
        with pytest.raises(ValueError, match=r"timestamp column 'ts' has 1 null"):
            harness.process(pa.record_batch({"k": ["a"], "v": [1], "ts": pa.array([None], pa.int64())}))


def test_an_integer_sum_that_overflows_fails_instead_of_wrapping() -> None:
    operator = KeyedAggregateOperator(["k"], parse_aggregates({"t": ("v", "sum")}, "agg"))
    with OperatorHarness(operator) as harness:
        harness.process(pa.record_batch({"k": ["a"], "v": [2**62]}))
        with pytest.raises(OverflowError, match="the sum of column 'v' \\(aggregate 't'\\) left the range of int64"):
            harness.process(pa.record_batch({"k": ["a"], "v": [2**62]}))
        with pytest.raises(OverflowError, match="left the range of int64"):  # within one batch
            harness.process(pa.record_batch({"k": ["b", "b"], "v": [2**62, 2**62]}))


def test_mean_of_only_nulls_is_null_and_sum_of_floats_is_float() -> None:
    operator = KeyedAggregateOperator(["k"], parse_aggregates({"m": ("v", "mean"), "t": ("v", "sum")}, "agg"))
    with OperatorHarness(operator) as harness:
        out = harness.process(pa.record_batch({"k": ["a"], "v": pa.array([None], pa.float64())}))
        assert rows_of(out[0]) == [("a", None, None)]
        out = harness.process(pa.record_batch({"k": ["a"], "v": [1.5]}))
        assert rows_of(out[0]) == [("a", 1.5, 1.5)]
        assert not math.isnan(rows_of(out[0])[0][1])


@SETTINGS
@given(batches(), st.integers(1, 3), st.integers(1, 3), st.sampled_from([(10, 10), (10, 5)]))
def test_open_windows_restore_at_another_parallelism_and_fire_once_each(
        drawn: tuple[list[str], list[pa.RecordBatch]], old_parallelism: int, new_parallelism: int,
        shape: tuple[int, int]) -> None:
    keys, made = drawn
    size, slide = shape
    half = len(made) // 2
    aggregates = parse_aggregates({"total": ("v", "sum"), "n": ("v", "count")}, "w")
    partitioner = KeyGroupBatchPartitioner(ColumnKeys(keys), 16)

    def operator() -> WindowAggregateOperator:
        return WindowAggregateOperator(keys, aggregates, size, slide, ColumnTimestamps("ts"))

    fired: dict[Any, tuple[Any, ...]] = {}

    def take(out: list[pa.RecordBatch]) -> None:
        for batch in out:
            for row in rows_of(batch):
                window = (row[0] if len(keys) == 1 else tuple(row[:len(keys)]), row[len(keys)])
                assert window not in fired
                fired[window] = tuple(row[len(keys) + 2:])

    snapshots = []
    for index in range(old_parallelism):
        with OperatorHarness(operator(), max_parallelism=16, parallelism=old_parallelism,
                             subtask_index=index) as harness:
            for batch in made[:half]:
                take(harness.process(*partitioner.split([batch], old_parallelism)[index]))
            take(harness.watermark(15))  # windows ending by 15 fire before the snapshot
            snapshots.append(harness.snapshot(1))
    for index in range(new_parallelism):
        with OperatorHarness(operator(), max_parallelism=16, parallelism=new_parallelism, subtask_index=index,
                             restore_from=snapshots) as harness:
            harness.watermark(15)
            for batch in made[half:]:
                take(harness.process(*partitioner.split([batch], new_parallelism)[index]))
            take(harness.end_input())
    # windows that fired before the snapshot hold the first half's rows only (later rows are late)
    before, everything = window_oracle(made[:half], keys, size, slide), window_oracle(made, keys, size, slide)
    expected = {window: (before.get(window) if window[1] + size - 1 <= 15 else value)
                for window, value in everything.items()}
    assert fired == {window: value for window, value in expected.items() if value is not None}


def test_a_restored_window_operator_keeps_its_schema_for_the_next_restore() -> None:
    """Restored twice, the second time from a snapshot the restored operator took before any
    batch: its open windows must come back again (their accumulators' types are in the schema it
    keeps in operator state)."""
    def operator() -> WindowAggregateOperator:
        return WindowAggregateOperator(["k"], parse_aggregates({"n": ("v", "count")}, "w"), 10, None,
                                       ColumnTimestamps("ts"))

    with OperatorHarness(operator()) as first:
        first.process(pa.record_batch({"k": ["a"], "v": [1], "ts": [3]}))
        snapshot = first.snapshot(1)
    with OperatorHarness(operator(), restore_from=snapshot) as second:
        again = second.snapshot(2)
    with OperatorHarness(operator(), restore_from=again) as third:
        assert [r for b in third.end_input() for r in rows_of(b)] == [("a", 0, 10, 1)]
