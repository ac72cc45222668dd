"""In-band control events: they travel inside channels, in FIFO order with the records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EndOfPartition:
    """The producer subtask will send nothing more on this channel."""


END_OF_PARTITION = EndOfPartition()


@dataclass(frozen=True)
class CheckpointBarrier:
    """Cuts a channel's stream into epochs: records before it belong to checkpoint ``checkpoint_id``.

    ``savepoint``: the :class:`~epochal.dataflow.checkpointing.messages.SavepointTarget` when the
    checkpoint is a savepoint (as Flink's barrier carries its checkpoint options): a barrier can
    reach a worker before the JobMaster's trigger does, and the subtask it aligns must still write
    a savepoint (whole, to the savepoint's own location), not an ordinary checkpoint."""

    checkpoint_id: int
    timestamp: float
    savepoint: Any = None


@dataclass(frozen=True)
class LoopProbe:
    """Termination detection of loop ``loop``: round ``round`` of the probe wave its heads send
    around the loop once their inputs from outside it ended (see docs/architecture.md)."""

    loop: int
    round: int


@dataclass(frozen=True)
class Watermark:
    """Event time has reached ``timestamp`` on this channel: no record with an event time at or
    below it will follow. A subtask's event time is the minimum over its live input channels."""

    timestamp: float


#: Event time before any watermark arrived (every real watermark is above it).
NO_WATERMARK = float("-inf")

#: Every event that travels in-band.
InBandEvent = EndOfPartition | CheckpointBarrier | LoopProbe | Watermark
