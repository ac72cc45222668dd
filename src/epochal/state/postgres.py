"""An external keyed-state backend: keyed state in PostgreSQL, committed with each checkpoint.

papers/001 §4.1 distinguishes local state backends (heap, RocksDB: a snapshot copies the state
to durable storage) from *external* ones, whose state lives in a database and whose snapshots are
transactions of that database: "rollback recovery does not require any I/O to retrieve and load
state from snapshots", and snapshots are incremental "by definition, [as] only changes are
committed externally". ``env.set_state_backend("postgres", dsn=...)`` chooses it; both of the
paper's variants are here:

- **Non-MVCC** (default, §4.1 (1)). The table holds each key's value as of the last completed
  checkpoint. A subtask keeps its changes since the last barrier in a write-ahead log in memory,
  reads its own uncommitted changes first and the database second (through a read cache), and at
  the barrier hands the epoch's log to the uploader thread, which writes it in batches and
  pre-commits it as one prepared transaction per subtask (``PREPARE TRANSACTION``). When the
  checkpoint completes the subtask commits it (``COMMIT PREPARED``); the protocol is the state
  machine of :mod:`epochal.state.postgres_epochs`. Needs ``max_prepared_transactions`` > 0, and
  one checkpoint at a time (``max_concurrent=1``): an epoch's prepared transaction holds its row
  locks, so the next epoch's upload waits for its commit.
- **MVCC** (``mvcc=True``, §4.1 (2)). Every row carries the epoch (checkpoint id) whose upload
  wrote it, and an upload commits at once; reads take each key's newest version at or below the
  last completed checkpoint, plus the subtask's own pending epochs from memory. Completing a
  checkpoint advances the namespace's committed epoch (one row update); a restore deletes the
  versions of epochs after the restored checkpoint (written by the attempt that failed), so any
  retained checkpoint can be restored; versions no retained checkpoint reads are collected.

Either way a restore loads nothing: it resolves the prepared transactions of earlier attempts
(non-MVCC) or drops the failed attempt's versions (MVCC), checks that the database holds the
restored checkpoint, and the operators start reading the database with an empty cache. Rows are
keyed by (operator, key group, key, state) (:mod:`epochal.state.postgres_store`), so a restore at
another parallelism reads another key-group range. A checkpoint's handle names the namespace,
the table and the committed epoch: ``restore_from`` a checkpoint continues in its namespace.

Savepoints are canonical (the heap backend's format: every key group's values), read from a
``REPEATABLE READ`` snapshot of the database taken at the barrier plus the epochs not yet
committed, so a job moves to the heap or RocksDB backend and back; a heap or RocksDB checkpoint
or savepoint restores into this backend by writing its values into the database.

Reads and writes go in batches: keyed operators hand each record batch's keys to
:meth:`PostgresKeyedStateBackend.prefetch`, which reads every key not cached in one statement; a
key group whose every row the cache holds (after a start without a checkpoint, a restore of a
savepoint, or a scan of the group) is *complete* and never read again. Keys and values are
pickled as the RocksDB backend stores them (equal keys of different types, ``1`` and ``1.0``, are
distinct keys here, as there).
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Iterator, MutableMapping
from typing import Any

from epochal.config import StateBackendConfig
from epochal.errors import StateBackendError
from epochal.serialization import dumps as _dumps
from epochal.state.backend import Captured, GroupTables, KeyedStateBackend
from epochal.state.postgres_epochs import SKIP, WAIT, Changes, EpochLog, Gid, UploadPlan, gid_prefix, resolve
from epochal.state.postgres_store import Store
from epochal.state.rocksdb_keys import KeyEncoder
from epochal.state.storage import CheckpointError
from epochal.state.ttl import CLOCK, drop_expired

__all__ = ["POSTGRES_FORMAT", "PostgresKeyedStateBackend"]

#: ``format`` of this backend's keyed-state handles in checkpoint metadata
POSTGRES_FORMAT = "postgres"
#: How long an upload waits for the commit of the subtask's previous epoch before it gives up
#: (the checkpoint is declined; its changes go with the next one).
UPLOAD_WAIT_S = 300.0

_loads = pickle.loads
_pickle = pickle.dumps
_SCALAR_KEYS = frozenset({str, int, bytes, float, bool, type(None)})
_MISS: Any = object()


class _Group:
    """What the read cache holds of one owned key group: the committed values of ``known`` keys
    (every state of a known key: a state missing is a state the key does not have), or of every
    key when ``complete``."""

    __slots__ = ("index", "complete", "known", "values")

    def __init__(self, index: int, complete: bool) -> None:
        self.index = index
        self.complete = complete
        self.known: set[bytes] = set()
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


class _GroupView(MutableMapping[Any, Any]):
    """One key group of one state as ``{key: value}``: the subtask's write-ahead log first, then
    its epochs not yet committed (newest first), then the read cache, then the database. Values
    read are fresh copies (unpickled), so one changed in place must be written back (the backend
    interface's rule). Writes go to the log only."""

    __slots__ = ("_backend", "_slot", "_wal", "_group", "_values", "_encode")

    def __init__(self, backend: PostgresKeyedStateBackend, state: int, group: _Group) -> None:
        self._backend = backend
        self._slot = (state, group.index)
        self._wal = backend._wal_of(state, group.index)
        self._group = group
        self._values = group.values_of(state)
        self._encode = backend._encoder

    def _key(self, key: Any) -> bytes:
        return _pickle(key, 5) if type(key) in _SCALAR_KEYS else self._encode(key)

    def _stored(self, stored_key: bytes) -> bytes | None:
        """The stored value of ``stored_key`` as this subtask sees it now, or None."""
        value = self._wal.get(stored_key, _MISS)
        if value is not _MISS:
            return value
        pending = self._backend._pending
        if pending:
            slot = self._slot
            for changes in pending:
                entries = changes.get(slot)
                if entries is not None:
                    value = entries.get(stored_key, _MISS)
                    if value is not _MISS:
                        return value
        value = self._values.get(stored_key, _MISS)
        if value is not _MISS:
            return value
        group = self._group
        if group.complete or stored_key in group.known:
            return None
        self._backend._fetch([group.index], [stored_key])
        return self._values.get(stored_key)

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._stored(_pickle(key, 5) if type(key) in _SCALAR_KEYS else self._encode(key))
        return default if value is None else _loads(value)

    def __getitem__(self, key: Any) -> Any:
        value = self._stored(self._key(key))
        if value is None:
            raise KeyError(key)
        return _loads(value)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._wal[_pickle(key, 5) if type(key) in _SCALAR_KEYS else self._encode(key)] = _dumps(value)

    def __contains__(self, key: object) -> bool:
        return self._stored(self._key(key)) is not None

    def __delitem__(self, key: Any) -> None:
        stored_key = self._key(key)
        if self._stored(stored_key) is None:
            raise KeyError(key)
        self._wal[stored_key] = None

    def pop(self, key: Any, default: Any = _MISS) -> Any:
        stored_key = self._key(key)
        value = self._stored(stored_key)
        if value is None:
            if default is _MISS:
                raise KeyError(key)
            return default
        self._wal[stored_key] = None
        return _loads(value)

    def _merged(self) -> dict[bytes, bytes]:
        """Every stored key and value of the group as this subtask sees it (loads the group)."""
        self._backend._load_group(self._group)
        merged: dict[bytes, bytes | None] = dict(self._values)
        slot = self._slot
        for changes in reversed(self._backend._pending):  # oldest first
            entries = changes.get(slot)
            if entries:
                merged.update(entries)
        merged.update(self._wal)
        return {k: v for k, v in merged.items() if v is not None}

    def clear(self) -> None:
        for stored_key in self._merged():
            self._wal[stored_key] = None

    def __iter__(self) -> Iterator[Any]:
        return iter([_loads(k) for k in self._merged()])

    def __len__(self) -> int:
        return len(self._merged())

    def items(self) -> Any:
        return [(_loads(k), _loads(v)) for k, v in self._merged().items()]

    def values(self) -> Any:
        return [_loads(v) for v in self._merged().values()]

    def __repr__(self) -> str:
        return f"<PostgreSQL key group {self._group.index}: {dict(self.items())!r}>"


class PostgresKeyedStateBackend(KeyedStateBackend):
    """Keyed state of one operator subtask in PostgreSQL (see the module docstring).

    Created with the job's :class:`~epochal.config.StateBackendConfig`, the operator's ``uid``,
    the namespace to use when it starts without a checkpoint of this backend, and the attempt;
    :meth:`open_state` must run before the state is used (it decides the namespace, resolves
    earlier attempts and restores). One processing thread uses it, plus the worker's uploader
    thread for :meth:`begin_snapshot`'s upload; ``dispose`` closes its connections."""

    def __init__(self, max_parallelism: int, key_groups: range, config: StateBackendConfig, uid: str,
                 namespace: str, attempt: int = 0, subtask: str = "") -> None:
        super().__init__(max_parallelism, key_groups)
        self.config = config
        self.mvcc = config.mvcc
        self.uid = uid
        self.namespace = namespace
        self.table = config.table
        self.attempt = attempt
        self.what = f"PostgreSQL state of {subtask or uid}"
        self.store: Store | None = None
        self.log = EpochLog(sequential=not self.mvcc)
        self._cond = threading.Condition()
        self._encoder = KeyEncoder()
        #: state id -> key group -> stored key -> stored value (None: removed): this epoch's log
        self._wal: dict[int, dict[int, dict[bytes, bytes | None]]] = {}
        #: the changes of the epochs not yet committed, newest first (what reads see after the log)
        self._pending: list[Changes] = []
        self._groups = {group: _Group(group, True) for group in key_groups}
        self._incomplete = 0
        self._cached = 0
        self._evict_at = 0
        self._state_ids: dict[str, int] = {}
        self._tables: dict[str, GroupTables] = {}
        #: MVCC: reads see versions up to this checkpoint (the last completed one)
        self.committed_epoch = 0
        #: MVCC: completed checkpoints known, oldest first, and the keys each epoch wrote (for GC)
        self._completed_ids: list[int] = []
        self._gc: list[tuple[int, list[tuple[int, bytes, int, bool]]]] = []
        self._gc_due: list[tuple[int, list[tuple[int, bytes, int, bool]]]] = []
        self._gc_horizon = 0
        self.prefix = ""
        #: what the last start found and did, for logs and tests
        self.started: dict[str, Any] = {}
        self._processing_thread = threading.get_ident()

    # ------------------------------------------------------------------ starting
    def open_state(self, restore: Any | None) -> None:
        """Before the operator opens: a restore of this backend's checkpoint resolves and checks
        the database (nothing is loaded); any other start clears this subtask's key groups in the
        namespace and loads what ``restore`` holds in another backend's format, if anything."""
        started = time.monotonic()
        handles: list[dict[str, Any]] = []
        checkpoint_id = 0 if restore is None else int(restore.checkpoint_id)
        if restore is not None and hasattr(restore, "keyed_handles"):
            handles = restore.keyed_handles(self.uid, self.key_groups)
        own = [h for h in handles if h.get("format") == POSTGRES_FORMAT]
        if own:
            variants = {bool(h.get("mvcc")) for h in own}
            if variants != {self.mvcc}:
                raise CheckpointError(
                    f"checkpoint {checkpoint_id} holds the keyed state of operator '{self.uid}' in PostgreSQL "
                    f"written with mvcc={not self.mvcc}; restore it with set_state_backend('postgres', "
                    f"mvcc={not self.mvcc}), or move between the variants through a savepoint")
            self.namespace = own[0]["namespace"]
            self.table = own[0].get("table", self.table)
        self.store = Store(self.config.dsn or "", self.table, self.mvcc, self.what)
        self.store.register(self.namespace, self.uid)
        self.prefix = gid_prefix(self.table, self.namespace, self.uid)
        if own:
            self._start_restored(checkpoint_id)
        else:
            self._start_fresh(restore)
        self.started["open_s"] = time.monotonic() - started

    def _start_restored(self, checkpoint_id: int) -> None:
        store = self.store
        assert store is not None
        groups = self.key_groups
        if self.mvcc:
            if store.committed_row(self.namespace) is None:
                raise CheckpointError(f"checkpoint {checkpoint_id}: namespace '{self.namespace}' has no state in "
                                      f"{self.table}_versions of this database (another database, or dropped?)")
            horizon = store.horizon()
            if horizon > checkpoint_id:
                raise CheckpointError(
                    f"checkpoint {checkpoint_id} can no longer be restored from PostgreSQL: the versions it reads "
                    f"were collected (operator '{self.uid}' of namespace '{self.namespace}' keeps the versions of "
                    f"checkpoint {horizon} on, those of the retained checkpoints); restore a newer checkpoint or a "
                    "savepoint")
            dropped = store.drop_after(groups, checkpoint_id)
            store.set_committed(self.namespace, checkpoint_id, forward_only=False)
            self.started.update(mode="restored", checkpoint=checkpoint_id, dropped_versions=dropped)
        else:
            commit, rollback = resolve(store.prepared(self.prefix), checkpoint_id, groups)
            for gid in rollback:
                store.finish_prepared(str(gid), commit=False)
            for gid in commit:
                store.finish_prepared(str(gid), commit=True)
            markers = store.markers(groups)
            wrong = {g: markers.get(g) for g in groups if markers.get(g) != checkpoint_id}
            if wrong:
                newer = {g: c for g, c in wrong.items() if c is not None and c > checkpoint_id}
                shown = ", ".join(f"{g}: {c if c is not None else 'none'}" for g, c in sorted(wrong.items())[:8])
                if newer:
                    raise CheckpointError(
                        f"checkpoint {checkpoint_id} can no longer be restored from PostgreSQL: the database holds a "
                        f"later checkpoint's state of operator '{self.uid}' (key group: checkpoint {shown}). The "
                        "non-MVCC PostgreSQL backend keeps only the latest completed checkpoint: restore that one, "
                        "take savepoints to go back, or use mvcc=True (versions of every retained checkpoint)")
                raise CheckpointError(
                    f"checkpoint {checkpoint_id}: the state of operator '{self.uid}' in namespace '{self.namespace}' "
                    f"is not in {self.table} of this database (key group: checkpoint {shown}); another database, "
                    "or was the table changed?")
            self.started.update(mode="restored", checkpoint=checkpoint_id, committed=[str(g) for g in commit],
                                rolled_back=[str(g) for g in rollback])
        self.log.committed = checkpoint_id
        self.committed_epoch = checkpoint_id
        self._completed_ids = [checkpoint_id]
        for group in self._groups.values():  # nothing loaded: the cache fills as keys are read
            group.complete = False
        self._incomplete = len(self._groups)

    def _start_fresh(self, restore: Any | None) -> None:
        """Start empty (this subtask's key groups of the namespace cleared), then load the state
        ``restore`` holds in another backend's format (a heap or RocksDB checkpoint, a savepoint)."""
        store = self.store
        assert store is not None
        rolled_back = []
        if not self.mvcc:
            _, rollback = resolve(store.prepared(self.prefix), None, self.key_groups)
            for gid in rollback:
                store.finish_prepared(str(gid), commit=False)
            rolled_back = [str(g) for g in rollback]
        store.clear(self.key_groups)
        checkpoint_id = int(restore.checkpoint_id) if restore is not None else 0
        loaded = 0
        if restore is not None:
            loaded = self._load_canonical(restore, checkpoint_id)
        if self.mvcc:  # a new history: no version of it was collected
            store.set_committed(self.namespace, checkpoint_id, forward_only=False)
            store.set_horizon(checkpoint_id)
        elif restore is not None:
            store.set_markers(self.key_groups, checkpoint_id)
        self.log.committed = checkpoint_id
        self.committed_epoch = checkpoint_id
        self._completed_ids = [checkpoint_id] if restore is not None else []
        self.started.update(mode="loaded" if restore is not None else "fresh", checkpoint=checkpoint_id,
                            loaded=loaded, rolled_back=rolled_back)

    def _load_canonical(self, restore: Any, checkpoint_id: int) -> int:
        """Write the key groups ``restore`` holds for this subtask (any other backend's format)
        into the database, and into the cache while it has room; returns the entries loaded."""
        store = self.store
        assert store is not None
        rows: list[tuple[int, bytes, int, bytes]] = []
        loaded = 0
        keep = self.config.cache_entries
        for group, states in restore.keyed_groups(self.uid, self.key_groups):
            cached = self._groups[group]
            for name, entries in states.items():
                state = self._state_id(name)
                values = cached.values_of(state)
                for key, value in entries.items():
                    stored_key, stored = self._encode_key(key), _dumps(value)
                    rows.append((group, stored_key, state, stored))
                    if loaded < keep:
                        values[stored_key] = stored
                    loaded += 1
            if len(rows) >= 20_000:
                store.write_restored(rows, checkpoint_id)
                rows = []
        store.write_restored(rows, checkpoint_id)
        if loaded > keep:  # the cache could not take it all: read what it lacks from the database
            for cached in self._groups.values():
                cached.drop()
            self._incomplete = len(self._groups)
        self._cached = min(loaded, keep)
        return loaded

    # ------------------------------------------------------------------ tables
    def _encode_key(self, key: Any) -> bytes:
        return _pickle(key, 5) if type(key) in _SCALAR_KEYS else self._encoder(key)

    def _state_id(self, name: str) -> int:
        state = self._state_ids.get(name)
        if state is None:
            if self.store is None:
                raise RuntimeError("the PostgreSQL state backend is used before open_state()")
            state = self._state_ids[name] = self.store.state_id(name)
        return state

    def _wal_of(self, state: int, group: int) -> dict[bytes, bytes | None]:
        groups = self._wal.get(state)
        if groups is None:
            groups = self._wal[state] = {}
        wal = groups.get(group)
        if wal is None:
            wal = groups[group] = {}
        return wal

    def owned_table(self, name: str) -> GroupTables:
        table = self._tables.get(name)
        if table is None:
            state = self._state_id(name)
            table = self._tables[name] = {g: _GroupView(self, state, self._groups[g]) for g in self.key_groups}
        return table

    def batch_logged_table(self, name: str) -> tuple[GroupTables, Any]:
        """State ``name`` for a batch-at-a-time operator; its per-batch log reads the batch's
        keys not yet cached in one statement (:meth:`prefetch`)."""
        return self.owned_table(name), self.prefetch

    def prefetch(self, keys: list[Any], key_groups: list[int]) -> None:
        """A record batch's keys (``key_groups[i]`` is ``keys[i]``'s): every state of each key the
        cache cannot answer for is read, in one statement."""
        if not self._incomplete:
            return
        groups = self._groups
        encode = self._encoder
        want_groups: list[int] = []
        want_keys: list[bytes] = []
        seen: set[bytes] = set()
        for key, index in zip(keys, key_groups, strict=True):
            group = groups[index]
            if group.complete:
                continue
            stored_key = _pickle(key, 5) if type(key) in _SCALAR_KEYS else encode(key)
            if stored_key in group.known or stored_key in seen:
                continue
            seen.add(stored_key)
            want_groups.append(index)
            want_keys.append(stored_key)
        if want_keys:
            self._fetch(want_groups, want_keys)

    def _fetch(self, key_groups: list[int], stored_keys: list[bytes]) -> None:
        """Read every state of the given keys into the cache (they become known)."""
        store = self.store
        assert store is not None
        rows = store.fetch(key_groups, stored_keys, self.committed_epoch)
        groups = self._groups
        for index, stored_key, state, value in rows:
            groups[index].values_of(state)[stored_key] = value
        for index, stored_key in zip(key_groups, stored_keys, strict=True):
            groups[index].known.add(stored_key)
        self._cached += len(rows) + len(stored_keys)
        if self._cached > self.config.cache_entries:
            self._evict(set(key_groups))

    def _load_group(self, group: _Group) -> None:
        """Read a whole key group into the cache (it becomes complete)."""
        if group.complete:
            return
        store = self.store
        assert store is not None
        rows = list(store.scan(range(group.index, group.index + 1), self.committed_epoch))
        group.drop()
        for _, stored_key, state, value in rows:
            group.values_of(state)[stored_key] = value
        group.complete = True
        self._incomplete -= 1
        self._cached += len(rows)
        if self._cached > self.config.cache_entries:
            self._evict({group.index})

    def _evict(self, keep: set[int]) -> None:
        """The cache is over ``cache_entries``: forget whole key groups (not those in ``keep``,
        which the caller is about to read) until it is at three quarters."""
        total = sum(g.size() for g in self._groups.values())
        limit = self.config.cache_entries
        if total <= limit:
            self._cached = total
            return
        target = limit * 3 // 4
        order = list(self._groups.values())
        for step in range(len(order)):
            group = order[(self._evict_at + step) % len(order)]
            if group.index in keep:
                continue
            size = group.size()
            if not size:
                continue
            if group.complete:
                self._incomplete += 1
            group.drop()
            total -= size
            if total <= target:
                self._evict_at = (self._evict_at + step + 1) % len(order)
                break
        self._cached = total

    def _fold(self, changes: Changes) -> None:
        """An epoch was committed: its values are the database's now (the cache takes them for
        the keys it answers for)."""
        groups = self._groups
        added = 0
        for (state, index), entries in changes.items():
            group = groups[index]
            values = group.values_of(state)
            if group.complete:
                for stored_key, value in entries.items():
                    if value is None:
                        values.pop(stored_key, None)
                    else:
                        values[stored_key] = value
                added += len(entries)
            else:
                known = group.known
                for stored_key, value in entries.items():
                    if stored_key in known:
                        if value is None:
                            values.pop(stored_key, None)
                        else:
                            values[stored_key] = value
        self._cached += added
        if self._cached > self.config.cache_entries:
            self._evict(set())

    def _refresh_pending(self) -> None:
        self._pending = [epoch.changes for epoch in reversed(self.log.epochs)]

    # ------------------------------------------------------------------ snapshots
    def begin_snapshot(self, checkpoint_id: int) -> _EpochUpload:
        """The barrier: this epoch's log becomes epoch ``checkpoint_id`` (copied, the live dicts
        emptied in place: the views hold them) and a plan the uploader thread writes."""
        self._processing_thread = threading.get_ident()
        changes: Changes = {}
        for state, groups in self._wal.items():
            for group, entries in groups.items():
                if entries:
                    changes[(state, group)] = entries.copy()
                    entries.clear()
        with self._cond:
            self.log.begin(checkpoint_id, changes)
        self._refresh_pending()
        return _EpochUpload(self, checkpoint_id)

    def begin_savepoint(self, checkpoint_id: int, native: bool) -> _CanonicalSnapshot:
        """A savepoint is canonical (every key group's values, as the heap backend writes them),
        whichever format was asked for: read from a snapshot of the database taken now, plus the
        epochs not yet committed and this epoch's log. The log stays for the next checkpoint."""
        return _CanonicalSnapshot(self)

    def capture_snapshot(self, plan: Any) -> Any:
        return self.capture() if plan is None else plan

    def snapshot_written(self, checkpoint_id: int, handle: dict[str, Any]) -> None:
        pass

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        """Commit the prepared transactions of every checkpoint up to ``checkpoint_id`` (MVCC:
        advance the committed epoch); their epochs' values go to the cache."""
        store = self.store
        if store is None:
            return
        with self._cond:
            newly = checkpoint_id > self.log.committed
            commits, done = self.log.completed(checkpoint_id)
        if not newly:
            return
        try:
            for gid in commits:
                if not store.finish_prepared(gid, commit=True):
                    raise StateBackendError(f"{self.what}: prepared transaction {gid} of completed checkpoint "
                                            f"{checkpoint_id} is gone: was it rolled back by someone else?")
            if self.mvcc:
                store.set_committed(self.namespace, checkpoint_id, forward_only=True)
        finally:
            with self._cond:
                self._cond.notify_all()
        if self.mvcc:
            self.committed_epoch = checkpoint_id
            self._collectable(checkpoint_id, done)
        for epoch in done:
            self._fold(epoch.changes)
        self._refresh_pending()

    def checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` will never complete: its prepared transaction (if any) is
        rolled back; its changes go with the next checkpoint."""
        store = self.store
        if store is None:
            return
        with self._cond:
            gid = self.log.aborted(checkpoint_id)
        if gid is not None:
            try:
                store.finish_prepared(gid, commit=False)
            finally:
                with self._cond:
                    self._cond.notify_all()

    # ------------------------------------------------------------------ MVCC garbage collection
    def _collectable(self, checkpoint_id: int, done: list[Any]) -> None:
        """Record which keys the committed epochs wrote (at their holder's epoch), and move to the
        uploader's queue those no retained checkpoint reads older versions of."""
        for epoch in done:
            entries = [(group, stored_key, state, value is None)
                       for (state, group), values in epoch.changes.items() for stored_key, value in values.items()]
            if entries and epoch.holder is not None:
                self._gc.append((epoch.holder, entries))
        self._completed_ids.append(checkpoint_id)
        retained = self.config.retained
        if len(self._completed_ids) < retained:
            return
        del self._completed_ids[:-retained]
        horizon = self._completed_ids[0]
        due = [item for item in self._gc if item[0] <= horizon]
        if due:
            self._gc = [item for item in self._gc if item[0] > horizon]
            with self._cond:
                self._gc_due.extend(due)
                self._gc_horizon = max(self._gc_horizon, horizon)

    def collect_garbage(self) -> int:
        """Delete the versions queued by :meth:`_collectable` (uploader thread); returns how many."""
        with self._cond:
            due, self._gc_due = self._gc_due, []
            horizon = self._gc_horizon
        store = self.store
        if not due or store is None:
            return 0
        deleted = 0
        try:
            for epoch, entries in due:
                deleted += store.collect(entries, epoch, horizon)
        except StateBackendError:
            with self._cond:  # tried again after the next checkpoint
                self._gc_due = due + self._gc_due
            raise
        return deleted

    # ------------------------------------------------------------------ canonical copies
    def capture(self) -> Captured:
        """A full copy of the state, ``{group: {name: {key: value}}}`` (the database read on the
        processing thread: for tests and the harness; savepoints use :meth:`begin_savepoint`)."""
        snapshot = _CanonicalSnapshot(self, isolated=False)
        return snapshot.read()

    def restore_group(self, group: int, states: dict[str, dict[Any, Any]]) -> None:
        raise RuntimeError("the PostgreSQL backend restores in open_state()")

    def entry_count(self) -> int:
        return sum(len(entries) for states in self.capture().values() for entries in states.values())

    def dispose(self) -> None:
        """Close the connections. Prepared transactions stay: a completed checkpoint's are
        committed by the restore that follows, later ones rolled back by it."""
        if self.store is not None:
            self.store.close()


class _EpochUpload:
    """The upload of one checkpoint's epoch (and of earlier epochs no transaction holds), run by
    the worker's uploader thread through ``upload`` (:func:`epochal.state.snapshot.materialize`)."""

    def __init__(self, backend: PostgresKeyedStateBackend, checkpoint_id: int) -> None:
        self.backend = backend
        self.checkpoint_id = checkpoint_id

    def upload(self, storage: Any, checkpoint_id: int, stem: str) -> dict[str, Any]:
        backend = self.backend
        store = backend.store
        assert store is not None
        cond = backend._cond
        deadline = time.monotonic() + UPLOAD_WAIT_S
        with cond:
            while (plan := backend.log.plan(self.checkpoint_id)) is WAIT:
                left = deadline - time.monotonic()
                if left <= 0 or threading.get_ident() == backend._processing_thread:
                    raise StateBackendError(
                        f"{backend.what}: checkpoint {self.checkpoint_id} cannot be pre-committed while the prepared "
                        f"transaction of checkpoint {backend.log.waiting_on(self.checkpoint_id)} is neither committed "
                        "nor rolled back (the PostgreSQL backend commits one checkpoint at a time)")
                cond.wait(min(left, 1.0))
        handle: dict[str, Any] = {"format": POSTGRES_FORMAT, "mvcc": backend.mvcc, "table": backend.table,
                                  "namespace": backend.namespace, "uid": backend.uid,
                                  "key_groups": [backend.key_groups.start, backend.key_groups.stop],
                                  "checkpoint": self.checkpoint_id, "rows": 0, "written_bytes": 0}
        if plan is SKIP:
            handle["skipped"] = True
            return handle
        assert isinstance(plan, UploadPlan)
        gid = None if backend.mvcc else str(Gid(backend.prefix, backend.key_groups.start, backend.key_groups.stop,
                                                self.checkpoint_id, backend.attempt))
        rows, written = store.write_epoch(plan.merged(), self.checkpoint_id, backend.key_groups, gid)
        with cond:
            kept = backend.log.prepared(plan, gid or "")
        if not kept:  # aborted while it was written: roll it back here, its epochs go with the next
            try:
                store.finish_prepared(gid or "", commit=False, conn=store.write)
            finally:
                with cond:
                    backend.log.rolled_back(plan)
                    cond.notify_all()
            handle["skipped"] = True
            return handle
        if backend.mvcc:
            handle["collected"] = backend.collect_garbage()
        handle.update(gid=gid, rows=rows, written_bytes=written, epochs=[e.checkpoint_id for e in plan.epochs])
        return handle


class _CanonicalSnapshot:
    """A full copy of the state in the canonical layout (``{group: {name: {key: value}}}``),
    consistent with the barrier it was taken at: the database as of a ``REPEATABLE READ``
    snapshot begun at the barrier (``isolated``; else read at once on the processing thread),
    overlaid with the epochs not yet committed and the log, as they were then."""

    def __init__(self, backend: PostgresKeyedStateBackend, isolated: bool = True) -> None:
        self.backend = backend
        self.committed = backend.committed_epoch
        self.overlays: list[Changes] = list(reversed(backend._pending))  # oldest first (frozen dicts)
        current: Changes = {}
        for state, groups in backend._wal.items():
            for group, entries in groups.items():
                if entries:
                    current[(state, group)] = entries.copy()
        self.overlays.append(current)
        self.state_types = dict(backend.state_types)
        self.ttl = dict(backend.ttl_configs)
        self.now = CLOCK.now()
        self.conn: Any = None
        store = backend.store
        assert store is not None
        if isolated:
            from epochal.state.postgres_store import connect

            self.conn = connect(store.dsn, backend.what)
            try:
                self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                self.conn.execute("SELECT 1")  # the snapshot is taken by the first statement
            except Exception as exc:
                self.conn.close()
                raise StateBackendError(f"{backend.what}: cannot begin a snapshot of PostgreSQL: {exc}") from exc

    def read(self) -> Captured:
        backend = self.backend
        store = backend.store
        assert store is not None
        try:
            names = store.state_names(self.conn)
            stored: dict[tuple[int, int], dict[bytes, bytes | None]] = {}
            for group, stored_key, state, value in store.scan(backend.key_groups, self.committed, self.conn):
                entries = stored.get((state, group))
                if entries is None:
                    entries = stored[(state, group)] = {}
                entries[stored_key] = value
        finally:
            if self.conn is not None:
                try:
                    self.conn.execute("COMMIT")
                    self.conn.close()
                except Exception:
                    pass
        for changes in self.overlays:
            for slot, entries in changes.items():
                target = stored.get(slot)
                if target is None:
                    target = stored[slot] = {}
                target.update(entries)
        by_group: Captured = {}
        for (state, group), entries in stored.items():
            name = names.get(state)
            if name is None:
                continue
            values = {_loads(k): _loads(v) for k, v in entries.items() if v is not None}
            ttl = self.ttl.get(name)
            if ttl is not None and ttl.cleanup_in_snapshot:
                values = drop_expired(values, self.state_types.get(name, "value"), ttl, self.now)
            if values:
                by_group.setdefault(group, {})[name] = values
        return by_group

    def upload(self, storage: Any, checkpoint_id: int, stem: str) -> dict[str, Any]:
        from epochal.state.snapshot import _group_blobs

        data, groups = _group_blobs(self.read())
        written = storage.write_file(checkpoint_id, f"{stem}.keyed", data)
        return {"file": written["file"], "size": written["size"], "groups": groups}
