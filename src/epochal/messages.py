"""The control protocol between workers and the JobMaster: every message, defined once.

Messages travel pickled (protocol 5) in CONTROL frames of :mod:`epochal.runtime.host.frames`, one
message per frame, on the one TCP connection each worker keeps to the JobMaster. Each message is
a frozen, slotted dataclass; receivers dispatch on its type through a :class:`Dispatch` table,
never on a string. Two directions:

* :class:`ToJobMaster` (worker -> JobMaster): registration, readiness, heartbeats, checkpoint
  acknowledgements and declines, loop termination votes, collected records, failures;
* :class:`ToWorker` (JobMaster -> worker): deployment, start, checkpoint trigger, completion and
  abort, loop probe rounds, and the three ways to stop (:class:`Stop`).

The collect sink's payloads (:class:`CollectBatch`, :class:`CollectSeal`, :class:`CollectCommit`,
and the committable :class:`CollectEpoch`) are defined here too: the sink writer builds them on
the worker, the driver's :class:`~epochal.dataflow.collect.CollectLedger` consumes them.

Terms used in field names: ``worker`` is a worker index (the Spark partition running it);
``subtask`` is the index of a subtask within its vertex (slot sharing puts subtask ``i`` on
worker ``i``, but the two are different things); ``job_attempt`` counts the job's restarts (0
first); ``task_attempt`` is Spark's attempt number of the task running a worker.

This module imports nothing from epochal: workers, connectors and the driver all use it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from epochal.tracebacks import UserTraceback

#: A worker's counters as sent with heartbeats and at the end (see ``Worker.metrics``): JSON-like,
#: str -> int | float, and ``operators`` -> {"<operator>#<subtask>": records in}.
Metrics = dict[str, Any]
#: Where one operator's state of one subtask was written (see ``epochal.state.snapshot``): JSON-like.
StateHandle = dict[str, Any]
#: Why a job attempt failed; ordered by how well each explains a failure in the JobMaster.
FailureCategory = Literal["restore", "user", "worker_lost", "internal", "checkpoint", "spark", "heartbeat",
                      "peer_lost"]


class ControlMessage:
    """Base of every control message."""

    __slots__ = ()


class ToJobMaster(ControlMessage):
    """A message from a worker to the JobMaster."""

    __slots__ = ()


class ToWorker(ControlMessage):
    """A message from the JobMaster to a worker."""

    __slots__ = ()


# ---------------------------------------------------------------------- collect sink payloads
@dataclass(frozen=True, slots=True)
class CollectEpoch:
    """One epoch of one collect writer: the committable kept in the sink's checkpointed state."""

    writer: str
    attempt: int
    epoch: int


@dataclass(frozen=True, slots=True)
class CollectBatch:
    """Records of writer ``writer`` (of job attempt ``attempt``), epoch ``epoch``."""

    writer: str
    attempt: int
    epoch: int
    records: list[Any]


@dataclass(frozen=True, slots=True)
class CollectSeal:
    """Epoch ``epoch`` is complete; it ends at checkpoint ``checkpoint_id``."""

    writer: str
    attempt: int
    epoch: int
    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class CollectCommit:
    """Publish these sealed epochs (their checkpoints completed)."""

    epochs: tuple[CollectEpoch, ...]


#: What a collect sink sends: epoch-tagged messages under checkpointing, else plain record lists.
CollectPayload = CollectBatch | CollectSeal | CollectCommit | list[Any]


# ---------------------------------------------------------------------- worker -> JobMaster
@dataclass(frozen=True, slots=True)
class Register(ToJobMaster):
    """First message of a worker: who it is and where its data port listens."""

    worker: int
    task_attempt: int
    job_attempt: int
    pid: int
    host: str
    data_port: int
    hostname: str


@dataclass(frozen=True, slots=True)
class Ready(ToJobMaster):
    """The worker connected to its peers and opened its operators."""

    worker: int


@dataclass(frozen=True, slots=True)
class Heartbeat(ToJobMaster):
    """Periodic liveness signal with the worker's current counters."""

    metrics: Metrics


@dataclass(frozen=True, slots=True)
class Processing(ToJobMaster):
    """The worker processed its first record in this attempt (the JobMaster times recovery)."""

    worker: int


