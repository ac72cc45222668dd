"""The completed checkpoints of one job: their ids, retention, and the records each covers.

Owns the list of completed checkpoint ids (oldest first, read from the storage at start so a
restarted driver continues the job's history), the deletion of checkpoints through the storage
(completed ones beyond ``retained``, oldest first, never the latest; the partial files of
aborted ones), and per checkpoint the total of source records it covers.
"""

from __future__ import annotations

from typing import Any

from epochal.state.storage import CheckpointStorage


class CompletedCheckpointStore:
    """Completed checkpoint ids, retention and per-checkpoint source-record totals."""

    def __init__(self, storage: CheckpointStorage, retained: int) -> None:
        self.storage = storage
        self.retained = retained
        self.completed: list[int] = storage.completed()
        #: Records the sources had read before the current attempt (as of the checkpoint it
        #: restored), and the total each completed checkpoint covers: each record counts once.
        self.records_base = 0
        self.source_records: dict[int, int] = {}

    @property
    def latest(self) -> int | None:
        return self.completed[-1] if self.completed else None

    def write(self, checkpoint_id: int, metadata: dict[str, Any]) -> None:
        """Write the metadata (atomically, by the storage): from now on the checkpoint exists."""
        self.storage.write_metadata(checkpoint_id, metadata)

    def add(self, checkpoint_id: int, attempt_records: int) -> None:
        """Record a completed checkpoint covering ``attempt_records`` read in this attempt."""
        self.completed.append(checkpoint_id)
        self.source_records[checkpoint_id] = self.records_base + attempt_records

    def retain(self) -> list[int]:
        """Delete the oldest completed checkpoints beyond ``retained`` (never the latest, as
        ``retained`` is at least 1); returns the deleted ids."""
        deleted = []
        while len(self.completed) > max(self.retained, 1):
            checkpoint_id = self.completed.pop(0)
            self.storage.delete(checkpoint_id)
            deleted.append(checkpoint_id)
        return deleted

    def discard(self, checkpoint_id: int) -> None:
        """Delete what an aborted checkpoint had written."""
        self.storage.delete(checkpoint_id)
