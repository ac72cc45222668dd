"""The vocabulary of the JobMaster's state machine: the events it handles and the instructions it returns.

:class:`~epochal.control.jobmaster_machine.JobMasterMachine` is pure: ``handle(event)`` takes one
of the events below and returns a list of the instructions below, which the driver
(:class:`~epochal.control.jobmaster.JobMaster`) carries out. Events carry every input the
machine needs, time included (``now`` is ``time.monotonic()``, ``wall`` is ``time.time()``, both
read by the driver; time passing is every machine's :class:`~epochal.machines.TimePassed`);
instructions carry everything the driver needs to carry them out. A worker's control connection
is named by a *connection id*, an int the driver's :class:`~epochal.control.server.ControlServer`
assigns per accepted connection, so the machine never holds a socket. All are frozen dataclasses,
compared by value in the tests.

Things that need I/O are round trips: :class:`ResolveRestore` asks the driver to read and check
the checkpoint an attempt restores, and the driver answers with :class:`RestoreResolved` or
:class:`RestoreFailed`; a kind's ``WriteCheckpoint`` is answered with ``CheckpointWritten`` and
its ``ReserveCheckpointId`` with ``CheckpointIdReserved`` (:mod:`epochal.control.checkpoint_files`,
whose other instructions need no answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from epochal.control.checkpoint_files import CheckpointIdReserved, CheckpointIO, CheckpointWritten
from epochal.control.lifecycle import KillSparkJob
from epochal.errors import EpochalError
from epochal.machines import TimePassed
from epochal.messages import RestorePoint, ToJobMaster, ToWorker
from epochal.state.storage import CheckpointStorage

__all__ = ["Broadcast", "CancelRequested", "CheckpointIdReserved", "CheckpointWritten", "CloseConnections", "Event",
           "Instruction", "JobStarted", "KillSparkJob", "ResolveRestore", "RestoreFailed", "RestoreResolved",
           "Restarting", "SavepointDone", "SavepointRequest", "SavepointRequested", "SendTo", "SparkJobEnded",
           "SubmitSparkJob", "WorkerDisconnected", "WorkerMessage"]


# ---------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True)
class JobStarted:
    """The driver opened for registrations: the first attempt's Spark job is to be submitted."""

    now: float


@dataclass(frozen=True, slots=True)
class WorkerMessage:
    """``message`` arrived on connection ``connection`` of the worker that said (in its HELLO) it is
    ``worker``. ``wall`` dates a checkpoint the message triggers (the final one)."""

    worker: int
    connection: int
    message: ToJobMaster
    now: float
    wall: float


@dataclass(frozen=True, slots=True)
class WorkerDisconnected:
    """Connection ``connection`` of worker ``worker`` ended (the peer closed it, or it broke)."""

    worker: int
    connection: int
    now: float


@dataclass(frozen=True, slots=True)
class SparkJobEnded:
    """The Spark job running the workers returned ``results`` or failed; ``error`` is the failure's
    summary (see ``summarize_spark_error``), None when it did not fail."""

    results: list[Any] | None
    error: str | None
    now: float


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """The user (or a timeout) cancels the job."""

    reason: str
    now: float


@dataclass(frozen=True, slots=True)
class RestoreResolved:
    """The answer to :class:`ResolveRestore`: what the attempt restores (None: nothing), and what
    to suggest instead should that checkpoint turn out damaged."""

    point: RestorePoint | None
    hint: str


@dataclass(frozen=True, slots=True)
class RestoreFailed:
    """The answer to :class:`ResolveRestore` when the checkpoint cannot be read or is incomplete."""

    error: EpochalError
    now: float


@dataclass(frozen=True, slots=True)
class SavepointRequest:
    """A user's savepoint request (``JobClient.trigger_savepoint`` / ``stop_with_savepoint``, the
    REST API): ``request_id`` names it, ``location`` is the savepoint's own directory (checked
    writable by the driver), ``stop``: the job stops at it, ``drain``: its sources end first."""

    request_id: str
    location: str
    format: str = "canonical"
    stop: bool = False
    drain: bool = False


@dataclass(frozen=True, slots=True)
class SavepointRequested:
    """The driver asks the machine to take the savepoint ``request`` describes."""

    request: SavepointRequest
    now: float
    wall: float


Event = (JobStarted | WorkerMessage | WorkerDisconnected | SparkJobEnded | CancelRequested | TimePassed
         | RestoreResolved | RestoreFailed | CheckpointWritten | CheckpointIdReserved | SavepointRequested)


# ---------------------------------------------------------------------- instructions
@dataclass(frozen=True, slots=True)
class SendTo:
    """Send ``message`` on connection ``connection`` (a failed send is reported by the disconnect)."""

    connection: int
    message: ToWorker


@dataclass(frozen=True, slots=True)
class Broadcast:
    """Send ``message`` on each of ``connections``: the registered workers' when it was decided."""

    message: ToWorker
    connections: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SubmitSparkJob:
    """Submit the Spark job of the current attempt (its workers register with the current
    ``JobMasterMachine.attempt``)."""


@dataclass(frozen=True, slots=True)
class SubmitWorker:
    """Submit a Spark task for worker ``worker`` alone, to replace a lost one while the others
    keep running (task-local recovery, :class:`~epochal.control.kinds.TaskLocalRecovery`)."""

    worker: int


@dataclass(frozen=True, slots=True)
class ResolveRestore:
    """Find what the current attempt's workers restore and answer :class:`RestoreResolved` (or
    :class:`RestoreFailed`): checkpoint ``checkpoint_id`` of ``storage``, read and checked, when
    ``checkpoint_id`` is set; else ``given`` (the user's ``restore_from``, already read and checked
    when the job was submitted: ``storage``, ``checkpoint_id`` and ``metadata``), or nothing."""

    storage: CheckpointStorage | None
    checkpoint_id: int | None
    given: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Restarting:
    """Attempt ``attempt`` failed with ``cause`` (the first line of its error) and the job restarts
    after ``delay`` seconds: restart ``number`` under ``strategy`` (described). The driver logs it,
    one line, so a restart is not silent until the strategy gives up."""

    attempt: int
    cause: str
    delay: float
    number: int
    strategy: str


@dataclass(frozen=True, slots=True)
class CloseConnections:
    """Close these connections: the previous attempt's workers', or one no registered worker uses."""

    connections: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SavepointDone:
    """Savepoint request ``request_id`` ended: completed at ``location``, or failed with ``error``
    (the job keeps running unless it was stopping at it)."""

    request_id: str
    location: str | None
    error: str | None = None


Instruction = (SendTo | Broadcast | SubmitSparkJob | SubmitWorker | KillSparkJob | ResolveRestore | CloseConnections
               | Restarting | CheckpointIO | SavepointDone)
