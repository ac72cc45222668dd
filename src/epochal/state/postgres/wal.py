"""The PostgreSQL backend's write-ahead log: this epoch's changes and those of the epochs not yet committed.

papers/001 §4.1 (1): a subtask keeps the changes it made since the last barrier "in memory,
spilling to local disk", and reads its own uncommitted changes before the database. The log is
layered, newest first: this epoch's changes in memory (``{state: {key group: {stored key: stored
value or None}}}``, the dicts :class:`~epochal.state.postgres.views.GroupView` writes), this
epoch's spill, then each epoch frozen at a barrier and not yet committed (its changes in memory,
then its spill: the :class:`~epochal.state.postgres.epochs.Epoch` of the backend's
:class:`~epochal.state.postgres.epochs.EpochLog`). The memory of the whole log is held to
``wal_memory_bytes``; past it :meth:`WriteAheadLog.spill` moves every change in memory to its
epoch's spill (:mod:`epochal.state.postgres.spill`). The read cache and the database are the
backend's: this module answers only for the changes they do not hold yet.
"""

from __future__ import annotations

import threading
from typing import Any

from epochal.state.postgres.epochs import Changes, EpochLog
from epochal.state.postgres.spill import MISS, DiskSpill, SpillDirectory

__all__ = ["WriteAheadLog"]


