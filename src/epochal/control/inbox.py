"""The JobMaster's inbox: the events its coordinator thread takes decisions on.

Socket reader threads, the Spark launcher thread and the user's thread (cancel) never touch
the JobMaster's state; they put one of these events into its queue and the coordinator thread
dispatches on the event's type (``JobMaster._handle``).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from epochal.messages import ToJobMaster


@dataclass(frozen=True, slots=True)
class Received:
    """``message`` arrived from the worker that said it is ``worker`` on ``connection``."""

    worker: int
    connection: socket.socket
    message: ToJobMaster


@dataclass(frozen=True, slots=True)
class Disconnected:
    """The control connection ``connection`` of worker ``worker`` ended."""

    worker: int
    connection: socket.socket


@dataclass(frozen=True, slots=True)
class SparkEnded:
    """The Spark job running the workers returned ``results`` or failed with ``error``."""

    results: list[Any] | None
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """The user (or a timeout) cancels the job."""

    reason: str


#: Every event of the inbox (``typing.get_args`` lists the types).
InboxEvent = Received | Disconnected | SparkEnded | CancelRequested
