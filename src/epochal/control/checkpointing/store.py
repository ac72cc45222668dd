"""The completed checkpoints of one job: their ids, retention, and the records each covers.

Owns the list of completed checkpoint ids (oldest first, read from the storage at start so a
restarted driver continues the job's history), the deletion of checkpoints through the storage
(completed ones beyond ``retained``, oldest first, never the latest; the partial files of
aborted ones; the shared files of incremental chains once no retained checkpoint references
them), and per checkpoint the total of source records it covers.
"""

from __future__ import annotations

from typing import Any

from epochal.state.storage import SHARED, CheckpointStorage, state_files


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
        #: per completed checkpoint, the shared files its chains reference
        self._shared: dict[int, set[str]] = {}

    @property
    def latest(self) -> int | None:
        return self.completed[-1] if self.completed else None

    def write(self, checkpoint_id: int, metadata: dict[str, Any]) -> None:
        """Write the metadata (atomically, by the storage): from now on the checkpoint exists."""
        self.storage.write_metadata(checkpoint_id, metadata)
        self._shared[checkpoint_id] = shared_files_of(metadata)

    def _shared_of(self, checkpoint_id: int) -> set[str]:
        if checkpoint_id not in self._shared:  # completed before this driver started
            try:
                self._shared[checkpoint_id] = shared_files_of(self.storage.read_metadata(checkpoint_id))
            except Exception:  # noqa: BLE001 - unreadable: it references nothing we can know of
                self._shared[checkpoint_id] = set()
        return self._shared[checkpoint_id]

    def add(self, checkpoint_id: int, attempt_records: int) -> None:
        """Record a completed checkpoint covering ``attempt_records`` read in this attempt."""
        self.completed.append(checkpoint_id)
        self.source_records[checkpoint_id] = self.records_base + attempt_records

    def retain(self) -> list[int]:
        """Delete the oldest completed checkpoints beyond ``retained`` (never the latest, as
        ``retained`` is at least 1); returns the deleted ids."""
        deleted = []
        candidates: set[str] = set()
        while len(self.completed) > max(self.retained, 1):
            checkpoint_id = self.completed.pop(0)
            candidates |= self._shared_of(checkpoint_id)
            self._shared.pop(checkpoint_id, None)
            self.storage.delete(checkpoint_id)
            deleted.append(checkpoint_id)
        if candidates:  # shared files no retained checkpoint's chain references any more
            referenced = set().union(*(self._shared_of(c) for c in self.completed))
            self.storage.delete_shared(sorted(candidates - referenced))
        return deleted

    def discard(self, checkpoint_id: int) -> None:
        """Delete what an aborted checkpoint had written, its shared files too (only completed
        checkpoints' files are ever referenced by later ones)."""
        self.storage.delete(checkpoint_id)
        marker = f".c{checkpoint_id}."
        referenced = set().union(*(self._shared_of(c) for c in self.completed))
        self.storage.delete_shared([name for name in self.storage.shared_files()
                                    if marker in name and name not in referenced])


def shared_files_of(metadata: dict[str, Any]) -> set[str]:
    """The shared files (incremental chains) a checkpoint's metadata references."""
    files: set[str] = set()
    for operator in metadata.get("operators", {}).values():
        for handle in operator.get("subtasks", {}).values():
            for part in ("keyed", "operator"):
                for file in state_files(handle[part]) if part in handle else ():
                    if file["file"].startswith(f"{SHARED}/"):
                        files.add(file["file"])
    return files
