"""Replication fault tolerance on the JobMaster: failure handling of Imitator (papers/003 Algorithm 1, §5).

:class:`ReplicaRecovery` is a pure machine the graph job's coordinator
(:class:`~epochal.graph.coordination.GraphCoordination`) consults when a worker is lost while the
job runs. The other workers are not restarted: they roll back to the start of the superstep in
progress (or, when the loss came after a barrier, to the start of the next one) and rebuild only
what was lost:

- **Rebirth**: a new Spark task replaces each lost worker (:class:`~epochal.control.kinds.ReplaceWorker`);
  once all replacements are connected and ready, every live worker gets :class:`Recover`.
- **Migration**: lost workers are retired (:class:`~epochal.control.kinds.RetireWorker`); their
  masters move to the workers of their responsible mirrors, which this machine computes from the
  load-time plan, and every survivor gets :class:`Recover` at once.

A worker reports :class:`Recovered` when its partition is whole again; when all did, the
coordinator resumes the barrier. A loss during a Rebirth recovery restarts it (a new epoch, with
every worker lost so far); a loss during a Migration fails the attempt (survivors may already have
rebuilt). A loss that leaves some vertex without any copy fails the attempt with a message saying
how many vertices were lost and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from epochal.control.kinds import ReplaceWorker, RetireWorker
from epochal.graph.recovery import ReplicationSettings, responsible_for
from epochal.graph.supersteps import FinishRecovery, Recover, Recovered, RecoveryPrepared
from epochal.messages import Failed


@dataclass
class _Recovery:
    epoch: int
    lost: set[int]
    detected: float
    resume_at: int
    #: waiting (for replacements), preparing (batches in flight), finishing (workers assemble)
    phase: str = "waiting"
    started: float | None = None
    waiting: set[int] = field(default_factory=set)
    rejoined: set[int] = field(default_factory=set)
    moves: tuple[np.ndarray, np.ndarray] | None = None
    #: per worker: where its time went (the ``phases`` of its ``Recovered``)
    phases: dict[int, dict[str, float]] = field(default_factory=dict)


class ReplicaRecovery:
    """Which workers are lost, gone or being replaced, and where lost masters go; pure.

    A recovery has two phases so that a loss in the middle of it is safe: while *preparing*,
    workers only exchange batches (nothing they hold changes; a loss starts a new epoch with
    every worker lost so far); once all prepared, :class:`FinishRecovery` makes them assemble
    (a loss then is a new recovery of the new layout)."""

    def __init__(self, settings: ReplicationSettings, vertices: np.ndarray | None, owner: np.ndarray,
                 mirrors: np.ndarray, num_workers: int, counts: np.ndarray | None = None) -> None:
        """One row per vertex (``vertices``: their ids; ``owner``, ``mirrors``: their worker and
        mirror workers), or, for a graph loaded on the executors, one row per distinct ``(owner,
        mirrors)`` pattern with ``counts`` vertices each and ``vertices`` None: then the workers
        find Migration's moves themselves (:func:`~epochal.graph.recovery.moves_of`) and the
        JobMaster holds ``W^(k+1)`` rows at most, whatever the graph's size."""
        self.settings = settings
        self.vertices = vertices
        self.counts = counts
        self.owner = owner.astype(np.int64, copy=True)
        self.mirrors = mirrors
        self.num_workers = num_workers
        self.gone: set[int] = set()
        self.current: _Recovery | None = None
        self.epoch = 0
        #: one entry per completed recovery (times are the JobMaster's monotonic clock)
        self.history: list[dict[str, Any]] = []

    @property
    def live(self) -> list[int]:
        return [w for w in range(self.num_workers) if w not in self.gone]

    @property
    def recovering(self) -> bool:
        return self.current is not None

    def _unrecoverable(self, lost: set[int]) -> int:
        unrecoverable = responsible_for(self.owner, self.mirrors, lost | self.gone) < 0
        return int(unrecoverable.sum() if self.counts is None else self.counts[unrecoverable].sum())

    def worker_lost(self, worker: int, resume_at: int, now: float) -> list[Any]:
        """Running worker ``worker`` was lost; ``resume_at``: the superstep to restart from."""
        if worker in self.gone:
            return []
        current = self.current
        if current is not None and current.phase == "finishing":
            self._complete(now)  # the workers assemble the new layout; recover from that one
            current = None
        lost = {worker} | (current.lost if current is not None else set())
        missing = self._unrecoverable(lost)
        if missing:
            return [Failed("worker_lost", worker=worker, error=(
                f"worker {worker} was lost, and with it the only copy of {missing} vertices (lost workers "
                f"{sorted(lost | self.gone)}; replication keeps k={self.settings.k} extra copies"
                f"{'' if self.settings.ft_replicas else ', FT replicas disabled'}). Run with a larger k, or "
                "with fault_tolerance='checkpoint'"))]
        self.epoch += 1
        self.current = _Recovery(self.epoch, lost, now if current is None else current.detected,
                                 resume_at if current is None else min(resume_at, current.resume_at),
                                 rejoined=set() if current is None else current.rejoined - {worker})
        if self.settings.mode == "rebirth":
            return [ReplaceWorker(worker), *self._maybe_prepare(now)]
        return [RetireWorker(worker), self._prepare(now)]

    def worker_rejoined(self, worker: int, now: float) -> list[Any]:
        """The replacement of lost ``worker`` is ready; once all are, recovery starts."""
        current = self.current
        if current is None:
            return []
        current.rejoined.add(worker)
        return self._maybe_prepare(now)

    def _maybe_prepare(self, now: float) -> list[Any]:
        current = self.current
        assert current is not None
        return [self._prepare(now)] if current.lost <= current.rejoined else []

    def _prepare(self, now: float) -> Recover:
        current = self.current
        assert current is not None
        current.phase, current.started = "preparing", now
        migration = self.settings.mode == "migration"
        live = [w for w in self.live if not (migration and w in current.lost)]
        current.waiting = set(live)
        moved_ids = moved_to = None
        if migration:
            dense = np.flatnonzero(np.isin(self.owner, list(current.lost)))
            target = responsible_for(self.owner[dense], self.mirrors[dense], current.lost | self.gone)
            current.moves = (dense, target)
            if self.vertices is not None:
                moved_ids, moved_to = self.vertices[dense], target
        survivors = [w for w in live if w not in current.lost]
        return Recover(current.epoch, current.resume_at, tuple(sorted(current.lost)), self.settings.mode,
                       tuple(sorted(self.gone)), moved_ids, moved_to, min(survivors))

    def on_prepared(self, worker: int, report: RecoveryPrepared) -> list[Any]:
        """A worker has every batch of the current epoch; once all do, they assemble."""
        current = self.current
        if current is None or report.epoch != current.epoch or current.phase != "preparing":
            return []
        current.waiting.discard(worker)
        if current.waiting:
            return []
        current.phase = "finishing"
        current.waiting = set(self.live) - (current.lost if self.settings.mode == "migration" else set())
        if current.moves is not None:
            dense, target = current.moves
            self.owner[dense] = target
            self.gone |= current.lost
        return [FinishRecovery(current.epoch)]

    def on_recovered(self, worker: int, report: Recovered, now: float) -> bool:
        """A worker assembled; True once every live worker did (the barrier resumes)."""
        current = self.current
        if current is None or report.epoch != current.epoch or current.phase != "finishing":
            return False
        current.waiting.discard(worker)
        current.phases[worker] = dict(report.phases)
        if current.waiting:
            return False
        self._complete(now)
        return True

    def _complete(self, now: float) -> None:
        current = self.current
        assert current is not None
        self.history.append({"epoch": current.epoch, "lost": sorted(current.lost), "mode": self.settings.mode,
                             "resume_at": current.resume_at, "detected": current.detected,
                             "started": current.started, "recovered": now, "workers": dict(current.phases)})
        self.current = None
