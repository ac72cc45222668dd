"""The peer benchmark's shared definitions: the oracle agrees with a plain-Python run of each
job, a wrong output is caught, and the driver's arithmetic (start-up subtraction, sizing)."""

from __future__ import annotations

import argparse
import collections

import pytest
from benchmarks.common.stats import percentile, rate_after_startup
from benchmarks.peers import spec
from benchmarks.peers.__main__ import Run, size_run

N = 30_000


def reference_output(job: str, records: int) -> list[tuple]:
    """Each job computed record by record in plain Python, from the text lines."""
    rows = [spec.parse_line(spec.make_line(i, spec.JOBS[job].keys)) for i in range(records)]
    if job == "stateless":
        return [(key, value * 2, created) for key, value, _, created in rows if value < spec.FILTER_BELOW]
    if job == "window":
        windows = collections.Counter((key, spec.window_start(event)) for key, _, event, _ in rows)
        return [(key, start, count) for (key, start), count in windows.items()]
    counts: collections.Counter = collections.Counter()
    out = []
    for key, _, _, created in rows:
        counts[key] += 1
        out.append((key, counts[key], created))
    return out


@pytest.mark.parametrize("job", list(spec.JOBS))
def test_oracle_matches_a_reference_run(job):
    assert spec.summarize(job, reference_output(job, N)) == spec.oracle(job, N)


@pytest.mark.parametrize("job", list(spec.JOBS))
def test_a_lost_record_is_caught(job):
    output = reference_output(job, N)
    if job in ("keyed", "keyed_1m"):
        output = [row for row in output if row[0] != output[-1][0]]  # a key's updates went missing
    else:
        output = output[1:]
    assert spec.summarize(job, output) != spec.oracle(job, N)


def test_a_window_fired_twice_is_caught():
    output = reference_output("window", N)
    assert spec.summarize("window", output + output[:1])["fired_twice"] == 1


def test_lines_parse_back_and_sample_latency():
    key, value, event, created = spec.parse_line(spec.make_line(spec.LATENCY_SAMPLE_EVERY * 3, 10))
    assert (key, value, event) == ("k0", 0, 30) and created > 0
    assert spec.parse_line(spec.make_line(7, 10))[3] == 0


def test_throughput_subtracts_the_median_start_up():
    run = Run("s", "keyed", 1_010_000, 0, "timed", job_s=3.0)
    assert rate_after_startup(run, (10_000, 1.0)) == pytest.approx(500_000)
    assert rate_after_startup(run, None) == pytest.approx(1_010_000 / 3.0)
    run.error = "boom"
    assert rate_after_startup(run, (10_000, 1.0)) != rate_after_startup(run, (10_000, 1.0))  # NaN


def test_size_run_targets_seconds_within_bounds():
    args = argparse.Namespace(target_seconds=20.0, min_records=2_000_000, max_records=40_000_000)
    pilot = Run("s", "keyed", 510_000, 0, "pilot", job_s=2.0)  # 500k in 1 s after start-up
    assert size_run(pilot, (10_000, 1.0), args) == 10_000_000
    slow = Run("s", "keyed", 510_000, 0, "pilot", job_s=51.0)
    assert size_run(slow, (10_000, 1.0), args) == 2_000_000
    assert percentile([3, 1, 2], 0.5) == 2
