"""Delta Lake and PostgreSQL sinks, and the DataFrame and Delta sources, under SIGKILLed workers.

A keyed running count writes to Delta (append), PostgreSQL append (two-phase commit) and
PostgreSQL upsert (the latest count per key) at once, while workers die at seeded random moments
three times per run: each table must equal the oracle exactly, and no prepared transaction of the
job may stay open. Each mechanism is shown necessary: without the Delta transaction check a
restore commits the restored checkpoint's files again, and without two-phase commit PostgreSQL
append repeats rows.
"""

from __future__ import annotations

import collections
import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from epochal.connectors.delta import DeltaSink, DeltaSource
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from epochal.connectors.postgres import PostgresSink
from epochal.control.restart import FixedDelayRestart
from epochal.testing import Fault, random_faults

RECORDS = 6000
KEYS = 37
RATE = 2000  # records/s over all source subtasks: ~3 s and about ten checkpoints a run


def key_of(i: int) -> str:
    return f"k{i % KEYS}"


def oracle() -> tuple[collections.Counter, dict[str, int]]:
    """Every (key, running count) once, and each key's final count."""
    seen: collections.Counter = collections.Counter()
    rows: collections.Counter = collections.Counter()
    for i in range(RECORDS):
        seen[key_of(i)] += 1
        rows[(key_of(i), seen[key_of(i)])] += 1
    return rows, dict(seen)


ROWS, FINAL = oracle()


@pytest.fixture
def tables(make_pg_table):
    """Fresh PostgreSQL tables for append (no key: duplicates would show) and upsert."""
    return {"append": make_pg_table("key text NOT NULL, count bigint NOT NULL", "counts"),
            "upsert": make_pg_table("key text PRIMARY KEY, count bigint NOT NULL", "latest")}


def run(make_env, tmp_path, parallelism, faults, name, add_sinks):
    env = make_env(parallelism)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=len(faults) + 1, delay=0.2))
    counts = env.from_generator(key_of, count=RECORDS, rate=RATE).key_by(lambda k: k).count().name("count")
    add_sinks(counts)
    result = env.execute(name, timeout=300, faults=faults)
    assert len(result.restarts) == len(faults), result.restarts  # every planned kill happened
    return result


def delta_rows(path) -> collections.Counter:
    return collections.Counter((r["key"], r["count"]) for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist())


def pg_rows(postgres, table) -> collections.Counter:
    with postgres.connect() as conn:
        return collections.Counter(conn.execute(f"SELECT key, count FROM {table}").fetchall())


def open_prepared(postgres) -> list[str]:
    with postgres.connect() as conn:
        return [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]


def differences(counter: collections.Counter) -> str:
    missing = sorted(set(ROWS) - set(counter))
    repeated = sorted(k for k, c in counter.items() if c > 1)
    return f"{len(missing)} missing (e.g. {missing[:3]}), {len(repeated)} repeated (e.g. {repeated[:3]})"


@pytest.mark.parametrize("parallelism,seed", [(2, 5), (3, 11)])
def test_random_kills_leave_delta_and_postgres_exact(make_env, tmp_path, postgres, tables, parallelism, seed):
    delta = tmp_path / "delta"

    def add_sinks(counts):
        counts.map(lambda kv: {"key": kv[0], "count": kv[1]}).sink_to(DeltaSink(str(delta)), name="delta")
        counts.sink_to(PostgresSink(postgres.dsn, tables["append"], columns=["key", "count"], batch_size=200),
                       name="pg-append")  # small batches: the next epoch is often open when a commit comes
        counts.sink_to(PostgresSink(postgres.dsn, tables["upsert"], mode="upsert", key=["key"],
                                    columns=["key", "count"]), name="pg-upsert")

    faults = random_faults(seed, parallelism, count=3, window=(0.3, 0.9))
    result = run(make_env, tmp_path, parallelism, faults, "sql-sinks", add_sinks)
    assert result.completed_checkpoints >= 3
    assert delta_rows(delta) == ROWS, differences(delta_rows(delta))
    assert pg_rows(postgres, tables["append"]) == ROWS, differences(pg_rows(postgres, tables["append"]))
    assert dict(pg_rows(postgres, tables["upsert"])) == {(k, n): 1 for k, n in FINAL.items()}
    assert open_prepared(postgres) == []  # nothing of the job left prepared


# ------------------------------------------------------------------ necessity


class UncheckedDeltaSink(DeltaSink):
    skip_committed = False


