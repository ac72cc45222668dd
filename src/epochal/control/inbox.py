"""The JobMaster's inbox: what other threads tell its coordinator thread.

The control server's reader threads (:mod:`epochal.control.server`), the Spark launcher thread
and the user's thread (cancel) never touch the job's state; they put one of these events into
the JobMaster's queue. The coordinator thread (:class:`~epochal.control.jobmaster.JobMaster`)
takes them in order, stamps them with the time and hands them to the state machine as its events
(:mod:`epochal.control.jobmaster_events`), dispatching on the inbox event's type (``_INBOX``).
Connections are named by the control server's connection ids, never by sockets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from epochal.control.jobmaster_events import SavepointRequest
from epochal.messages import ToJobMaster


@dataclass(frozen=True, slots=True)
class Received:
    """``message`` arrived on connection ``connection`` of the worker that said it is ``worker``."""

    worker: int
    connection: int
    message: ToJobMaster


@dataclass(frozen=True, slots=True)
class Disconnected:
    """Connection ``connection`` of worker ``worker`` ended."""

    worker: int
    connection: int


@dataclass(frozen=True, slots=True)
class SparkEnded:
    """The Spark job running the workers returned ``results`` or failed with ``error``."""

    results: list[Any] | None
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class CancelAsked:
    """The user (or a timeout) cancels the job."""

    reason: str


@dataclass(frozen=True, slots=True)
class SavepointAsked:
    """The user asks for the savepoint ``request`` describes."""

    request: SavepointRequest


#: Every event of the inbox (``typing.get_args`` lists the types).
InboxEvent = Received | Disconnected | SparkEnded | CancelAsked | SavepointAsked
