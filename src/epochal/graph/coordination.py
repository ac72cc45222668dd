"""The graph job's coordinator on the JobMaster: the global barrier and the checkpoint baseline.

:class:`GraphCoordination` is the :class:`~epochal.control.kinds.KindCoordinator` of the ``graph``
job kind. It wraps the barrier machine (:class:`~epochal.graph.supersteps.SuperstepCoordinator`),
turns workers' :class:`~epochal.graph.supersteps.SuperstepDone` reports into the next command,
and completes checkpoints: when every worker reported a checkpointed superstep, it appends each
worker's file to that worker's chain (a full file starts a new chain) and has the driver write
the metadata (:class:`~epochal.control.checkpoint_files.WriteCheckpoint`, as a dataflow job's
checkpoints are; a failed write fails the attempt);
a new attempt restores the latest complete one and resumes at the superstep after it. It also
keeps per-superstep timings (time is passed in) for the benchmarks, and the halting decision.
"""

from __future__ import annotations

from typing import Any, ClassVar

from epochal.control import job_failures
from epochal.control.checkpoint_files import WriteCheckpoint
from epochal.control.jobmaster_events import ResolveRestore, SavepointDone, SavepointRequest
from epochal.control.kinds import (
    KindCoordinator,
    KindOutput,
    KindTable,
    ReplaceWorker,
    RetireWorker,
    TaskLocalRecovery,
)
from epochal.graph import checkpoints
from epochal.graph.program import VectorProgram, VertexProgram
from epochal.graph.replica_recovery import ReplicaRecovery
from epochal.graph.supersteps import (
    Halt,
    Recovered,
    RecoveryPrepared,
    RunSuperstep,
    SuperstepCoordinator,
    SuperstepDone,
)
from epochal.graph.worker import GraphWorker
from epochal.messages import Failed, KindCommand, KindReport, ToJobMaster
from epochal.state.storage import CheckpointStorage

#: Supersteps the dashboard shows (the latest).
SHOWN = 200


