"""Restart strategies: delays and limits."""

from __future__ import annotations

from epochal.control.restart import ExponentialBackoffRestart, FailureRateRestart, FixedDelayRestart, NoRestart


def test_no_restart():
    assert NoRestart().next_delay(0.0) is None


def test_fixed_delay_stops_after_its_attempts():
    strategy = FixedDelayRestart(attempts=2, delay=0.5)
    assert [strategy.next_delay(t) for t in range(3)] == [0.5, 0.5, None]


def test_exponential_backoff_grows_and_caps():
    strategy = ExponentialBackoffRestart(attempts=5, initial=1.0, multiplier=2.0, max_delay=5.0)
    assert [strategy.next_delay(0) for _ in range(6)] == [1.0, 2.0, 4.0, 5.0, 5.0, None]


def test_failure_rate_counts_failures_in_a_sliding_window():
    strategy = FailureRateRestart(max_failures=2, interval=10.0, delay=0.1)
    assert strategy.next_delay(0.0) == 0.1
    assert strategy.next_delay(1.0) == 0.1
    assert strategy.next_delay(2.0) is None  # a third failure within 10 s
    fresh = FailureRateRestart(max_failures=2, interval=10.0, delay=0.1)
    assert [fresh.next_delay(t) for t in (0.0, 1.0, 20.0, 21.0)] == [0.1, 0.1, 0.1, 0.1]  # old ones expired
