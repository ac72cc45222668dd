"""The worker's heart as a pure state machine: events in, instructions out.

:class:`WorkerMachine` owns the worker's phase (registering, deploying, ready, running, stopped)
with its deadlines, what it has reported to the JobMaster (first record, finished), and two sub-
machines with one owner each: the snapshot pipeline
(:mod:`epochal.dataflow.checkpointing.snapshots`) and the loops
(:mod:`epochal.dataflow.checkpointing.loop_heads`). Its events, the :data:`~epochal.dataflow.protocol.Event`
union, are the JobMaster's control messages to a dataflow worker, a lost peer
(:mod:`epochal.runtime.host.mailbox`), and what the driver observes
(:mod:`epochal.dataflow.protocol`, :mod:`epochal.dataflow.checkpointing.events`,
:mod:`epochal.runtime.host.events`); ``handle`` dispatches them by type (``_HANDLERS``, one
handler per member of the union) and returns the instructions the driver
(:mod:`epochal.dataflow.worker`) carries out, in order. No sockets, threads or clocks here: time
is an event field.

Records do not pass through the machine: the driver's data path moves batches from input
channels through the operators, and tells the machine only about protocol moments (an alignment
completed, a subtask finished, a probe or feedback arrived at a loop subtask).
"""

from __future__ import annotations

import enum

from epochal.config import NONE
from epochal.dataflow.checkpointing.events import (
    AlignmentOverflow,
    CheckpointingInstruction,
    Feedback,
    FinishSubtask,
    InputEnded,
    LoopClosed,
    ProbeArrived,
    SnapshotHeld,
    SubtaskAligned,
    SubtaskFinished,
    SubtaskInfo,
    SubtaskKey,
)
from epochal.dataflow.checkpointing.loop_heads import LoopHeads
from epochal.dataflow.checkpointing.messages import (
    CheckpointAbort,
    CheckpointComplete,
    EndLoop,
    StartLoopProbe,
    TriggerCheckpoint,
)
from epochal.dataflow.checkpointing.snapshots import SnapshotPipeline
from epochal.dataflow.protocol import (
    Built,
    ConnectAndBuild,
    EndSources,
    Event,
    FinishSources,
    FirstRecord,
    Instruction,
    StartProcessing,
    WorkerDrained,
)
from epochal.messages import Deploy, Dispatch, Finished, Processing, Ready, Start
from epochal.runtime.host.events import FailPeerLost, Send, StopWorker
from epochal.runtime.host.lifecycle import WorkerLifecycle, register_lifecycle
from epochal.runtime.host.mailbox import PeerClosed


class WorkerPhase(enum.Enum):
    """Where a worker is in its life."""

    REGISTERING = "registering"  # registered; waiting for the deployment
    DEPLOYING = "deploying"      # connecting to peers and opening subtasks
    READY = "ready"              # reported ready; waiting for the start
    RUNNING = "running"
    STOPPED = "stopped"


#: What the worker waits for in each phase with a deadline (for the timeout message).
_WAITING_FOR = {WorkerPhase.REGISTERING: "Deploy", WorkerPhase.READY: "Start"}
#: Message and event type -> handler (see ``WorkerMachine.handle``).
_HANDLERS = Dispatch("worker machine")