class GraphCoordination(KindCoordinator):
    """The barrier of one graph job (``checkpoint_interval`` 0: no checkpoints; every
    ``full_every``-th checkpoint is full, so a restore never reads a long chain). With
    ``replication`` it recovers lost workers from replicas: its ``local_recovery`` is itself."""

    worker_body: ClassVar[type] = GraphWorker
    kind_name: ClassVar[str] = "graph"

    def __init__(self, job_name: str, program: VectorProgram | VertexProgram, num_workers: int,
                 storage: CheckpointStorage | None = None, checkpoint_interval: int = 0, full_every: int = 8,
                 replication: ReplicaRecovery | None = None) -> None:
        self.job_name = job_name
        #: replication fault tolerance (papers/003): lost workers are recovered task-locally
        self.replication = replication
        self.local_recovery: TaskLocalRecovery | None = self if replication is not None else None
        self.storage = storage
        self.full_every = max(1, full_every)
        self.supersteps = SuperstepCoordinator(program, num_workers, checkpoint_interval if storage else 0)
        #: per worker: the chain of the latest complete checkpoint, and the files of the pending one
        self.chains: dict[int, list[list[Any]]] = {}
        #: the newest checkpoint whose metadata is written, and the chains it holds (what a failed
        #: write of a newer one falls back to)
        self.written: int | None = None
        self.written_chains: dict[int, list[list[Any]]] = {}
        self.pending: dict[int, tuple[dict[str, Any], bool]] = {}
        self.checkpoints_since_full = 0
        self.halted: Halt | None = None
        #: per superstep: monotonic time it was started and completed, and per worker when its
        #: report arrived and its compute / send / commit seconds (for the benchmarks)
        self.timings: list[dict[str, Any]] = []
        self.restores: list[int] = []

    @property
    def latest_checkpoint(self) -> int | None:
        return self.supersteps.latest_checkpoint

    def tables(self, metrics: dict[int, dict[str, Any]]) -> list[KindTable]:
        """Supersteps (active vertices, messages sent, seconds, checkpointed), the latest
        :data:`SHOWN`; recoveries by replication (Rebirth or Migration, with each worker's phases)
        and restores from checkpoints."""
        timed = {t["superstep"]: t for t in self.timings}
        rows = []
        for step in self.supersteps.history[-SHOWN:]:
            timing = timed.get(step["superstep"], {})
            took = timing["completed"] - timing["started"] if "completed" in timing else None
            rows.append((step["superstep"], step["active"], step["sent"], took, bool(timing.get("checkpoint"))))
        tables = [KindTable("Supersteps", ("superstep", "active vertices", "messages sent", "seconds", "checkpoint"),
                            rows)]
        if self.replication is not None:
            tables.append(KindTable("Recoveries (replication)", (
                "epoch", "lost workers", "mode", "seconds", "phases per worker"), [
                (r["epoch"], ", ".join(map(str, r["lost"])), r["mode"], r["recovered"] - r["detected"],
                 "; ".join(f"{w}: " + ", ".join(f"{k} {v:.3f}s" for k, v in phases.items())
                           for w, phases in sorted(r["workers"].items())))
                for r in self.replication.history]))
        if self.restores:
            tables.append(KindTable("Restores from checkpoints", ("restore", "superstep"),
                                    [(i + 1, step) for i, step in enumerate(self.restores)]))
        return tables

    def _command(self, step: RunSuperstep, now: float) -> RunSuperstep:
        if step.checkpoint:
            full = not self.chains or self.checkpoints_since_full + 1 >= self.full_every
            step = RunSuperstep(step.superstep, step.aggregates, True, full, step.final)
        self.timings.append({"superstep": step.superstep, "started": now, "checkpoint": step.checkpoint,
                             "full": step.full})
        return step

    # ---------------------------------------------------------------- KindCoordinator
    def restore_request(self, attempt: int) -> ResolveRestore:
        latest = self.latest_checkpoint
        if latest is None or self.storage is None:
            return ResolveRestore(None, None, None)
        return ResolveRestore(self.storage, latest, None)

    def resume(self, checkpoint_id: int, metadata: dict[str, Any]) -> None:
        """Take over a job another driver ran (high availability): its latest complete checkpoint
        ``checkpoint_id`` (the superstep) with ``metadata`` as written (each worker's chain and the
        aggregates after it) is where the first attempt restores and resumes, and what this
        coordinator's next checkpoints extend, as after a restart in the same driver."""
        if metadata.get("kind") != checkpoints.KIND or int(metadata.get("superstep", -1)) != checkpoint_id:
            raise ValueError(f"checkpoint {checkpoint_id} is not a graph checkpoint of that superstep: "
                             f"kind {metadata.get('kind')!r}, superstep {metadata.get('superstep')!r}")
        self.chains = {int(w): [list(entry) for entry in chain] for w, chain in metadata["workers"].items()}
        self.written, self.written_chains = checkpoint_id, {w: list(c) for w, c in self.chains.items()}
        self.supersteps.latest_checkpoint = checkpoint_id
        self.supersteps.checkpoint_aggregates[checkpoint_id] = dict(metadata.get("aggregates", {}))
        self.pending = {}

    def started(self, now: float, wall: float) -> list[KindOutput]:
        latest = self.latest_checkpoint
        if latest is not None:
            self.restores.append(latest)
        self.pending = {}
        return [KindCommand(self._command(self.supersteps.start(resume_after=latest), now))]

    def new_attempt(self, attempt: int) -> None:
        self.pending = {}

    def request_savepoint(self, request: SavepointRequest, now: float, wall: float) -> list[KindOutput]:
        return [SavepointDone(request.request_id, None, (
            "graph jobs take no savepoints: a vertex program runs to its end from its input graph; "
            "restart it, or run it with fault_tolerance='checkpoint' to survive failures"))]

    def checkpoint_written(self, checkpoint_id: int, error: str | None, now: float) -> list[KindOutput]:
        """The metadata of ``checkpoint_id`` is written: the next attempt may restore it. If it could
        not be written, the attempt fails and the next one restores the newest written checkpoint."""
        if error is None:
            self.written, self.written_chains = checkpoint_id, {w: list(c) for w, c in self.chains.items()}
            return []
        self.supersteps.latest_checkpoint = self.written
        self.chains = {w: list(c) for w, c in self.written_chains.items()}
        self.pending = {}
        return [job_failures.checkpoint_declined(checkpoint_id, f"its metadata could not be written: {error}", 0)]

    # ---------------------------------------------------------------- TaskLocalRecovery
    @property
    def recovering(self) -> bool:
        """A recovery from replicas is under way; once done, the barrier (or the ``Halt``) is sent again."""
        return self.replication is not None and self.replication.recovering

    def worker_lost(self, worker: int, now: float) -> list[KindOutput]:
        """A running worker was lost: recover it from replicas; the superstep in progress (the
        next one, when the loss came after a barrier) runs again once every worker recovered."""
        assert self.replication is not None
        resume_at = self.halted.superstep + 1 if self.halted is not None else self.supersteps.superstep
        self.supersteps.reports = {}
        out = self.replication.worker_lost(worker, resume_at, now)
        self.supersteps.num_workers = len(self.replication.live)
        return _commands(out)

    def worker_rejoined(self, worker: int, now: float) -> list[KindOutput]:
        assert self.replication is not None
        return _commands(self.replication.worker_rejoined(worker, now))

    def live_workers(self) -> list[int]:
        """The workers whose results make up the job's output."""
        return self.replication.live if self.replication is not None else list(range(self.supersteps.num_workers))

    def on_message(self, worker: int, message: ToJobMaster, now: float, wall: float,
                   running: bool) -> list[KindOutput]:
        if not isinstance(message, KindReport):
            return []
        return _commands(self._on_report(worker, message.payload, now))

    def _on_report(self, worker: int, payload: Any, now: float) -> list[Any]:
        replication = self.replication
        if isinstance(payload, RecoveryPrepared) and replication is not None:
            return replication.on_prepared(worker, payload)
        if isinstance(payload, Recovered) and replication is not None:
            if not replication.on_recovered(worker, payload, now):
                return []
            self.supersteps.num_workers = len(replication.live)
            if self.halted is not None:
                return [self.halted]
            return [self._command(self.supersteps.command(), now)]
        if not isinstance(payload, SuperstepDone) or (replication is not None and replication.recovering):
            return []
        report = payload.report
        if self.timings and report.superstep == self.timings[-1]["superstep"]:  # where the worker's time went
            self.timings[-1].setdefault("workers", {})[worker] = {"reported": now, **report.phases}
        if payload.checkpoint is not None and report.superstep == self.supersteps.superstep:
            self.pending[worker] = (payload.checkpoint, payload.full)
        decision = self.supersteps.on_report(worker, report)
        if decision is None:
            return []
        n = report.superstep
        self.timings[-1]["completed"] = now
        written = [self._complete_checkpoint(n)] if self.supersteps.latest_checkpoint == n and self.storage else []
        if isinstance(decision, Halt):
            self.halted = decision
            return [*written, decision]
        return [*written, self._command(decision, now)]

    def _complete_checkpoint(self, superstep: int) -> WriteCheckpoint:
        assert self.storage is not None
        full = any(f for _, f in self.pending.values())
        for worker, (handle, is_full) in self.pending.items():
            entry = [superstep, handle]
            self.chains[worker] = [entry] if is_full else [*self.chains.get(worker, []), entry]
        self.checkpoints_since_full = 0 if full else self.checkpoints_since_full + 1
        self.pending = {}
        return WriteCheckpoint(self.storage, superstep, checkpoints.metadata(
            superstep, self.supersteps.checkpoint_aggregates.get(superstep, {}), self.chains, self.job_name))


def _commands(items: list[Any]) -> list[KindOutput]:
    """The barrier's and the replica recovery's commands as messages to every worker; what the
    JobMaster's machine carries out itself (workers to replace or retire, a failure, I/O) as it is."""
    return [item if isinstance(item, (Failed, ReplaceWorker, RetireWorker, WriteCheckpoint)) else KindCommand(item)
            for item in items]
