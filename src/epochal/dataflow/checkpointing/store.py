"""The completed checkpoints of one job: their ids, which to retain, and the records each covers.

Owns the list of completed checkpoint ids (oldest first, read from the storage when the job is
submitted, so a restarted driver continues the job's history), the choice of the completed
checkpoints to delete (beyond ``retained``, oldest first, never the latest), and per checkpoint
the total of source records it covers. Pure: deleting is the driver's
(:class:`~epochal.control.checkpoint_files.DeleteCheckpoints`).
"""

from __future__ import annotations


class CompletedCheckpointStore:
    """Completed checkpoint ids, retention and per-checkpoint source-record totals."""

    def __init__(self, completed: list[int], retained: int) -> None:
        self.retained = retained
        self.completed: list[int] = list(completed)
        #: Records the sources had read before the current attempt (as of the checkpoint it
        #: restored), and the total each completed checkpoint covers: each record counts once.
        self.records_base = 0
        self.source_records: dict[int, int] = {}

    @property
    def latest(self) -> int | None:
        return self.completed[-1] if self.completed else None

    def add(self, checkpoint_id: int, attempt_records: int) -> None:
        """Record a completed checkpoint covering ``attempt_records`` read in this attempt."""
        self.completed.append(checkpoint_id)
        self.source_records[checkpoint_id] = self.records_base + attempt_records

    def retain(self) -> list[int]:
        """Forget the oldest completed checkpoints beyond ``retained`` (never the latest, as
        ``retained`` is at least 1); returns their ids, to delete."""
        excess = max(0, len(self.completed) - max(self.retained, 1))
        deleted, self.completed = self.completed[:excess], self.completed[excess:]
        return deleted
