"""Upgrading a job under crashes (issue 10, item 2): job 1 is killed and restarted, then stopped;
job 2 adds a ``map`` before the keyed sum, restores job 1's checkpoint at another parallelism
and is killed again. Each key's committed rolling sums must continue exactly where job 1's
checkpoint left them and end at the full count: nothing of the sum's state lost or repeated."""

from __future__ import annotations

import collections
import time

import pytest

from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from epochal.control.restart import FixedDelayRestart
from epochal.testing import Fault, random_faults

COUNT = 24_000
KEYS = 4
PER_KEY = COUNT // KEYS


def gen(i):
    return (f"k{i % KEYS}", 1)


def run_job_1(make_env, storage, parallelism):
    """Job 1: a keyed sum into discard, killed once, stopped once a checkpoint of the restarted
    attempt completed; returns its checkpoint directory."""
    env = make_env(parallelism)
    env.enable_checkpointing(0.2, storage=storage)
    env.set_restart_strategy(FixedDelayRestart(attempts=1, delay=0.2))
    env.from_generator(gen, count=COUNT, rate=3000).key_by(lambda kv: kv[0]).sum(lambda kv: kv[1]).discard()
    client = env.execute_async("upgrade-v1", faults=[Fault("time", worker=parallelism - 1, after=0.6)])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if client.attempt == 1 and any(c["status"] == "completed" and c["trigger_time"] > restarted(client)
                                       for c in client.checkpoint_stats()):
            break
        assert not client.status.is_terminal, "job 1 ended before it could be stopped"
        time.sleep(0.05)
    client.cancel(timeout=60)
    assert len(client.restarts()) == 1  # the planned kill happened
    return client.checkpoint_path


def restarted(client) -> float:
    """Wall-clock time of the restart (checkpoint trigger times are wall-clock)."""
    restart = client.restarts()[0]
    return time.time() - (time.monotonic() - restart["detected"])


@pytest.mark.parametrize("before,after,seed", [(2, 3, 41), (3, 2, 42)])
def test_upgraded_job_continues_the_sums_exactly_under_kills(make_env, tmp_path, before, after, seed):
    checkpoints = run_job_1(make_env, str(tmp_path / "v1"), before)

    env = make_env(after)
    env.enable_checkpointing(0.2, storage=str(tmp_path / "v2"))
    faults = random_faults(seed, after, count=2, window=(0.3, 0.9))
    env.set_restart_strategy(FixedDelayRestart(attempts=len(faults), delay=0.2))
    out = tmp_path / "out"
    (env.from_generator(gen, count=COUNT, rate=3000).map(lambda kv: kv)   # the upgrade: one more map
     .key_by(lambda kv: kv[0]).sum(lambda kv: kv[1])
     .sink_to(ExactlyOnceFileSink(str(out), format=lambda kv: f"{kv[0]} {kv[1]}")))
    result = env.execute("upgrade-v2", timeout=300, restore_from=checkpoints, faults=faults)
    assert len(result.restarts) == len(faults)

    sums: dict[str, list[int]] = collections.defaultdict(list)
    for line in read_committed_lines(str(out)):
        key, total = line.split()
        sums[key].append(int(total))
    assert sorted(sums) == [f"k{k}" for k in range(KEYS)]
    for key, totals in sums.items():
        restored = PER_KEY - len(totals)
        assert restored > 0, f"{key}: job 1's state was not restored"
        # exactly the rolling sums after the restored state: no gap, no repeat, ending at the full count
        assert sorted(totals) == list(range(restored + 1, PER_KEY + 1)), key
