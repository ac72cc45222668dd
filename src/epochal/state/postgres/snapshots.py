"""The PostgreSQL backend's snapshots (:mod:`epochal.state.postgres.backend`), both run by the worker's
uploader thread through ``upload`` (:func:`epochal.state.snapshot.materialize`): a checkpoint's
epoch written and pre-committed (:class:`EpochUpload`), and a savepoint's canonical copy read from
a ``REPEATABLE READ`` snapshot begun at the barrier (:class:`CanonicalSnapshot`)."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

from epochal.errors import StateBackendError
from epochal.state.backend import Captured
from epochal.state.postgres.epochs import SKIP, WAIT, Changes, EpochLog, EpochTransactionId, UploadPlan
from epochal.state.postgres.spill import merge
from epochal.state.postgres.store import Store
from epochal.state.postgres.wal import WriteAheadLog
from epochal.state.storage import CheckpointError, CheckpointStorage
from epochal.state.ttl import CLOCK, StateTtlConfig, drop_expired

__all__ = ["POSTGRES_FORMAT", "READER", "CanonicalSnapshot", "DatabaseReader", "EpochUpload", "Snapshotted"]

#: ``format`` of this backend's keyed-state handles in checkpoint metadata (:mod:`epochal.state.registry`)
POSTGRES_FORMAT = "postgres"
#: How long an upload waits for the commit of the subtask's previous epoch before it gives up
#: (the checkpoint is declined; its changes go with the next one).
UPLOAD_WAIT_S = 300.0

_loads = pickle.loads


class Snapshotted(Protocol):
    """What the snapshots read of their subtask's backend
    (:class:`~epochal.state.postgres.backend.PostgresKeyedStateBackend`): its connections, epoch
    log and write-ahead log, the lock and thread the log is shared under, what the handle names,
    and its states' types and TTL configs."""

    store: Store | None
    log: EpochLog
    wal: WriteAheadLog
    cond: threading.Condition
    processing_thread: int
    what: str
    mvcc: bool
    table: str
    namespace: str
    uid: str
    key_groups: range
    prefix: str
    attempt: int
    fence: int
    started: dict[str, Any]
    rows_read: int
    committed_epoch: int
    state_types: dict[str, str]
    ttl_configs: dict[str, StateTtlConfig]

    def collect_garbage(self) -> int:
        """Delete the MVCC versions no retained checkpoint reads (uploader thread); how many."""
        ...


class EpochUpload:
    """The upload of one checkpoint's epoch (and of earlier epochs no transaction holds), run by
    the worker's uploader thread through ``upload`` (:func:`epochal.state.snapshot.materialize`)."""

    def __init__(self, backend: Snapshotted, checkpoint_id: int) -> None:
        self.backend = backend
        self.checkpoint_id = checkpoint_id

    def upload(self, storage: Any, checkpoint_id: int, stem: str) -> dict[str, Any]:
        backend = self.backend
        store = backend.store
        assert store is not None
        cond = backend.cond
        deadline = time.monotonic() + UPLOAD_WAIT_S
        with cond:
            while (plan := backend.log.plan(self.checkpoint_id)) is WAIT:
                left = deadline - time.monotonic()
                if left <= 0 or threading.get_ident() == backend.processing_thread:
                    raise StateBackendError(
                        f"{backend.what}: checkpoint {self.checkpoint_id} cannot be pre-committed while the prepared "
                        f"transaction of checkpoint {backend.log.waiting_on(self.checkpoint_id)} is neither committed "
                        "nor rolled back (the PostgreSQL backend commits one checkpoint at a time)")
                cond.wait(min(left, 1.0))
            layers = plan.layers() if isinstance(plan, UploadPlan) else []
        handle: dict[str, Any] = {"format": POSTGRES_FORMAT, "mvcc": backend.mvcc, "table": backend.table,
                                  "namespace": backend.namespace, "uid": backend.uid,
                                  "key_groups": [backend.key_groups.start, backend.key_groups.stop],
                                  "checkpoint": self.checkpoint_id, "rows": 0, "written_bytes": 0,
                                  "opened": {k: v for k, v in backend.started.items()
                                             if isinstance(v, (str, int, float))},
                                  "rows_read": backend.rows_read}
        if plan is SKIP:
            handle["skipped"] = True
            return handle
        assert isinstance(plan, UploadPlan)
        gid = None if backend.mvcc else str(EpochTransactionId(backend.prefix, backend.key_groups.start,
                                                               backend.key_groups.stop, self.checkpoint_id,
                                                               backend.attempt))
        rows, written = store.write_epoch(merge(layers), self.checkpoint_id, backend.key_groups, gid, backend.fence)
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
        handle.update(gid=gid, rows=rows, written_bytes=written, epochs=[e.checkpoint_id for e in plan.epochs],
                      spilled_epochs=sum(spill is not None for _, spill in layers))
        return handle


class CanonicalSnapshot:
    """A full copy of the state in the canonical layout (``{group: {name: {key: value}}}``),
    consistent with the barrier it was taken at: the database as of a ``REPEATABLE READ``
    snapshot begun at the barrier (``isolated``; else read at once on the processing thread),
    overlaid with the epochs not yet committed and the log, as they were then."""

    def __init__(self, backend: Snapshotted, isolated: bool = True) -> None:
        self.backend = backend
        self.committed = backend.committed_epoch
        self.overlays: list[Changes] = backend.wal.overlays()  # oldest first (spilled ones read back)
        self.state_types = dict(backend.state_types)
        self.ttl = dict(backend.ttl_configs)
        self.now = CLOCK.now()
        self.conn: Any = None
        store = backend.store
        assert store is not None
        if isolated:
            from epochal.state.postgres.schema import connect

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
        from epochal.state.snapshot import write_key_groups

        return write_key_groups(storage, checkpoint_id, f"{stem}.keyed", sorted(self.read().items()))


class DatabaseReader:
    """The reader of ``postgres`` handles (:class:`epochal.state.registry.FormatReader`): the
    state is in the database, not in checkpoint files, so another backend cannot restore it; a
    restore that owns some of the handle's key groups is refused with what to do instead (this
    backend restores its own handles when it opens:
    :meth:`~epochal.state.postgres.backend.PostgresKeyedStateBackend.open_state`)."""

    fetches_files = False

    def key_groups(self, storage: CheckpointStorage, checkpoint_id: int, uid: str, handle: dict[str, Any],
                   key_groups: range, names: frozenset[str] | None) -> Iterator[tuple[int, dict[str, dict[Any, Any]]]]:
        start, stop = handle["key_groups"]
        if start < key_groups.stop and key_groups.start < stop:
            raise CheckpointError(
                f"checkpoint {checkpoint_id} keeps the keyed state of operator '{uid}' in PostgreSQL "
                f"(namespace '{handle.get('namespace')}' of table {handle.get('table')}): restore it with "
                "set_state_backend('postgres', dsn=...), or take a savepoint of the job (savepoints are "
                "canonical) to move its state to another backend")
        yield from ()

    def fetch(self, storage: CheckpointStorage, checkpoint_id: int, handle: dict[str, Any],
              key_groups: range) -> Iterator[tuple[str, range]]:
        """Nothing: there are no files to fetch."""
        return iter(())


#: What :data:`epochal.state.registry.FORMATS` names for :data:`POSTGRES_FORMAT`
READER = DatabaseReader()
