"""Reading a source subtask's splits, with read positions that are operator state.

:class:`SourceReader` reads the splits assigned to one source subtask one after the other, or,
for a source that reads its splits together (:meth:`~epochal.connectors.base.Source.create_reader`,
e.g. Kafka's partitions), through that source's :class:`~epochal.connectors.base.SplitReader`. It
reports each split's position for snapshots; a restore (at any parallelism) seeks every split to
its restored position when it opens.
"""

from __future__ import annotations

from typing import Any

from epochal.connectors.base import ReaderContext, Source, SourceSplit, SplitReader


class SourceReader:
    """Reads a source subtask's splits.

    Read positions are operator state (union list of ``(split id, position)``), so a restore
    with any parallelism finds the position of every split it is assigned.
    """

    POSITIONS = "split-positions"
    #: the positions of the snapshots taken and not yet completed, kept for the source's
    #: ``notify_checkpoint_complete``
    MAX_PENDING = 16

    def __init__(self, splits: list[SourceSplit], source: Source | None = None,
                 context: ReaderContext | None = None) -> None:
        self.splits = splits
        self.source = source
        self.context = context or ReaderContext("source", 0, 1)
        self.current = 0
        self.opened = False
        self.restored: dict[str, Any] = {}
        self.split_reader: SplitReader | None = None
        self.taken: dict[int, list[tuple[str, Any]]] = {}
        #: the split reader's positions when it closed (its splits all read, or the task ending):
        #: what every later snapshot records, so a restore never reads them again
        self.closed_positions: list[tuple[str, Any]] | None = None

    def restore(self, positions: list[tuple[str, Any]]) -> None:
        self.restored = dict(positions)

    def _open_reader(self) -> SplitReader | None:
        if self.source is None:
            return None
        self.split_reader = self.source.create_reader(self.splits, dict(self.restored), self.context)
        if self.split_reader is not None:
            self.restored = {}
        self.source = None  # asked once
        return self.split_reader

    def read(self, max_records: int) -> list[Any] | None:
        """Next records; ``[]`` if none now, ``None`` once every split is exhausted."""
        reader = self.split_reader or self._open_reader()
        if reader is not None:
            return reader.read_batch(max_records)
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

    def watermark(self) -> Any:
        """The event time a split reader reports, or None."""
        return None if self.split_reader is None else self.split_reader.watermark()

    def take_side_output(self) -> list[tuple[str, Any]]:
        return [] if self.split_reader is None else self.split_reader.take_side_output()

    def progress(self) -> tuple[int, int] | None:
        """``(done, total)`` over this subtask's splits, in the source's ``progress_unit``
        (``SourceSplit.progress`` at each split's position: a restored one's until it opens), or
        its split reader's; None when any split does not know. Read from the heartbeat thread
        while the worker's thread reads: it only reads, and a split read to its end stays there."""
        reader = self.split_reader
        if reader is not None:
            return reader.progress()
        done = total = 0
        restored = self.restored
        for split in list(self.splits):
            found = split.progress(restored.get(split.split_id, split.position()))
            if found is None:
                return None
            done, total = done + found[0], total + found[1]
        return done, total

    def positions(self) -> list[tuple[str, Any]]:
        """Read position of every split this subtask owns (not yet opened ones as restored)."""
        if self.split_reader is not None:
            return self.split_reader.positions()
        if self.closed_positions is not None:
            return list(self.closed_positions)
        # A restored position is dropped when its split opens, so one still here is not applied yet.
        return [(split.split_id, self.restored.get(split.split_id, split.position())) for split in self.splits]

    def snapshot(self, checkpoint_id: int) -> list[tuple[str, Any]]:
        """The positions checkpoint ``checkpoint_id`` records (kept until it completes)."""
        positions = self.positions()
        if self.split_reader is not None:
            self.taken[checkpoint_id] = positions
            for old in sorted(self.taken)[:-self.MAX_PENDING]:
                del self.taken[old]
        return positions

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        positions = self.taken.pop(checkpoint_id, None)
        for old in [c for c in self.taken if c < checkpoint_id]:
            del self.taken[old]
        if positions is not None and self.split_reader is not None:
            self.split_reader.notify_checkpoint_complete(checkpoint_id, positions)

    def close(self) -> None:
        if self.split_reader is not None:
            reader, self.split_reader = self.split_reader, None
            # A finished source subtask still takes part in later checkpoints: without these, its
            # snapshots would record its splits' *start* positions (``split.position()``), and a
            # restore from one would read them all again into state that already counted them.
            self.closed_positions = reader.positions()
            reader.close()
            return
        if self.opened and self.current < len(self.splits):
            self.splits[self.current].close()
            self.opened = False
