"""The global barrier of a graph job: a pure machine on the driver (papers/003 §2.1, Algorithm 1).

:class:`SuperstepCoordinator` starts superstep *n* on every worker, collects one
:class:`~epochal.graph.engine.StepReport` per worker, and at the barrier combines the partial
aggregates and decides: halt (the superstep bound was reached, the program's convergence test
holds, or no vertex is active and nothing was sent) or run superstep *n+1*. Every
``checkpoint_interval`` supersteps the workers write their changed vertex state at the barrier
(the Imitator-CKPT baseline, papers/003 §2.2); superstep *n*'s checkpoint is complete when every
worker reported *n*, and a restarted job resumes after the latest complete one. No sockets,
threads or clocks; the same machine drives the Spark job and the local runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from epochal.graph.engine import StepReport
from epochal.graph.program import VectorProgram, VertexProgram, combine_aggregates


@dataclass(frozen=True)
class RunSuperstep:
    """Instruction: every worker runs ``superstep`` (and checkpoints at its end if ``checkpoint``)."""

    superstep: int
    aggregates: dict[str, Any] = field(default_factory=dict)
    checkpoint: bool = False
    #: the checkpoint holds every master's state, not only what changed since the last one
    full: bool = False
    #: the program's bound says this is its last superstep
    final: bool = False


@dataclass(frozen=True)
class SuperstepDone:
    """Report: a worker finished (committed) superstep ``report.superstep``; ``checkpoint`` is the
    handle of the state file it wrote for it (None: no checkpoint this superstep)."""

    report: StepReport
    checkpoint: dict[str, Any] | None = None
    full: bool = False


@dataclass(frozen=True)
class Halt:
    """Instruction: the computation is over after ``superstep``; workers write their results."""

    superstep: int
    reason: str


class SuperstepCoordinator:
    """Decides each superstep of one graph job; ``checkpoint_interval`` 0 means no checkpoints."""

    def __init__(self, program: VectorProgram | VertexProgram, num_workers: int, checkpoint_interval: int = 0,
                 max_supersteps: int | None = None) -> None:
        self.program = program
        self.num_workers = num_workers
        self.checkpoint_interval = checkpoint_interval
        bound = program.max_supersteps if max_supersteps is None else max_supersteps
        self.max_supersteps = bound
        self.superstep = -1
        self.reports: dict[int, StepReport] = {}
        self.aggregates: dict[str, Any] = {}
        #: the latest superstep whose checkpoint every worker wrote, and the aggregates after it
        self.latest_checkpoint: int | None = None
        self.checkpoint_aggregates: dict[int, dict[str, Any]] = {}
        self.history: list[dict[str, Any]] = []

    def _checkpoints(self, superstep: int) -> bool:
        k = self.checkpoint_interval
        return k > 0 and superstep % k == 0

    def start(self, resume_after: int | None = None) -> RunSuperstep:
        """The first superstep: 0, or the one after checkpoint ``resume_after``."""
        self.reports = {}
        if resume_after is None:
            self.superstep, self.aggregates = 0, {}
        else:
            self.superstep = resume_after + 1
            self.aggregates = dict(self.checkpoint_aggregates.get(resume_after, {}))
        return self.command()

    def command(self) -> RunSuperstep:
        """The command that runs the current superstep."""
        n = self.superstep
        return RunSuperstep(n, self.aggregates, self._checkpoints(n), final=n == self.max_supersteps)

    def on_report(self, worker: int, report: StepReport) -> RunSuperstep | Halt | None:
        """Worker ``worker`` finished the current superstep; at the barrier, what comes next."""
        if report.superstep != self.superstep or worker in self.reports:
            return None  # a stale or duplicate report
        self.reports[worker] = report
        if len(self.reports) < self.num_workers:
            return None
        reports = [self.reports[w] for w in sorted(self.reports)]  # a fixed order: replays add alike
        self.reports = {}
        n = self.superstep
        self.aggregates = combine_aggregates(self.program.aggregators, [r.aggregates for r in reports])
        active, sent = sum(r.active for r in reports), sum(r.sent for r in reports)
        self.history.append({"superstep": n, "active": active, "sent": sent})
        if self._checkpoints(n):
            self.latest_checkpoint = n
            self.checkpoint_aggregates[n] = dict(self.aggregates)
        if self.max_supersteps is not None and n >= self.max_supersteps:
            return Halt(n, f"reached the bound of {self.max_supersteps} supersteps")
        if self.program.converged(self.aggregates, n):
            return Halt(n, "converged")
        if active == 0 and sent == 0:
            return Halt(n, "no active vertex and no message")
        self.superstep = n + 1
        return self.command()


# ---------------------------------------------------------------------- recovery (replication, papers/003 §5)
@dataclass(frozen=True)
class Recover:
    """Command: recovery ``epoch`` of the workers in ``lost``; resume at superstep ``resume_at``.
    Migration moves ``moved_ids`` to ``moved_to`` (None: each worker finds them in its routing
    table, which then holds every vertex's mirrors); ``gone`` were retired before;
    ``routing_from`` sends the routing table to new workers."""

    epoch: int
    resume_at: int
    lost: tuple[int, ...]
    mode: str
    gone: tuple[int, ...] = ()
    moved_ids: np.ndarray | None = None
    moved_to: np.ndarray | None = None
    routing_from: int = 0


@dataclass(frozen=True)
class RecoveryPrepared:
    """Report: this worker sent its recovery batches of ``epoch`` and received every peer's."""

    epoch: int


@dataclass(frozen=True)
class FinishRecovery:
    """Command: every worker prepared recovery ``epoch``: assemble what was received."""

    epoch: int


@dataclass(frozen=True)
class Recovered:
    """Report: this worker's part is whole again after recovery ``epoch``; ``phases``: where its
    time went (seconds by phase, measured by the worker driver)."""

    epoch: int
    phases: dict[str, float] = field(default_factory=dict, compare=False)
