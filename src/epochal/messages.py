"""The control protocol every job kind shares, between workers and the JobMaster: each message, defined once.

Messages travel pickled (protocol 5) in CONTROL frames of :mod:`epochal.runtime.host.frames`, one
message per frame, on the one TCP connection each worker keeps to the JobMaster. Each message is
a frozen, slotted dataclass; receivers dispatch on its type through a :class:`Dispatch` table,
never on a string. Two directions:

* :class:`ToJobMaster` (worker -> JobMaster): registration, readiness, heartbeats, the first
  record, finished, failures, and a kind's reports (:class:`KindReport`);
* :class:`ToWorker` (JobMaster -> worker): deployment, start, a kind's commands
  (:class:`KindCommand`), and the three ways to stop (:class:`Stop`).

A job kind's own messages are its own: a dataflow job's checkpoint and loop protocol is
:mod:`epochal.dataflow.checkpointing.messages` (its two ends, the worker's checkpointing and the
JobMaster's checkpoint coordinator, are below the ``dataflow`` package), its ``collect()`` output
:class:`~epochal.dataflow.protocol.Collect` and stop-with-drain
:class:`~epochal.dataflow.protocol.EndSources`; a graph or CEC job's are the payloads of
:class:`KindReport` and :class:`KindCommand`. The JobMaster's machine handles those every kind
shares and hands the others to the kind's coordinator (:mod:`epochal.control.kinds`).

Terms used in field names: ``worker`` is a worker index (the Spark partition running it);
``subtask`` is the index of a subtask within its vertex (slot sharing puts subtask ``i`` on
worker ``i``, but the two are different things); ``job_attempt`` counts the job's restarts (0
first); ``task_attempt`` is Spark's attempt number of the task running a worker.

This module imports nothing from epochal but the leaves :mod:`epochal.tracebacks` and
:mod:`epochal.moved` (a name that left it, read by a pickle an earlier epochal wrote, is answered
from where it lives now): workers, connectors and the driver all use it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from epochal import moved
from epochal.tracebacks import UserTraceback

#: A worker's counters as sent with heartbeats and at the end (see ``Worker.metrics``): JSON-like,
#: str -> int | float, and ``operators`` -> {"<operator>#<subtask>": records in}.
Metrics = dict[str, Any]
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
class KindCommand(ToWorker):
    """A command of the job's kind to every worker (a graph job: run superstep *n*, halt). The
    payload is a frozen dataclass the kind's module defines."""

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


if not TYPE_CHECKING:  # (type checkers see only what is defined here)
    def __getattr__(name: str) -> Any:
        return moved.moved_name(__name__, name)
