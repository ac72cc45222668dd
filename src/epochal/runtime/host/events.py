"""What every worker machine shares, whatever its job kind: the common events and instructions.

Each kind's worker machine (the dataflow :mod:`~epochal.dataflow.worker_machine`, the graph and
CEC ones) is pure: events in, instructions out. These are the ones all of them handle or return,
carried out by the shared :class:`~epochal.runtime.host.shell.WorkerShell`: the registration
sent, a message for the JobMaster, a stop, a lost peer, a hook point reached. Time passing is
:class:`epochal.machines.TimePassed`, as for every machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochal.messages import ToJobMaster


@dataclass(frozen=True)
class Registered:
    """The worker sent its registration at ``now``; a deployment must come within ``timeout``."""

    now: float
    timeout: float


@dataclass(frozen=True)
class Send:
    """Send ``message`` to the JobMaster."""

    message: ToJobMaster


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
class ReachPoint:
    """The worker reached hook point ``point`` (fault injection in chaos tests)."""

    point: str
    checkpoint_id: int | None = None