class WriteAheadLog:
    """The layered uncommitted changes of one subtask (see the module docstring).

    The processing thread uses it; ``cond`` is the backend's lock, under which the uploader thread
    takes an epoch's (changes, spill): :meth:`spill` and :meth:`freeze` change them under it.
    ``directory`` (where spills go) is set when the backend opens, before the first spill.

    Fields read on the hot path of :class:`~epochal.state.postgres.views.GroupView`: ``bytes``
    (the estimated bytes of this epoch's log in memory, counted by the views), ``room`` (what the
    budget leaves it beside the frozen epochs' memory), ``spilled`` (some epoch spilled: reads go
    through :meth:`spilled_read`) and ``pending`` (otherwise: the frozen epochs' changes, newest
    first)."""

    def __init__(self, log: EpochLog, cond: threading.Condition, memory_bytes: int) -> None:
        self.log = log
        self.cond = cond
        self.memory_bytes = memory_bytes
        #: state id -> key group -> stored key -> stored value (None: removed): this epoch's log
        self.current: dict[int, dict[int, dict[bytes, bytes | None]]] = {}
        #: the changes in memory of the epochs not yet committed, newest first
        self.pending: list[Changes] = []
        self.bytes = 0
        self.room = memory_bytes
        #: the part of this epoch's log spilled to local disk
        self.current_spill: DiskSpill | None = None
        self.spilled = False
        #: (changes, spill) of the epochs not yet committed, newest first
        self.layers: list[tuple[Changes, DiskSpill | None]] = []
        self.directory: SpillDirectory | None = None
        #: changes moved to local disk over the log's life
        self.spilled_entries = 0

    def of(self, state: int, group: int) -> dict[bytes, bytes | None]:
        """This epoch's log of ``state`` in key group ``group``: a dict that lives as long as the
        log (emptied in place when the epoch is frozen or spilled), for a view to write."""
        groups = self.current.get(state)
        if groups is None:
            groups = self.current[state] = {}
        entries = groups.get(group)
        if entries is None:
            entries = groups[group] = {}
        return entries

    def refresh(self) -> None:
        """The epochs not yet committed changed (frozen, spilled, committed): recompute the
        layers reads go through and the room left for this epoch's log."""
        epochs = self.log.epochs
        self.pending = [epoch.changes for epoch in reversed(epochs)]
        self.layers = [(epoch.changes, epoch.spill) for epoch in reversed(epochs)]
        self.spilled = self.current_spill is not None or any(epoch.spill is not None for epoch in epochs)
        self.room = self.memory_bytes - sum(epoch.size for epoch in epochs)

    def _take(self) -> Changes:
        """This epoch's log in memory, copied; the live dicts emptied in place (the views hold them)."""
        changes: Changes = {}
        for state, groups in self.current.items():
            for group, entries in groups.items():
                if entries:
                    changes[(state, group)] = entries.copy()
                    entries.clear()
        return changes

    def freeze(self, checkpoint_id: int) -> None:
        """The barrier of ``checkpoint_id``: this epoch's log (memory and spill) becomes that
        epoch of the :class:`~epochal.state.postgres.epochs.EpochLog`; a new epoch starts empty."""
        changes = self._take()
        with self.cond:
            self.log.begin(checkpoint_id, changes, self.current_spill, self.bytes)
        self.current_spill, self.bytes = None, 0
        self.refresh()

    def spill(self) -> int:
        """The log is over ``wal_memory_bytes`` (:class:`~epochal.state.postgres.views.GroupView`
        counts each new key's bytes): move every change held in memory, this epoch's and the
        frozen epochs', to their epochs' spills on local disk. Returns how many moved."""
        directory = self.directory
        if directory is None:
            raise RuntimeError("the PostgreSQL state backend is used before open_state()")
        moved = 0
        current = self._take()
        if current:
            if self.current_spill is None:
                self.current_spill = directory.new_spill()
            moved += self.current_spill.add(current)
        for epoch in self.log.epochs:
            if epoch.changes:
                spill = epoch.spill or directory.new_spill()
                moved += spill.add(epoch.changes)
                with self.cond:  # an upload takes (changes, spill) under the lock: both hold them now
                    epoch.spill = spill
                    epoch.changes = {}
                    epoch.size = 0
        self.bytes = 0
        self.spilled_entries += moved
        self.refresh()
        return moved

    def spilled_read(self, slot: tuple[int, int], stored_key: bytes) -> Any:
        """The value of ``stored_key`` in ``slot`` after this epoch's log in memory, while some
        epoch spilled: this epoch's spill, then each epoch not yet committed (memory, then
        spill), newest first; :data:`~epochal.state.postgres.spill.MISS` if none changed it."""
        if self.current_spill is not None:
            value = self.current_spill.get(slot, stored_key)
            if value is not MISS:
                return value
        for changes, spill in self.layers:
            entries = changes.get(slot)
            if entries is not None:
                value = entries.get(stored_key, MISS)
                if value is not MISS:
                    return value
            if spill is not None:
                value = spill.get(slot, stored_key)
                if value is not MISS:
                    return value
        return MISS

    def group_changes(self, state: int, group: int) -> list[Any]:
        """The uncommitted changes of ``state`` in key group ``group`` but this epoch's in memory,
        oldest first: iterables of (stored key, value or None) to apply in order over the
        database's values (then this epoch's log in memory, :meth:`of`)."""
        slot = (state, group)
        out: list[Any] = []
        for changes, spill in reversed(self.layers):
            if spill is not None:
                out.append(spill.group(state, group))
            entries = changes.get(slot)
            if entries:
                out.append(entries.items())
        if self.current_spill is not None:
            out.append(self.current_spill.group(state, group))
        return out

    def overlays(self) -> list[Changes]:
        """Every uncommitted change, oldest first, copied (spilled ones read back into memory):
        for a savepoint's copy."""
        out: list[Changes] = []
        for epoch in self.log.epochs:
            if epoch.spill is not None:
                out.append(epoch.spill.changes())
            out.append(epoch.changes)
        if self.current_spill is not None:
            out.append(self.current_spill.changes())
        current: Changes = {}
        for state, groups in self.current.items():
            for group, entries in groups.items():
                if entries:
                    current[(state, group)] = entries.copy()
        out.append(current)
        return out

    def remove_spills(self) -> None:
        """Delete every spill of the log and the spill directory (the backend is disposed)."""
        for spill in [self.current_spill, *(epoch.spill for epoch in self.log.epochs)]:
            if spill is not None:
                spill.remove()
        if self.directory is not None:
            self.directory.remove()
