"""Savepoints under crashes (papers/001 §3.3.1): a worker is SIGKILLed while a savepoint is being
taken, at chosen points of the protocol (its upload, after acknowledging it, before committing a
stop savepoint) and at a seeded random moment. The savepoint fails cleanly or completes, the job
recovers, a later savepoint completes, and the union of the committed output of the killed job
and of the job restored from its stop savepoint is each key's running sums, each exactly once."""

from __future__ import annotations

import random
import threading
import time

import pytest

import epochal
from epochal.control.restart import FixedDelayRestart
from epochal.testing import Fault, kill_worker
from tests.integration.test_savepoints import committed_sums, keyed_job

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

#: one periodic checkpoint (1, as the job starts) and no other within a test: the savepoint is checkpoint 2
NEVER = 600.0
SAVEPOINT = 2


def run_until_records(client, at_least: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(m.get("source_records", 0) for m in client.metrics().values()) >= at_least:
            return
        assert not client.status.is_terminal, client.status
        time.sleep(0.05)
    raise AssertionError(f"fewer than {at_least} records processed after {timeout} s")


def until_taken(take, client, timeout: float = 120.0) -> str:
    """``take()`` (a savepoint call) again until it completes; refusals while the job restarts and
    savepoints failed by a crash are what the issue allows, anything else fails the test."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return take()
        except epochal.SavepointError as error:
            text = str(error)
            allowed = ("restarting", "deploying", "starting", "failed", "in progress")
            assert any(reason in text for reason in allowed), text
            assert not client.status.is_terminal, f"the job ended after a failed savepoint: {text}"
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def restore_and_drain(make_env, tmp_path, savepoint: str, out) -> None:
    """The second run: from the stop savepoint at parallelism 3 on RocksDB, drained at the end."""
    env = make_env(3)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints-2"))
    env.set_state_backend("rocksdb", local_dir=str(tmp_path / "rocksdb-2"))
    keyed_job(env, out)
    client = env.execute_async("savepoint-chaos-2", restore_from=savepoint)
    run_until_records(client, 1000)
    client.stop_with_savepoint(str(tmp_path / "savepoints"), drain=True, timeout=120)


def assert_exactly_once(out) -> None:
    sums = committed_sums(out)
    assert sums, "nothing committed"
    for key, totals in sums.items():  # each key's running sums, each once, none missing
        assert sorted(totals) == list(range(1, len(totals) + 1)), (key, sorted(totals)[:20])


def start(make_env, tmp_path, out, interval: float, faults=()):
    env = make_env(2)
    env.enable_checkpointing(interval, storage=str(tmp_path / "checkpoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=3, delay=0.2))
    keyed_job(env, out, rate=3000)
    client = env.execute_async("savepoint-chaos", faults=list(faults))
    run_until_records(client, 1500)
    return client


def test_a_worker_killed_while_writing_a_savepoint_fails_it_cleanly_and_a_later_one_completes(make_env, tmp_path):
    out, savepoints = tmp_path / "out", str(tmp_path / "savepoints")
    client = start(make_env, tmp_path, out, NEVER, [Fault("during_upload", worker=1, checkpoint=SAVEPOINT)])
    with pytest.raises(epochal.SavepointError, match="failed"):
        client.trigger_savepoint(savepoints, timeout=90)
    taken = until_taken(lambda: client.trigger_savepoint(savepoints, timeout=90), client)
    assert client.attempt == 1 and epochal.savepoint_info(taken)["type"] == "savepoint"
    stopped = until_taken(lambda: client.stop_with_savepoint(savepoints, timeout=90), client)
    restore_and_drain(make_env, tmp_path, stopped, out)
    assert_exactly_once(out)


@pytest.mark.parametrize("point", ["after_ack", "before_commit"])
def test_a_worker_killed_at_a_stop_savepoint_loses_and_repeats_nothing(make_env, tmp_path, point):
    """Killed after acknowledging the stop savepoint, the savepoint may complete or fail; killed
    before committing it, it completed: the job is not restarted from an older checkpoint (that
    would repeat what the savepoint's commit publishes) but fails, saying to restore from it."""
    out, savepoints = tmp_path / "out", str(tmp_path / "savepoints")
    client = start(make_env, tmp_path, out, NEVER, [Fault(point, worker=1, checkpoint=SAVEPOINT)])
    stopped = until_taken(lambda: client.stop_with_savepoint(savepoints, timeout=90), client)
    if client.status is epochal.JobStatus.FAILED:  # the savepoint completed, a commit did not
        with pytest.raises(epochal.JobFailedError, match=f"restore from {stopped}"):
            client.result(timeout=10)
    else:
        assert client.status is epochal.JobStatus.FINISHED, client.status
    if point == "before_commit":
        assert client.status is epochal.JobStatus.FAILED
    restore_and_drain(make_env, tmp_path, stopped, out)
    assert_exactly_once(out)


def test_a_worker_killed_at_a_random_moment_of_a_stop_savepoint(make_env, tmp_path):
    out, savepoints = tmp_path / "out", str(tmp_path / "savepoints")
    client = start(make_env, tmp_path, out, 0.3)
    rng = random.Random(20261126)
    results: list[object] = []

    def stop() -> None:
        try:
            results.append(client.stop_with_savepoint(savepoints, timeout=90))
        except epochal.EpochalError as error:
            results.append(error)

    asking = threading.Thread(target=stop)
    asking.start()
    time.sleep(rng.uniform(0.0, 0.3))
    try:
        kill_worker(client, rng.randrange(2))
    except ValueError:
        pass  # the job stopped first: nothing to kill
    asking.join(120)
    [first] = results
    if isinstance(first, str):
        stopped = first
    else:  # the savepoint failed with the crash: the job recovers and stops at a later one
        assert isinstance(first, epochal.SavepointError), first
        stopped = until_taken(lambda: client.stop_with_savepoint(savepoints, timeout=90), client)
    restore_and_drain(make_env, tmp_path, stopped, out)
    assert_exactly_once(out)


def test_without_the_restart_refusal_a_stop_savepoint_killed_before_its_commit_repeats_output(
        make_env, tmp_path, monkeypatch):
    """The refusal is necessary: restarted from checkpoint 1 instead, the job writes again what the
    stop savepoint's commit (done by the surviving worker) already published."""
    from epochal.dataflow.coordination import DataflowCoordination
    from tests.integration.test_savepoints import repeated

    monkeypatch.setattr(DataflowCoordination, "restart_refusal", lambda self: None)
    out, savepoints = tmp_path / "out", str(tmp_path / "savepoints")
    client = start(make_env, tmp_path, out, NEVER, [Fault("before_commit", worker=1, checkpoint=SAVEPOINT)])
    with pytest.raises(epochal.JobTimeoutError, match="did not stop"):  # it restarted instead
        client.stop_with_savepoint(savepoints, timeout=20)
    run_until_records(client, 3000)  # the restarted attempt, from checkpoint 1
    until_taken(lambda: client.stop_with_savepoint(savepoints, timeout=90), client)  # publishes it
    assert repeated(committed_sums(out)), "the restarted job repeated nothing"


@pytest.mark.parametrize("backend,fmt", [("rocksdb", "native"), ("heap-incremental", "canonical")])
def test_a_job_restored_from_a_savepoint_needs_none_of_its_files_after_its_first_checkpoint(
        make_env, tmp_path, backend, fmt):
    """The first checkpoint after a restore references none of the savepoint's files: the savepoint
    is disposed of, a worker is killed, and the job recovers from its own checkpoint, exactly."""
    out, savepoints = tmp_path / "out", str(tmp_path / "savepoints")
    options = {"rocksdb": {"kind": "rocksdb", "local_dir": str(tmp_path / "rocksdb")},
               "heap-incremental": {"incremental": True}}[backend]
    env = make_env(2)
    env.set_state_backend(**options)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
    keyed_job(env, out, rate=3000)
    client = env.execute_async("savepoint-files-1")
    run_until_records(client, 1500)
    taken = client.stop_with_savepoint(savepoints, format=fmt, timeout=90)
    assert epochal.savepoint_info(taken)["format"] == fmt

    env = make_env(2)
    env.set_state_backend(**options)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints-2"))
    env.set_restart_strategy(FixedDelayRestart(attempts=1, delay=0.2))
    keyed_job(env, out, rate=3000)
    client = env.execute_async("savepoint-files-2", restore_from=taken)
    deadline = time.monotonic() + 60
    while not any(c["status"] == "completed" and "savepoint" not in c for c in client.checkpoint_stats()):
        assert time.monotonic() < deadline, "no checkpoint completed after the restore"
        time.sleep(0.1)
    epochal.dispose_savepoint(taken)
    kill_worker(client, 1)
    deadline = time.monotonic() + 60
    while not client.restarts():  # (the metrics of the killed attempt may already count 1000 records)
        assert time.monotonic() < deadline, "the killed worker caused no restart"
        time.sleep(0.05)
    run_until_records(client, 1000)  # the new attempt, restored from the job's own checkpoint
    assert len(client.restarts()) == 1
    client.stop_with_savepoint(savepoints, timeout=90)
    assert_exactly_once(out)
