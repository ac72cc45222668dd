"""PostgresSink's writers against a real PostgreSQL server (the session's ``postgres`` fixture):
two-phase commit per checkpoint, what a restored subtask commits and rolls back, upserts, and one
readable error for each bad input. No Spark here: the job-level tests are in
test_sql_connectors_jobs.py and tests/chaos/test_sql_sinks.py."""

from __future__ import annotations

import pytest

from epochal.connectors.base import AT_LEAST_ONCE, EXACTLY_ONCE, SinkContext
from epochal.connectors.postgres import PostgresSink
from epochal.errors import PlanError, SinkError


@pytest.fixture
def table(make_pg_table):
    """A fresh table ``items(id int primary key, name text not null, n int check (n >= 0))``."""
    return make_pg_table("id int PRIMARY KEY, name text NOT NULL, n int CHECK (n >= 0)", "items")


def context(subtask=0, parallelism=1, attempt=0, restored=None, job_id="run1"):
    return SinkContext("pg", subtask, parallelism, lambda payload: None, attempt=attempt, checkpointing=True,
                       job_name="pg job", job_id=job_id, operator_uid="sink-7", restored_checkpoint=restored)


def query(postgres, sql):
    with postgres.connect() as conn:
        return conn.execute(sql).fetchall()


def prepared(postgres):
    return sorted(r[0] for r in query(postgres, "SELECT gid FROM pg_prepared_xacts"))


def test_append_is_invisible_until_the_checkpoint_completes_and_a_repeated_commit_is_harmless(postgres, table):
    sink = PostgresSink(postgres.dsn, table)
    assert sink.guarantee == EXACTLY_ONCE
    writer = sink.create_writer(context())
    writer.write_batch([{"id": i, "name": f"n{i}", "n": i} for i in range(3)])
    committable = writer.pre_commit(1)
    gid = committable[0]
    assert gid == "epochal:pg-job:sink-7|run1|a0|s0|c1"  # names sink, job, attempt, subtask, checkpoint
    assert query(postgres, f"SELECT count(*) FROM {table}") == [(0,)] and prepared(postgres) == [gid]
    writer.commit([committable])
    assert query(postgres, f"SELECT count(*) FROM {table}") == [(3,)] and prepared(postgres) == []
    restored = sink.create_writer(context(attempt=1, restored=1))
    restored.commit([committable])  # after a restore: committed before, confirmed by pg_xact_status
    assert query(postgres, f"SELECT count(*) FROM {table}") == [(3,)]
    writer.close()
    restored.close()


def test_the_next_epoch_may_be_open_when_the_checkpoint_completes(postgres, table):
    """Records after the barrier of checkpoint 1 open the next epoch's transaction before 1
    completes: COMMIT PREPARED runs on a connection of its own (it cannot run inside a
    transaction block)."""
    writer = PostgresSink(postgres.dsn, table, batch_size=1).create_writer(context())
    writer.write_batch([{"id": 1, "name": "a", "n": 1}])
    committable = writer.pre_commit(1)
    writer.write_batch([{"id": 2, "name": "b", "n": 2}])  # batch_size 1: copied at once, in a new transaction
    writer.commit([committable])
    assert query(postgres, f"SELECT id FROM {table}") == [(1,)]
    writer.commit([writer.pre_commit(2)])
    assert query(postgres, f"SELECT id FROM {table} ORDER BY id") == [(1,), (2,)]
    writer.close()


def test_a_restored_subtask_rolls_back_what_no_restore_commits_and_commits_the_restored(postgres, table):
    sink = PostgresSink(postgres.dsn, table)
    old = [sink.create_writer(context(s, 3)) for s in range(3)]  # parallelism 3 before the restore
    pending = {}
    for checkpoint in (1, 2):
        for s, writer in enumerate(old):
            writer.write_batch([{"id": checkpoint * 10 + s, "name": "x", "n": 1}])
            pending[(s, checkpoint)] = writer.pre_commit(checkpoint)
    for writer in old:
        writer.conn.close()  # the workers die with everything prepared
        writer.control.close()
    # restored from checkpoint 1 at parallelism 2: subtask 0 stands for old 0 and 2, subtask 1 for old 1
    new = [sink.create_writer(context(s, 2, attempt=1, restored=1)) for s in range(2)]
    assert prepared(postgres) == sorted(pending[(s, 1)][0] for s in range(3))  # checkpoint 2's rolled back
    new[0].commit([pending[(0, 1)], pending[(2, 1)]])  # the committables the split state gives each
    new[1].commit([pending[(1, 1)]])
    assert query(postgres, f"SELECT id FROM {table} ORDER BY id") == [(10,), (11,), (12,)]
    assert prepared(postgres) == []
    for writer in new:
        writer.close()


