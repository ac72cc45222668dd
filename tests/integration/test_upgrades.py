"""Restoring a checkpoint into a changed job (issue 10, items 2 and 9), on real Spark.

Operator uids are stable under unrelated edits, so adding a ``map`` before a keyed ``sum``
keeps the sum's state; state that no operator of the new job claims fails the restore with a
PlanError naming it (before any Spark job), unless ``allow_non_restored_state=True``; a
damaged checkpoint fails at once, naming the file, without restarts.
"""

from __future__ import annotations

import logging
import os
import shutil
import time

import pytest

import epochal
from epochal.control import spark as spark_support
from epochal.control.restart import FixedDelayRestart
from epochal.state.storage import CheckpointError

COUNT = 20_000
KEYS = 4


def gen(i):
    return (f"k{i % KEYS}", 1)


@pytest.fixture(scope="module")
def old_checkpoints(spark, tmp_path_factory):
    """Job 1 of the issue: a keyed sum, cancelled after ~4 s once a checkpoint completed; its
    checkpoint directory (several retained checkpoints)."""
    root = tmp_path_factory.mktemp("upgrades")
    env = epochal.Environment(2, spark=spark, registration_timeout=60.0)
    env.enable_checkpointing(0.3, storage=str(root / "chk"), retained=3)
    env.from_generator(gen, count=COUNT, rate=2000).key_by(lambda kv: kv[0]).sum(lambda kv: kv[1]).discard()
    client = env.execute_async("upgrade-v1")
    client.wait_until_running()
    started = time.monotonic()
    deadline = started + 60
    while time.monotonic() < deadline and (
            time.monotonic() - started < 4 or
            sum(c["status"] == "completed" for c in client.checkpoint_stats()) < 2):
        time.sleep(0.05)
    client.cancel(timeout=60)
    assert client.status == epochal.JobStatus.CANCELLED, "job 1 ended before it was cancelled"
    completed = [c for c in client.checkpoint_stats() if c["status"] == "completed"]
    assert len(completed) >= 2, client.checkpoint_stats()
    return client.checkpoint_path


@pytest.fixture
def checkpoints(old_checkpoints, tmp_path):
    """A private copy of job 1's checkpoints (tests may damage it)."""
    copy = tmp_path / "copy"
    shutil.copytree(old_checkpoints, copy)
    return str(copy)


@pytest.fixture
def no_spark_job(monkeypatch):
    """Fail the test if a Spark job is submitted."""
    def refuse(*args, **kwargs):
        raise AssertionError("a Spark job was submitted")
    monkeypatch.setattr(spark_support, "SparkJobLauncher", refuse)


def last_per_key(records):
    last = {}
    for key, total in records:
        last[key] = total
    return last


