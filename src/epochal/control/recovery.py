"""Recovery modes: how a job recovers from a failure, chosen by name when the JobMaster starts.

The JobMaster's machine asks its recovery machine, through :class:`RecoveryMachine`, whether
and when the failed attempt is replaced (and records what recovery cost). ``restart_job`` (every
worker stops and the whole job restarts from its latest completed checkpoint,
:class:`~epochal.control.restart.RestartMachine`) is built in. A new mode (replace one worker;
CEC's single-operator recovery; Imitator's Rebirth and Migration) is a module with its own
machine, registered here with :func:`register_recovery_mode`; the JobMaster's machine builds it
with :func:`recovery_machine` and never branches on the mode's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from epochal.control.lifecycle import KillSparkJob, StartAttempt
from epochal.control.restart import RestartMachine, RestartStrategy


class RecoveryMachine(Protocol):
    """What the JobMaster's machine asks of a recovery mode (all time is passed in)."""

    #: One entry per recovery: attempt, cause, detected, then recovered_s and resumed_s.
    restarts: list[dict[str, Any]]

    def failure_seen(self, now: float) -> None:
        """A failure of the current attempt was seen (the first one starts the recovery clock)."""

    def decide(self, kind: str, now: float) -> float | None:
        """After the failure grace period: seconds until recovery starts, or None to fail the job."""

    def give_up_note(self) -> str:
        """What the final error message adds when the job fails after recoveries."""

    def begin(self, attempt: int, cause: str, delay: float, now: float) -> None:
        """Recovery of ``attempt`` (failed with ``cause``) starts in ``delay`` seconds."""

    def tick(self, now: float, spark_done: bool) -> list[KillSparkJob | StartAttempt]:
        """While recovering: what to do now."""

    def new_attempt(self) -> None:
        """The next attempt was started."""

    def all_ready(self, now: float) -> None:
        """The new attempt's workers are all ready."""

    def processing(self, now: float) -> None:
        """The new attempt processes records again."""


#: ``factory(strategy, stop_timeout)`` of each recovery mode.
RecoveryFactory = Callable[[RestartStrategy, float], RecoveryMachine]
RECOVERY_MODES: dict[str, RecoveryFactory] = {"restart_job": RestartMachine}


def register_recovery_mode(name: str, factory: RecoveryFactory) -> None:
    """Make recovery mode ``name`` available; a name is registered once."""
    if name in RECOVERY_MODES and RECOVERY_MODES[name] is not factory:
        raise ValueError(f"recovery mode {name!r} is already registered")
    RECOVERY_MODES[name] = factory


def recovery_machine(name: str, strategy: RestartStrategy, stop_timeout: float) -> RecoveryMachine:
    """A new machine of recovery mode ``name``."""
    try:
        factory = RECOVERY_MODES[name]
    except KeyError:
        raise ValueError(f"unknown recovery mode {name!r}; known modes: {', '.join(sorted(RECOVERY_MODES))}") \
            from None
    return factory(strategy, stop_timeout)