class WorkerMachine(WorkerLifecycle):
    """The protocol state of worker ``worker``; see the module docstring.

    Contract: ``handle`` is called from one thread with an :data:`~epochal.dataflow.protocol.Event`;
    an event of another type raises :class:`~epochal.machines.UnknownEvent` (a ``KindCommand``,
    which a dataflow job never sends, or a ``PeerJoined``: a dataflow worker accepts no
    replacements). An event the phase does not expect is ignored (a late or early message), never
    an error. After :class:`StopWorker` or :class:`FailPeerLost` the machine is STOPPED and
    ignores every event.
    """

    STOPPED = WorkerPhase.STOPPED
    WAITING_FOR = _WAITING_FOR

    def __init__(self, worker: int) -> None:
        super().__init__(worker, WorkerPhase.REGISTERING)
        self.subtasks: dict[SubtaskKey, SubtaskInfo] = {}
        self.finished: set[SubtaskKey] = set()
        self.snapshots = SnapshotPipeline(worker, NONE, self.subtasks, self.finished)
        self.loops = LoopHeads(self.subtasks, self.finished)
        self.processing_reported = False
        self.reported_finished = False

    def handle(self, event: Event) -> list[Instruction]:
        """Apply one event; returns the instructions to carry out, in order."""
        return self.dispatch(_HANDLERS, event)

    @property
    def sources_halted(self) -> bool:
        """A synchronous checkpoint is in progress: sources wait for its completion."""
        return bool(self.snapshots.halted)

    @property
    def running(self) -> bool:
        return self.phase is WorkerPhase.RUNNING

    # ---------------------------------------------------------------- life cycle
    @_HANDLERS.on(Deploy)
    def _deploy(self, message: Deploy) -> list[Instruction]:
        if self.phase is not WorkerPhase.REGISTERING:
            return []  # only answers a starting worker
        self.phase, self.deadline = WorkerPhase.DEPLOYING, None
        return [ConnectAndBuild(message)]

    @_HANDLERS.on(Built)
    def _built(self, event: Built) -> list[Instruction]:
        self.subtasks.update((info.key, info) for info in event.subtasks)
        self.snapshots = SnapshotPipeline(self.worker, event.mode, self.subtasks, self.finished,
                                          event.iteration_log)
        self.loops = LoopHeads(self.subtasks, self.finished)
        self._wait(WorkerPhase.READY, event.now, event.timeout)
        return [Send(Ready(self.worker))]

    @_HANDLERS.on(Start)
    def _start(self, message: Start) -> list[Instruction]:
        if self.phase is not WorkerPhase.READY:
            return []
        self.phase, self.deadline = WorkerPhase.RUNNING, None
        return [StartProcessing()]

    @_HANDLERS.on(PeerClosed)
    def _peer_closed(self, event: PeerClosed) -> list[Instruction]:
        if self.phase is WorkerPhase.RUNNING and self.all_finished:
            return []  # a finished peer closing is expected
        if self.snapshots.stopped_at is not None:  # the job stopped at a savepoint: peers are shutting down
            self.phase = WorkerPhase.STOPPED
            return [StopWorker(f"the job stopped at savepoint {self.snapshots.stopped_at}")]
        self.phase = WorkerPhase.STOPPED
        return [FailPeerLost(event.peer, event.reason)]

    @property
    def all_finished(self) -> bool:
        return self.finished >= self.subtasks.keys()

    @_HANDLERS.on(FirstRecord)
    def _first_record(self, event: FirstRecord) -> list[Instruction]:
        if self.processing_reported:
            return []
        self.processing_reported = True  # the JobMaster times recovery up to the first record
        return [Send(Processing(self.worker))]

    @_HANDLERS.on(WorkerDrained)
    def _all_finished(self, event: WorkerDrained) -> list[Instruction]:
        if self.reported_finished:
            return []
        self.reported_finished = self.snapshots.reported_finished = True
        return [Send(Finished(event.metrics))]

    # ---------------------------------------------------------------- checkpoints
    def _when_running(self) -> bool:
        return self.phase is WorkerPhase.RUNNING

    @_HANDLERS.on(TriggerCheckpoint)
    def _trigger(self, message: TriggerCheckpoint) -> list[CheckpointingInstruction]:
        return self.snapshots.on_trigger(message.checkpoint_id, message.savepoint) if self._when_running() else []

    @_HANDLERS.on(EndSources)
    def _end_sources(self, message: EndSources) -> list[Instruction]:
        return [FinishSources()] if self._when_running() else []

    @_HANDLERS.on(CheckpointComplete)
    def _complete(self, message: CheckpointComplete) -> list[CheckpointingInstruction]:
        if not self._when_running():
            return []
        return self.snapshots.on_complete(message.checkpoint_id, message.savepoint, message.leader_epoch)

    @_HANDLERS.on(CheckpointAbort)
    def _abort(self, message: CheckpointAbort) -> list[CheckpointingInstruction]:
        if not self._when_running():
            return []
        self.loops.on_abort(message.checkpoint_id)
        return self.snapshots.on_abort(message.checkpoint_id)

    @_HANDLERS.on(SubtaskFinished)
    def _subtask_finished(self, event: SubtaskFinished) -> list[CheckpointingInstruction]:
        self.finished.add(event.key)
        return self.snapshots.on_finished(event.key)

    @_HANDLERS.on(SubtaskAligned)
    def _aligned(self, event: SubtaskAligned) -> list[CheckpointingInstruction]:
        return self.snapshots.on_aligned(event)

    @_HANDLERS.on(AlignmentOverflow)
    def _overflow(self, event: AlignmentOverflow) -> list[CheckpointingInstruction]:
        return self.snapshots.on_overflow(event)

    @_HANDLERS.on(SnapshotHeld)
    def _held(self, event: SnapshotHeld) -> list[CheckpointingInstruction]:
        return self.loops.hold(event.key, event.upload)

    @_HANDLERS.on(LoopClosed)
    def _loop_closed(self, event: LoopClosed) -> list[CheckpointingInstruction]:
        return self.loops.on_loop_closed(event.key, event.checkpoint_id)

    # ---------------------------------------------------------------- loops
    @_HANDLERS.on(Feedback)
    def _feedback(self, event: Feedback) -> list[CheckpointingInstruction]:
        return self.loops.on_feedback(event.key, event.records)

    @_HANDLERS.on(ProbeArrived)
    def _probe(self, event: ProbeArrived) -> list[CheckpointingInstruction]:
        return self.loops.on_probe(event.key, event.channel, event.round, event.back_edge)

    @_HANDLERS.on(InputEnded)
    def _input_ended(self, event: InputEnded) -> list[CheckpointingInstruction]:
        if event.key not in self.loops.loops:
            return []
        out, inputs_closed = self.loops.on_input_ended(event.key, event.channel, event.finished)
        if inputs_closed:
            out += self.snapshots.on_loop_inputs_ended(event.key)
        return out

    @_HANDLERS.on(StartLoopProbe)
    def _start_probe(self, message: StartLoopProbe) -> list[CheckpointingInstruction]:
        return self.loops.on_start_probe(message.loop, message.round) if self._when_running() else []

    @_HANDLERS.on(EndLoop)
    def _end_loop(self, message: EndLoop) -> list[CheckpointingInstruction]:
        if not self._when_running():
            return []
        out: list[CheckpointingInstruction] = []
        for key in self.loops.on_end_loop(message.loop):
            out.append(FinishSubtask(key))
            self.finished.add(key)
            out += self.snapshots.on_finished(key)
        return out


register_lifecycle(_HANDLERS)
