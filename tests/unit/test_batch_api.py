"""The batch API's plan-time checks and shapes (no Spark: the job is planned, not run): what a
user can get wrong is a PlanError naming the call and the column before the job starts,
wherever the batches' schema is known then."""

from __future__ import annotations

import pyarrow as pa
import pytest

from epochal import BatchStream, Environment, KeyedBatchStream, PlanError
from epochal.runtime.columnar.keyed import KeyedAggregateOperator, WindowAggregateOperator

SCHEMA = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("note", pa.string()), ("ts", pa.int64())])


def rows_env() -> tuple[Environment, BatchStream]:
    env = Environment(2)
    return env, env.from_collection([("a", 1, "x", 5)]).to_batches(SCHEMA)


def test_a_batch_stream_plans_into_chained_batch_operators() -> None:
    env, batches = rows_env()
    keyed = batches.filter_batches(lambda b: b["amount"].is_valid()).key_by("user")
    assert isinstance(keyed, KeyedBatchStream)
    out = keyed.agg(total=("amount", "sum"), n=("amount", "count"))
    assert isinstance(out, BatchStream) and isinstance(out.node.operator, KeyedAggregateOperator)
    assert out.node.operator.emits_batches
    out.rows().map(lambda row: row).discard()
    text = env.plan().describe()
    assert "Aggregate" in text and "hash" in text


@pytest.mark.parametrize("build, message", [
    (lambda s: s.key_by("missing"), r"key_by: the batches have no column .missing. \(they have user, amount, note"),
    (lambda s: s.key_by("user").agg(t=("amount", "median")), r"names the function 'median'"),
    (lambda s: s.key_by("user").agg(t=("nope", "sum")), r"aggregate 't' reads column 'nope'"),
    (lambda s: s.key_by("user").agg(t=("note", "sum")), r"aggregate 't': sum does not apply to column 'note' of "
                                                        r"type string"),
    (lambda s: s.key_by("user").agg(user=("amount", "sum")), r"has the name of a key column"),
    (lambda s: s.key_by("user").agg(), r"needs at least one aggregate"),
    (lambda s: s.key_by(lambda b: b), r"takes column names.*call rows\(\) first"),
    (lambda s: s.key_by(["user", "user"]), r"names a column twice"),
    (lambda s: s.key_by("user").window(10, timestamp="when"), r"no column 'when'"),
    (lambda s: s.key_by("user").window(10), r"needs timestamp=\"column\""),
    (lambda s: s.key_by("user").window(10, slide=20, timestamp="ts"), r"slide may not exceed the size"),
    (lambda s: s.with_watermarks(lambda b: 0), r"takes the name of its event-time column"),
    (lambda s: s.map_batches(lambda b: b, batch_format="arrow"), r"the formats are 'pyarrow', 'pandas'"),
    (lambda s: s.to_batches(), r"already carries record batches"),
    (lambda s: s.key_by("user").as_queryable_state("q").window(10, timestamp="ts"), r"applies to agg\(\)"),
])
def test_mistakes_are_plan_errors_before_the_job_starts(build, message) -> None:
    _, batches = rows_env()
    with pytest.raises(PlanError, match=message):
        build(batches)


def test_union_of_batch_and_row_streams_or_of_two_schemas_is_refused() -> None:
    env, batches = rows_env()
    with pytest.raises(PlanError, match="convert row streams with to_batches"):
        batches.union(env.from_collection([1]))
    other = env.from_collection([(1,)]).to_batches(pa.schema([("x", pa.int64())]))
    with pytest.raises(PlanError, match="different schemas"):
        batches.union(other)
    assert isinstance(batches.union(batches.filter_batches(lambda b: b["amount"].is_valid())), BatchStream)


def test_a_window_reads_the_watermarks_column_and_a_sink_gets_rows_unless_it_takes_batches() -> None:
    env, batches = rows_env()
    windowed = batches.with_watermarks("ts", 5).key_by("user").window(10).agg(n=("amount", "count"))
    operator = windowed.node.operator
    assert isinstance(operator, WindowAggregateOperator) and operator.timestamp.column == "ts"
    printed = windowed.print()
    assert env.graph[printed.node.inputs[0]].operation == "rows"  # the print sink takes rows
    collected = windowed.collect()
    assert collected is not None  # collect takes the record batches themselves


def test_from_batches_needs_a_function_and_numbers_are_checked() -> None:
    env = Environment(1)
    with pytest.raises(PlanError, match="takes a function of the index"):
        env.from_batches([pa.record_batch({"x": [1]})])  # type: ignore[arg-type]
    with pytest.raises(PlanError):
        env.from_batches(lambda i: pa.record_batch({"x": [i]}), count=-1)
    _, batches = rows_env()
    with pytest.raises(PlanError):
        batches.key_by("user").window(0, timestamp="ts")
