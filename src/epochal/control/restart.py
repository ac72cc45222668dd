"""Restart strategies: whether, and after how long, a failed job restarts from its latest checkpoint.

Each strategy answers ``next_delay(now)`` with the seconds to wait before the next attempt, or
``None`` when the limit is reached and the job must fail (with the failure that ended it).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from epochal.validation import check_number


class RestartStrategy:
    """Base: never restart."""

    def next_delay(self, now: float) -> float | None:
        return None

    def describe(self) -> str:
        return "no restarts"


@dataclass
class NoRestart(RestartStrategy):
    """Fail the job on its first failure."""


@dataclass
class FixedDelayRestart(RestartStrategy):
    """Up to ``attempts`` restarts, each after ``delay`` seconds."""

    attempts: int = 3
    delay: float = 1.0
    used: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        check_number(self.attempts, "attempts", strict=False, integer=True)
        check_number(self.delay, "delay (seconds)", strict=False)

    def next_delay(self, now: float) -> float | None:
        if self.used >= self.attempts:
            return None
        self.used += 1
        return self.delay

    def describe(self) -> str:
        return f"fixed delay ({self.attempts} attempts, {self.delay:g} s apart)"


@dataclass
class ExponentialBackoffRestart(RestartStrategy):
    """Restarts after ``initial``, ``initial*multiplier``, ... seconds (capped at ``max_delay``),
    at most ``attempts`` times."""

    attempts: int = 10
    initial: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 60.0
    used: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        check_number(self.attempts, "attempts", strict=False, integer=True)
        check_number(self.initial, "initial (seconds)", strict=False)
        check_number(self.multiplier, "multiplier", minimum=1, strict=False)
        check_number(self.max_delay, "max_delay (seconds)", strict=False)

    def next_delay(self, now: float) -> float | None:
        if self.used >= self.attempts:
            return None
        delay = min(self.max_delay, self.initial * self.multiplier ** self.used)
        self.used += 1
        return delay

    def describe(self) -> str:
        return f"exponential backoff ({self.attempts} attempts)"


@dataclass
class FailureRateRestart(RestartStrategy):
    """Restart after ``delay`` unless more than ``max_failures`` happened within ``interval`` seconds."""

    max_failures: int = 3
    interval: float = 60.0
    delay: float = 1.0
    failures: deque = field(default_factory=deque, init=False)

    def __post_init__(self) -> None:
        check_number(self.max_failures, "max_failures", strict=False, integer=True)
        check_number(self.interval, "interval (seconds)")
        check_number(self.delay, "delay (seconds)", strict=False)

    def next_delay(self, now: float) -> float | None:
        self.failures.append(now)
        while self.failures and now - self.failures[0] > self.interval:
            self.failures.popleft()
        if len(self.failures) > self.max_failures:
            return None
        return self.delay

    def describe(self) -> str:
        return f"failure rate (at most {self.max_failures} failures in {self.interval:g} s)"
