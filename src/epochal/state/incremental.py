"""Incremental checkpoints of keyed state: only what changed since the last completed checkpoint.

papers/001 §4.2 calls incremental snapshots of the in-memory backend "conceptually trivial (using
delta maps), yet not implemented"; Flink has them only for RocksDB. Here the heap backend has them:

- **Tracking.** Every key group's entries of every state are a :class:`TrackedDict`, a dict that
  logs which keys were written or removed (every write path of the state objects and of the
  built-in operators goes through its ``__setitem__``/``__delitem__``/``pop``/...; a value changed
  in place and not written back is not seen, which the backend interface already forbids). The
  one exception is a state whose only writer processes a batch at a time and writes every
  record's key (the built-in keyed aggregations): its groups are plain dicts, and the writer
  hands a :class:`BatchLog` each batch's keys before writing them, one call per batch instead
  of a Python-level ``__setitem__`` per record.
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
  (:mod:`epochal.dataflow.checkpointing.store`).

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


_dict_set = dict.__setitem__

#: a change log may hold this many entries per entry of its dict (plus ``_SLACK``) before it is
#: compacted: bounds its memory when checkpoints are rare, and never triggers between
#: checkpoints that come before the state's writes reach several times its size
_LOG_FACTOR = 8
_SLACK = 4096


def _log_limit(entries: int) -> int:
    """How long a change log over ``entries`` entries may grow before it is compacted."""
    return _LOG_FACTOR * entries + _SLACK


class TrackedDict(dict):
    """A dict that logs, in ``changes``, every key written or removed since :meth:`take_changes`.

    The log is a list, duplicates and all: appending costs a fraction of a set insertion (which
    misses the cache on every write of a large state), and the keys are deduplicated where they
    are used, by the snapshot (:meth:`SnapshotPlan.changed_keys`: in a forked snapshot that is the
    child), or by :meth:`compact` once the log outgrows ``_LOG_FACTOR`` entries per entry."""

    __slots__ = ("changes", "_limit")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.changes: list[Any] = []
        self._limit = _log_limit(len(self))

    def __setitem__(self, key: Any, value: Any) -> None:  # the hot path: kept to three steps
        changes = self.changes
        changes.append(key)
        if len(changes) > self._limit:
            self.compact()
        _dict_set(self, key, value)

    def _log(self, *keys: Any) -> None:
        self.changes.extend(keys)
        if len(self.changes) > self._limit:
            self.compact()

    def __delitem__(self, key: Any) -> None:
        dict.__delitem__(self, key)
        self._log(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self._log(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[Any, Any]:
        key, value = dict.popitem(self)
        self._log(key)
        return key, value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self._log(key)
        return dict.setdefault(self, key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> TrackedDict:  # type: ignore[misc]
        self.update(other)
        return self

    def clear(self) -> None:
        self._log(*self)
        dict.clear(self)

    def compact(self) -> None:
        """Drop the log's duplicates (amortised: at most one per ``_LOG_FACTOR`` writes per entry)."""
        self.changes = list(set(self.changes))
        self._limit = _log_limit(max(len(self), len(self.changes)))

    @property
    def dirty(self) -> set[Any]:
        """The keys changed since the log was taken."""
        return set(self.changes)

    def take_changes(self) -> list[Any]:
        """The log of changed keys (duplicates possible), replaced by an empty one."""
        taken, self.changes = self.changes, []
        self._limit = _log_limit(len(self))
        return taken

    def __reduce__(self) -> Any:  # a copy of the entries travels as a plain dict
        return dict, (dict(self),)


#: Keys logged as changed, in pieces: ``(keys, group)`` (a :class:`TrackedDict`'s log: every key in
#: one key group) or ``(keys, groups)`` (a :class:`BatchLog` entry: ``groups[i]`` is ``keys[i]``'s)
Piece = tuple[list[Any], int | list[int]]
#: state name -> the pieces logged since the last completed checkpoint (duplicates possible)
Changes = dict[str, tuple[Piece, ...]]


