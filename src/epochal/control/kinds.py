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

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

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


# ---------------------------------------------------------------------- task-local recovery
@dataclass(frozen=True)
class ReplaceWorker:
    """From a kind's coordinator: start a new Spark task for worker ``worker`` (lost) while the
    others keep running; it registers, is deployed with ``Deploy(joining=True)``, and once it is
    ready the coordinator's ``worker_rejoined`` is called."""

    worker: int


@dataclass(frozen=True)
class RetireWorker:
    """From a kind's coordinator: lost worker ``worker`` is not replaced; the job goes on (and
    finishes) without it (Imitator's Migration, papers/003 §5.2)."""

    worker: int


@runtime_checkable
class TaskLocalRecovery(Protocol):
    """A kind's coordinator that recovers a lost worker itself, without restarting the others
    (papers/003 §5; CEC's single-operator recovery). The JobMaster's machine then does not fail
    the attempt when a running worker is lost: it forgets the worker and asks the coordinator.
    What it returns are :class:`~epochal.messages.KindCommand` payloads to broadcast, and
    :class:`ReplaceWorker` / :class:`RetireWorker` for the machine.

    ``recovering`` is True while a recovery is under way after which every worker writes its
    output and reports ``Finished`` again (a graph job sends its ``Halt`` again: a survivor's
    partition may have changed). The machine then does not end the job: a loss that starts such a
    recovery clears every worker's finished mark, and ``Finished`` reports received while it runs
    are outdated and ignored. A kind whose workers' ``Finished`` stand across a recovery (CEC)
    keeps it False."""

    recovering: bool

    def worker_lost(self, worker: int, now: float) -> list[Any]:
        """Running worker ``worker`` was lost (its control connection ended)."""
        ...

    def worker_rejoined(self, worker: int, now: float) -> list[Any]:
        """The replacement of ``worker`` registered, connected to its peers and is ready."""
        ...


# ---------------------------------------------------------------------- job runners
#: Recovery modes whose jobs run as a job kind of their own -> ``"module:function"`` starting one:
#: ``function(environment, job_name, faults) -> JobClient``. Imported when a job uses the mode, so
#: the API layer names no higher layer (``epochal.cec`` builds on it).
JOB_RUNNERS: dict[str, str] = {
    "cec": "epochal.cec.job:execute_async",
    "crb": "epochal.cec.job:execute_async",
    "native": "epochal.cec.job:execute_async",
}


def job_runner(mode: str) -> Any:
    """The function that starts a job recovering by ``mode`` (imported now)."""
    import importlib

    module, _, name = JOB_RUNNERS[mode].partition(":")
    return getattr(importlib.import_module(module), name)
