"""``collect()`` made exactly-once: the driver-side ledger of collected records.

Under checkpointing each collect writer (one per sink subtask and job attempt, named by a
random id) streams its records to the driver tagged with its *epoch*, the records between two
checkpoint barriers (:class:`CollectBatch`). At the barrier of checkpoint *n* it seals the
epoch (:class:`CollectSeal`) and keeps a :class:`CollectEpoch` as its committable in the
checkpoint; when *n* completes it commits it (:class:`CollectCommit`), and only then are the
epoch's records *published*: visible in ``JobClient.collected`` and ``JobResult.collected``.
A restarted attempt commits the committables of the checkpoint it restored again; an epoch is
published at most once, so nothing is repeated, and an epoch of a completed checkpoint is never
dropped, so nothing is lost. Epochs that can never be published (of a failed attempt, not
covered by the restored checkpoint) are dropped when the next attempt starts, so staged records
do not pile up in driver memory.

Without checkpointing writers send plain lists of records, published at once.

The messages (defined in :mod:`epochal.connectors.memory`, by the sink writer that builds them)
arrive from one worker over one connection, in order: an epoch's records before its
seal, its seal before the checkpoint's acknowledgement (so before the checkpoint can complete),
and before any commit. :class:`CollectLedger` is pure bookkeeping (no sockets, no threads): the
JobMaster feeds it events on its coordinator thread.
"""

from __future__ import annotations

from typing import Any

from epochal.connectors.memory import CollectBatch, CollectCommit, CollectEpoch, CollectPayload, CollectSeal

__all__ = ["CollectLedger"]


class _Writer:
    """What the ledger knows of one writer: its staged epochs and which epochs it published."""

    __slots__ = ("attempt", "collect_id", "published_below", "published_extra", "staged")

    def __init__(self, collect_id: str, attempt: int) -> None:
        self.collect_id = collect_id
        self.attempt = attempt
        #: epoch -> [records, checkpoint id of its seal or None]
        self.staged: dict[int, list[Any]] = {}
        # Published epochs: all below ``published_below``, plus ``published_extra`` (a writer's
        # commits come in epoch order, so that set stays empty in practice).
        self.published_below = 0
        self.published_extra: set[int] = set()

    def is_published(self, epoch: int) -> bool:
        return epoch < self.published_below or epoch in self.published_extra

    def mark_published(self, epoch: int) -> None:
        if epoch != self.published_below:
            self.published_extra.add(epoch)
            return
        self.published_below += 1
        extra = self.published_extra
        while self.published_below in extra:
            extra.discard(self.published_below)
            self.published_below += 1


class CollectLedger:
    """Stages collected records per writer epoch and publishes committed epochs exactly once.

    ``published[collect id]`` is the list of published records of each collect sink (it only
    grows; readers may copy it at any time).
    """

    def __init__(self, collect_ids: list[str] | tuple[str, ...] = ()) -> None:
        self.published: dict[str, list[Any]] = {cid: [] for cid in collect_ids}
        self._writers: dict[str, _Writer] = {}
        self._attempt = 0  # messages of earlier attempts' writers are stale once it moved on
        #: Records of epochs dropped because they could never be published.
        self.dropped_records = 0
        #: Committed epochs the ledger never staged (e.g. restored from another run's checkpoint).
        self.unknown_commits = 0

    # ------------------------------------------------------------------ events
    def receive(self, collect_id: str, payload: CollectPayload) -> None:
        """One collect message from a worker (the payload of its
        :class:`~epochal.dataflow.protocol.Collect`)."""
        if isinstance(payload, CollectBatch):
            self._stage(collect_id, payload)
        elif isinstance(payload, CollectSeal):
            self._seal(collect_id, payload)
        elif isinstance(payload, CollectCommit):
            self.commit(payload.epochs)
        elif isinstance(payload, list):
            self.published.setdefault(collect_id, []).extend(payload)  # not transactional: at once
        else:
            raise TypeError(f"unexpected collect payload {type(payload).__name__}")

    def _writer(self, collect_id: str, writer: str, attempt: int) -> _Writer | None:
        book = self._writers.get(writer)
        if book is None:
            if attempt < self._attempt:
                return None  # a late message of a failed attempt
            book = self._writers[writer] = _Writer(collect_id, attempt)
        return book

    def _stage(self, collect_id: str, batch: CollectBatch) -> None:
        if batch.attempt < self._attempt:
            return  # a failed attempt's records after the restart began: never published
        book = self._writer(collect_id, batch.writer, batch.attempt)
        if book is None or book.is_published(batch.epoch):
            return
        staged = book.staged.get(batch.epoch)
        if staged is None:
            book.staged[batch.epoch] = [list(batch.records), None]
        else:
            staged[0].extend(batch.records)

    def _seal(self, collect_id: str, seal: CollectSeal) -> None:
        if seal.attempt < self._attempt:
            return
        book = self._writer(collect_id, seal.writer, seal.attempt)
        if book is None or book.is_published(seal.epoch):
            return
        staged = book.staged.setdefault(seal.epoch, [[], None])
        staged[1] = seal.checkpoint_id

    def commit(self, epochs: tuple[CollectEpoch, ...] | list[CollectEpoch]) -> int:
        """Publish the given epochs, each at most once; returns how many records were published."""
        published = 0
        for ref in epochs:
            book = self._writers.get(ref.writer)
            if book is None or (ref.epoch not in book.staged and not book.is_published(ref.epoch)):
                self.unknown_commits += 1
                continue
            if book.is_published(ref.epoch):
                continue  # committed before: a commit repeated after a restore
            records, _ = book.staged.pop(ref.epoch)
            book.mark_published(ref.epoch)
            self.published.setdefault(book.collect_id, []).extend(records)
            published += len(records)
        return published

    def new_attempt(self, attempt: int, restored_checkpoint: int | None, checkpointing: bool = True) -> int:
        """Job attempt ``attempt`` starts from ``restored_checkpoint`` (None: from scratch).

        Drops every staged epoch of an earlier attempt that no completed checkpoint covers (not
        sealed, or sealed for a checkpoint after the restored one): no commit can ever come for
        it. Epochs sealed up to the restored checkpoint stay: the new attempt commits them.
        Without checkpointing (``checkpointing=False``) records were published as they came and
        the new attempt recomputes all of them, so what was published is withdrawn.
        Returns how many records were dropped."""
        self._attempt = max(self._attempt, attempt)
        dropped = 0
        if not checkpointing:
            for records in self.published.values():
                dropped += len(records)
                records.clear()  # in place: readers hold these lists
        for book in self._writers.values():
            if book.attempt >= attempt:
                continue
            for epoch, (records, checkpoint_id) in list(book.staged.items()):
                if checkpoint_id is None or restored_checkpoint is None or checkpoint_id > restored_checkpoint:
                    del book.staged[epoch]
                    dropped += len(records)
        self.dropped_records += dropped
        return dropped

    # ------------------------------------------------------------------ inspection
    def staged_records(self) -> int:
        """Records received but not (yet) published."""
        return sum(len(records) for book in self._writers.values() for records, _ in book.staged.values())
