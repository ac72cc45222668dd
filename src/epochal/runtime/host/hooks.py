"""Hooks into a worker at named points of its protocol, and the one epochal ships: fault injection.

The deployment may carry one :class:`WorkerHook`. After deployment each worker asks it once
which points it wants to hear about (``points``); at each of those it calls ``reached`` with a
:class:`HookPoint`. Points the hook did not ask for cost the worker one set lookup, and nothing
on the per-batch path.

:class:`FaultInjector` is that hook for chaos tests: it carries plain :class:`Fault` specs and
SIGKILLs the worker at the first point where one applies. Users build faults through
``epochal.testing`` (``Fault``, ``random_faults``), which re-exports these names;
``Environment.execute(faults=...)`` wraps them in the injector.

Every worker process imports this module (the hook arrives pickled in the deployment), so it
imports nothing from epochal; a hook of your own must not import driver code
(``epochal.control``, ``epochal.api``, ``epochal.testing``) either.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

#: The points at which a worker calls its hook (where a fault can crash it).
POINTS = (
    "time",            # ``after`` seconds after the worker started processing
    "records",         # after the worker processed ``after`` records
    "alignment",       # while aligning barriers of a checkpoint (an input blocked)
    "after_sync",      # after the synchronous part of a snapshot, before the upload
    "during_upload",   # in the middle of writing the snapshot's files (forked snapshots: while the child writes)
    "snapshot_child",  # forked snapshots: the child wrote the files, before it reports (the child dies)
    "after_ack",       # after acknowledging a checkpoint, before it completes
    "before_commit",   # after the checkpoint completed, before the sink committed it
    "back_edge_log",   # at a loop head, while it logs the loop's in-transit records for a snapshot
    "superstep",       # graph job: a superstep computed and sent, before the global barrier
    "barrier",         # graph job: the global barrier passed (the next command came), before acting on it
    "recovery",        # graph job (replication): recovery batches sent, before the recovery finished
    "log_write",       # CEC: a frame of the persisted output queue is durable (``after``: frames written)
    "g_check",         # CEC: inside a G_check slice, after G_checks (``after``: G_checks emitted so far)
)


@dataclass(frozen=True, slots=True)
class HookPoint:
    """What a worker knows when it reaches ``point``."""

    point: str
    worker: int
    job_attempt: int
    #: The checkpoint the point belongs to (None for time and records; the superstep for the
    #: graph points).
    checkpoint_id: int | None
    #: Seconds since the worker started processing.
    processing_s: float
    #: Records the worker processed so far in this attempt.
    records_processed: int
    #: Which task of the worker this is: 0 the first, k its k-th replacement (task-local recovery).
    incarnation: int = 0


class WorkerHook(Protocol):
    """Called by a worker at the protocol points it asks for."""

    def points(self, worker: int, job_attempt: int, incarnation: int = 0) -> frozenset[str]:
        """The points worker ``worker`` of job attempt ``job_attempt`` (its ``incarnation``-th
        replacement, 0 for the first task) must report."""
        ...

    def reached(self, at: HookPoint) -> None:
        """The worker reached a point; the hook may act (a fault injector crashes the process)."""
        ...


@dataclass(frozen=True)
class Fault:
    """Crash worker ``worker`` of job attempt ``attempt`` at ``point``.

    ``incarnation`` picks which task of the worker crashes: 0 the first, k its k-th replacement
    when a lost worker is replaced while the job runs (a crash during recovery).
    ``after`` is seconds for ``time`` and a record count for ``records``; for the checkpoint
    points, ``checkpoint`` picks the checkpoint id (the first one reaching the point if None); for
    the graph points ``superstep`` and ``barrier``, ``superstep`` picks the superstep.
    """

    point: str
    worker: int = 0
    attempt: int = 0
    after: float = 0.0
    checkpoint: int | None = None
    superstep: int | None = None
    incarnation: int = 0

    def __post_init__(self) -> None:
        if self.point not in POINTS:
            raise ValueError(f"unknown fault point {self.point!r}; choose one of {', '.join(POINTS)}")


@dataclass(frozen=True)
class FaultInjector:
    """The worker hook that carries out ``faults``: a worker crashes at the first point where one
    of its faults (same worker, same job attempt) applies."""

    faults: tuple[Fault, ...]

    @classmethod
    def of(cls, faults: Iterable[Fault]) -> FaultInjector | None:
        """The injector for ``faults``, or None when there are none."""
        specs = tuple(faults)
        return cls(specs) if specs else None

    def points(self, worker: int, job_attempt: int, incarnation: int = 0) -> frozenset[str]:
        return frozenset(f.point for f in self.faults
                         if f.worker == worker and f.attempt == job_attempt and f.incarnation == incarnation)

    def reached(self, at: HookPoint) -> None:
        for fault in self.faults:
            if fault.point != at.point or fault.worker != at.worker or fault.attempt != at.job_attempt \
                    or fault.incarnation != at.incarnation:
                continue
            if at.point == "time" and at.processing_s < fault.after:
                continue
            if at.point == "records" and at.records_processed < fault.after:
                continue
            if at.point in ("log_write", "g_check"):
                if (at.checkpoint_id or 0) < fault.after:
                    continue
                crash()
            wanted = fault.superstep if fault.superstep is not None else fault.checkpoint
            if wanted is not None and at.checkpoint_id != wanted:
                continue
            crash()


def crash() -> None:
    """Die at once by SIGKILL: no clean-up, no goodbye to peers or the JobMaster."""
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(137)  # not reached on POSIX; a hard exit where SIGKILL does not exist
