"""The per-worker snapshot pipeline (papers/000 §4, papers/001 §4.2): a pure sub-machine.

It owns which checkpoints the worker still has to answer (``expected``), which of them halt the
sources (``halted``, the synchronous baseline only), and the last checkpoint each subtask
snapshotted. It decides, per subtask, *when* a snapshot is taken:

- a trigger: sources emit the barrier and snapshot their positions at once; finished subtasks
  answer with their final state; a loop head whose regular inputs ended starts the checkpoint
  itself; every other subtask waits for its barriers (:mod:`epochal.dataflow.checkpointing.barriers`);
- an alignment: the subtask forwards the barrier and snapshots (a loop head holds its state copy
  until the back-edge log is complete, see :mod:`epochal.dataflow.checkpointing.loop_heads`);
- a subtask that finishes answers every expected checkpoint with its final state;
- a completion notifies the operators (transactional sinks commit) and, once the worker reported
  finished, confirms the commit to the JobMaster (the final checkpoint);
- an abort forgets the checkpoint; its alignment, should it still complete (the barrier came
  after the abort), is dropped.

*How* a snapshot is taken and uploaded (the synchronous capture, the upload thread, the ack) is
the driver's (:mod:`epochal.dataflow.worker`): it carries out :class:`Capture` instructions.
No sockets, threads or clocks here.
"""

from __future__ import annotations

from epochal.config import SYNCHRONOUS
from epochal.dataflow.checkpointing.events import (
    AbortAlignment,
    AlignmentOverflow,
    Capture,
    CheckpointingInstruction,
    EmitBarrier,
    NotifyAborted,
    NotifyComplete,
    StartAlignment,
    SubtaskAligned,
    SubtaskInfo,
    SubtaskKey,
)
from epochal.dataflow.checkpointing.messages import Committed, Decline, SavepointTarget
from epochal.runtime.host.events import ReachPoint, Send


