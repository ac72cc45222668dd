"""A graph worker's heart as a pure state machine: events in, instructions out.

:class:`GraphWorkerMachine` owns a graph worker's phase (registering, loading, resyncing after a
restore, ready, running, halted, stopped) with its deadlines, and the superstep in progress: a
superstep is done on this worker once it computed (``Computed``) and every peer's exchange for it
arrived (``ExchangeArrived``); then it commits, writes its checkpoint when the barrier asked for
one, and reports to the JobMaster, which holds the global barrier
(:mod:`epochal.graph.supersteps`). Hook points: ``superstep`` after computing (mid-superstep,
before the barrier) and ``barrier`` after reporting. The driver is :mod:`epochal.graph.worker`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from epochal.graph.engine import StepReport
from epochal.graph.supersteps import Halt, RunSuperstep, SuperstepDone
from epochal.messages import (
    Deploy,
    Dispatch,
    KindCommand,
    KindReport,
    Processing,
    Ready,
    Start,
)
from epochal.runtime.mailbox import PeerClosed
from epochal.runtime.worker_events import FailPeerLost, ReachPoint, Send, StopWorker
from epochal.runtime.worker_lifecycle import WorkerLifecycle, register_lifecycle


# ---------------------------------------------------------------------- events
@dataclass(frozen=True)
class Loaded:
    """The partition is loaded (and, with ``restored``, its checkpointed state reinstated)."""

    now: float
    timeout: float
    num_workers: int
    restored: bool


@dataclass(frozen=True)
class ExchangeArrived:
    """Peer ``sender``'s exchange for ``superstep`` arrived (``resync``: after a restore)."""

    superstep: int
    sender: int
    resync: bool = False


@dataclass(frozen=True)
class Computed:
    """This worker computed ``superstep`` and sent its exchanges."""

    superstep: int
    report: StepReport


@dataclass(frozen=True)
class CheckpointWritten:
    """This worker's checkpoint file of ``superstep`` is durable."""

    superstep: int
    handle: dict[str, Any]


# ---------------------------------------------------------------------- instructions
@dataclass(frozen=True)
class ConnectAndLoad:
    """Connect to the peers of ``deploy``, load the partition, restore; then feed :class:`Loaded`."""

    deploy: Deploy


@dataclass(frozen=True)
class SendResync:
    """Send every master's restored value to the peers' replicas."""


@dataclass(frozen=True)
class CommitResync:
    """Every peer's resync arrived: the replicas are as they were at the checkpoint."""


@dataclass(frozen=True)
class Compute:
    """Run ``superstep`` and send its exchanges; then feed :class:`Computed`."""

    command: RunSuperstep


@dataclass(frozen=True)
class Commit:
    """``superstep`` is complete on this worker: make its results current."""

    superstep: int


@dataclass(frozen=True)
class WriteCheckpoint:
    """Write this worker's state after ``superstep`` (changed masters only unless ``full``)."""

    superstep: int
    full: bool


@dataclass(frozen=True)
class StartHeartbeats:
    """The job started: start the heartbeat thread."""


@dataclass(frozen=True)
class WriteOutput:
    """The computation halted: write this worker's results and report finished."""


Instruction = (Send | StopWorker | FailPeerLost | ReachPoint | ConnectAndLoad | SendResync | CommitResync
               | Compute | Commit | WriteCheckpoint | StartHeartbeats | WriteOutput)


class GraphPhase(enum.Enum):
    REGISTERING = "registering"
    LOADING = "loading"
    RESYNCING = "resyncing"
    READY = "ready"
    RUNNING = "running"
    HALTED = "halted"
    STOPPED = "stopped"


_WAITING_FOR = {GraphPhase.REGISTERING: "Deploy", GraphPhase.READY: "Start"}
_HANDLERS = Dispatch("graph worker machine")
_COMMANDS = Dispatch("graph worker commands")


@dataclass
class _Superstep:
    command: RunSuperstep
    report: StepReport | None = None
    committed: bool = False


