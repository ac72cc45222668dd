"""Batch streams in real jobs on Spark, beside the row API: rows converted to batches, aggregated
and converted back inside one job; a batch aggregation's keyed state answering queryable-state
clients while it runs, read by the state DataFrame reader from a savepoint, restored into a job of
another parallelism, and placed in the same key groups as a row job's state of the same keys."""

from __future__ import annotations

import collections
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import epochal
from epochal.plan.keygroups import key_group_of

KEYS = 11


def test_rows_to_batches_aggregated_and_back_to_rows_in_one_job(make_env):
    env = make_env(2)
    schema = pa.schema([("user", pa.string()), ("amount", pa.int64())])
    rows = env.from_collection([(f"u{i % KEYS}", i) for i in range(3_000)])
    totals = (rows.filter(lambda r: r[1] % 3 != 0).to_batches(schema, max_rows=256)
              .key_by("user").agg(total=("amount", "sum"), n=("amount", "count")).final_results()
              .rows().map(lambda r: (r[0], r[1], r[2], r[1] / r[2])).collect())
    result = env.execute("rows-batches-rows", timeout=120)
    expected = collections.defaultdict(lambda: [0, 0])
    for i in range(3_000):
        if i % 3:
            expected[f"u{i % KEYS}"][0] += i
            expected[f"u{i % KEYS}"][1] += 1
    got = {r[0]: (r[1], r[2], r[3]) for r in result.collected[totals.collect_id]}
    assert got == {u: (t, n, t / n) for u, (t, n) in expected.items()}


def batch(i: int) -> pa.RecordBatch:
    users = [f"u{(i + j) % KEYS}" for j in range(4)]
    return pa.record_batch({"user": users, "amount": [i] * 4})


def oracle(batches: int) -> dict[str, tuple[int, int]]:
    totals: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for i in range(batches):
        for j in range(4):
            totals[f"u{(i + j) % KEYS}"][0] += i
            totals[f"u{(i + j) % KEYS}"][1] += 1
    return {u: (t, n) for u, (t, n) in totals.items()}


def agg_job(env, batches: int, rate: float | None = None):
    return (env.from_batches(batch, count=batches, rate=rate).uid("batches")
            .key_by("user").as_queryable_state("totals")
            .agg(total=("amount", "sum"), n=("amount", "count")).uid("totals"))


def test_a_batch_aggregation_is_queryable_readable_as_a_dataframe_and_restorable_elsewhere(make_env, spark, tmp_path):
    env = make_env(2)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    agg_job(env, 6_000, rate=400).discard()
    job = env.execute_async("queryable-batches")
    job.wait_until_running()
    with epochal.QueryableStateClient(job, timeout=30) as client:
        deadline, seen = time.monotonic() + 20, {}
        while len(seen) < KEYS and time.monotonic() < deadline:
            seen = {k: v for k, v in client.get_many("totals", [f"u{k}" for k in range(KEYS)]).items() if v}
            time.sleep(0.1)
        assert len(seen) == KEYS
        for total, n in seen.values():  # the accumulator tuple: (sum, count)
            assert isinstance(total, int) and n > 0 and total >= 0
        later = client.get("totals", "u3")
        assert later[1] >= seen["u3"][1]
    time.sleep(0.5)
    savepoint = job.stop_with_savepoint(str(tmp_path / "savepoints"), timeout=60)
    frame = epochal.read_state(spark, savepoint, "totals", "aggregates", value_format="pickle")
    state = {row.key: epochal.decode_state_value(row.value) for row in frame.collect()}
    assert sorted(state) == sorted(f"u{k}" for k in range(KEYS))
    # a row job's state of the same keys is in the same key groups: the placement is the same
    for row in frame.collect():
        assert row.key_group == key_group_of(row.key, 128), row

    # restored at parallelism 3, the job continues each key's totals from the savepoint
    second = make_env(3)
    collected = agg_job(second, 6_000).final_results().rows().collect()
    result = second.execute("restored-batches", restore_from=savepoint, timeout=180)
    assert {r[0]: (r[1], r[2]) for r in result.collected[collected.collect_id]} == oracle(6_000)


def test_map_batches_in_pandas_and_polars_inside_a_job(make_env):
    pytest.importorskip("pandas")
    pytest.importorskip("polars")
    import polars as pl

    env = make_env(2)
    out = (env.from_batches(batch, count=50)
           .map_batches(lambda df: df.assign(amount=df["amount"] * 10), batch_format="pandas")
           .map_batches(lambda df: df.with_columns(pl.col("amount") + 1), batch_format="polars")
           .filter_batches(lambda b: pc.greater(b["amount"], 100))
           .collect())
    result = env.execute("formats", timeout=120)
    amounts = sorted(v for b in result.collected[out.collect_id] for v in b.column("amount").to_pylist())
    assert amounts == sorted(i * 10 + 1 for i in range(50) for _ in range(4) if i * 10 + 1 > 100)
