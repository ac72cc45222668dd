"""Loops on one worker (papers/000 §3.3, Algorithm 2): a pure sub-machine.

For every subtask in a loop it owns the termination probes (rounds seen on some loop inputs and
not yet forwarded; at the head, the round in progress and whether feedback arrived during it),
which input channels ended, and at the head the back-edge logs of snapshots in progress and the
state copies waiting for them:

- feedback at the head marks the probe round dirty and is appended to every log being recorded;
- a probe is forwarded once every loop input delivered it and every input from outside the loop
  ended; a probe that comes back to the head is its vote (quiet if no feedback arrived);
- when every regular input of a head ended it tells the JobMaster the loop is ready for
  termination detection (and the snapshot pipeline starts the expected checkpoints at the head);
- when barrier *n* comes back around the loop, the head's log for *n* joins its held state copy
  and the snapshot is uploaded; an abort drops both;
- ``EndLoop`` finishes the loop's heads.

No sockets, threads or clocks here; the driver sends the probes and uploads.
"""

from __future__ import annotations

from typing import Any

from epochal.dataflow.checkpointing.events import (
    CheckpointingInstruction,
    LoopShape,
    SendProbe,
    SnapshotUpload,
    SubtaskInfo,
    SubtaskKey,
    UploadWithLog,
)
from epochal.dataflow.checkpointing.messages import LoopReady, LoopVote
from epochal.runtime.host.events import ReachPoint, Send


class LoopState:
    """The mutable loop state of one subtask (``shape`` is fixed at deployment)."""

    def __init__(self, shape: LoopShape) -> None:
        self.shape = shape
        self.ended: set[int] = set()
        #: probe rounds seen on some loop inputs but not yet forwarded: round -> channel ids
        self.probes: dict[int, set[int]] = {}
        #: head: the probe round in progress, and whether feedback arrived during it
        self.probe_round = 0
        self.dirty = False
        self.ready_sent = False
        #: head: back-edge logs being recorded, and state copies waiting for them
        self.logs: dict[int, list[Any]] = {}
        self.held: dict[int, SnapshotUpload] = {}


class LoopHeads:
    """The loop state of every loop subtask of one worker; see the module docstring.

    ``finished`` is shared with the owning worker machine.
    """

    def __init__(self, subtasks: dict[SubtaskKey, SubtaskInfo], finished: set[SubtaskKey]) -> None:
        self.loops = {key: LoopState(info.loop) for key, info in subtasks.items() if info.loop is not None}
        self.finished = finished

    def state(self, key: SubtaskKey) -> LoopState:
        return self.loops[key]

    def _heads(self, loop_id: int) -> list[SubtaskKey]:
        return [key for key, state in self.loops.items()
                if state.shape.head and state.shape.loop_id == loop_id and key not in self.finished]

    # ---------------------------------------------------------------- events
    def on_feedback(self, key: SubtaskKey, records: list[Any]) -> list[CheckpointingInstruction]:
        state = self.loops[key]
        state.dirty = True
        if not state.logs:
            return []
        for log in state.logs.values():
            log.extend(records)
        return [ReachPoint("back_edge_log", max(state.logs))]

    def on_probe(self, key: SubtaskKey, channel: int, probe_round: int,
                 back_edge: bool) -> list[CheckpointingInstruction]:
        state = self.loops.get(key)
        if state is None:
            return []
        if back_edge:  # the probe came around: vote for this round
            if state.shape.head and probe_round == state.probe_round:
                return [Send(LoopVote(state.shape.loop_id, probe_round, key[1], quiet=not state.dirty))]
            return []
        state.probes.setdefault(probe_round, set()).add(channel)
        return self._forward(key, state)

    def _forward(self, key: SubtaskKey, state: LoopState) -> list[CheckpointingInstruction]:
        """Pass probe rounds on once every loop input delivered them and every input from
        outside the loop ended (nothing can enter the loop any more)."""
        shape = state.shape
        if not shape.external_inputs <= state.ended:
            return []
        out: list[CheckpointingInstruction] = []
        for probe_round in sorted(state.probes):
            arrived = state.probes[probe_round]
            if not all(c in arrived or c in state.ended for c in shape.loop_inputs):
                break
            del state.probes[probe_round]
            out.append(SendProbe(key, shape.loop_id, probe_round))
        return out

    def on_input_ended(self, key: SubtaskKey, channel: int,
                       finished: bool) -> tuple[list[CheckpointingInstruction], bool]:
        """Returns the instructions and whether the head's regular inputs all ended just now
        (the snapshot pipeline then starts the expected checkpoints at the head)."""
        state = self.loops[key]
        state.ended.add(channel)
        out = self._forward(key, state) if state.probes else []
        shape = state.shape
        if not shape.head or state.ready_sent or finished or key in self.finished:
            return out, False
        if (shape.loop_inputs | shape.external_inputs) <= state.ended:
            state.ready_sent = True
            out.append(Send(LoopReady(shape.loop_id, key[1])))
            return out, True
        return out, False

    def on_start_probe(self, loop_id: int, probe_round: int) -> list[CheckpointingInstruction]:
        out: list[CheckpointingInstruction] = []
        for key in self._heads(loop_id):
            state = self.loops[key]
            state.dirty = False
            state.probe_round = probe_round
            out.append(SendProbe(key, loop_id, probe_round))
        return out

    def on_end_loop(self, loop_id: int) -> list[SubtaskKey]:
        """The loop is empty and nothing can enter it: the heads to finish (end of partition
        goes around, the tail's comes back and the head's back-edge ends)."""
        return self._heads(loop_id)

    def hold(self, key: SubtaskKey, upload: SnapshotUpload) -> list[CheckpointingInstruction]:
        """A head's state copy is taken at alignment; its snapshot is complete when the back-edge
        log is (the barrier came back around the loop)."""
        state = self.loops[key]
        state.held[upload.checkpoint_id] = upload
        state.logs[upload.checkpoint_id] = []
        return []

    def on_loop_closed(self, key: SubtaskKey, checkpoint_id: int) -> list[CheckpointingInstruction]:
        state = self.loops[key]
        log = state.logs.pop(checkpoint_id, [])
        held = state.held.pop(checkpoint_id, None)
        if held is None:
            return []
        return [UploadWithLog(key, held, log)]

    def on_abort(self, checkpoint_id: int) -> None:
        for state in self.loops.values():
            state.logs.pop(checkpoint_id, None)
            state.held.pop(checkpoint_id, None)