def delta_changes(path) -> collections.Counter:
    """The rows of every data file any version added: what a reader following the table's
    changes (Spark's Delta streaming source, DeltaSource(follow=True)) reads."""
    rows: collections.Counter = collections.Counter()
    for commit in sorted((path / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            add = json.loads(line).get("add")
            if add and add["dataChange"]:
                rows.update((r["key"], r["count"]) for r in pa.parquet.read_table(path / add["path"]).to_pylist())
    return rows


@pytest.mark.parametrize("sink_class", [DeltaSink, UncheckedDeltaSink], ids=["checked", "unchecked"])
def test_without_the_transaction_check_a_restore_commits_again(make_env, tmp_path, sink_class):
    """The kill comes after a worker acknowledged checkpoint 4 and before it completes: the job
    restores checkpoint 3, whose files were committed already, and commits them again unless
    the table's transaction version says they are there."""
    delta = tmp_path / "delta"

    def add_sinks(counts):
        counts.map(lambda kv: {"key": kv[0], "count": kv[1]}).sink_to(sink_class(str(delta)), name="delta")

    run(make_env, tmp_path, 2, [Fault("after_ack", worker=0, checkpoint=4)], "delta-necessity", add_sinks)
    changes = delta_changes(delta)
    if sink_class is DeltaSink:
        assert changes == ROWS and delta_rows(delta) == ROWS
    else:
        assert sum(changes.values()) > len(ROWS), differences(changes)  # files added twice
        assert set(changes) == set(ROWS)


def test_without_two_phase_commit_postgres_append_repeats_rows(make_env, tmp_path, postgres, tables, make_pg_table):
    """Both sinks see the same stream and the same kill, during checkpoint 3's upload: the job
    restores checkpoint 2, and the at-least-once sink, which committed the epoch before
    checkpoint 3 at its barrier, writes it again; the two-phase-commit sink rolled it back."""
    plain = make_pg_table("key text NOT NULL, count bigint NOT NULL", "plain")

    def add_sinks(counts):
        counts.sink_to(PostgresSink(postgres.dsn, plain, columns=["key", "count"], exactly_once=False), name="plain")
        counts.sink_to(PostgresSink(postgres.dsn, tables["append"], columns=["key", "count"]), name="two-phase")

    run(make_env, tmp_path, 2, [Fault("during_upload", worker=0, checkpoint=3)], "pg-necessity", add_sinks)
    repeated = pg_rows(postgres, plain)
    assert set(repeated) == set(ROWS) and sum(repeated.values()) > len(ROWS), differences(repeated)
    assert pg_rows(postgres, tables["append"]) == ROWS, differences(pg_rows(postgres, tables["append"]))
    assert open_prepared(postgres) == []


# ------------------------------------------------------------------ bounded sources, killed mid-way


def bounded_job(make_env, tmp_path, build_source, name):
    env = make_env(2)
    env.enable_checkpointing(0.2, storage=str(tmp_path / "checkpoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=2, delay=0.2))
    out = tmp_path / "out"
    build_source(env).map(lambda n: (n, n * n)).sink_to(
        ExactlyOnceFileSink(str(out), format=lambda r: f"{r[0]} {r[1]}"), name="file")
    result = env.execute(name, timeout=300, faults=[Fault("records", worker=1, after=3000)])
    assert len(result.restarts) == 1
    return collections.Counter(read_committed_lines(str(out)))


BOUNDED = 20_000
BOUNDED_ORACLE = collections.Counter(f"{n} {n * n}" for n in range(BOUNDED))


def slow(n):
    import time

    if n % 500 == 0:
        time.sleep(0.05)  # keeps the job running across several checkpoints
    return n


def test_a_bounded_job_from_a_dataframe_killed_mid_way_is_exact(make_env, spark, tmp_path):
    df = spark.range(BOUNDED).repartition(4)
    lines = bounded_job(make_env, tmp_path, lambda env: env.from_dataframe(
        df, snapshot_dir=str(tmp_path / "snapshots")).map(lambda row: slow(row.id)), "dataframe-kill")
    assert lines == BOUNDED_ORACLE


def test_a_bounded_job_from_a_delta_table_killed_mid_way_is_exact(make_env, tmp_path):
    table = str(tmp_path / "in")
    for part in range(4):
        write_deltalake(table, pa.table({"n": list(range(part * 5000, part * 5000 + 5000))}), mode="append")
    lines = bounded_job(make_env, tmp_path, lambda env: env.from_source(DeltaSource(table)).map(
        lambda r: slow(r["n"])), "delta-kill")
    assert lines == BOUNDED_ORACLE
