"""The arithmetic the paired benchmarks' verdicts rest on (benchmarks/machine_noise.py,
benchmarks/dashboard_overhead_paired.py): rates per window, the geometric mean of noisy ratios
with its interval, the per-phase speed of the cores, and the verdict against the 2 % goal."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from benchmarks.common.noise import unit_ms
from benchmarks.common.stats import ratio_interval
from benchmarks.dashboard_overhead_paired import ratios, summarise, verdict
from benchmarks.machine_noise import variation, windows


def test_windows_count_whole_windows_only() -> None:
    stamps = [0.0, 0.4, 0.9, 1.1, 1.5, 2.2, 2.95]  # 3 in [0, 1), 2 in [1, 2), the rest in a partial window
    assert windows(stamps, 1.0) == [(0.0, 3.0), (1.0, 2.0)]
    assert windows([], 1.0) == []


def test_variation_of_a_steady_rate_resolves_anything() -> None:
    steady = variation([100.0] * 10)
    assert steady["cv"] == 0.0 and steady["resolvable"] == 0.0 and steady["median"] == 100.0
    noisy = variation([90.0, 110.0] * 10)
    assert noisy["cv"] == pytest.approx(statistics.stdev([90.0, 110.0] * 10) / 100)
    assert noisy["spread"] == pytest.approx(0.2)


def test_the_geometric_mean_of_noisy_ratios_is_not_biased_upwards() -> None:
    # the same rate with 25 % noise on both sides of each ratio: nothing differs
    rng = random.Random(7)
    values = [math.exp(rng.gauss(0, 0.25)) / math.exp(rng.gauss(0, 0.25)) for _ in range(4000)]
    arithmetic = statistics.fmean(values)
    ratio, low, high = ratio_interval(values)
    assert arithmetic > 1.04  # the bias the geometric mean avoids
    assert low < 1.0 < high
    assert ratio == pytest.approx(1.0, abs=0.02)


def test_ratio_interval_of_known_values() -> None:
    ratio, low, high = ratio_interval([0.5, 2.0])
    assert ratio == pytest.approx(1.0)
    assert low < 1.0 < high
    assert ratio_interval([0.9])[:2] == (pytest.approx(0.9), 0.0)  # one value: no interval
    assert ratio_interval([0.95] * 5) == (pytest.approx(0.95), pytest.approx(0.95), pytest.approx(0.95))


def test_unit_ms_takes_each_cores_median_in_the_window() -> None:
    core0 = [(0.0, 0.001), (1.0, 0.003), (2.0, 0.002), (9.0, 0.100)]
    core1 = [(0.5, 0.001), (1.5, 0.001)]
    assert unit_ms([core0, core1], 0.0, 5.0) == pytest.approx((2.0 + 1.0) / 2)
    assert math.isnan(unit_ms([core0], 20.0, 30.0))


def test_ratios_pair_each_phase_with_its_blocks_off_phase() -> None:
    rows = [{"block": 0, "config": "off", "records_per_s": 100.0, "unit_ms": 1.0},
            {"block": 0, "config": "watched", "records_per_s": 90.0, "unit_ms": 1.2},
            {"block": 1, "config": "off", "records_per_s": 200.0, "unit_ms": 0.5},
            {"block": 1, "config": "watched", "records_per_s": 210.0, "unit_ms": 0.5},
            {"block": 2, "config": "watched", "records_per_s": 1.0, "unit_ms": 1.0}]  # no off phase: left out
    assert ratios(rows, "watched") == [pytest.approx(0.9), pytest.approx(1.05)]
    # adjusted: a phase whose cores ran slower (a longer unit) is credited for it
    assert ratios(rows, "watched", adjusted=True) == [pytest.approx(0.9 * 1.2), pytest.approx(1.05)]


def test_the_cpu_model_takes_the_watchers_share_and_the_jobs_cpu_per_record(monkeypatch) -> None:
    """Throughput with full cores = CPU the job gets / its CPU per record: a watcher taking 2 % of
    a 2-core machine (0.04 CPU-s/s) and a job needing 1 % more CPU per record give x0.98/1.01."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    rows = []
    for block, (off, watched) in enumerate([(10.0, 10.1), (12.0, 12.12), (8.0, 8.08)]):
        for config, per_record in (("off", off), ("watched", watched), ("polled", off)):
            rows.append({"block": block, "config": config, "records_per_s": 100.0, "unit_ms": 1.0,
                         "watcher_cpu_per_s": 0.04 if config == "watched" else 0.0, "driver_cpu_per_s": 0.1,
                         "job_cpu_us_per_record": per_record})
    watched = summarise(rows)["watched"]
    assert watched["cpu_per_record"][0] == pytest.approx(1.01)
    assert watched["cpu_model"][0] == pytest.approx(0.98 / 1.01)
    assert summarise(rows)["polled"]["cpu_model"][0] == pytest.approx(1.0)


@pytest.mark.parametrize(("low", "high", "expected"), [
    (0.99, 1.01, "met"),
    (0.97, 0.975, "not met"),
    (0.90, 1.05, "not resolved"),
    (0.975, 1.005, "not shown"),  # narrow enough, but its low end is below 0.98
])
def test_verdict_needs_an_interval_narrower_than_the_goal(low: float, high: float, expected: str) -> None:
    assert verdict(low, high).startswith(expected)