@dataclass(frozen=True, slots=True)
class Finished(ToJobMaster):
    """Every subtask of the worker ended and all its output was sent."""

    metrics: Metrics


@dataclass(frozen=True, slots=True)
class Ack(ToJobMaster):
    """Subtask ``subtask`` of vertex ``vertex`` wrote its snapshot for checkpoint ``checkpoint_id``."""

    checkpoint_id: int
    vertex: int
    subtask: int
    worker: int
    #: operator uid -> where its state was written
    handles: dict[str, StateHandle]
    #: alignment_s, sync_s, async_s, bytes, and where they apply buffered_bytes, spilled_bytes,
    #: loop_log_records, source_records
    stats: dict[str, float]


@dataclass(frozen=True, slots=True)
class Decline(ToJobMaster):
    """The worker cannot complete checkpoint ``checkpoint_id`` (an upload failed, alignment overflowed)."""

    checkpoint_id: int
    worker: int
    reason: str


@dataclass(frozen=True, slots=True)
class Committed(ToJobMaster):
    """A finished worker's sinks committed checkpoint ``checkpoint_id`` (the final one)."""

    checkpoint_id: int
    worker: int


@dataclass(frozen=True, slots=True)
class LoopReady(ToJobMaster):
    """Head subtask ``subtask`` of loop ``loop`` will receive nothing more from outside the loop."""

    loop: int
    subtask: int


@dataclass(frozen=True, slots=True)
class LoopVote(ToJobMaster):
    """Head subtask ``subtask`` of loop ``loop`` saw probe round ``round`` come back; ``quiet``: no
    record arrived on its back-edge since it sent the probe."""

    loop: int
    round: int
    subtask: int
    quiet: bool


@dataclass(frozen=True, slots=True)
class Collect(ToJobMaster):
    """Output of a collect sink for the driver; ``collect_id`` names the sink."""

    collect_id: str
    worker: int
    payload: CollectPayload


@dataclass(frozen=True, slots=True)
class Failed(ToJobMaster):
    """A job attempt failed: sent by a worker, or recorded by the JobMaster for what it detects
    itself (a lost worker, a failed Spark job, failed checkpoints, a missed heartbeat).

    ``error`` is the one-line cause; the other fields are set where they apply: ``operator``
    and ``where`` for user errors, ``user_traceback`` (the user's frames, formatted on the driver)
    and ``record`` (the record it raised on, cut to a readable length) for user errors,
    ``traceback`` for internal ones, ``file`` and ``checkpoint_id`` for a damaged checkpoint,
    ``peer`` for a lost data connection."""

    category: FailureCategory
    error: str
    worker: int | None = None
    operator: str | None = None
    where: str | None = None
    traceback: str = ""
    file: str | None = None
    checkpoint_id: int | None = None
    peer: int | None = None
    user_traceback: UserTraceback | None = None
    record: str | None = None


@dataclass(frozen=True, slots=True)
class KindReport(ToJobMaster):
    """A report of the job's kind from ``worker`` (a graph job: superstep *n* done), handed to the
    kind's coordinator on the JobMaster (:mod:`epochal.control.kinds`)."""

    worker: int
    payload: Any


# ---------------------------------------------------------------------- JobMaster -> worker
@dataclass(frozen=True, slots=True)
class RestorePoint:
    """The checkpoint a job attempt's workers restore."""

    storage: str
    checkpoint_id: int
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Deploy(ToWorker):
    """Sent once all workers registered: the job and where every worker's data port is."""

    #: The cloudpickled :class:`~epochal.plan.execution.Deployment`.
    deployment: bytes
    #: worker index -> (host, data port)
    peers: dict[int, tuple[str, int]]
    restore: RestorePoint | None = None
    #: the worker replaces a lost one while the others keep running (task-local recovery): it
    #: connects to every peer instead of waiting for the higher-numbered ones
    joining: bool = False


@dataclass(frozen=True, slots=True)
class Start(ToWorker):
    """Every worker is ready: start processing."""


