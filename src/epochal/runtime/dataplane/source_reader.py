"""Reading a source subtask's splits, with read positions that are operator state.

:class:`SourceReader` reads the splits assigned to one source subtask one after the other and
reports each split's position for snapshots; a restore (at any parallelism) seeks every split
to its restored position when it opens.
"""

from __future__ import annotations

from typing import Any

from epochal.connectors.base import SourceSplit


class SourceReader:
    """Reads a source subtask's splits one after the other.

    Read positions are operator state (union list of ``(split id, position)``), so a restore
    with any parallelism finds the position of every split it is assigned.
    """

    POSITIONS = "split-positions"

    def __init__(self, splits: list[SourceSplit]) -> None:
        self.splits = splits
        self.current = 0
        self.opened = False
        self.restored: dict[str, Any] = {}

    def restore(self, positions: list[tuple[str, Any]]) -> None:
        self.restored = dict(positions)

    def read(self, max_records: int) -> list[Any] | None:
        """Next records; ``[]`` if none now, ``None`` once every split is exhausted."""
        while self.current < len(self.splits):
            split = self.splits[self.current]
            if not self.opened:
                split.open()
                self.opened = True
                if split.split_id in self.restored:
                    split.seek(self.restored.pop(split.split_id))
            records = split.read_batch(max_records)
            if records is not None:
                return records
            split.close()
            self.current += 1
            self.opened = False
        return None

    def positions(self) -> list[tuple[str, Any]]:
        """Read position of every split this subtask owns (not yet opened ones as restored)."""
        # A restored position is dropped when its split opens, so one still here is not applied yet.
        return [(split.split_id, self.restored.get(split.split_id, split.position())) for split in self.splits]

    def close(self) -> None:
        if self.opened and self.current < len(self.splits):
            self.splits[self.current].close()
            self.opened = False
