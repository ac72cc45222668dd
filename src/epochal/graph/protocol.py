"""The graph worker machine's vocabulary: the events it takes and the instructions it returns.

Frozen dataclasses only, like :mod:`epochal.dataflow.protocol` for the dataflow worker; the
machine is :mod:`epochal.graph.worker_machine`, the driver that carries the instructions out
:mod:`epochal.graph.worker`. The recovery events and instructions are Imitator's (papers/003 §5).
:data:`Event` lists everything the machine takes (anything else raises
:class:`~epochal.machines.UnknownEvent`), :data:`GraphCommand` the payloads of the
``KindCommand`` s it takes (the barrier's commands, :mod:`epochal.graph.supersteps`),
:data:`Instruction` everything it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from epochal.graph.engine import StepReport
from epochal.graph.supersteps import FinishRecovery, Halt, Recover, RunSuperstep
from epochal.messages import Deploy, KindCommand, Start
from epochal.runtime.host.events import FailPeerLost, ReachPoint, Send, StopWorker
from epochal.runtime.host.lifecycle import LifecycleEvent
from epochal.runtime.host.mailbox import PeerClosed


# ---------------------------------------------------------------------- events
@dataclass(frozen=True)
class Loaded:
    """The partition is loaded (and, with ``restored``, its checkpointed state reinstated).
    ``replicated``: replication fault tolerance (a lost peer is recovered, not fatal);
    ``joined``: a replacement's peers, all connected (it has no partition until it recovers)."""

    now: float
    timeout: float
    num_workers: int
    restored: bool
    replicated: bool = False
    joined: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PeerRejoined:
    """A replacement of lost worker ``peer`` connected."""

    peer: int


@dataclass(frozen=True)
class RecoveryArrived:
    """Peer ``sender``'s recovery batch of ``epoch`` arrived."""

    epoch: int
    sender: int


@dataclass(frozen=True)
class Assembled:
    """This worker's part is whole again after recovery ``epoch``; ``phases``: the seconds the
    driver spent on it (for the benchmarks: rewind, batches built and sent, assembly)."""

    epoch: int
    phases: dict[str, float] = field(default_factory=dict, compare=False)


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
class CheckpointFileWritten:
    """This worker's checkpoint file of ``superstep`` is durable."""

    superstep: int
    handle: dict[str, Any]


#: The payloads of the ``KindCommand`` s a graph worker takes: the global barrier's commands.
GraphCommand = RunSuperstep | Halt | Recover | FinishRecovery
#: Everything the graph worker machine takes: the start-up and stops every worker shares, the
#: JobMaster's messages (a ``KindCommand`` carries a :data:`GraphCommand`), a lost peer, and what
#: the driver observes.
Event = (LifecycleEvent | Deploy | Start | KindCommand | PeerClosed | Loaded | PeerRejoined | RecoveryArrived
         | Assembled | ExchangeArrived | Computed | CheckpointFileWritten)


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
    """``superstep`` is complete on this worker: make its results current (``undo``: keep what
    it replaces until the global barrier passed, replication's rollback)."""

    superstep: int
    undo: bool = False


@dataclass(frozen=True)
class WriteCheckpointFile:
    """Write this worker's state after ``superstep`` (changed masters only unless ``full``)."""

    superstep: int
    full: bool


@dataclass(frozen=True)
class Rewind:
    """Roll back to the start of superstep ``resume_at`` (papers/003 Algorithm 1, line 9)."""

    resume_at: int


@dataclass(frozen=True)
class SendRecovery:
    """Send every live peer this worker's recovery batch of ``command`` (papers/003 §5)."""

    command: Recover


@dataclass(frozen=True)
class Assemble:
    """Every worker prepared recovery ``command``: assemble what arrived; then feed :class:`Assembled`."""

    command: Recover


@dataclass(frozen=True)
class StartHeartbeats:
    """The job started: start the heartbeat thread."""


@dataclass(frozen=True)
class WriteOutput:
    """The computation halted: write this worker's results and report finished."""


Instruction = (Send | StopWorker | FailPeerLost | ReachPoint | ConnectAndLoad | SendResync | CommitResync
               | Compute | Commit | WriteCheckpointFile | StartHeartbeats | WriteOutput | Rewind | SendRecovery
               | Assemble)
