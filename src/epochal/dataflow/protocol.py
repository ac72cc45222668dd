"""The dataflow worker machine's own vocabulary: the events it handles and the instructions it returns.

The worker's heart (:class:`epochal.dataflow.worker_machine.WorkerMachine`, with its
sub-machines :mod:`~epochal.runtime.checkpointing.snapshots` and
:mod:`~epochal.runtime.checkpointing.loop_heads`) is pure: events in, instructions out. Control
messages from the JobMaster (:mod:`epochal.messages`) are events as they are; the events and
instructions every kind's worker shares are :mod:`epochal.runtime.host.events`, the
checkpointing ones :mod:`epochal.runtime.checkpointing.events`; this module adds the dataflow
worker's life cycle (built, first record, drained) and the :data:`Instruction` union.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from epochal.messages import Deploy
from epochal.runtime.checkpointing.events import CheckpointingInstruction, SubtaskInfo
from epochal.runtime.host.events import FailPeerLost, StopWorker


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