class SnapshotPipeline:
    """When each subtask of one worker snapshots; see the module docstring.

    ``subtasks`` and ``finished`` are shared with the owning worker machine, which adds to
    ``finished`` before it calls :meth:`on_finished`.
    """

    def __init__(self, worker: int, mode: str, subtasks: dict[SubtaskKey, SubtaskInfo],
                 finished: set[SubtaskKey], iteration_log: bool = True) -> None:
        self.worker = worker
        self.mode = mode
        self.subtasks = subtasks
        self.finished = finished
        self.iteration_log = iteration_log
        #: Checkpoints triggered and neither completed nor aborted, in trigger order.
        self.expected: list[int] = []
        #: Checkpoints that halt the sources until they complete (synchronous mode).
        self.halted: set[int] = set()
        #: The newest checkpoint each subtask snapshotted (0: none).
        self.last: dict[SubtaskKey, int] = {key: 0 for key in subtasks}
        #: Whether the worker told the JobMaster it finished (completions are then confirmed).
        self.reported_finished = False
        #: Checkpoints that can no longer be snapshotted here: every one up to ``completed`` (the
        #: newest completion), and those aborted above it. A barrier may arrive after its abort
        #: (it travels from another worker; the abort from the JobMaster): its alignment is dropped.
        self.completed = 0
        self.aborted: set[int] = set()
        #: the savepoints among the expected checkpoints: where and how each is written
        self.savepoints: dict[int, SavepointTarget] = {}
        #: the savepoint the job stopped at, once it completed (the worker then only shuts down)
        self.stopped_at: int | None = None

    def _capture(self, key: SubtaskKey, checkpoint_id: int, alignment_s: float = 0.0,
                 stats: dict[str, int] | None = None, hold: bool = False) -> Capture:
        self.last[key] = max(self.last[key], checkpoint_id)
        return Capture(key, checkpoint_id, alignment_s, stats or {}, hold, self.savepoints.get(checkpoint_id))

    def owed(self, key: SubtaskKey) -> list[int]:
        """Expected checkpoints that subtask ``key`` has not snapshotted yet."""
        last = self.last[key]
        return [c for c in self.expected if c > last]

    # ---------------------------------------------------------------- events
    def on_trigger(self, checkpoint_id: int,
                   savepoint: SavepointTarget | None = None) -> list[CheckpointingInstruction]:
        """Checkpoint ``checkpoint_id`` was triggered. A savepoint the job stops at halts the
        sources after their barrier, until it completes (then the job ends) or is aborted."""
        self.expected.append(checkpoint_id)
        if savepoint is not None:
            self.savepoints[checkpoint_id] = savepoint
        if self.mode == SYNCHRONOUS or (savepoint is not None and savepoint.stop):
            self.halted.add(checkpoint_id)
        out: list[CheckpointingInstruction] = []
        for key, info in self.subtasks.items():
            if key in self.finished:
                out += self.on_finished(key)
            elif info.source:
                out.append(EmitBarrier(key, checkpoint_id, savepoint))
                out.append(self._capture(key, checkpoint_id))
            elif info.loop is not None and info.loop.head and info.barriers:
                out.append(StartAlignment(key, checkpoint_id))  # only if no barrier can bring it any more
        return out

    def on_finished(self, key: SubtaskKey) -> list[CheckpointingInstruction]:
        """A finished subtask's state is final: it answers every expected checkpoint with it."""
        return [self._capture(key, c) for c in self.owed(key)]

    def on_aligned(self, event: SubtaskAligned) -> list[CheckpointingInstruction]:
        """Forward the barrier and snapshot, unless the checkpoint was already aborted or
        completed (then nothing: no barrier downstream, no snapshot, no upload). A checkpoint
        not triggered here yet is snapshotted: its barrier may overtake the trigger, and then the
        barrier says whether it is a savepoint's (``event.savepoint``), so that it is written as one."""
        if event.checkpoint_id <= self.completed or event.checkpoint_id in self.aborted:
            return []
        if event.savepoint is not None:
            self.savepoints.setdefault(event.checkpoint_id, event.savepoint)
        info = self.subtasks[event.key]
        hold = info.loop is not None and info.loop.head and self.iteration_log
        return [ReachPoint("alignment", event.checkpoint_id),
                EmitBarrier(event.key, event.checkpoint_id, self.savepoints.get(event.checkpoint_id)),
                self._capture(event.key, event.checkpoint_id, event.alignment_s, event.stats, hold=hold)]

    def on_loop_inputs_ended(self, key: SubtaskKey) -> list[CheckpointingInstruction]:
        """Nothing more enters the loop: checkpoints can no longer arrive as barriers, so the
        head starts the expected ones itself."""
        if not self.subtasks[key].barriers:
            return []
        return [StartAlignment(key, c) for c in self.owed(key)]

    def on_overflow(self, event: AlignmentOverflow) -> list[CheckpointingInstruction]:
        """Alignment buffers grew past the limit: decline rather than fill the disk."""
        return [AbortAlignment(event.key, event.checkpoint_id, event.reason),
                Send(Decline(event.checkpoint_id, self.worker, event.reason))]

    def on_complete(self, checkpoint_id: int, savepoint: bool = False,
                    leader_epoch: int | None = None) -> list[CheckpointingInstruction]:
        """Checkpoint ``checkpoint_id`` completed: the subtasks commit. The commit is confirmed
        to the JobMaster once the worker finished (the final checkpoint), or at once for a
        savepoint the job stops at (``savepoint``; the sources stay halted: the job ends)."""
        self.completed = max(self.completed, checkpoint_id)
        self.aborted = {c for c in self.aborted if c > self.completed}
        self.expected = [c for c in self.expected if c > checkpoint_id]
        if not savepoint:
            self.halted = {c for c in self.halted if c > checkpoint_id}
        self.savepoints = {c: s for c, s in self.savepoints.items() if c > checkpoint_id}
        out: list[CheckpointingInstruction] = [ReachPoint("before_commit", checkpoint_id),
                                               NotifyComplete(checkpoint_id, savepoint, leader_epoch)]
        if savepoint:
            self.stopped_at = checkpoint_id
        if self.reported_finished or savepoint:
            out.append(Send(Committed(checkpoint_id, self.worker)))
        return out

    def on_abort(self, checkpoint_id: int) -> list[CheckpointingInstruction]:
        if checkpoint_id > self.completed:
            self.aborted.add(checkpoint_id)
        self.savepoints.pop(checkpoint_id, None)
        self.expected = [c for c in self.expected if c != checkpoint_id]
        self.halted.discard(checkpoint_id)
        return [NotifyAborted(checkpoint_id)]
