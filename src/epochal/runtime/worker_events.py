"""The worker machine's vocabulary: the events it handles and the instructions it returns.

The worker's heart (:class:`epochal.runtime.worker_machine.WorkerMachine`, with its
sub-machines :mod:`epochal.runtime.snapshots` and :mod:`epochal.runtime.loop_heads`) is pure:
events in, instructions out. Control messages from the JobMaster (:mod:`epochal.messages`) are
events as they are; this module adds what the worker's driver observes itself (a subtask
finished, an alignment completed, a barrier came back around a loop, a timer) and the
instructions the driver carries out with its sockets, operators and threads.

A subtask is named by its :data:`SubtaskKey`, ``(vertex id, subtask index)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from epochal.messages import Deploy, ToJobMaster
from epochal.runtime.mailbox import SnapshotUpload

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


# ---------------------------------------------------------------------- events
@dataclass(frozen=True)
class Registered:
    """The worker sent its registration at ``now``; a deployment must come within ``timeout``."""

    now: float
    timeout: float


@dataclass(frozen=True)
class Built:
    """Peers connected and subtasks opened (in this order); ``Start`` must come within ``timeout``."""

    now: float
    timeout: float
    subtasks: tuple[SubtaskInfo, ...]
    #: The checkpointing mode (``config.NONE`` when off) and whether loop heads log back-edges.
    mode: str
    iteration_log: bool = True


@dataclass(frozen=True)
class Tick:
    """Time passed (monotonic ``now``): deadlines are checked."""

    now: float


@dataclass(frozen=True)
class FirstRecord:
    """The worker processed its first record of this attempt."""


@dataclass(frozen=True)
class AllFinished:
    """Every subtask finished and every output drained; ``metrics`` are the final counters."""

    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SubtaskFinished:
    """A subtask processed all its input (its state is final)."""

    key: SubtaskKey


@dataclass(frozen=True)
class Aligned:
    """A subtask received barrier ``checkpoint_id`` on every input (alignment took ``alignment_s``)."""

    key: SubtaskKey
    checkpoint_id: int
    alignment_s: float
    stats: dict[str, int] = field(default_factory=dict)


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


# ---------------------------------------------------------------------- instructions
@dataclass(frozen=True)
class Send:
    """Send ``message`` to the JobMaster."""

    message: ToJobMaster


@dataclass(frozen=True)
class ConnectAndBuild:
    """Connect to the peers of ``deploy`` and open this worker's subtasks; then feed :class:`Built`."""

    deploy: Deploy


@dataclass(frozen=True)
class StartProcessing:
    """The job started: start the heartbeat and upload threads and the mailbox loop."""


@dataclass(frozen=True)
class StopWorker:
    """Stop (cancelled, rejected, shut down, or the driver went away)."""

    reason: str


@dataclass(frozen=True)
class FailPeerLost:
    """A data connection to worker ``peer`` broke before this worker finished: fail."""

    peer: int
    reason: str


@dataclass(frozen=True)
class EmitBarrier:
    """Subtask ``key`` sends barrier ``checkpoint_id`` on all its outputs."""

    key: SubtaskKey
    checkpoint_id: int


@dataclass(frozen=True)
class Capture:
    """Take the synchronous part of ``key``'s snapshot for ``checkpoint_id``; upload it, or, when
    ``hold``, feed it back as :class:`SnapshotHeld` (a loop head waits for its back-edge log)."""

    key: SubtaskKey
    checkpoint_id: int
    alignment_s: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)
    hold: bool = False


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
    """Tell every subtask that ``checkpoint_id`` completed (transactional sinks commit)."""

    checkpoint_id: int


@dataclass(frozen=True)
class NotifyAborted:
    """Tell every subtask that ``checkpoint_id`` was aborted."""

    checkpoint_id: int


@dataclass(frozen=True)
class ReachPoint:
    """The worker reached hook point ``point`` (fault injection in chaos tests)."""

    point: str
    checkpoint_id: int | None = None


Instruction = (Send | ConnectAndBuild | StartProcessing | StopWorker | FailPeerLost | EmitBarrier | Capture
               | UploadWithLog | StartAlignment | AbortAlignment | SendProbe | FinishSubtask | NotifyComplete
               | NotifyAborted | ReachPoint)
