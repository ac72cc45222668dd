"""One triggered checkpoint waiting for acknowledgements, and what an acknowledgement did to it.

Owns the set of subtasks a checkpoint still waits for and the acks received so far, as Flink's
``PendingCheckpoint.acknowledgeTask``: every ack is classified by :class:`AckResult` and only a
``SUCCESS`` changes the checkpoint. It also assembles the checkpoint's metadata from the acks'
state handles (the JSON written to ``chk-<n>/_metadata``). No clocks, no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from epochal.dataflow.checkpointing.messages import Ack, SavepointTarget


class AckResult(enum.Enum):
    """What one acknowledgement did to its checkpoint."""

    #: recorded: the subtask was expected and had not acknowledged yet
    SUCCESS = "success"
    #: the subtask had already acknowledged this checkpoint; ignored (the first ack counts)
    DUPLICATE = "duplicate"
    #: no such pending checkpoint (a late ack of an aborted or completed one), or a subtask the
    #: checkpoint does not wait for; ignored
    UNKNOWN = "unknown"
    #: the pending checkpoint was already disposed of (aborted); ignored
    DISCARDED = "discarded"


@dataclass
class PendingCheckpoint:
    """A triggered checkpoint waiting for one acknowledgement per subtask."""

    checkpoint_id: int
    triggered_at: float  # wall clock, for the statistics and the metadata's timestamp
    started: float  # monotonic, for timeouts and durations
    expected: set[tuple[int, int]]
    acks: dict[tuple[int, int], Ack] = field(default_factory=dict)
    discarded: bool = False
    #: set when the checkpoint is a savepoint: where and how it is written
    savepoint: SavepointTarget | None = None

    def acknowledge(self, message: Ack) -> AckResult:
        """Record ``message`` if its subtask is expected and has not acknowledged yet."""
        if self.discarded:
            return AckResult.DISCARDED
        key = (message.vertex, message.subtask)
        if key in self.acks:
            return AckResult.DUPLICATE
        if key not in self.expected:
            return AckResult.UNKNOWN
        self.acks[key] = message
        return AckResult.SUCCESS

    @property
    def fully_acknowledged(self) -> bool:
        return not self.discarded and set(self.acks) == self.expected

    def discard(self) -> None:
        """Dispose of this checkpoint (aborted): later acks are ``DISCARDED``."""
        self.discarded = True

    def source_records(self) -> int:
        """Records the sources read up to this checkpoint's barrier, in this attempt."""
        return sum(int(a.stats.get("source_records", 0)) for a in self.acks.values())

    def metadata(self, job_name: str, max_parallelism: int, vertex_parallelism: dict[int, int],
                 split_layout: dict[str, int], operators: dict[str, dict[str, str]]) -> dict[str, Any]:
        """The checkpoint's metadata: every operator's state handles per subtask, plus what a
        restore needs to redistribute them (parallelism, split layout, names and kinds)."""
        state: dict[str, Any] = {}
        for (vertex, subtask), ack in self.acks.items():
            for uid, handle in ack.handles.items():
                entry = state.setdefault(uid, {"vertex": vertex, "parallelism": vertex_parallelism[vertex],
                                               **operators.get(uid, {}), "subtasks": {}})
                entry["subtasks"][str(subtask)] = handle
        return {"checkpoint_id": self.checkpoint_id, "job": job_name, "timestamp": self.triggered_at,
                "max_parallelism": max_parallelism, "split_layout": split_layout, "operators": state}
