"""Job counters survive crashes: each source record is counted once, whatever was replayed."""

from __future__ import annotations

import pytest

from epochal.control.restart import FixedDelayRestart
from epochal.testing import random_faults

RECORDS = 80_000


@pytest.mark.parametrize("parallelism,seed", [(2, 7), (3, 8)])
def test_records_processed_is_exact_across_restarts(make_env, tmp_path, parallelism, seed):
    env = make_env(parallelism)
    env.enable_checkpointing(0.2, storage=str(tmp_path / "checkpoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=3, delay=0.2))
    (env.from_generator(lambda i: i, count=RECORDS, rate=20_000).map(lambda i: i).disable_chaining()
     .key_by(lambda i: i % 11).count().discard())
    # Kills 0.7-1.4 s into an attempt (of 4 s at 20,000 records/s): late enough for a checkpoint
    # (every 0.2 s) to complete first on a loaded machine, early enough that the second attempt,
    # resumed from it, is still running at its kill.
    result = env.execute("counters", timeout=300, faults=random_faults(seed, parallelism, count=2, window=(0.7, 1.4)))
    assert len(result.restarts) == 2
    assert result.records_before_last_attempt > 0  # the last attempt resumed from a checkpoint
    assert result.records_processed == RECORDS
