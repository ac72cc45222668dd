"""An external keyed-state backend: keyed state in PostgreSQL, committed with each checkpoint.

papers/001 §4.1 distinguishes local state backends (heap, RocksDB: a snapshot copies the state
to durable storage) from *external* ones, whose state lives in a database and whose snapshots are
transactions of that database: "rollback recovery does not require any I/O to retrieve and load
state from snapshots", and snapshots are incremental "by definition, [as] only changes are
committed externally". ``env.set_state_backend("postgres", dsn=...)`` chooses it; both of the
paper's variants are here:

- **Non-MVCC** (default, §4.1 (1)). The table holds each key's value as of the last completed
  checkpoint. A subtask keeps its changes since the last barrier in a write-ahead log in memory
  (:mod:`epochal.state.postgres.wal`; past ``wal_memory_bytes``, with those of its epochs not yet
  committed, spilled to local disk: :mod:`epochal.state.postgres.spill`), reads its own
  uncommitted changes first and the database second (through a read cache), and at the barrier
  hands the epoch's log to the uploader thread, which writes it in batches and pre-commits it as
  one prepared transaction per subtask (``PREPARE TRANSACTION``). When the checkpoint completes
  the subtask commits it (``COMMIT PREPARED``); the protocol is the state machine of
  :mod:`epochal.state.postgres.epochs`. Needs ``max_prepared_transactions`` > 0, and one
  checkpoint at a time (``max_concurrent=1``): an epoch's prepared transaction holds its row
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
keyed by (operator, key group, key, state) (:mod:`epochal.state.postgres.store`), so a restore at
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
import secrets
import threading
import time
from collections.abc import Mapping
from typing import Any

from epochal.config import StateBackendConfig
from epochal.errors import StateBackendError
from epochal.state.backend import Captured, GroupTables, KeyedStateBackend
from epochal.state.canonical import SCALAR_KEYS, KeyEncoder
from epochal.state.local_disk import local_root
from epochal.state.postgres.epochs import Changes, EpochLog, Session, gid_prefix
from epochal.state.postgres.release import release_later
from epochal.state.postgres.restore import resolve_restore, start_fresh
from epochal.state.postgres.snapshots import POSTGRES_FORMAT, CanonicalSnapshot, EpochUpload
from epochal.state.postgres.spill import SpillDirectory, merge
from epochal.state.postgres.store import Store
from epochal.state.postgres.views import CommittedGroupView, Group, GroupView, evict, fold_epoch
from epochal.state.postgres.wal import WriteAheadLog
from epochal.state.storage import CheckpointError

__all__ = ["POSTGRES_FORMAT", "PostgresKeyedStateBackend", "create"]

_loads = pickle.loads
_pickle = pickle.dumps


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
        #: guards the epoch log (and the garbage queued for collection) between the processing
        #: thread and the uploader thread; notified when an epoch's transaction is resolved
        self.cond = threading.Condition()
        #: the canonical bytes of a user key (what the rows store)
        self.encoder = KeyEncoder()
        #: this epoch's changes and those of the epochs not yet committed (memory and spills)
        self.wal = WriteAheadLog(self.log, self.cond, config.wal_memory_bytes)
        self._groups = {group: Group(group, True) for group in key_groups}
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
        #: this start's fencing token: it owns the subtask's key groups in the database until a
        #: later start takes them, after which this one's uploads are refused
        self.fence = secrets.randbits(62) + 1
        #: what the last start found and did, for logs and tests (each checkpoint's handle carries
        #: its plain values as ``opened``)
        self.started: dict[str, Any] = {}
        #: state rows read from the database since the start (a restore reads none; the read cache
        #: reads a key's rows once): each checkpoint's handle carries it, so that a test can tell
        #: that a recovery did no state I/O
        self.rows_read = 0
        #: the thread that took the last barrier: an upload on it may not wait for a commit that
        #: only it could make (:class:`~epochal.state.postgres.snapshots.EpochUpload`)
        self.processing_thread = threading.get_ident()

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
        self.prefix = gid_prefix(self.table, self.namespace, self.uid)
        self.store = Store(self.config.dsn or "", self.table, self.mvcc, self.what,
                           Session(self.prefix, self.key_groups.start, self.key_groups.stop, self.fence))
        self.store.register(self.namespace, self.uid)
        directory = self.wal.directory = SpillDirectory(local_root(self.config),
                                                        f"{self.uid}-{self.key_groups.start}-{self.key_groups.stop}")
        self.started["spills_removed"] = len(directory.sweep())  # those of killed workers
        if own:
            self._start_restored(checkpoint_id)
        else:
            start_fresh(self, restore)
        self.started["open_s"] = time.monotonic() - started

    def _start_restored(self, checkpoint_id: int) -> None:
        assert self.store is not None
        self.started.update(resolve_restore(self.store, self.mvcc, self.namespace, self.table, self.uid, self.prefix,
                                            self.key_groups, checkpoint_id, self.fence))
        self.log.committed = checkpoint_id
        self.committed_epoch = checkpoint_id
        self._completed_ids = [checkpoint_id]
        for group in self._groups.values():  # nothing loaded: the cache fills as keys are read
            group.complete = False
        self._incomplete = len(self._groups)

    def _encode_key(self, key: Any) -> bytes:
        return _pickle(key, 5) if type(key) in SCALAR_KEYS else self.encoder(key)

    def _state_id(self, name: str) -> int:
        state = self._state_ids.get(name)
        if state is None:
            if self.store is None:
                raise RuntimeError("the PostgreSQL state backend is used before open_state()")
            state = self._state_ids[name] = self.store.state_id(name)
        return state

    def owned_table(self, name: str) -> GroupTables:
        table = self._tables.get(name)
        if table is None:
            state = self._state_id(name)
            table = self._tables[name] = {g: GroupView(self, state, self._groups[g]) for g in self.key_groups}
        return table

    def committed_views(self, names: Mapping[str, str]) -> dict[str, dict[int, CommittedGroupView]]:
        """States ``names`` (query -> state name) as of the last checkpoint this subtask committed,
        ``{query: {owned group: view}}``, read when asked: nothing is copied at a barrier
        (:class:`~epochal.state.postgres.views.CommittedGroupView` says why that is right)."""
        ids = {query: self._state_id(state) for query, state in names.items()}
        return {query: {g: CommittedGroupView(self, state, self._groups[g]) for g in self.key_groups}
                for query, state in ids.items()}

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
        encode = self.encoder
        want_groups: list[int] = []
        want_keys: list[bytes] = []
        seen: set[bytes] = set()
        for key, index in zip(keys, key_groups, strict=True):
            group = groups[index]
            if group.complete:
                continue
            stored_key = _pickle(key, 5) if type(key) in SCALAR_KEYS else encode(key)
            if stored_key in group.known or stored_key in seen:
                continue
            seen.add(stored_key)
            want_groups.append(index)
            want_keys.append(stored_key)
        if want_keys:
            self.fetch_keys(want_groups, want_keys)

    def fetch_keys(self, key_groups: list[int], stored_keys: list[bytes]) -> None:
        """Read every state of the given keys into the cache (they become known)."""
        store = self.store
        assert store is not None
        rows = store.fetch(key_groups, stored_keys, self.committed_epoch)
        groups = self._groups
        for index, stored_key, state, value in rows:
            groups[index].values_of(state)[stored_key] = value
        self.rows_read += len(rows)
        for index, stored_key in zip(key_groups, stored_keys, strict=True):
            groups[index].known[stored_key] = None
        self._cached += len(rows) + len(stored_keys)
        if self._cached > self.config.cache_entries:
            self._evict(set(key_groups))

    def load_group(self, group: Group) -> None:
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
        self.rows_read += len(rows)
        if self._cached > self.config.cache_entries:
            self._evict({group.index})

    def _evict(self, keep: set[int]) -> None:
        """The cache is over ``cache_entries``: forget whole key groups (not those in ``keep``,
        which the caller is about to read) until it is at three quarters."""
        total = sum(g.size() for g in self._groups.values())
        limit = self.config.cache_entries
        if total > limit:
            total, dropped, self._evict_at = evict(list(self._groups.values()), keep, total, limit * 3 // 4,
                                                   self._evict_at)
            self._incomplete += dropped
        self._cached = total

    def _fold(self, changes: Changes) -> None:
        """An epoch was committed: its values are the database's now (the cache takes them for
        the keys it answers for)."""
        self._cached += fold_epoch(self._groups, changes)
        if self._cached > self.config.cache_entries:
            self._evict(set())

    def _forget_cache(self) -> None:
        """Empty the read cache: every key is read from the database again."""
        for group in self._groups.values():
            group.drop()
        self._incomplete = len(self._groups)
        self._cached = 0

    # ------------------------------------------------------------------ snapshots
    def begin_snapshot(self, checkpoint_id: int) -> EpochUpload:
        """The barrier: this epoch's log becomes epoch ``checkpoint_id`` (copied, the live dicts
        emptied in place: the views hold them) and a plan the uploader thread writes."""
        self.processing_thread = threading.get_ident()
        self.wal.freeze(checkpoint_id)
        return EpochUpload(self, checkpoint_id)

    def begin_savepoint(self, checkpoint_id: int, native: bool) -> CanonicalSnapshot:
        """A savepoint is canonical (every key group's values, as the heap backend writes them),
        whichever format was asked for: read from a snapshot of the database taken now, plus the
        epochs not yet committed and this epoch's log. The log stays for the next checkpoint."""
        return CanonicalSnapshot(self)

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
        with self.cond:
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
            with self.cond:
                self.cond.notify_all()
        if self.mvcc:
            self.committed_epoch = checkpoint_id
            self._collectable(checkpoint_id, done)
        spilled = [epoch.spill for epoch in done if epoch.spill is not None]
        if spilled:  # their values are the database's now: rather than read them back, read it again
            self._forget_cache()
            for spill in spilled:
                spill.remove()
        else:
            for epoch in done:
                self._fold(epoch.changes)
        self.wal.refresh()

    def checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` will never complete: its prepared transaction (if any) is
        rolled back; its changes go with the next checkpoint."""
        store = self.store
        if store is None:
            return
        with self.cond:
            gid = self.log.aborted(checkpoint_id)
        if gid is not None:
            try:
                store.finish_prepared(gid, commit=False)
            finally:
                with self.cond:
                    self.cond.notify_all()

    # ------------------------------------------------------------------ MVCC garbage collection
    def _collectable(self, checkpoint_id: int, done: list[Any]) -> None:
        """Record which keys the committed epochs wrote (at their holder's epoch), and move to the
        uploader's queue those no retained checkpoint reads older versions of."""
        for epoch in done:
            entries = [(group, stored_key, state, value is None)
                       for group, stored_key, state, value in merge([(epoch.changes, epoch.spill)])]
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
            with self.cond:
                self._gc_due.extend(due)
                self._gc_horizon = max(self._gc_horizon, horizon)

    def collect_garbage(self) -> int:
        """Delete the versions queued by :meth:`_collectable` (uploader thread); returns how many."""
        with self.cond:
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
            with self.cond:  # tried again after the next checkpoint
                self._gc_due = due + self._gc_due
            raise
        return deleted

    # ------------------------------------------------------------------ canonical copies
    def capture(self) -> Captured:
        """A full copy of the state, ``{group: {name: {key: value}}}`` (the database read on the
        processing thread: for tests and the harness; savepoints use :meth:`begin_savepoint`)."""
        snapshot = CanonicalSnapshot(self, isolated=False)
        return snapshot.read()

    def restore_group(self, group: int, states: dict[str, dict[Any, Any]]) -> None:
        raise RuntimeError("the PostgreSQL backend restores in open_state()")

    def entry_count(self) -> int:
        return sum(len(entries) for states in self.capture().values() for entries in states.values())

    def dispose(self) -> None:
        """Close the connections and remove the spilled log. Prepared transactions stay: a
        completed checkpoint's are committed by the restore that follows, later ones rolled back
        by it. Without a store, a late notification (a checkpoint completed or aborted) does
        nothing. The read cache is freed in the background (:mod:`epochal.state.postgres.release`): the
        task ends, and a next task in this process starts, without waiting for it."""
        self.wal.remove_spills()
        store, self.store = self.store, None
        if store is not None:
            store.close()
        containers: list[dict[Any, Any]] = []
        for group in self._groups.values():
            containers.extend(group.values.values())
            containers.append(group.known)
        self._groups = {}
        release_later(containers)


def create(config: StateBackendConfig, max_parallelism: int, key_groups: range, name: str, *, uid: str = "",
           job_name: str = "", attempt: int = 0) -> PostgresKeyedStateBackend:
    """The PostgreSQL backend of one keyed operator subtask, as
    :func:`epochal.state.backends.create_backend` makes it: operator ``uid`` (else ``name``), in
    ``config.namespace``, else the job's name; its :meth:`~PostgresKeyedStateBackend.open_state`
    must run before it is used."""
    return PostgresKeyedStateBackend(max_parallelism, key_groups, config, uid or name,
                                     config.namespace or job_name or "job", attempt, name)
