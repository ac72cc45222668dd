"""Jobs on Spark with the Spark user's sources and sinks: a DataFrame and a Delta table in, Delta
and PostgreSQL out, and one readable error, in bounded time, for each bad target."""

from __future__ import annotations

import datetime
import decimal
import json
import os
import subprocess
import sys
import textwrap
import time
import warnings

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from epochal.connectors.delta import DeltaSink, DeltaSource
from epochal.connectors.postgres import PostgresSink
from epochal.control.restart import FixedDelayRestart
from epochal.errors import JobFailedError, PlanError


def test_from_dataframe_gives_what_collect_gives_split_by_partition(make_env, spark, tmp_path):
    rows = [(i, f"s{i}", i / 2, datetime.date(2024, 1, 1 + i % 28), datetime.datetime(2024, 1, 1, 12, i % 60),
             decimal.Decimal(f"{i}.25"), [i, i + 1], {"k": i}, (i, "x"), bytearray(b"ab"), i % 2 == 0)
            for i in range(500)]
    schema = ("id long, name string, half double, day date, at timestamp, price decimal(10,2), xs array<int>, "
              "m map<string,int>, st struct<a:int,b:string>, raw binary, even boolean")
    df = spark.createDataFrame(rows, schema).repartition(3)
    env = make_env(2)
    collected = env.from_dataframe(df, snapshot_dir=str(tmp_path / "snapshots")).collect()
    result = env.execute("from-dataframe", timeout=120)
    got = result.collected[collected.collect_id]
    expected = df.collect()
    key = lambda r: r.id  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)
    assert [type(v) for v in sorted(got, key=key)[0]] == [type(v) for v in sorted(expected, key=key)[0]]
    snapshot = next((tmp_path / "snapshots").iterdir())
    assert len([p for p in snapshot.iterdir() if p.name.endswith(".parquet")]) == 3  # one file per partition


def test_from_dataframe_refuses_what_is_not_a_dataframe(make_env):
    with pytest.raises(PlanError, match="takes a pyspark.sql.DataFrame"):
        make_env(2).from_dataframe([1, 2])


@pytest.mark.slow  # a Spark process of its own, which fetches Delta's Spark package
def test_a_bounded_job_reads_a_delta_table_and_appends_to_another_partitioned(make_env, tmp_path):
    source_table, target = str(tmp_path / "in"), str(tmp_path / "out")
    for part in range(4):
        write_deltalake(source_table, pa.table({"n": list(range(part * 250, part * 250 + 250))}), mode="append")
    env = make_env(2)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    (env.from_source(DeltaSource(source_table))
        .map(lambda r: {"n": r["n"], "bucket": r["n"] % 3})
        .sink_to(DeltaSink(target, partition_by=["bucket"]), name="delta-out"))
    env.execute("delta-to-delta", timeout=120)
    table = DeltaTable(target)
    assert sorted(r["n"] for r in table.to_pyarrow_table().to_pylist()) == list(range(1000))
    assert table.metadata().partition_columns == ["bucket"]
    assert read_with_spark(target) == sorted((n, n % 3) for n in range(1000))


