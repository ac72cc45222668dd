"""Windows under real crashes: window contents are keyed state in the checkpoints, so after kills
the committed windows equal the oracle (each window once, with its full contents): tumbling and
sliding event-time windows, and sliding count windows with a user AggregateFunction."""

from __future__ import annotations

import collections

import pytest

from epochal.connectors.files import ExactlyOnceFileSink
from epochal.testing import random_faults
from tests.aggregates import Span
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


def sliding_time_oracle(slide: int) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for i in range(RECORDS):
        key, ts = record(i)
        for start in range(ts - ts % slide, ts - WINDOW, -slide):
            counts[(key, start)] += 1
    return collections.Counter(f"{key} {start} {n}" for (key, start), n in counts.items())


def test_sliding_time_windows_exactly_once_under_random_kills(make_env, tmp_path):
    slide = WINDOW // 4  # each record in 4 windows

    def job(env, out_dir):
        (env.from_generator(record, count=RECORDS, rate=RATE)
         .with_watermarks(lambda r: r[1])
         .key_by(lambda r: r[0])
         .window(WINDOW, timestamp=lambda r: r[1], slide=slide).count().name("sliding-window-count")
         .sink_to(ExactlyOnceFileSink(str(out_dir), format=lambda w: f"{w[0]} {w[1]} {w[2]}"), name="sink"))

    faults = random_faults(47, 2, count=2, window=(0.5, 1.5))
    result, committed = run_with_faults(make_env, tmp_path, 2, faults, job, "sliding windows chaos")
    assert len(result.restarts) == 2
    assert committed == sliding_time_oracle(slide)  # every window exactly once, with its exact count


#: Count windows follow each key's arrival order, which is deterministic only when all records of
#: a key come from ONE source subtask: from_generator gives source subtask j of p the indices
#: j, j + p, ..., and key i % COUNT_KEYS (a multiple of the parallelism) fixes i % p. A key's
#: records then travel one channel, in index order, also when a restart replays them.
COUNT_KEYS = 12
COUNT_SIZE, COUNT_SLIDE = 1_000, 300


def keyed_record(i: int) -> tuple[str, int]:
    return (f"c{i % COUNT_KEYS}", i)


def sliding_count_oracle() -> collections.Counter:
    per_key: dict[str, list[int]] = collections.defaultdict(list)
    for i in range(RECORDS):
        key, index = keyed_record(i)
        per_key[key].append(index)
    return collections.Counter(f"{key} {indices[first]} {indices[first + COUNT_SIZE - 1]} {COUNT_SIZE}"
                               for key, indices in per_key.items()
                               for first in range(0, len(indices) - COUNT_SIZE + 1, COUNT_SLIDE))


def test_sliding_count_windows_exactly_once_under_random_kills(make_env, tmp_path):
    parallelism = 2
    assert COUNT_KEYS % parallelism == 0  # each key's records from one source subtask (see COUNT_KEYS)

    def job(env, out_dir):
        (env.from_generator(keyed_record, count=RECORDS, rate=RATE)
         .key_by(lambda r: r[0])
         .count_window(COUNT_SIZE, slide=COUNT_SLIDE).aggregate(Span()).name("sliding-count-window")
         .sink_to(ExactlyOnceFileSink(str(out_dir), format=lambda w: f"{w[0]} {w[1][0]} {w[1][1]} {w[1][2]}"),
                  name="sink"))

    faults = random_faults(53, parallelism, count=2, window=(0.5, 1.5))
    result, committed = run_with_faults(make_env, tmp_path, parallelism, faults, job, "count windows chaos")
    assert len(result.restarts) == 2
    assert committed == sliding_count_oracle()  # every full window exactly once, with exactly its records
