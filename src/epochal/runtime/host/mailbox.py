"""What a worker's threads hand each other: the mailbox, its events, and snapshot upload jobs.

The mailbox (:class:`Mailbox`, a ``SimpleQueue`` underneath) is fed by one reader thread per peer
connection and one for the control connection; the mailbox thread takes events out and dispatches on their type (see
``Worker._drain_mailbox``). A mailbox event is one of the classes below or a
:class:`~epochal.messages.ToWorker` control message from the JobMaster, put in as it arrived.

Data batches and credits arrive at the rate of the job's network traffic (one event per batch
of up to ``batch_size`` records, and one credit per processed batch back), so these events are
as small as a frozen dataclass can be: two slots, no defaults, no post-init. Creating and
dispatching one costs about half a microsecond more than the positional tuple it replaced,
under a nanosecond per record at the default batch size: below what ``benchmarks/throughput.py``
can resolve, so they are dataclasses like every other message.

The uploader thread has its own queue of :class:`SnapshotUpload` jobs (``None`` ends it).
"""

from __future__ import annotations

import os
import queue
import select
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from epochal.messages import ToWorker

if TYPE_CHECKING:
    from epochal.runtime.operators.inband import InBandEvent


@dataclass(frozen=True, slots=True)
class PeerData:
    """A batch of records arrived on ``channel`` from another worker."""

    channel: int
    batch: list[Any]


@dataclass(frozen=True, slots=True)
class PeerEvent:
    """An in-band event (end of partition, barrier, watermark, loop probe) arrived on ``channel``."""

    channel: int
    event: InBandEvent


@dataclass(frozen=True, slots=True)
class PeerCredit:
    """The consumer of output ``channel`` processed ``credit`` more batches, and wants batches of
    ``batch_size`` records from now on (0: as before)."""

    channel: int
    credit: int
    batch_size: int = 0


@dataclass(frozen=True, slots=True)
class PeerClosed:
    """The data connection to worker ``peer`` ended (cleanly or not); ``generation`` tells the
    connection to a replaced worker from the one to its replacement (see :class:`PeerJoined`)."""

    peer: int
    reason: str
    generation: int = 0


@dataclass(frozen=True, slots=True)
class PeerJoined:
    """A replacement of worker ``peer`` connected (and said HELLO) on a socket of its own, while
    the job runs: the body opens a new connection of generation ``generation`` on ``sock``."""

    peer: int
    sock: Any
    generation: int


@dataclass(frozen=True, slots=True)
class JobMasterLost:
    """The control connection to the JobMaster ended."""

    reason: str


MailboxEvent = PeerData | PeerEvent | PeerCredit | PeerClosed | PeerJoined | JobMasterLost | ToWorker


class Mailbox:
    """The worker's mailbox: any thread puts events in, the processing thread takes them out.

    ``get``, ``get_nowait`` and ``empty`` are the ``SimpleQueue``'s own. The processing thread may
    also wait for an event *and* for file descriptors of its own at once (:meth:`sleep`, used by
    a worker whose query server must answer a query that arrives while it has no work): while it
    sleeps there, a :meth:`put` also writes the mailbox's eventfd, which that wait watches. A put
    while the processing thread works costs one flag test more than ``SimpleQueue.put``, and no
    other thread is woken for a query that arrives while it works (it is answered at the next
    safe point)."""

    __slots__ = ("_queue", "get", "get_nowait", "empty", "_sleeping", "_fd")

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[MailboxEvent] = queue.SimpleQueue()
        self.get = self._queue.get
        self.get_nowait = self._queue.get_nowait
        self.empty = self._queue.empty
        self._sleeping = False
        self._fd = -1

    def put(self, event: MailboxEvent) -> None:
        """Queue ``event`` (any thread); wake the processing thread if it sleeps in :meth:`sleep`."""
        self._queue.put(event)
        if self._sleeping:
            try:
                os.eventfd_write(self._fd, 1)
            except OSError:  # closed: the worker is ending
                pass

    def wakeup_fd(self) -> int:
        """The eventfd a :meth:`put` writes while the processing thread sleeps: register it (for
        reading) in the poller handed to :meth:`sleep`."""
        if self._fd < 0:
            self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        return self._fd

    def sleep(self, poller: select.epoll, timeout: float) -> list[tuple[int, int]]:
        """On the processing thread: wait up to ``timeout`` seconds until an event is queued or a
        descriptor of ``poller`` (which holds :meth:`wakeup_fd`) is ready. Returns ``poller``'s
        ready descriptors, the eventfd among them read back to zero ([] if an event was queued
        already). May return early for no reason; the caller looks at its queue and descriptors."""
        self._sleeping = True  # a put from now on writes the eventfd ...
        try:
            if not self._queue.empty():  # ... and one before was queued: seen here
                return []
            ready = poller.poll(timeout)
        finally:
            self._sleeping = False
        for fd, _ in ready:
            if fd == self._fd:
                try:
                    os.eventfd_read(self._fd)
                except OSError:  # read meanwhile (or closed)
                    pass
        return ready

    def close(self) -> None:
        """Release the eventfd (the queue needs nothing)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