def test_adding_a_map_before_a_keyed_sum_keeps_its_state(make_env, checkpoints):
    env = make_env(2)
    out = (env.from_generator(gen, count=COUNT, rate=2000).map(lambda kv: kv)
           .key_by(lambda kv: kv[0]).sum(lambda kv: kv[1]).collect())
    result = env.execute("upgrade-v2", timeout=120, restore_from=checkpoints)
    records = out.get()
    assert last_per_key(records) == {f"k{k}": COUNT // KEYS for k in range(KEYS)}
    assert max(total for _, total in records) == COUNT // KEYS
    assert min(total for _, total in records) > 1  # started from the restored sums, not from zero
    assert result.non_restored_state == []


def test_renamed_or_removed_stateful_operator_fails_the_restore_naming_its_state(make_env, checkpoints,
                                                                                 no_spark_job):
    renamed = make_env(2)
    (renamed.from_generator(gen, count=COUNT).key_by(lambda kv: kv[0]).sum(lambda kv: kv[1]).name("totals")
     .discard())
    with pytest.raises(epochal.PlanError) as info:
        renamed.execute("upgrade-renamed", restore_from=checkpoints)
    message = str(info.value)
    assert message.splitlines()[0].startswith(f"cannot restore checkpoint {checkpoints}/chk-")
    assert "uid 'sum-0': keyed state of operator 'Sum' (sum), 2 subtask(s)" in message
    assert "'totals' (uid 'sum:totals') restore nothing" in message and ".uid('sum-0')" in message
    assert "allow_non_restored_state=True" in message

    removed = make_env(2)
    removed.from_generator(gen, count=COUNT).map(lambda kv: kv).discard()
    with pytest.raises(epochal.PlanError, match=r"uid 'sum-0': keyed state of operator 'Sum' \(sum\)"):
        removed.execute("upgrade-removed", restore_from=checkpoints)


def test_allow_non_restored_state_skips_it_and_says_so(make_env, checkpoints, caplog):
    env = make_env(2)
    out = (env.from_generator(gen, count=COUNT).key_by(lambda kv: kv[0]).sum(lambda kv: kv[1]).name("totals")
           .collect())
    with caplog.at_level(logging.WARNING, logger="epochal"):
        result = env.execute("upgrade-allowed", timeout=120, restore_from=checkpoints,
                             allow_non_restored_state=True)
    assert [(s["uid"], s["name"], s["operation"]) for s in result.non_restored_state] == [("sum-0", "Sum", "sum")]
    assert "uid 'sum-0' (Sum, sum)" in caplog.text
    finals = last_per_key(out.get())
    # the source resumed at its restored position, the sum started from zero: a partial count
    assert set(finals) == {f"k{k}" for k in range(KEYS)}
    assert all(0 < total < COUNT // KEYS for total in finals.values())


def latest_checkpoint_dir(job_dir):
    """The newest *completed* checkpoint (the one a restore reads: it has ``_metadata``); job 1
    was cancelled, so a newer one may have been left half written."""
    ids = sorted(int(name.split("-")[1]) for name in os.listdir(job_dir)
                 if name.startswith("chk-") and os.path.exists(os.path.join(job_dir, name, "_metadata")))
    return os.path.join(job_dir, f"chk-{ids[-1]}"), ids


def test_a_corrupt_state_file_fails_at_once_naming_it_without_restarts(make_env, checkpoints):
    latest, ids = latest_checkpoint_dir(checkpoints)
    keyed = sorted(name for name in os.listdir(latest) if name.endswith(".keyed"))
    assert keyed
    victim = os.path.join(latest, keyed[0])
    data = bytearray(open(victim, "rb").read())
    data[len(data) // 2] ^= 0xFF  # same size: only the workers' checksums can tell
    open(victim, "wb").write(bytes(data))

    env = make_env(2)
    env.set_restart_strategy(FixedDelayRestart(attempts=3, delay=0.5))
    env.from_generator(gen, count=COUNT).key_by(lambda kv: kv[0]).sum(lambda kv: kv[1]).discard()
    started = time.monotonic()
    client = env.execute_async("upgrade-corrupt", restore_from=checkpoints)
    with pytest.raises(epochal.JobFailedError) as info:
        client.result(timeout=120)
    assert time.monotonic() - started < 30
    assert client.restarts() == [] and client.attempt == 0
    assert info.value.category == "restore"
    lines = str(info.value).splitlines()
    assert lines[0].startswith(f"job 'upgrade-corrupt' failed: checkpoint state file {victim} is corrupt")
    earlier = ", ".join(f"restore_from='{os.path.join(checkpoints, f'chk-{i}')}'" for i in reversed(ids[:-1]))
    assert lines[1] == f"Restore from an earlier checkpoint instead (newest first): {earlier}"
    assert "not restarted" in lines[2]


def test_a_truncated_state_file_is_caught_on_the_driver(make_env, checkpoints, no_spark_job):
    latest, _ = latest_checkpoint_dir(checkpoints)
    victim = os.path.join(latest, sorted(n for n in os.listdir(latest) if n.endswith(".keyed"))[0])
    with open(victim, "r+b") as out:
        out.truncate(os.path.getsize(victim) // 2)
    env = make_env(2)
    env.from_generator(gen, count=COUNT).key_by(lambda kv: kv[0]).sum(lambda kv: kv[1]).discard()
    with pytest.raises(CheckpointError) as info:
        env.execute("upgrade-truncated", restore_from=checkpoints)
    assert str(info.value).startswith(f"checkpoint state file {victim} is damaged")
    assert "Restore from an earlier checkpoint instead" in str(info.value)
