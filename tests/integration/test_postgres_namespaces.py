"""One running job per PostgreSQL state namespace, and nothing left prepared when a job ends
(state/postgres/claims.py), against a real PostgreSQL server: the namespace claim (refused with the
holder named, all or none, released, taken over by the same job's new leader, taken again after
the server ended its connection); the end-of-job resolution (commits what a completed checkpoint
left, rolls back the rest, fences a worker still running); and on real Spark workers: a second
job in a running job's namespace is refused and the first keeps its state exactly, and a job
cancelled while an epoch is prepared leaves nothing prepared."""

from __future__ import annotations

import collections
import time

import pytest

from epochal.connectors.files import read_committed_lines
from epochal.errors import StateBackendError, StateNamespaceInUseError
from epochal.state.postgres import claims as postgres_claims
from epochal.state.postgres.claims import NamespaceClaim, resolve_left
from epochal.state.postgres.schema import ensure_schema
from tests.chaos.test_checkpoint_recovery import build, expected_lines
from tests.integration.test_postgres_state_backend import KEYS, MAXP, add, checkpoint, counts, make_backend, prepared

pytestmark = pytest.mark.integration
__all__ = ["make_backend"]  # the fixture, shared with the backend's tests
TABLE = "epochal_state"


def _claim(postgres, namespace: str, job_id: str, takeover: bool = False, table: str = TABLE) -> NamespaceClaim:
    return NamespaceClaim(postgres.dsn, [(table, namespace)], job_id, f"job-{job_id}", takeover)


def _holds(postgres, namespace: str, table: str = TABLE) -> bool:
    """Whether someone holds ``namespace``'s claim: a try from another session fails."""
    with postgres.connect() as conn:
        key = postgres_claims.lock_key(table, namespace)
        taken = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
        if taken:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        return not taken


def test_a_claimed_namespace_refuses_another_job_naming_the_holder_until_it_is_released(postgres):
    first = _claim(postgres, "claims-a", "job1")
    first.acquire()
    try:
        with pytest.raises(StateNamespaceInUseError, match=r"'claims-a'.*job 'job-job1' \(id job1") as refused:
            _claim(postgres, "claims-a", "job2").acquire()
        assert refused.value.holder == "job1" and refused.value.namespace == "claims-a"
        assert "Nothing was started" in str(refused.value)
        other = _claim(postgres, "claims-b", "job2")  # another namespace, or another table: free
        other.acquire()
        other.release()
        elsewhere = _claim(postgres, "claims-a", "job2", table="other_state")
        elsewhere.acquire()
        elsewhere.release()
    finally:
        first.release()
    assert not _holds(postgres, "claims-a")
    second = _claim(postgres, "claims-a", "job2")
    second.acquire()
    assert _holds(postgres, "claims-a")
    second.release()
    second.release()  # idempotent


def test_a_claim_takes_every_namespace_or_none(postgres):
    held = _claim(postgres, "claims-d", "job1")
    held.acquire()
    try:
        both = NamespaceClaim(postgres.dsn, [(TABLE, "claims-c"), (TABLE, "claims-d")], "job2", "two")
        with pytest.raises(StateNamespaceInUseError):
            both.acquire()
        assert not _holds(postgres, "claims-c")
    finally:
        held.release()


def test_a_new_leader_of_the_same_job_takes_the_claim_over_and_no_other_job_does(postgres):
    deposed = _claim(postgres, "claims-e", "job1")
    deposed.acquire()
    try:
        with pytest.raises(StateNamespaceInUseError):
            _claim(postgres, "claims-e", "job2", takeover=True).acquire()
        assert deposed.held()
        leader = _claim(postgres, "claims-e", "job1", takeover=True)
        leader.acquire()  # ends the deposed leader's claim connection
        assert leader.held() and not deposed.held()  # (the deposed one resolves nothing at its end)
        with pytest.raises(StateNamespaceInUseError, match="id job1"):
            _claim(postgres, "claims-e", "job3").acquire()
        leader.release()
    finally:
        deposed.release()


def test_a_claim_is_taken_again_after_the_server_ended_its_connection(postgres, monkeypatch):
    monkeypatch.setattr(postgres_claims, "CHECK_S", 0.1)
    claim = _claim(postgres, "claims-f", "job1")
    claim.acquire()
    claim.hold()
    try:
        with postgres.connect() as conn:
            ended = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                                 (claim.application_name,)).fetchall()
        assert ended == [(True,)]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with postgres.connect() as conn:
                names = [r[0] for r in conn.execute("SELECT application_name FROM pg_stat_activity")]
            if claim.application_name in names and _holds(postgres, "claims-f"):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the claim was not taken again")
    finally:
        claim.release()
    assert not _holds(postgres, "claims-f")


