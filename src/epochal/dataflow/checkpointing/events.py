"""The vocabulary of a dataflow worker's checkpointing sub-machines: their events and instructions.

The snapshot pipeline (:mod:`~epochal.dataflow.checkpointing.snapshots`) and the loops machine
(:mod:`~epochal.dataflow.checkpointing.loop_heads`) are pure parts of the dataflow worker machine
(:mod:`epochal.dataflow.worker_machine`): the driver observes a subtask finishing, an alignment
completing, a barrier coming back around a loop, and returns these instructions' effects
(barriers emitted, snapshots captured and uploaded, probes sent). A subtask is named by its
:data:`SubtaskKey`, ``(vertex id, subtask index)``. :class:`SnapshotUpload` is what the upload
thread gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from epochal.dataflow.checkpointing.messages import SavepointTarget
from epochal.runtime.host.events import ReachPoint, Send

#: ``(vertex id, subtask index)``: one subtask of the job graph.
SubtaskKey = tuple[int, int]


@dataclass(frozen=True)
class LoopShape:
    """Where a subtask sits in a loop: what its termination probes and snapshots depend on.

    ``loop_inputs`` are its input channels inside the loop (not back-edges), ``external_inputs``
    those from outside it; a probe round is forwarded once every loop input delivered it and
    every external input ended.
    """

    loop_id: int
    head: bool
    loop_inputs: frozenset[int] = frozenset()
    external_inputs: frozenset[int] = frozenset()


@dataclass(frozen=True)
class SubtaskInfo:
    """What the machine knows about one subtask the worker hosts."""

    key: SubtaskKey
    #: A source subtask: it injects barriers itself when a checkpoint is triggered.
    source: bool = False
    #: It aligns (or at least tracks) barriers on its inputs.
    barriers: bool = False
    loop: LoopShape | None = None


@dataclass(frozen=True)
class SubtaskFinished:
    """A subtask processed all its input (its state is final)."""

    key: SubtaskKey


@dataclass(frozen=True)
class SubtaskAligned:
    """A subtask received barrier ``checkpoint_id`` on every input (alignment took ``alignment_s``).
    ``savepoint``: the target a barrier carried (the checkpoint is a savepoint's)."""

    key: SubtaskKey
    checkpoint_id: int
    alignment_s: float
    stats: dict[str, int] = field(default_factory=dict)
    savepoint: SavepointTarget | None = None


@dataclass(frozen=True)
class AlignmentOverflow:
    """Blocked inputs of ``key`` buffered more than allowed while aligning ``checkpoint_id``."""

    key: SubtaskKey
    checkpoint_id: int
    reason: str


@dataclass(frozen=True)
class LoopClosed:
    """Barrier ``checkpoint_id`` came back to loop head ``key`` on every back-edge."""

    key: SubtaskKey
    checkpoint_id: int


@dataclass(frozen=True)
class SnapshotHeld:
    """A loop head's state copy for ``checkpoint_id``, waiting for its back-edge log."""

    key: SubtaskKey
    upload: SnapshotUpload


@dataclass(frozen=True)
class Feedback:
    """Loop head ``key`` received ``records`` over its back-edge."""

    key: SubtaskKey
    records: list[Any]


@dataclass(frozen=True)
class ProbeArrived:
    """A termination probe of ``round`` reached loop subtask ``key`` on ``channel``."""

    key: SubtaskKey
    channel: int
    round: int
    back_edge: bool


@dataclass(frozen=True)
class InputEnded:
    """Input ``channel`` of loop subtask ``key`` delivered its end of partition (``finished``:
    the subtask finished with it)."""

    key: SubtaskKey
    channel: int
    finished: bool = False


@dataclass(frozen=True)
class EmitBarrier:
    """Subtask ``key`` sends barrier ``checkpoint_id`` on all its outputs; ``savepoint``: the
    target the barrier carries when the checkpoint is a savepoint."""

    key: SubtaskKey
    checkpoint_id: int
    savepoint: SavepointTarget | None = None


@dataclass(frozen=True)
class Capture:
    """Take the synchronous part of ``key``'s snapshot for ``checkpoint_id``; upload it, or, when
    ``hold``, feed it back as :class:`SnapshotHeld` (a loop head waits for its back-edge log).
    ``savepoint``: it is a savepoint's, written whole to its own location."""

    key: SubtaskKey
    checkpoint_id: int
    alignment_s: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)
    hold: bool = False
    savepoint: SavepointTarget | None = None


@dataclass(frozen=True)
class UploadWithLog:
    """Add loop head ``key``'s back-edge ``log`` to its held ``upload`` and upload it."""

    key: SubtaskKey
    upload: SnapshotUpload
    log: list[Any]


@dataclass(frozen=True)
class StartAlignment:
    """Subtask ``key`` starts ``checkpoint_id`` itself (no barrier can bring it any more)."""

    key: SubtaskKey
    checkpoint_id: int


@dataclass(frozen=True)
class AbortAlignment:
    """Subtask ``key`` gives up aligning ``checkpoint_id`` (its buffers are replayed)."""

    key: SubtaskKey
    checkpoint_id: int
    reason: str


@dataclass(frozen=True)
class SendProbe:
    """Loop subtask ``key`` sends probe ``round`` of ``loop_id`` on its outputs inside the loop."""

    key: SubtaskKey
    loop_id: int
    round: int


@dataclass(frozen=True)
class FinishSubtask:
    """End subtask ``key`` (its loop is empty): final output, then end of partition downstream."""

    key: SubtaskKey


@dataclass(frozen=True)
class NotifyComplete:
    """Tell every subtask that ``checkpoint_id`` completed (transactional sinks commit);
    ``savepoint``: a savepoint the job stops at (state backends keep no base of it)."""

    checkpoint_id: int
    savepoint: bool = False
    #: the epoch of the leader that completed it (high availability), checked against the fence
    leader_epoch: int | None = None


@dataclass(frozen=True)
class NotifyAborted:
    """Tell every subtask that ``checkpoint_id`` was aborted, and drop its uploads not yet written."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class SnapshotUpload:
    """The asynchronous part of one subtask's snapshot, handed to the uploader thread: the state
    captured synchronously, to be written to checkpoint storage and then acknowledged."""

    checkpoint_id: int
    vertex: int
    subtask: int
    #: operator uid -> {"keyed": state per key group or None, "operator": named lists}
    captured: dict[str, dict[str, Any]]
    #: alignment_s, sync_s and where they apply buffered/spilled bytes, source_records,
    #: loop_log_records; the upload adds async_s and bytes
    stats: dict[str, float]


#: What the checkpointing sub-machines return (the dataflow worker machine adds its own).
CheckpointingInstruction = (EmitBarrier | Capture | UploadWithLog | StartAlignment | AbortAlignment | SendProbe
                            | FinishSubtask | NotifyComplete | NotifyAborted | ReachPoint | Send)
