"""Batch streams in real jobs on Spark: ``map_batches`` handing batches to pandas and polars and
taking them back. (Rows and batches in one job, queryable state, the state reader, restores at
another parallelism and key-group placement are checked against exact oracles in
``test_columnar_oracles.py``.)"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

KEYS = 11


def batch(i: int) -> pa.RecordBatch:
    users = [f"u{(i + j) % KEYS}" for j in range(4)]
    return pa.record_batch({"user": users, "amount": [i] * 4})


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
