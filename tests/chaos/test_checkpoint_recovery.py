"""Checkpoint failures and restores: failed uploads are aborted and the job goes on; a user can
restart from a checkpoint (also with another parallelism); missing or corrupt checkpoints end
in a clear error that names the file."""

from __future__ import annotations

import collections
import os
import time

import pytest

import epochal
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from epochal.control.restart import NoRestart
from epochal.state.storage import CheckpointError, CheckpointStorage, state_files

RECORDS = 60_000


def key_of(i: int) -> str:
    return f"k{i % 11}"


def expected_lines(records: int = RECORDS) -> collections.Counter:
    seen: collections.Counter = collections.Counter()
    lines: collections.Counter = collections.Counter()
    for i in range(records):
        seen[key_of(i)] += 1
        lines[f"{key_of(i)} {seen[key_of(i)]}"] += 1
    return lines


def build(env, out, rate=20_000, records=RECORDS):
    (env.from_generator(key_of, count=records, rate=rate).uid("numbers")
     .key_by(lambda k: k).count().uid("counts")
     .sink_to(ExactlyOnceFileSink(str(out), format=lambda kv: f"{kv[0]} {kv[1]}"), name="sink"))


def test_failed_upload_is_aborted_and_the_next_checkpoint_completes(make_env, tmp_path):
    env = make_env(2)
    env.enable_checkpointing(0.2, storage=str(tmp_path / "chk"), tolerable_failures=2)
    out = tmp_path / "out"
    build(env, out)
    client = env.execute_async("upload-failure")
    client.wait_until_running()
    root = client.checkpoint_path
    os.makedirs(root, exist_ok=True)
    deadline = time.monotonic() + 30
    while not client.checkpoint_stats() and time.monotonic() < deadline:
        time.sleep(0.02)
    doomed = client.kind.coordinator.next_id + 1
    with open(os.path.join(root, f"chk-{doomed}"), "w") as blocker:  # a file where the directory must go
        blocker.write("not a directory")
    result = client.result(timeout=200)
    statuses = {c["checkpoint_id"]: c for c in result.checkpoints}
    assert statuses[doomed]["status"] == "aborted"
    assert "declined" in statuses[doomed]["reason"]
    assert any(c["status"] == "completed" and c["checkpoint_id"] > doomed for c in result.checkpoints)
    assert not result.restarts  # the job kept running
    assert collections.Counter(read_committed_lines(str(out))) == expected_lines()


def test_restart_from_a_user_given_checkpoint_with_another_parallelism(make_env, tmp_path):
    out = tmp_path / "out"
    first = make_env(2)
    first.enable_checkpointing(0.2, storage=str(tmp_path / "chk"), retained=3)
    build(first, out, rate=10_000)
    client = first.execute_async("rescale")
    client.wait_until_running()
    deadline = time.monotonic() + 60
    while sum(c["status"] == "completed" for c in client.checkpoint_stats()) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    client.cancel(timeout=60)
    job_dir = client.checkpoint_path

    second = make_env(3)  # rescaled: key groups and split positions are redistributed
    second.enable_checkpointing(0.2, storage=str(tmp_path / "chk2"))
    build(second, out, rate=None)
    result = second.execute("rescale", timeout=200, restore_from=job_dir)
    assert result.completed_checkpoints >= 1
    assert collections.Counter(read_committed_lines(str(out))) == expected_lines()


def test_restore_from_a_missing_checkpoint_fails_clearly(make_env, tmp_path):
    env = make_env(2)
    build(env, tmp_path / "out")
    with pytest.raises(CheckpointError, match=r"chk-9/_metadata does not exist"):
        env.execute("missing", restore_from=str(tmp_path / "nowhere" / "chk-9"))
    with pytest.raises(CheckpointError, match="no completed checkpoint"):
        env.execute("missing", restore_from=str(tmp_path / "nowhere"))


@pytest.mark.keyed_state_files
def test_corrupt_state_file_fails_naming_the_file(make_env, tmp_path):
    env = make_env(2)
    env.enable_checkpointing(0.2, storage=str(tmp_path / "chk"), retained=1)
    build(env, tmp_path / "out", rate=None, records=20_000)
    result = env.execute("corrupt", timeout=200)
    checkpoint_id = result.checkpoints[-1]["checkpoint_id"]
    checkpoint_dir = os.path.join(result.checkpoint_path, f"chk-{checkpoint_id}")
    # the keyed state's files, wherever the backend keeps them (the checkpoint's own directory, or
    # shared/ for incremental chains and RocksDB SST files)
    storage = CheckpointStorage(result.checkpoint_path)
    handles = storage.read_metadata(checkpoint_id)["operators"]["counts"]["subtasks"].values()
    files = [f for h in handles for f in state_files(h["keyed"]) if f["size"] > 64]
    assert files
    victim = storage.file_path(checkpoint_id, files[0])
    data = bytearray(open(victim, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(victim, "wb").write(bytes(data))

    again = make_env(2)
    again.set_restart_strategy(NoRestart())
    build(again, tmp_path / "out2", rate=None, records=20_000)
    with pytest.raises(epochal.JobFailedError, match=rf"{os.path.basename(victim)} is corrupt"):
        again.execute("corrupt-restore", timeout=200, restore_from=checkpoint_dir)
