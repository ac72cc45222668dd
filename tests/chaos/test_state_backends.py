"""State backends on real Spark workers (docs/state_backends.md): a forked snapshot's child killed
before it reports makes the checkpoint decline and a later one complete, with no restart; a job
rescaled 2 -> 3 -> 1 from incremental checkpoints (heap chains, RocksDB SST files), with old
checkpoints deleted by retention on the way, ends with every count exactly once."""

from __future__ import annotations

import collections
import time

import pytest

from epochal.connectors.files import read_committed_lines
from epochal.testing import Fault
from tests.chaos.test_checkpoint_recovery import build, expected_lines

pytestmark = [pytest.mark.slow, pytest.mark.chaos]

BACKENDS = {
    "heap": {},
    "heap-incremental": {"incremental": True, "full_every": 3},
    "rocksdb": {"kind": "rocksdb"},
}


@pytest.mark.parametrize("backend", ["heap", "heap-incremental"])
def test_a_snapshot_child_killed_before_it_reports_declines_and_a_later_checkpoint_completes(
        make_env, tmp_path, backend):
    env = make_env(2)
    env.set_state_backend(**BACKENDS[backend])
    env.enable_checkpointing(0.2, storage=str(tmp_path / "chk"), tolerable_failures=2)
    out = tmp_path / "out"
    build(env, out)
    result = env.execute("child-killed", timeout=200, faults=[Fault("snapshot_child", worker=1, checkpoint=3)])
    statuses = {c["checkpoint_id"]: c for c in result.checkpoints}
    assert statuses[3]["status"] == "aborted" and "SIGKILL" in statuses[3]["reason"], statuses[3]
    assert any(c["status"] == "completed" and c["checkpoint_id"] > 3 for c in result.checkpoints)
    assert not result.restarts  # the worker never stopped
    assert collections.Counter(read_committed_lines(str(out))) == expected_lines()


def _run_until_checkpoints(env, name: str, count: int, restore_from: str | None = None):
    client = env.execute_async(name, restore_from=restore_from)
    client.wait_until_running()
    deadline = time.monotonic() + 90
    while sum(c["status"] == "completed" for c in client.checkpoint_stats()) < count \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    client.cancel(timeout=60)
    return client.checkpoint_path


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_rescaling_two_three_one_from_incremental_checkpoints_after_retention(make_env, tmp_path, backend):
    out = tmp_path / "out"
    restore_from = None
    for step, parallelism in enumerate((2, 3)):
        env = make_env(parallelism)
        env.set_state_backend(**BACKENDS[backend], **({"local_dir": str(tmp_path / "db")} if backend == "rocksdb"
                                                      else {}))
        env.enable_checkpointing(0.2, storage=str(tmp_path / f"chk{step}"), retained=1)  # old ones deleted
        build(env, out, rate=8_000)
        restore_from = _run_until_checkpoints(env, f"rescale-{step}", 5, restore_from)
    env = make_env(1)
    env.set_state_backend(**BACKENDS[backend])
    env.enable_checkpointing(0.2, storage=str(tmp_path / "chk2"))
    build(env, out, rate=None)
    result = env.execute("rescale-2", timeout=200, restore_from=restore_from)
    assert result.completed_checkpoints >= 1
    assert collections.Counter(read_committed_lines(str(out))) == expected_lines()