def test_the_end_of_a_job_commits_what_a_completed_checkpoint_left_and_rolls_back_the_rest(make_backend, postgres):
    worker = make_backend()
    namespace = worker.namespace
    add(worker, KEYS)
    checkpoint([worker], 1)
    worker.checkpoint_completed(1)
    add(worker, KEYS)
    source2 = checkpoint([worker], 2)  # completed at the JobMaster; the job ended before the worker committed
    worker.dispose()
    left = prepared(postgres, worker)
    assert len(left) == 1
    assert resolve_left(postgres.dsn, [(TABLE, namespace, "op")], MAXP, 2) == left
    assert prepared(postgres, worker) == []
    restored = make_backend(restore=source2)
    assert restored.started["committed"] == [] and restored.started["rolled_back"] == []
    assert set(counts(restored, KEYS).values()) == {2}
    add(restored, KEYS)
    checkpoint([restored], 3)  # in flight when the job was cancelled: never completes
    left = prepared(postgres, restored)
    assert len(left) == 1
    assert resolve_left(postgres.dsn, [(TABLE, namespace, "op")], MAXP, 2) == left
    assert prepared(postgres, restored) == []
    # the worker, still running (a zombie), is fenced (its connections ended): its next epoch is refused
    add(restored, KEYS)
    with pytest.raises(StateBackendError):
        restored.begin_snapshot(4).upload(None, 4, "x")
    assert prepared(postgres, restored) == []
    restored.dispose()
    again = make_backend(restore=source2)
    assert set(counts(again, KEYS).values()) == {2}
    # an operator that never ran in the namespace, and a job without any checkpoint: nothing to do
    assert resolve_left(postgres.dsn, [(TABLE, namespace, "never-ran")], MAXP, None) == []


def _job(make_env, tmp_path, postgres, step: int, rate: float | None = 8_000, slow: bool = False, out: str = "out"):
    env = make_env(2)
    env.set_state_backend("postgres", dsn=postgres.dsn)
    env.enable_checkpointing(0.2, storage=str(tmp_path / f"chk{step}"))
    if slow:  # barriers wait behind a slow operator downstream of the keyed one: epochs stay prepared
        (env.from_generator(lambda i: f"k{i % 50}", count=None, rate=400).key_by(lambda k: k).count()
         .rebalance().map(lambda kv: time.sleep(0.01) or kv).discard())
    else:
        build(env, tmp_path / out, rate=rate)
    return env


def _open_prepared(postgres) -> list[str]:
    with postgres.connect() as conn:
        return [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'epochal-state-%'")]


@pytest.mark.slow
def test_a_second_job_in_a_running_jobs_namespace_is_refused_and_the_first_keeps_its_state(
        make_env, tmp_path, postgres):
    postgres.roll_back_prepared(TABLE)
    ensure_schema(postgres.dsn, TABLE, False)
    first = _job(make_env, tmp_path, postgres, 0).execute_async("pg-twice")
    try:
        first.wait_until_running()
        deadline = time.monotonic() + 60
        while sum(c["status"] == "completed" for c in first.checkpoint_stats()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        second = _job(make_env, tmp_path, postgres, 1, out="out-second")  # (another sink directory)
        started = time.monotonic()
        with pytest.raises(StateNamespaceInUseError, match=f"'pg-twice'.*id {first.job_id}"):
            second.execute_async("pg-twice")  # the same name: the same namespace
        assert time.monotonic() - started < 30
        done = sum(c["status"] == "completed" for c in first.checkpoint_stats())
        while sum(c["status"] == "completed" for c in first.checkpoint_stats()) < done + 2:
            assert time.monotonic() < deadline + 60 and first.status.value == "running", first.status
            time.sleep(0.05)
    finally:
        first.cancel(timeout=120)
    assert _open_prepared(postgres) == []
    # the first job's state is intact: a job restored from its latest checkpoint ends with every count once
    env = _job(make_env, tmp_path, postgres, 2, rate=None)
    env.execute("pg-twice", timeout=200, restore_from=first.checkpoint_path)
    assert collections.Counter(read_committed_lines(str(tmp_path / "out"))) == expected_lines()
    assert _open_prepared(postgres) == []


@pytest.mark.slow
def test_a_job_cancelled_while_an_epoch_is_prepared_leaves_nothing_prepared(make_env, tmp_path, postgres):
    """The keyed operator pre-commits its epoch at the barrier; the barrier then waits behind the
    records queued for a slow operator downstream, so the checkpoint stays in flight for a while:
    the job is cancelled in that window (an epoch of a checkpoint not completed is prepared). It
    was left prepared before the driver resolved what its workers left (shown with that off)."""
    postgres.roll_back_prepared(TABLE)
    ensure_schema(postgres.dsn, TABLE, False)
    job = _job(make_env, tmp_path, postgres, 0, slow=True).execute_async("pg-cancel")
    try:
        job.wait_until_running()
        deadline = time.monotonic() + 60
        while True:
            completed = {c["checkpoint_id"] for c in job.checkpoint_stats() if c["status"] == "completed"}
            in_flight = [g for g in _open_prepared(postgres)
                         if int(g.rsplit(":c", 1)[1].split(":")[0]) not in completed]
            if in_flight:
                break
            assert time.monotonic() < deadline, "no epoch of a checkpoint in flight was ever seen prepared"
            time.sleep(0.02)
    finally:
        job.cancel(timeout=120)
    assert _open_prepared(postgres) == []
