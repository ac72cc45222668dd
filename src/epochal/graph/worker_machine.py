"""A graph worker's heart as a pure state machine: events in, instructions out.

:class:`GraphWorkerMachine` owns a graph worker's phase (registering, loading, resyncing after a
restore, ready, running, halted, stopped) with its deadlines, and the superstep in progress: a
superstep is done on this worker once it computed (``Computed``) and every peer's exchange for it
arrived (``ExchangeArrived``); then it commits, writes its checkpoint when the barrier asked for
one, and reports to the JobMaster, which holds the global barrier
(:mod:`epochal.graph.supersteps`). Hook points: ``superstep`` after computing (mid-superstep,
before the barrier) and ``barrier`` after reporting; ``recovery`` once its recovery batches
are sent. Its events and instructions are :mod:`epochal.graph.protocol`; the driver is
:mod:`epochal.graph.worker`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from epochal.graph.engine import StepReport
from epochal.graph.protocol import (
    Assemble,
    Assembled,
    CheckpointFileWritten,
    Commit,
    CommitResync,
    Compute,
    Computed,
    ConnectAndLoad,
    Event,
    ExchangeArrived,
    Instruction,
    Loaded,
    PeerRejoined,
    RecoveryArrived,
    Rewind,
    SendRecovery,
    SendResync,
    StartHeartbeats,
    WriteCheckpointFile,
    WriteOutput,
)
from epochal.graph.supersteps import (
    FinishRecovery,
    Halt,
    Recover,
    Recovered,
    RecoveryPrepared,
    RunSuperstep,
    SuperstepDone,
)
from epochal.machines import UnknownEvent
from epochal.messages import (
    Deploy,
    Dispatch,
    KindCommand,
    KindReport,
    Processing,
    Ready,
    Start,
)
from epochal.runtime.host.events import FailPeerLost, ReachPoint, Send
from epochal.runtime.host.lifecycle import WorkerLifecycle, register_lifecycle
from epochal.runtime.host.mailbox import PeerClosed


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
    """The protocol state of graph worker ``worker``. It takes the
    :data:`~epochal.graph.protocol.Event` s and raises :class:`~epochal.machines.UnknownEvent` for
    any other (a ``KindCommand`` too, whose payload is no :data:`~epochal.graph.protocol.GraphCommand`);
    an event its phase does not expect is ignored."""

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
        #: the last superstep whose global barrier this worker saw pass (a command after it came)
        self.barrier_passed = -1
        # -- replication fault tolerance (papers/003): a commit can be taken back until its barrier passed
        self.replicated = False
        self.epoch = 0
        self.recovery: Recover | None = None
        self.recovery_sent = False
        self.prepared = False
        #: recovery batches arrived, by epoch (one may come before its Recover)
        self.batches_from: dict[int, set[int]] = {}
        #: peers whose connection is lost; replacements connected since; workers gone for good
        self.lost: set[int] = set()
        self.joined: set[int] = set()
        self.gone: set[int] = set()

    def handle(self, event: Event) -> list[Instruction]:
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

    @property
    def live_peers(self) -> set[int]:
        """The peers this worker exchanges with (all but itself and those gone)."""
        return {p for p in range(self.num_workers) if p != self.worker and p not in self.gone}

    @_HANDLERS.on(Loaded)
    def _loaded(self, event: Loaded) -> list[Instruction]:
        self.num_workers = event.num_workers
        self.replicated = event.replicated
        if event.joined is not None:
            self.joined = set(event.joined)
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
        if self.replicated and self.running:
            self.lost.add(event.peer)  # the JobMaster recovers it; wait for its command
            self.joined.discard(event.peer)
            return []
        if self.phase is GraphPhase.HALTED:
            return []  # a peer that wrote its results and stopped
        self.phase = GraphPhase.STOPPED
        return [FailPeerLost(event.peer, event.reason)]

    # ---------------------------------------------------------------- supersteps
    @_HANDLERS.on(KindCommand)
    def _command(self, message: KindCommand) -> list[Instruction]:
        handler = _COMMANDS.handlers.get(type(message.payload))
        if handler is None:
            raise UnknownEvent(_COMMANDS.name, message.payload)
        if self.phase is not GraphPhase.RUNNING and not (self.replicated and self.phase is GraphPhase.HALTED):
            return []
        return handler(self, message.payload)

    @_COMMANDS.on(RunSuperstep)
    def _run(self, command: RunSuperstep) -> list[Instruction]:
        if self.current is not None and not self.current.committed:
            return []  # the barrier never starts a superstep before every worker reported the last
        self.current = _Superstep(command)
        return [*self._passed(command.superstep - 1), Compute(command)]

    @_COMMANDS.on(Halt)
    def _halt(self, command: Halt) -> list[Instruction]:
        self.phase, self.halted_at = GraphPhase.HALTED, command.superstep
        return [*self._passed(command.superstep), WriteOutput()]

    def _passed(self, n: int) -> list[Instruction]:
        """The master's command after superstep ``n`` arrived: ``n``'s global barrier passed. The
        ``"barrier"`` point is reached once per superstep, before the worker acts on the command."""
        if n <= self.barrier_passed:
            return []
        self.barrier_passed = n
        return [ReachPoint("barrier", n)]

    # ---------------------------------------------------------------- recovery (replication)
    @_COMMANDS.on(Recover)
    def _recover(self, command: Recover) -> list[Instruction]:
        if command.epoch <= self.epoch:
            return []
        self.epoch, self.recovery = command.epoch, command
        self.recovery_sent = self.prepared = False
        self.current = None  # (Rewind takes back a commit whose barrier did not pass)
        self.arrived = {n: s for n, s in self.arrived.items() if n < command.resume_at}
        self.gone |= set(command.gone)
        return [Rewind(command.resume_at), *self._maybe_send_recovery()]

    def _expected_batches(self, command: Recover) -> set[int]:
        peers = self.live_peers
        return peers - set(command.lost) if command.mode == "migration" else peers

    def _maybe_send_recovery(self) -> list[Instruction]:
        command = self.recovery
        if command is None or self.recovery_sent:
            return []
        if command.mode == "rebirth" and not {p for p in command.lost if p != self.worker} <= self.joined:
            return []  # a replacement has not connected yet
        self.recovery_sent = True
        return [SendRecovery(command), ReachPoint("recovery", command.epoch), *self._maybe_prepared()]

    def _maybe_prepared(self) -> list[Instruction]:
        command = self.recovery
        if command is None or not self.recovery_sent or self.prepared:
            return []
        if not self._expected_batches(command) <= self.batches_from.get(command.epoch, set()):
            return []
        self.prepared = True
        return [Send(KindReport(self.worker, RecoveryPrepared(command.epoch)))]

    @_HANDLERS.on(PeerRejoined)
    def _rejoined(self, event: PeerRejoined) -> list[Instruction]:
        self.lost.discard(event.peer)
        self.joined.add(event.peer)
        return self._maybe_send_recovery()

    @_HANDLERS.on(RecoveryArrived)
    def _batch_arrived(self, event: RecoveryArrived) -> list[Instruction]:
        if event.epoch < self.epoch:
            return []
        self.batches_from.setdefault(event.epoch, set()).add(event.sender)
        return self._maybe_prepared()

    @_COMMANDS.on(FinishRecovery)
    def _finish(self, command: FinishRecovery) -> list[Instruction]:
        recovery = self.recovery
        if recovery is None or command.epoch != recovery.epoch or not self.prepared:
            return []
        return [Assemble(recovery)]

    @_HANDLERS.on(Assembled)
    def _assembled(self, event: Assembled) -> list[Instruction]:
        recovery = self.recovery
        if recovery is None or recovery.epoch != event.epoch:
            return []
        if recovery.mode == "migration":
            self.gone |= set(recovery.lost)
        self.recovery = None
        self.batches_from = {e: s for e, s in self.batches_from.items() if e > event.epoch}
        return [Send(KindReport(self.worker, Recovered(event.epoch, dict(event.phases))))]

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
        if not self.live_peers <= self.arrived.get(n, set()):
            return []
        current.committed = True
        self.arrived.pop(n, None)  # (a single worker waits for no peer)
        out: list[Instruction] = [Commit(n, undo=self.replicated)]
        if current.command.checkpoint:
            out.append(WriteCheckpointFile(n, current.command.full))
            return out
        return out + self._report(None)

    @_HANDLERS.on(CheckpointFileWritten)
    def _checkpoint_written(self, event: CheckpointFileWritten) -> list[Instruction]:
        current = self.current
        if current is None or current.command.superstep != event.superstep:
            return []
        return self._report(event.handle)

    def _report(self, handle: dict[str, Any] | None) -> list[Instruction]:
        current = self.current
        assert current is not None and current.report is not None
        done = SuperstepDone(current.report, handle, current.command.full)
        return [Send(KindReport(self.worker, done))]


register_lifecycle(_HANDLERS)
