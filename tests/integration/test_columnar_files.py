"""Batch streams from and to the columnar formats on real Spark workers: Parquet files, Delta
tables and Spark DataFrames read as record batches (Arrow all the way), aggregated, and written
a batch at a time by the Parquet and Delta sinks (exactly once, as their row forms); a batch job
whose worker is killed mid-file continues from the checkpointed rows without loss or repeats."""

from __future__ import annotations

import collections
import datetime
import decimal
import glob
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from epochal import BatchStream, ParquetFileSink, PlanError
from epochal.connectors.delta import DeltaSink, DeltaSource
from epochal.control.restart import FixedDelayRestart
from epochal.testing import Fault

ROWS = 20_000


def orders(part: int) -> pa.Table:
    ids = list(range(part * ROWS, (part + 1) * ROWS))
    return pa.table({"id": ids, "user": [f"u{i % 97}" for i in ids], "amount": [i % 50 for i in ids]})


def oracle(tables: list[pa.Table]) -> dict[str, tuple[int, int]]:
    totals: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for table in tables:
        for user, amount in zip(table["user"].to_pylist(), table["amount"].to_pylist(), strict=True):
            totals[user][0] += amount
            totals[user][1] += 1
    return {user: (total, count) for user, (total, count) in totals.items()}


def read_parquet_dir(directory: str) -> pa.Table:
    files = sorted(glob.glob(f"{directory}/*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else pa.table({})


def test_parquet_batches_are_aggregated_and_written_back_as_batches_exactly_once(make_env, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    tables = [orders(part) for part in range(3)]
    for part, table in enumerate(tables):
        pq.write_table(table, source / f"part-{part}.parquet", row_group_size=7_000)
    env = make_env(2)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    stream = env.read_parquet(str(source), batches=True)
    assert isinstance(stream, BatchStream) and stream.schema.names == ["id", "user", "amount"]
    totals = (stream.filter_batches(lambda b: pc.greater_equal(b["amount"], 0))
              .key_by("user").agg(total=("amount", "sum"), n=("amount", "count")).final_results())
    totals.sink_to(ParquetFileSink(str(tmp_path / "out")))
    env.execute("parquet-batches", timeout=180)
    written = read_parquet_dir(str(tmp_path / "out"))
    assert written.schema.names == ["user", "total", "n"]
    got = {u: (t, n) for u, t, n in zip(*(written[c].to_pylist() for c in written.schema.names), strict=True)}
    assert got == oracle(tables)


def test_a_parquet_batch_stream_knows_its_schema_when_planned(make_env, tmp_path):
    pq.write_table(orders(0), tmp_path / "one.parquet")
    env = make_env(2)
    with pytest.raises(PlanError, match=r"no column 'customer' \(they have id, user, amount\)"):
        env.read_parquet(str(tmp_path), batches=True).key_by("customer")
    with pytest.raises(PlanError, match=r"sum does not apply to column 'user' of type string"):
        env.read_parquet(str(tmp_path), batches=True).key_by("id").agg(t=("user", "sum"))


def test_delta_batches_in_and_out(make_env, tmp_path):
    source_table, target = str(tmp_path / "in"), str(tmp_path / "out")
    tables = [orders(part) for part in range(2)]
    for table in tables:
        write_deltalake(source_table, table, mode="append")
    env = make_env(2)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    stream = env.from_source(DeltaSource(source_table, batches=True))
    assert isinstance(stream, BatchStream) and "user" in stream.schema.names
    (stream.map_batches(lambda b: b.append_column("bucket", pc.cast(pc.divide(b["id"], 10_000), pa.int64())))
        .sink_to(DeltaSink(target, partition_by=["bucket"])))
    env.execute("delta-batches", timeout=180)
    written = DeltaTable(target).to_pyarrow_table()
    assert written.num_rows == 2 * ROWS
    assert sorted(written["id"].to_pylist()) == list(range(2 * ROWS))
    assert oracle([written]) == oracle(tables)


def test_a_dataframe_as_batches(make_env, spark, tmp_path):
    df = spark.createDataFrame([(i, f"u{i % 7}", i % 10) for i in range(5_000)], "id long, user string, amount long")
    env = make_env(2)
    stream = env.from_dataframe(df.repartition(3), snapshot_dir=str(tmp_path / "snap"), batches=True)
    assert isinstance(stream, BatchStream) and stream.schema.names == ["id", "user", "amount"]
    collected = stream.key_by("user").agg(n=("id", "count"), total=("amount", "sum")).final_results().rows().collect()
    result = env.execute("dataframe-batches", timeout=180)
    expected = {f"u{u}": (sum(1 for i in range(5_000) if i % 7 == u), sum(i % 10 for i in range(5_000) if i % 7 == u))
                for u in range(7)}
    assert {row[0]: (row[1], row[2]) for row in result.collected[collected.collect_id]} == expected


def written_parts(directory, tables: list[pa.Table], row_group_size: int) -> list[pa.Table]:
    """``tables`` written as ``part-<i>.parquet`` files in ``directory`` (made), returned."""
    directory.mkdir()
    for part, table in enumerate(tables):
        pq.write_table(table, directory / f"part-{part}.parquet", row_group_size=row_group_size)
    return tables


def test_parquet_batches_read_what_the_row_source_reads(make_env, tmp_path):
    source = tmp_path / "in"
    tables = written_parts(source, [orders(part).slice(0, 3_000) for part in range(3)], 700)
    env = make_env(2)
    batches = env.read_parquet(str(source), batches=True, batch_rows=1_000).collect()
    rows = env.read_parquet(str(source), as_dicts=False).collect()
    result = env.execute("parquet-batches-and-rows", timeout=180)
    got = result.collected[batches.collect_id]
    assert all(type(b) is pa.RecordBatch and b.num_rows <= 1_000 for b in got)
    from_batches = sorted(tuple(r.values()) for r in pa.Table.from_batches(got).to_pylist())
    assert from_batches == sorted(result.collected[rows.collect_id])
    assert from_batches == sorted(tuple(r.values()) for t in tables for r in t.to_pylist())


def slowly(batch: pa.RecordBatch) -> pa.RecordBatch:
    time.sleep(0.05)  # a few checkpoints pass while a file is read: the kill comes mid-file
    return batch


def test_a_parquet_batch_job_killed_mid_file_continues_exactly(make_env, tmp_path):
    source = tmp_path / "in"
    tables = written_parts(source, [orders(part).slice(0, 8_000) for part in range(2)], 3_000)
    env = make_env(2)
    env.enable_checkpointing(0.2, storage=str(tmp_path / "checkpoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=2, delay=0.2))
    stream = env.read_parquet(str(source), batches=True, batch_rows=250).uid("orders").map_batches(slowly).uid("slow")
    stream.sink_to(ParquetFileSink(str(tmp_path / "rows")), name="rows").uid("rows")
    totals = stream.key_by("user").agg(total=("amount", "sum"), n=("amount", "count")).uid("totals")
    totals.final_results().sink_to(ParquetFileSink(str(tmp_path / "totals")), name="totals").uid("totals-out")
    result = env.execute("parquet-batches-killed", timeout=300,
                         faults=[Fault("after_sync", worker=1, checkpoint=3)])
    assert len(result.restarts) == 1, result.restarts
    ids = read_parquet_dir(str(tmp_path / "rows"))["id"].to_pylist()
    assert len(ids) == len(set(ids)) == 16_000 and sorted(ids) == sorted(i for t in tables for i in t["id"].to_pylist())
    written = read_parquet_dir(str(tmp_path / "totals"))
    got = {u: (t, n) for u, t, n in zip(*(written[c].to_pylist() for c in ("user", "total", "n")), strict=True)}
    assert got == oracle(tables)


def test_a_dataframe_round_trips_through_batches_to_parquet(make_env, spark, tmp_path):
    day = datetime.date(2024, 2, 29)
    when = datetime.datetime(2024, 3, 1, 12, 30, 15, 250_000)
    data = [(i, f"u{i % 5}", i / 4, day + datetime.timedelta(days=i % 3), decimal.Decimal(i) / 100,
             when + datetime.timedelta(seconds=i), [i, i + 1], None if i % 4 == 0 else f"n{i}") for i in range(600)]
    df = spark.createDataFrame(data, "id long, user string, amount double, day date, price decimal(10,2), "
                                     "at timestamp, tags array<int>, note string").repartition(3)
    env = make_env(2)
    stream = env.from_dataframe(df, snapshot_dir=str(tmp_path / "snap"), batches=True, batch_rows=128)
    assert isinstance(stream, BatchStream)
    assert stream.schema.field("at").type == pa.timestamp("us", tz="UTC")
    collected = stream.collect()
    stream.sink_to(ParquetFileSink(str(tmp_path / "out")))
    rows = env.from_dataframe(df, snapshot_dir=str(tmp_path / "snap")).collect()
    result = env.execute("dataframe-round-trip", timeout=180)
    got = result.collected[collected.collect_id]
    assert all(b.schema == stream.schema and b.num_rows <= 128 for b in got)
    as_rows = sorted(pa.Table.from_batches(got).to_pylist(), key=lambda r: r["id"])
    spark_rows = sorted(result.collected[rows.collect_id], key=lambda r: r.id)
    assert len(as_rows) == len(spark_rows) == 600
    for mine, theirs in zip(as_rows, spark_rows, strict=True):
        expected = theirs.asDict()
        assert mine["at"] == expected.pop("at").astimezone(datetime.UTC)  # Spark's naive local time, Arrow's UTC
        assert {k: v for k, v in mine.items() if k != "at"} == expected
    back = spark.read.parquet(str(tmp_path / "out")).exceptAll(df)
    assert back.count() == 0 and spark.read.parquet(str(tmp_path / "out")).count() == 600