def read_with_spark(table: str) -> list[tuple]:
    """The table's rows as Spark reads them, in a Spark process of its own: through Delta's Spark
    package (``io.delta:delta-spark``) where it runs on this Spark; where it does not (no release
    for Spark 4.3 yet: 4.4.0 is built for Spark 4.2 and fails with NoSuchMethodError), Spark reads
    the snapshot the way the Delta protocol defines it: the log's JSON commits replayed (adds less
    removes, by path), the files read as Parquet with the partition values added."""
    script = textwrap.dedent(f"""
        import json, sys
        from pyspark.sql import SparkSession, functions as F
        spark = (SparkSession.builder.master("local[1]").appName("delta-check")
                 .config("spark.jars.packages", "io.delta:delta-spark_2.13:4.4.0")
                 .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                 .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
                 .config("spark.ui.enabled", "false").getOrCreate())
        table = {table!r}
        try:
            rows = spark.read.format("delta").load(table).select("n", "bucket").collect()
            reader = "delta-spark"
        except Exception as exc:
            if "NoSuchMethodError" not in str(exc) and "ClassNotFound" not in str(exc):
                raise
            log = spark.read.json(table + "/_delta_log/*.json")
            live = {{}}
            kinds = [k for k in ("add", "remove") if k in log.columns]
            versions = sorted(log.select(F.input_file_name().alias("f"), *kinds).collect(),
                              key=lambda row: int(row.f.rsplit("/", 1)[-1].split(".")[0]))
            for row in versions:  # replayed in version order: the latest action of a path wins
                add, remove = row["add"] if "add" in kinds else None, row["remove"] if "remove" in kinds else None
                if add is not None:
                    live[add.path] = add.partitionValues.asDict()
                if remove is not None:
                    live.pop(remove.path, None)
            rows = []
            from urllib.parse import unquote
            for path, parts in live.items():
                frame = spark.read.parquet(table + "/" + unquote(path))
                for name, value in parts.items():
                    frame = frame.withColumn(name, F.lit(value).cast("long"))
                rows.extend(frame.select("n", "bucket").collect())
            why = next(line for line in str(exc).splitlines() if "NoSuchMethod" in line or "ClassNotFound" in line)
            reader = "spark-parquet-via-delta-log (delta-spark 4.4.0 fails on this Spark: " + why.strip()[:200] + ")"
        print(json.dumps({{"reader": reader, "rows": sorted([list(r) for r in rows])}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if answer["reader"] != "delta-spark":
        warnings.warn(f"Spark read the Delta table without Delta's Spark package: {answer['reader']}", stacklevel=2)
    return [tuple(r) for r in answer["rows"]]


# ------------------------------------------------------------------ bad input and faults


@pytest.fixture
def pg_table(make_pg_table):
    return make_pg_table("id int PRIMARY KEY, n int CHECK (n >= 0)", "jobs")


def test_a_constraint_violation_fails_the_job_naming_record_and_constraint(make_env, postgres, pg_table):
    env = make_env(1)
    env.from_collection([(i, 5 - i) for i in range(10)]).sink_to(
        PostgresSink(postgres.dsn, pg_table, columns=["id", "n"]), name="pg")
    started = time.monotonic()
    with pytest.raises(JobFailedError) as failure:
        env.execute("constraint", timeout=120)
    assert time.monotonic() - started < 60
    message = str(failure.value)
    assert f"{pg_table}_n_check" in message and "record (6, -1)" in message, message
    with postgres.connect() as conn:
        assert conn.execute(f"SELECT count(*) FROM {pg_table}").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (0,)


def test_postgres_down_mid_job_fails_it_in_bounded_time_and_keeps_what_was_committed(make_env, tmp_path):
    from tests.postgres_server import PostgresServer

    server = PostgresServer(tmp_path / "pg").start()
    try:
        with server.connect() as conn:
            conn.execute("CREATE TABLE t (id bigint)")  # no key: a duplicate would show
        env = make_env(2)
        env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
        env.set_restart_strategy(FixedDelayRestart(attempts=2, delay=0.2))
        (env.from_sequence(0, 100_000, rate=5_000).map(lambda i: (i,))
            .sink_to(PostgresSink(server.dsn, "t", columns=["id"]), name="pg"))
        client = env.execute_async("pg-down")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with server.connect() as conn:
                if conn.execute("SELECT count(*) FROM t").fetchone()[0] > 0:
                    break
            time.sleep(0.2)
        with server.connect() as conn:
            committed = conn.execute("SELECT count(*) FROM t").fetchone()[0]
        assert committed > 0
        server.stop("immediate")
        stopped = time.monotonic()
        with pytest.raises(JobFailedError, match="PostgreSQL"):
            client.result(timeout=120)
        assert time.monotonic() - stopped < 60
        server.start()
        server.wait_ready()
        with server.connect() as conn:
            ids = [r[0] for r in conn.execute("SELECT id FROM t ORDER BY id").fetchall()]
        assert len(ids) >= committed and len(set(ids)) == len(ids)  # nothing committed lost, nothing twice
    finally:
        server.destroy()


def test_postgres_down_at_submit_fails_before_spark_runs(postgres):
    with pytest.raises(PlanError, match="cannot connect to PostgreSQL"):
        PostgresSink("host=127.0.0.1 port=1 dbname=postgres user=postgres", "t", connect_timeout=2)


def test_a_delta_table_whose_schema_does_not_match_fails_the_job_naming_the_field(make_env, tmp_path):
    table = str(tmp_path / "t")
    write_deltalake(table, pa.table({"id": pa.array([1], pa.int64()), "name": ["a"]}))
    env = make_env(1)
    env.from_collection([{"id": 2, "name": 7}]).sink_to(DeltaSink(table), name="delta")
    with pytest.raises(JobFailedError, match=r"field 'name' \(string\) of record \{'id': 2, 'name': 7\}"):
        env.execute("delta-schema", timeout=120)
    assert DeltaTable(table).to_pyarrow_table().to_pylist() == [{"id": 1, "name": "a"}]