@dataclass(frozen=True)
class SnapshotPlan:
    """What one incremental checkpoint of one operator subtask writes.

    ``full``: every entry; else the entries of ``changed`` (their value now, or :data:`DELETED`)
    as a delta on ``base``, the chain of file handles of the last completed checkpoint.
    ``changed`` holds the keys as logged (duplicates possible); :meth:`changed_keys` sorts them
    into key groups and deduplicates (in a forked snapshot: in the child)."""

    checkpoint_id: int
    full: bool
    base: tuple[dict[str, Any], ...] = ()
    changed: Changes = field(default_factory=dict)

    def changed_keys(self) -> dict[str, dict[int, set[Any]]]:
        """State name -> key group -> the distinct keys this delta writes."""
        out: dict[str, dict[int, set[Any]]] = {}
        for name, pieces in self.changed.items():
            by_group = out[name] = {}
            batched: dict[Any, int] = {}  # key -> group over every batch piece: deduplicated in C
            for keys, groups in pieces:
                if isinstance(groups, int):
                    mine = by_group.get(groups)
                    if mine is None:
                        mine = by_group[groups] = set()
                    mine.update(keys)
                else:
                    batched.update(zip(keys, groups, strict=True))
            for key, group in batched.items():
                mine = by_group.get(group)
                if mine is None:
                    mine = by_group[group] = set()
                mine.add(key)
        return out


class BatchLog:
    """The keys a batch-at-a-time operator wrote to one state, a whole batch per call.

    For built-in operators that write every record's key of a batch (keyed aggregations): their
    state's key groups are plain dicts, so a write pays no Python-level ``__setitem__``
    (:class:`TrackedDict`'s costs ~0.3 µs per write), and the operator calls the log once per
    batch with the batch's keys and key groups, *before* it writes them (a key logged but not
    written is harmless: the delta holds its value now). Compacted like a :class:`TrackedDict`'s
    log once it holds more than ``_LOG_FACTOR`` entries per entry of ``table``."""

    __slots__ = ("table", "pieces", "logged", "_limit")

    def __init__(self, table: dict[int, dict[Any, Any]]) -> None:
        self.table = table
        self.pieces: list[Piece] = []
        self.logged = 0
        self._limit = _log_limit(self._entries())

    def _entries(self) -> int:
        return sum(map(len, self.table.values()))

    def __call__(self, keys: list[Any], key_groups: list[int]) -> None:
        self.pieces.append((keys, key_groups))
        self.logged += len(keys)
        if self.logged > self._limit:
            self.compact()

    def compact(self) -> None:
        """Replace the pieces by one, each key once (C-level dict merges, no loop per key: with
        checkpoints rare or off, a small state compacts often)."""
        merged: dict[Any, int] = {}
        for keys, groups in self.pieces:
            merged.update(dict.fromkeys(keys, groups) if isinstance(groups, int) else zip(keys, groups, strict=True))
        self.pieces = [(list(merged), list(merged.values()))]
        self.logged = len(merged)
        self._limit = _log_limit(max(self._entries(), self.logged))

    def take(self) -> list[Piece]:
        """The pieces logged so far, replaced by none."""
        taken, self.pieces, self.logged = self.pieces, [], 0
        self._limit = _log_limit(self._entries())
        return taken


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
        #: checkpoint -> state name -> the pieces logged between the previous barrier and its own
        self.pending: dict[int, dict[str, list[Piece]]] = {}
        #: checkpoint -> its chain, once written and not yet confirmed
        self.chains: dict[int, tuple[dict[str, Any], ...]] = {}
        #: the chain of the newest completed checkpoint (None: none yet: the next one is full)
        self.confirmed: tuple[dict[str, Any], ...] | None = None

    def begin(self, checkpoint_id: int, tables: Iterable[tuple[str, dict[int, Any]]],
              batch_logs: dict[str, BatchLog] | None = None) -> SnapshotPlan:
        """Take the change logs of ``tables`` (state name -> key group -> :class:`TrackedDict`;
        groups that are plain dicts are logged by ``batch_logs``) and of ``batch_logs`` for
        checkpoint ``checkpoint_id``; returns what it must write. Takes references only: the
        keys are sorted out by :meth:`SnapshotPlan.changed_keys`, in the snapshot."""
        taken: dict[str, list[Piece]] = {}
        for name, groups in tables:
            for group, entries in groups.items():
                if type(entries) is TrackedDict and entries.changes:
                    taken.setdefault(name, []).append((entries.take_changes(), group))
        for name, log in (batch_logs or {}).items():
            if log.pieces:
                taken.setdefault(name, []).extend(log.take())
        self.pending[checkpoint_id] = taken
        base = self.confirmed
        if base is None or len(base) + 1 > self.full_every:
            return SnapshotPlan(checkpoint_id, True)
        logs: dict[str, list[Piece]] = {}
        for checkpoint in sorted(self.pending):
            for name, pieces in self.pending[checkpoint].items():
                logs.setdefault(name, []).extend(pieces)
        return SnapshotPlan(checkpoint_id, False, base, {name: tuple(pieces) for name, pieces in logs.items()})

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