class GraphWorkerMachine(WorkerLifecycle):
    """The protocol state of graph worker ``worker``; unexpected events are ignored."""

    STOPPED = GraphPhase.STOPPED
    WAITING_FOR = _WAITING_FOR

    def __init__(self, worker: int) -> None:
        super().__init__(worker, GraphPhase.REGISTERING)
        self.num_workers = 1
        self.current: _Superstep | None = None
        #: senders whose exchange arrived, per superstep (a fast peer may be a superstep ahead of us)
        self.arrived: dict[int, set[int]] = {}
        self.resynced: set[int] = set()
        self.halted_at: int | None = None
        self.processing_reported = False

    def handle(self, event: Any) -> list[Instruction]:
        return self.dispatch(_HANDLERS, event)

    @property
    def running(self) -> bool:
        return self.phase in (GraphPhase.RUNNING, GraphPhase.HALTED)

    # ---------------------------------------------------------------- life cycle
    @_HANDLERS.on(Deploy)
    def _deploy(self, message: Deploy) -> list[Instruction]:
        if self.phase is not GraphPhase.REGISTERING:
            return []
        self.phase, self.deadline = GraphPhase.LOADING, None
        return [ConnectAndLoad(message)]

    @_HANDLERS.on(Loaded)
    def _loaded(self, event: Loaded) -> list[Instruction]:
        self.num_workers = event.num_workers
        self.deadline, self.timeout = event.now + event.timeout, event.timeout
        if event.restored and event.num_workers > 1:
            self.phase = GraphPhase.RESYNCING
            return [SendResync()] + self._resynced()
        self.phase = GraphPhase.READY
        return [Send(Ready(self.worker))]

    def _resynced(self) -> list[Instruction]:
        if self.phase is GraphPhase.RESYNCING and len(self.resynced) == self.num_workers - 1:
            self.phase = GraphPhase.READY
            return [CommitResync(), Send(Ready(self.worker))]
        return []

    @_HANDLERS.on(Start)
    def _start(self, message: Start) -> list[Instruction]:
        if self.phase is not GraphPhase.READY:
            return []
        self.phase, self.deadline = GraphPhase.RUNNING, None
        return [StartHeartbeats()]

    def _timed_out(self) -> str:
        if self.phase is GraphPhase.RESYNCING:
            return f"peers did not resynchronise within {self.timeout:.0f} s"
        return super()._timed_out()

    @_HANDLERS.on(PeerClosed)
    def _peer_closed(self, event: PeerClosed) -> list[Instruction]:
        if self.phase is GraphPhase.HALTED:
            return []  # a peer that wrote its results and stopped
        self.phase = GraphPhase.STOPPED
        return [FailPeerLost(event.peer, event.reason)]

    # ---------------------------------------------------------------- supersteps
    @_HANDLERS.on(KindCommand)
    def _command(self, message: KindCommand) -> list[Instruction]:
        if self.phase is not GraphPhase.RUNNING:
            return []
        handler = _COMMANDS.handlers.get(type(message.payload))
        return handler(self, message.payload) if handler is not None else []

    @_COMMANDS.on(RunSuperstep)
    def _run(self, command: RunSuperstep) -> list[Instruction]:
        if self.current is not None and not self.current.committed:
            return []  # the barrier never starts a superstep before every worker reported the last
        self.current = _Superstep(command)
        return [Compute(command)]

    @_COMMANDS.on(Halt)
    def _halt(self, command: Halt) -> list[Instruction]:
        self.phase, self.halted_at = GraphPhase.HALTED, command.superstep
        return [WriteOutput()]

    @_HANDLERS.on(Computed)
    def _computed(self, event: Computed) -> list[Instruction]:
        current = self.current
        if current is None or current.command.superstep != event.superstep:
            return []
        current.report = event.report
        out: list[Instruction] = [ReachPoint("superstep", event.superstep)]
        if not self.processing_reported:  # the JobMaster times recovery up to the first superstep
            self.processing_reported = True
            out.append(Send(Processing(self.worker)))
        return out + self._maybe_done()

    @_HANDLERS.on(ExchangeArrived)
    def _arrived(self, event: ExchangeArrived) -> list[Instruction]:
        if event.resync:
            self.resynced.add(event.sender)
            return self._resynced()
        self.arrived.setdefault(event.superstep, set()).add(event.sender)
        return self._maybe_done()

    def _maybe_done(self) -> list[Instruction]:
        current = self.current
        if current is None or current.report is None or current.committed:
            return []
        n = current.command.superstep
        if len(self.arrived.get(n, ())) < self.num_workers - 1:
            return []
        current.committed = True
        self.arrived.pop(n, None)  # (a single worker waits for no peer)
        out: list[Instruction] = [Commit(n)]
        if current.command.checkpoint:
            out.append(WriteCheckpoint(n, current.command.full))
            return out
        return out + self._report(None)

    @_HANDLERS.on(CheckpointWritten)
    def _checkpoint_written(self, event: CheckpointWritten) -> list[Instruction]:
        current = self.current
        if current is None or current.command.superstep != event.superstep:
            return []
        return self._report(event.handle)

    def _report(self, handle: dict[str, Any] | None) -> list[Instruction]:
        current = self.current
        assert current is not None and current.report is not None
        n = current.command.superstep
        done = SuperstepDone(current.report, handle, current.command.full)
        return [Send(KindReport(self.worker, done)), ReachPoint("barrier", n)]


register_lifecycle(_HANDLERS)