def test_a_fresh_run_rolls_back_an_old_runs_prepared_transactions_and_a_lost_commit_is_an_error(postgres, table):
    sink = PostgresSink(postgres.dsn, table)
    writer = sink.create_writer(context(job_id="old"))
    writer.write_batch([{"id": 1, "name": "x", "n": 1}])
    committable = writer.pre_commit(5)
    writer.conn.close()
    writer.control.close()
    fresh = sink.create_writer(context(job_id="new"))  # not restored: nothing of this sink is due
    assert prepared(postgres) == []
    with pytest.raises(SinkError, match="was rolled back by someone else"):
        fresh.commit([committable])
    fresh.close()


def test_a_constraint_violation_names_the_record_and_the_constraint_and_commits_nothing(postgres, table):
    writer = PostgresSink(postgres.dsn, table).create_writer(context())
    writer.write_batch([{"id": 1, "name": "ok", "n": 1}, {"id": 2, "name": "bad", "n": -5}])
    with pytest.raises(SinkError, match=r"constraint '\w+_n_check'.*record \{'id': 2, 'name': 'bad', 'n': -5\}"):
        writer.pre_commit(1)
    writer.close()
    assert query(postgres, f"SELECT count(*) FROM {table}") == [(0,)] and prepared(postgres) == []


def test_upsert_keeps_each_keys_last_row_and_repeating_it_changes_nothing(postgres, table):
    sink = PostgresSink(postgres.dsn, table, mode="upsert", key=["id"], batch_size=3)
    assert sink.guarantee == AT_LEAST_ONCE  # idempotent: the table ends exact after replays
    writer = sink.create_writer(context())
    batch = [{"id": i % 4, "name": f"v{i}", "n": i} for i in range(10)]
    for _ in range(2):  # a replay writes the same rows again
        writer.write_batch(batch)
        writer.flush()
    assert query(postgres, f"SELECT id, name, n FROM {table} ORDER BY id") == [
        (0, "v8", 8), (1, "v9", 9), (2, "v6", 6), (3, "v7", 7)]
    writer.write_batch([{"id": 5, "name": None, "n": 1}])
    with pytest.raises(SinkError, match="not-null constraint|null value in column \"name\""):
        writer.flush()
    writer.close()


def test_at_least_once_append_commits_at_every_barrier(postgres, table):
    sink = PostgresSink(postgres.dsn, table, exactly_once=False, columns=["id", "name", "n"])
    assert sink.guarantee == AT_LEAST_ONCE
    writer = sink.create_writer(context())
    writer.write_batch([(1, "a", 1), (2, "b", 2)])
    writer.flush()
    assert query(postgres, f"SELECT count(*) FROM {table}") == [(2,)]
    writer.close()


def test_bad_targets_fail_at_submit_with_one_readable_error(postgres, table, tmp_path):
    with pytest.raises(PlanError, match="table nope does not exist"):
        PostgresSink(postgres.dsn, "nope")
    with pytest.raises(PlanError, match="column 'zz' does not exist in table"):
        PostgresSink(postgres.dsn, table, columns=["id", "zz"])
    with pytest.raises(PlanError, match="upsert needs a primary key or unique constraint"):
        PostgresSink(postgres.dsn, table, mode="upsert", key=["name"])
    with pytest.raises(PlanError, match="cannot connect to PostgreSQL"):
        PostgresSink("host=127.0.0.1 port=1 dbname=postgres user=postgres", table, connect_timeout=2)
    writer = PostgresSink(postgres.dsn, table).create_writer(context())
    with pytest.raises(SinkError, match="column 'extra' does not exist in table"):
        writer.write_batch([{"id": 1, "extra": 2}])
    writer.close()


def test_two_phase_commit_needs_prepared_transactions_on_the_server(tmp_path):
    from tests.postgres_server import PostgresServer

    server = PostgresServer(tmp_path / "pg0", max_prepared_transactions=0).start()
    try:
        with server.connect() as conn:
            conn.execute("CREATE TABLE t (id int)")
        with pytest.raises(PlanError, match="max_prepared_transactions = 0"):
            PostgresSink(server.dsn, "t")
        PostgresSink(server.dsn, "t", exactly_once=False)  # at-least-once needs no prepared transactions
    finally:
        server.destroy()
