"""The PostgreSQL backend's view of its keys (:mod:`epochal.state.postgres.backend`): what the read cache
holds of one key group (:class:`Group`), how the cache takes in a committed epoch
(:func:`fold_epoch`) and forgets groups past its budget (:func:`evict`); one key group of one
state as a mapping (:class:`GroupView`) that reads the subtask's write-ahead log first, then its
epochs not yet committed, then the cache, then the database, and writes the log only; and the same
group as of the last committed checkpoint, for ``read_committed`` queries
(:class:`CommittedGroupView`)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Protocol

from epochal.serialization import dumps as _dumps
from epochal.state.canonical import SCALAR_KEYS, KeyEncoder
from epochal.state.postgres.epochs import Changes
from epochal.state.postgres.spill import ENTRY_OVERHEAD, MISS
from epochal.state.postgres.wal import WriteAheadLog

_loads = pickle.loads
_pickle = pickle.dumps
_MISS: Any = MISS


class Group:
    """What the read cache holds of one owned key group: the committed values of ``known`` keys
    (every state of a known key: a state missing is a state the key does not have), or of every
    key when ``complete``."""

    __slots__ = ("index", "complete", "known", "values")

    def __init__(self, index: int, complete: bool) -> None:
        self.index = index
        self.complete = complete
        #: a dict used as a set: one of bytes keys and None values is not tracked by the garbage
        #: collector, so its full collections do not visit millions of cached keys (a set is)
        self.known: dict[bytes, None] = {}
        #: state id -> stored key -> stored value (the database's, as of the last completed checkpoint)
        self.values: dict[int, dict[bytes, bytes]] = {}

    def values_of(self, state: int) -> dict[bytes, bytes]:
        values = self.values.get(state)
        if values is None:
            values = self.values[state] = {}
        return values

    def size(self) -> int:
        return len(self.known) + sum(map(len, self.values.values()))

    def drop(self) -> None:
        """Forget everything (the dicts are emptied in place: views hold them)."""
        for values in self.values.values():
            values.clear()
        self.known.clear()
        self.complete = False


def fold_epoch(groups: dict[int, Group], changes: Changes) -> int:
    """An epoch was committed: its values are the database's now. Each cached group takes them
    for the keys it answers for (every key of a complete group, the known ones of another).
    Returns how many entries the complete groups took (what the cache may have grown by)."""
    added = 0
    for (state, index), entries in changes.items():
        group = groups[index]
        values = group.values_of(state)
        complete, known = group.complete, group.known
        for stored_key, value in entries.items():
            if complete or stored_key in known:
                if value is None:
                    values.pop(stored_key, None)
                else:
                    values[stored_key] = value
        if complete:
            added += len(entries)
    return added


def evict(order: list[Group], keep: set[int], total: int, target: int, start: int) -> tuple[int, int, int]:
    """Forget whole groups of ``order`` (not those in ``keep``, which the caller is about to read),
    round-robin from ``order[start]``, until the ``total`` entries cached are at ``target`` or
    below. Returns the total then, how many complete groups were dropped (they are incomplete
    now), and where the next eviction starts (``start`` again if the target was not reached)."""
    dropped = 0
    for step in range(len(order)):
        group = order[(start + step) % len(order)]
        if group.index in keep:
            continue
        size = group.size()
        if not size:
            continue
        dropped += group.complete
        group.drop()
        total -= size
        if total <= target:
            return total, dropped, (start + step + 1) % len(order)
    return total, dropped, start


class Reads(Protocol):
    """What the views read through (the subtask's
    :class:`~epochal.state.postgres.backend.PostgresKeyedStateBackend`): its write-ahead log, its
    key encoder (keys are stored as :class:`~epochal.state.canonical.KeyEncoder`'s bytes, scalar
    keys as their plain pickle, :data:`~epochal.state.canonical.SCALAR_KEYS`), and its read
    cache's fills from the database."""

    wal: WriteAheadLog
    encoder: KeyEncoder

    def fetch_keys(self, key_groups: list[int], stored_keys: list[bytes]) -> None:
        """Read every state of the given keys into the cache (they become known)."""
        ...

    def load_group(self, group: Group) -> None:
        """Read a whole key group into the cache (it becomes complete)."""
        ...