@dataclass(frozen=True, slots=True)
class SavepointTarget:
    """A checkpoint that is a savepoint (papers/001 §3.3.1): its state goes to ``location`` (the
    savepoint's own directory) in ``format`` (``canonical``: one layout every state backend reads;
    ``native``: the backend's own, where it has one), whole (nothing shared with a checkpoint).
    ``stop``: the job stops at it: sources read nothing after its barrier, and once it completes
    the sinks commit and the job ends."""

    location: str
    format: str = "canonical"
    stop: bool = False


@dataclass(frozen=True, slots=True)
class TriggerCheckpoint(ToWorker):
    """Start checkpoint ``checkpoint_id`` (a savepoint when ``savepoint`` is set): sources
    snapshot and emit its barrier."""

    checkpoint_id: int
    savepoint: SavepointTarget | None = None


@dataclass(frozen=True, slots=True)
class CheckpointComplete(ToWorker):
    """Checkpoint ``checkpoint_id`` is complete (its metadata is written): sinks may commit.
    ``savepoint``: it is a savepoint the job stops at (the state backends keep no base of it;
    workers confirm the commit with ``Committed``). ``leader_epoch``: with high availability, the
    epoch of the leader that completed it: a worker commits only while no newer leader took over
    (:class:`~epochal.state.fencing.LeaderFence`)."""

    checkpoint_id: int
    savepoint: bool = False
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class CheckpointAbort(ToWorker):
    """Checkpoint ``checkpoint_id`` was aborted: release its alignment, forget its snapshot."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class EndSources(ToWorker):
    """Stop with drain: every source subtask ends its input now (end of input flows: the maximum
    watermark, windows and timers fire), as if its splits were exhausted."""


@dataclass(frozen=True, slots=True)
class StartLoopProbe(ToWorker):
    """The heads of loop ``loop`` send probe round ``round`` around the loop."""

    loop: int
    round: int


@dataclass(frozen=True, slots=True)
class EndLoop(ToWorker):
    """Loop ``loop`` is empty and nothing can enter it: its heads end it."""

    loop: int


@dataclass(frozen=True, slots=True)
class KindCommand(ToWorker):
    """A command of the job's kind to every worker (a graph job: run superstep *n*, halt). The
    payload is a frozen dataclass the kind's module defines; other kinds' workers ignore it."""

    payload: Any


class Stop(ToWorker):
    """The worker stops: a :class:`Cancel`, :class:`Shutdown` or :class:`Reject`."""

    __slots__ = ()
    reason: str


@dataclass(frozen=True, slots=True)
class Cancel(Stop):
    """The job is cancelled, failed, or restarting: stop at once."""

    reason: str


@dataclass(frozen=True, slots=True)
class Shutdown(Stop):
    """The job finished: stop."""

    reason: str = "shutdown"


@dataclass(frozen=True, slots=True)
class Reject(Stop):
    """A registration that the job does not need (a stale attempt, a duplicate, too late)."""

    reason: str


# ---------------------------------------------------------------------- dispatch
def message_types(base: type) -> list[type]:
    """Every concrete (dataclass) message type deriving from ``base``.

    Only classes their module exports count: ``dataclass(slots=True)`` replaces the class it
    decorates, and the replaced one lingers among the base's subclasses until collected."""
    found: list[type] = []
    pending = [base]
    while pending:
        cls = pending.pop(0)
        for sub in cls.__subclasses__():
            pending.append(sub)
            exported = getattr(sys.modules.get(sub.__module__), sub.__qualname__, None) is sub
            if exported and "__dataclass_fields__" in sub.__dict__ and sub not in found:
                found.append(sub)
    return found


Handler = TypeVar("Handler", bound=Callable[..., Any])


class Dispatch:
    """A handler table: message or event type -> handler, looked up with ``type(message)``.

    Fill it by decorating the handlers (``@table.on(Heartbeat)``); a type gets one handler.
    The handlers are the plain functions (called as ``handler(owner, ...)``), so the lookup is
    one dict access. ``missing`` lists the types without a handler, for the tests."""

    __slots__ = ("handlers", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.handlers: dict[type, Callable[..., Any]] = {}

    def on(self, *types: type) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            for cls in types:
                if cls in self.handlers:
                    raise TypeError(f"{self.name}: {cls.__name__} already has a handler")
                self.handlers[cls] = handler
            return handler

        return register

    def missing(self, types: Iterable[type]) -> list[type]:
        return [cls for cls in types if cls not in self.handlers]
