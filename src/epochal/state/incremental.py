"""Incremental checkpoints of keyed state: only what changed since the last completed checkpoint.

papers/001 §4.2 calls incremental snapshots of the in-memory backend "conceptually trivial (using
delta maps), yet not implemented"; Flink has them only for RocksDB. Here the heap backend has them:

- **Tracking.** Every key group's entries of every state are a :class:`TrackedDict`, a dict that
  remembers which keys were written or removed (every write path of the state objects and of the
  built-in operators goes through its ``__setitem__``/``__delitem__``/``pop``/...; a value changed
  in place and not written back is not seen, which the backend interface already forbids).
- **Deltas against the last completed checkpoint.** At a barrier the dirty keys move to the
  checkpoint that took them (:meth:`DeltaTracker.begin`); the checkpoint writes, for every key
  changed since the last checkpoint that *completed* (the keys of every checkpoint in between,
  which may still fail, included), its value now or :data:`DELETED`. A checkpoint's state is then a
  *chain*: the files of that completed checkpoint's chain plus its own delta. Because a delta only
  ever builds on a completed checkpoint, a declined or aborted checkpoint never breaks a chain.
- **Full checkpoints.** The first checkpoint of a subtask (after a start or a restore, at any
  parallelism), and any whose chain would exceed ``full_every`` files, writes the whole state
  instead, so a restore never reads more than ``full_every`` files per old subtask.
- **Files.** Chain files live in the job's ``shared/`` directory (they outlive the checkpoint that
  wrote them) and are deleted once no retained checkpoint references them
  (:mod:`epochal.control.checkpointing.store`).

A pure bookkeeping module: writing and reading the files is :mod:`epochal.state.snapshot`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


class _Deleted:
    """The value of a key a delta removes (one instance; pickles to it)."""

    def __repr__(self) -> str:
        return "DELETED"

    def __reduce__(self) -> str:
        return "DELETED"


DELETED: Any = _Deleted()


class TrackedDict(dict):
    """A dict that records, in ``dirty``, every key written or removed since the set was taken."""

    __slots__ = ("dirty",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dirty: set[Any] = set()

    def __setitem__(self, key: Any, value: Any) -> None:
        self.dirty.add(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        dict.__delitem__(self, key)
        self.dirty.add(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self.dirty.add(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[Any, Any]:
        key, value = dict.popitem(self)
        self.dirty.add(key)
        return key, value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self.dirty.add(key)
        return dict.setdefault(self, key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> TrackedDict:  # type: ignore[misc]
        self.update(other)
        return self

    def clear(self) -> None:
        self.dirty.update(self)
        dict.clear(self)

    def __reduce__(self) -> Any:  # a copy of the entries travels as a plain dict
        return dict, (dict(self),)


#: state name -> key group -> keys changed
Changes = dict[str, dict[int, set[Any]]]


@dataclass(frozen=True)
class SnapshotPlan:
    """What one incremental checkpoint of one operator subtask writes.

    ``full``: every entry; else the entries of ``changed`` (their value now, or :data:`DELETED`)
    as a delta on ``base``, the chain of file handles of the last completed checkpoint."""

    checkpoint_id: int
    full: bool
    base: tuple[dict[str, Any], ...] = ()
    changed: Changes = field(default_factory=dict)


@dataclass(frozen=True)
class IncrementalCapture:
    """The captured keyed state of an incremental checkpoint: ``data`` (key group -> state name ->
    key -> value, or :data:`DELETED` in a delta) as ``plan`` says."""

    plan: SnapshotPlan
    data: dict[int, dict[str, dict[Any, Any]]]


class DeltaTracker:
    """Which keys changed since the last completed checkpoint, and that checkpoint's chain.

    Calls: :meth:`begin` at each barrier (processing thread), :meth:`written` once the
    checkpoint's files are written (uploader thread; before the acknowledgement is sent),
    :meth:`completed` when the JobMaster says a checkpoint completed (processing thread)."""

    def __init__(self, full_every: int) -> None:
        self.full_every = full_every
        #: checkpoint -> the keys that changed between the previous barrier and its own
        self.pending: dict[int, Changes] = {}
        #: checkpoint -> its chain, once written and not yet confirmed
        self.chains: dict[int, tuple[dict[str, Any], ...]] = {}
        #: the chain of the newest completed checkpoint (None: none yet: the next one is full)
        self.confirmed: tuple[dict[str, Any], ...] | None = None

    def begin(self, checkpoint_id: int, tables: Iterable[tuple[str, dict[int, Any]]]) -> SnapshotPlan:
        """Take the dirty keys of ``tables`` (state name -> key group -> :class:`TrackedDict`)
        for checkpoint ``checkpoint_id``; returns what it must write."""
        taken: Changes = {}
        for name, groups in tables:
            for group, entries in groups.items():
                if entries.dirty:
                    taken.setdefault(name, {})[group] = entries.dirty
                    entries.dirty = set()
        self.pending[checkpoint_id] = taken
        base = self.confirmed
        if base is None or len(base) + 1 > self.full_every:
            return SnapshotPlan(checkpoint_id, True)
        changed: Changes = {}
        for checkpoint in sorted(self.pending):
            for name, groups in self.pending[checkpoint].items():
                mine = changed.setdefault(name, {})
                for group, keys in groups.items():
                    mine[group] = mine[group] | keys if group in mine else set(keys)
        return SnapshotPlan(checkpoint_id, False, base, changed)

    def written(self, checkpoint_id: int, chain: tuple[dict[str, Any], ...]) -> None:
        """Checkpoint ``checkpoint_id``'s files are written; ``chain``: its full chain."""
        self.chains[checkpoint_id] = chain

    def completed(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed: later deltas build on its chain. (A completed
        checkpoint this subtask never wrote, e.g. one from before a restore, changes nothing.)"""
        chain = self.chains.get(checkpoint_id)
        if chain is None:
            return
        self.confirmed = chain
        for done in [c for c in self.chains if c <= checkpoint_id]:
            del self.chains[done]
        for done in [c for c in self.pending if c <= checkpoint_id]:
            del self.pending[done]


def apply_delta(states: dict[str, dict[Any, Any]], delta: dict[str, dict[Any, Any]]) -> None:
    """Apply one key group's ``delta`` (state name -> key -> value or :data:`DELETED`) to its
    ``states`` in place (chain files are read oldest first)."""
    for name, entries in delta.items():
        target = states.setdefault(name, {})
        for key, value in entries.items():
            if value is DELETED:
                target.pop(key, None)
            else:
                target[key] = value
    for name in [n for n, entries in states.items() if not entries]:
        del states[name]
