"""The JobMaster's side of a job kind: the coordinator a kind plugs into the JobMaster's machine.

The JobMaster's machine does everything kinds share (registration, deployment, heartbeats,
failures, restarts, the lifecycle). What a kind coordinates itself (a graph job's global
barrier: papers/003 §2.1) it does through a :class:`KindCoordinator`: the machine asks it what a
new attempt restores, tells it when every worker is ready, and hands it every
:class:`~epochal.messages.KindReport`; what it returns is broadcast to the workers as
:class:`~epochal.messages.KindCommand` payloads. The streaming job kind needs none (its
checkpoint coordinator is built into the machine).
"""

from __future__ import annotations

from typing import Any, Protocol

from epochal.control.jobmaster_events import ResolveRestore


class KindCoordinator(Protocol):
    """A job kind's coordination on the JobMaster; pure (time is passed in), called by its machine."""

    def restore_request(self, attempt: int) -> ResolveRestore:
        """What job attempt ``attempt``'s workers restore (asked once all registered)."""
        ...

    def started(self, now: float) -> list[Any]:
        """Every worker is ready and started: the first commands."""
        ...

    def on_report(self, worker: int, payload: Any, now: float) -> list[Any]:
        """Worker ``worker`` reported ``payload``: the commands to broadcast (may be none)."""
        ...

    def new_attempt(self) -> None:
        """The failed attempt is gone; the next one will register, restore and start."""
        ...
