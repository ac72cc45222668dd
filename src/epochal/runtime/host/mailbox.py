"""What a worker's threads hand each other: mailbox events and snapshot upload jobs.

The mailbox (a ``SimpleQueue``) is fed by one reader thread per peer connection and one for the
control connection; the mailbox thread takes events out and dispatches on their type (see
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


@dataclass(frozen=True, slots=True)
class QueriesWaiting:
    """A query of a queryable state arrived while the processing thread waited for work
    (:mod:`epochal.runtime.queries.server`): poll the query server."""


MailboxEvent = PeerData | PeerEvent | PeerCredit | PeerClosed | PeerJoined | JobMasterLost | QueriesWaiting | ToWorker
