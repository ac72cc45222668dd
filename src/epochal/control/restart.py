"""Restart strategies: whether, and after how long, a failed job restarts from its latest checkpoint.

Each strategy answers ``next_delay(now)`` with the seconds to wait before the next attempt, or
``None`` when the limit is reached and the job must fail (with the failure that ended it).
:class:`RestartMachine` is the restart sub-machine of the JobMaster's machine
(:class:`~epochal.control.jobmaster_machine.JobMasterMachine`) built on them (decisions, restart
timing and history; time passed in).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from epochal.control.lifecycle import KillSparkJob, StartAttempt
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


class RestartMachine:
    """The restart sub-machine of the JobMaster: whether and when a failed job restarts, and
    the history of its restarts (``restarts``: attempt, cause, detected, then ``recovered_s``
    once the new attempt's workers are all ready and ``resumed_s`` once they process records).

    Pure: time comes in as an argument, and ``tick`` answers with the lifecycle instructions
    the JobMaster's machine acts on (kill the failed attempt's Spark job, start the next attempt).
    """

    def __init__(self, strategy: RestartStrategy, stop_timeout: float) -> None:
        self.strategy = strategy
        self.stop_timeout = stop_timeout
        self.restarts: list[dict[str, Any]] = []
        #: When the current attempt's first failure was seen (0: none yet).
        self.detected = 0.0
        self.restart_at = 0.0
        self.stop_deadline = 0.0
        self.spark_killed = False

    def failure_seen(self, now: float) -> None:
        self.detected = self.detected or now

    def decide(self, category: str, now: float) -> float | None:
        """The delay before the next attempt, or None when the job must fail. A damaged
        checkpoint ("restore") fails every attempt the same way: never restarted."""
        return None if category == "restore" else self.strategy.next_delay(now)

    def give_up_note(self) -> str:
        """What a final failure's message adds after restarts."""
        if not self.restarts:
            return ""
        return f"\n(after {len(self.restarts)} restarts; restart strategy: {self.strategy.describe()})"

    def begin(self, attempt: int, cause: str, delay: float, now: float, message: str = "",
              category: str = "") -> None:
        """Attempt ``attempt`` failed with ``cause`` (the first line of the error; ``message``: all
        of it, the user's traceback included; ``category``: ``JobFailedError.category``) and
        restarts after ``delay`` seconds."""
        entry: dict[str, Any] = {"attempt": attempt, "cause": cause, "detected": self.detected or now}
        if message and message != cause:
            entry["message"] = message
        if category:
            entry["category"] = category
        self.restarts.append(entry)
        self.stop_deadline = now + self.stop_timeout
        self.restart_at = now + delay
        self.spark_killed = False

    def tick(self, now: float, spark_done: bool) -> list[KillSparkJob | StartAttempt]:
        """While RESTARTING: kill the old Spark job once its workers overran the stop deadline;
        start the next attempt once it is gone and the delay has passed."""
        if not spark_done and not self.spark_killed and now > self.stop_deadline:
            self.spark_killed = True
            return [KillSparkJob()]
        if spark_done and now >= self.restart_at:
            return [StartAttempt()]
        return []

    def new_attempt(self) -> None:
        self.detected = 0.0

    def all_ready(self, now: float) -> None:
        """The restarted attempt's workers are all ready: the job recovered."""
        if self.restarts and "recovered_s" not in self.restarts[-1]:
            self.restarts[-1]["recovered_s"] = now - self.restarts[-1]["detected"]

    def processing(self, now: float) -> None:
        """The restarted attempt processes records again."""
        if self.restarts and "resumed_s" not in self.restarts[-1]:
            self.restarts[-1]["resumed_s"] = now - self.restarts[-1]["detected"]