class _CommittedReads:
    """What the read cache and the database say of a key: its value as of the last checkpoint
    this subtask committed (the cache holds the database's values, folded in as epochs commit);
    and the iteration both views share over what each shows of its group (``_shown``)."""

    __slots__ = ()
    _backend: Reads
    _group: Group
    _values: dict[bytes, bytes]

    def _committed(self, stored_key: bytes) -> bytes | None:
        value = self._values.get(stored_key, _MISS)
        if value is not _MISS:
            return value
        group = self._group
        if group.complete or stored_key in group.known:
            return None
        self._backend.fetch_keys([group.index], [stored_key])
        return self._values.get(stored_key)

    def _shown(self) -> dict[bytes, bytes]:
        """Every stored key and value of the group this view shows (loads the group)."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        return iter([_loads(k) for k in self._shown()])

    def __len__(self) -> int:
        return len(self._shown())

    def items(self) -> Any:
        return [(_loads(k), _loads(v)) for k, v in self._shown().items()]

    def values(self) -> Any:
        return [_loads(v) for v in self._shown().values()]


class CommittedGroupView(_CommittedReads, Mapping[Any, Any]):
    """One key group of one state as of the last checkpoint the subtask committed, read-only: the
    read cache, then the database; not the write-ahead log, not the epochs not yet committed. A
    ``read_committed`` view
    (:meth:`~epochal.state.postgres.backend.PostgresKeyedStateBackend.committed_views`): it is read when
    asked, and shows the checkpoint the query server calls committed because a worker commits a
    checkpoint's epochs before its query server promotes that checkpoint's view."""

    __slots__ = ("_backend", "_group", "_values", "_encode")

    def __init__(self, backend: Reads, state: int, group: Group) -> None:
        self._backend = backend
        self._group = group
        self._values = group.values_of(state)
        self._encode = backend.encoder

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._committed(_pickle(key, 5) if type(key) in SCALAR_KEYS else self._encode(key))
        return default if value is None else _loads(value)

    def __getitem__(self, key: Any) -> Any:
        value = self._committed(_pickle(key, 5) if type(key) in SCALAR_KEYS else self._encode(key))
        if value is None:
            raise KeyError(key)
        return _loads(value)

    def __contains__(self, key: object) -> bool:
        return self.get(key, _MISS) is not _MISS

    def _shown(self) -> dict[bytes, bytes]:
        self._backend.load_group(self._group)
        return dict(self._values)

    def __repr__(self) -> str:
        return f"<PostgreSQL key group {self._group.index}, committed: {dict(self.items())!r}>"


class GroupView(_CommittedReads, MutableMapping[Any, Any]):
    """One key group of one state as ``{key: value}``: the subtask's write-ahead log first, then
    its epochs not yet committed (newest first), then the read cache, then the database. Values
    read are fresh copies (unpickled), so one changed in place must be written back (the backend
    interface's rule). Writes go to the log only; each key new to it counts its bytes against
    the log's memory budget, past which the backend spills (:meth:`_log`)."""

    __slots__ = ("_backend", "_slot", "_wal", "_entries", "_group", "_values", "_encode")

    def __init__(self, backend: Reads, state: int, group: Group) -> None:
        self._backend = backend
        self._slot = (state, group.index)
        self._wal = backend.wal
        self._entries = backend.wal.of(state, group.index)
        self._group = group
        self._values = group.values_of(state)
        self._encode = backend.encoder

    def _key(self, key: Any) -> bytes:
        return _pickle(key, 5) if type(key) in SCALAR_KEYS else self._encode(key)

    def _stored(self, stored_key: bytes) -> bytes | None:
        """The stored value of ``stored_key`` as this subtask sees it now, or None."""
        value = self._entries.get(stored_key, _MISS)
        if value is not _MISS:
            return value
        wal = self._wal
        if wal.spilled:
            value = wal.spilled_read(self._slot, stored_key)
            if value is not _MISS:
                return value
        elif pending := wal.pending:
            slot = self._slot
            for changes in pending:
                entries = changes.get(slot)
                if entries is not None:
                    value = entries.get(stored_key, _MISS)
                    if value is not _MISS:
                        return value
        return self._committed(stored_key)

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._stored(_pickle(key, 5) if type(key) in SCALAR_KEYS else self._encode(key))
        return default if value is None else _loads(value)

    def __getitem__(self, key: Any) -> Any:
        value = self._stored(self._key(key))
        if value is None:
            raise KeyError(key)
        return _loads(value)

    def _log(self, stored_key: bytes, value: bytes | None) -> None:
        """Write the log; a key new to it counts against the budget (its bytes and
        :data:`~epochal.state.postgres.spill.ENTRY_OVERHEAD`), which past ``wal_memory_bytes``
        spills the log."""
        entries = self._entries
        size = len(entries)
        entries[stored_key] = value
        if len(entries) != size:
            wal = self._wal
            wal.bytes += len(stored_key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD
            if wal.bytes > wal.room:
                wal.spill()

    def __setitem__(self, key: Any, value: Any) -> None:
        self._log(_pickle(key, 5) if type(key) in SCALAR_KEYS else self._encode(key), _dumps(value))

    def __contains__(self, key: object) -> bool:
        return self._stored(self._key(key)) is not None

    def __delitem__(self, key: Any) -> None:
        stored_key = self._key(key)
        if self._stored(stored_key) is None:
            raise KeyError(key)
        self._log(stored_key, None)

    def pop(self, key: Any, default: Any = _MISS) -> Any:
        stored_key = self._key(key)
        value = self._stored(stored_key)
        if value is None:
            if default is _MISS:
                raise KeyError(key)
            return default
        self._log(stored_key, None)
        return _loads(value)

    def _shown(self) -> dict[bytes, bytes]:
        """Every stored key and value of the group as this subtask sees it (loads the group)."""
        self._backend.load_group(self._group)
        merged: dict[bytes, bytes | None] = dict(self._values)
        for entries in self._wal.group_changes(*self._slot):  # oldest first
            merged.update(entries)
        merged.update(self._entries)
        return {k: v for k, v in merged.items() if v is not None}

    def clear(self) -> None:
        for stored_key in self._shown():
            self._log(stored_key, None)

    def __repr__(self) -> str:
        return f"<PostgreSQL key group {self._group.index}: {dict(self.items())!r}>"
