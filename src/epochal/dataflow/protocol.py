"""The dataflow kind's own vocabulary: its messages, and the worker machine's events and instructions.

Messages: :class:`Collect` (worker -> JobMaster: a ``collect()`` sink's output, whose payloads the
sink writer defines, :mod:`epochal.connectors.memory`) and :class:`EndSources` (JobMaster ->
worker: stop with drain). The checkpoint and loop protocol is
:mod:`epochal.dataflow.checkpointing.messages` (both its ends are below this package), what every
job kind shares :mod:`epochal.messages`.

The worker's heart (:class:`epochal.dataflow.worker_machine.WorkerMachine`, with its
sub-machines :mod:`~epochal.dataflow.checkpointing.snapshots` and
:mod:`~epochal.dataflow.checkpointing.loop_heads`) is pure: events in, instructions out. Control
messages from the JobMaster are events as they are; the events and instructions every kind's
worker shares are :mod:`epochal.runtime.host.events`, the checkpointing ones
:mod:`epochal.dataflow.checkpointing.events`; this module adds the dataflow worker's life cycle
(built, first record, drained), the :data:`Event` union of everything the machine takes (it
raises :class:`~epochal.machines.UnknownEvent` for anything else) and the :data:`Instruction`
union of everything it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from epochal.connectors.memory import CollectPayload
from epochal.dataflow.checkpointing.events import (
    AlignmentOverflow,
    CheckpointingInstruction,
    Feedback,
    InputEnded,
    LoopClosed,
    ProbeArrived,
    SnapshotHeld,
    SubtaskAligned,
    SubtaskFinished,
    SubtaskInfo,
)
from epochal.dataflow.checkpointing.messages import (
    CheckpointAbort,
    CheckpointComplete,
    EndLoop,
    StartLoopProbe,
    TriggerCheckpoint,
)
from epochal.messages import Deploy, Start, ToJobMaster, ToWorker
from epochal.runtime.host.events import FailPeerLost, StopWorker
from epochal.runtime.host.lifecycle import LifecycleEvent
from epochal.runtime.host.mailbox import PeerClosed


# ---------------------------------------------------------------------- messages
@dataclass(frozen=True, slots=True)
class Collect(ToJobMaster):
    """Output of a collect sink for the driver; ``collect_id`` names the sink."""

    collect_id: str
    worker: int
    payload: CollectPayload


@dataclass(frozen=True, slots=True)
class EndSources(ToWorker):
    """Stop with drain: every source subtask ends its input now (end of input flows: the maximum
    watermark, windows and timers fire), as if its splits were exhausted."""


# ---------------------------------------------------------------------- the worker machine's events
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
class FirstRecord:
    """The worker processed its first record of this attempt."""


@dataclass(frozen=True)
class WorkerDrained:
    """Every subtask finished and every output drained; ``metrics`` are the final counters."""

    metrics: dict[str, Any] = field(default_factory=dict)


#: Everything the dataflow worker machine takes: the start-up and stops every worker shares, the
#: JobMaster's messages to a dataflow worker, a lost peer, and what the driver observes (its own
#: life cycle, and its subtasks' checkpoints and loops).
Event = (LifecycleEvent | Deploy | Start | Built | FirstRecord | WorkerDrained | PeerClosed
         | TriggerCheckpoint | CheckpointComplete | CheckpointAbort | EndSources | StartLoopProbe | EndLoop
         | SubtaskFinished | SubtaskAligned | AlignmentOverflow | SnapshotHeld | LoopClosed | Feedback
         | ProbeArrived | InputEnded)


# ---------------------------------------------------------------------- the worker machine's instructions
@dataclass(frozen=True)
class ConnectAndBuild:
    """Connect to the peers of ``deploy`` and open this worker's subtasks; then feed :class:`Built`."""

    deploy: Deploy


@dataclass(frozen=True)
class StartProcessing:
    """The job started: start the heartbeat and upload threads and the mailbox loop."""


@dataclass(frozen=True)
class FinishSources:
    """Stop with drain: end every source subtask's input now (its end of input flows on)."""


#: Everything the dataflow worker machine returns.
Instruction = CheckpointingInstruction | ConnectAndBuild | StartProcessing | StopWorker | FailPeerLost | FinishSources
