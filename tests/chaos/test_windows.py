"""Event-time windows under real crashes: window contents are keyed state in the checkpoints, so
after kills the committed windows equal the oracle (each window once, with its full count)."""

from __future__ import annotations

import collections

import pytest

from epochal.connectors.transactional import ExactlyOnceFileSink
from epochal.testing import random_faults
from tests.chaos.harness import run_with_faults

RECORDS = 200_000
KEYS = 23
WINDOW = 5_000  # event time of record i is i: 40 windows per key over the run
RATE = 40_000


def record(i: int) -> tuple[str, int]:
    return (f"k{(i * 7) % KEYS}", i)


def oracle() -> collections.Counter:
    counts = collections.Counter(record(i)[0] + f" {i - i % WINDOW}" for i in range(RECORDS))
    return collections.Counter(f"{key_start} {n}" for key_start, n in counts.items())


def window_job(env, out_dir):
    (env.from_generator(record, count=RECORDS, rate=RATE)
     .with_watermarks(lambda r: r[1])
     .key_by(lambda r: r[0])
     .window(WINDOW, timestamp=lambda r: r[1]).count().name("window-count")
     .sink_to(ExactlyOnceFileSink(str(out_dir), format=lambda w: f"{w[0]} {w[1]} {w[2]}"), name="sink"))


@pytest.mark.parametrize("parallelism,seed", [(2, 41), (3, 43)])
def test_windows_exactly_once_under_random_kills(make_env, tmp_path, parallelism, seed):
    faults = random_faults(seed, parallelism, count=2, window=(0.5, 1.5))
    result, committed = run_with_faults(make_env, tmp_path, parallelism, faults, window_job, "windows chaos")
    assert len(result.restarts) == 2
    assert committed == oracle()  # every window exactly once, with its exact count
