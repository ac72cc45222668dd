"""Restores of the PostgreSQL backend (:mod:`epochal.state.postgres.backend`) in the database: a restore of
its own checkpoint resolves what earlier attempts left (non-MVCC: commits the prepared transactions
of the restored checkpoint and earlier, rolls back later ones; MVCC: drops the versions written
after it) and checks that the database holds that checkpoint; a fresh start rolls back every
prepared transaction of the subtask's key groups. Nothing is loaded either way.

Either way the subtask takes its key groups' fence (:func:`take_fence`) before it trusts their
markers or drops versions: a worker of an earlier attempt that still runs (a zombie: partitioned,
or slow to stop) is refused from then on, so it can neither prepare a transaction the restore
would miss (and whose row locks would stall every later upload) nor write versions the restored
state would read."""

from __future__ import annotations

import time
from typing import Any

from epochal.errors import StateBackendError
from epochal.serialization import dumps
from epochal.state.postgres.epochs import resolve
from epochal.state.postgres.store import WRITE_CHUNK, Store
from epochal.state.storage import CheckpointError

#: How long a start waits for an earlier attempt's upload that holds its key groups' markers.
FENCE_WAIT_S = 60.0


def take_fence(store: Store, prefix: str, key_groups: range, fence: int, restored: int | None,
               wait_s: float | None = None) -> list[str]:
    """Make ``fence`` the owner of ``key_groups`` (:meth:`Store.take_fence`). An upload of an
    earlier start that holds their markers is ended: its connections are terminated
    (:meth:`Store.end_earlier_sessions`), which rolls back a transaction not yet prepared; a
    prepared one is resolved as a restore of ``restored`` resolves it (committed if of a
    checkpoint up to ``restored``, else rolled back; ``restored`` None: a start without a
    checkpoint of this backend, rolled back) and the fence taken again. Where the connections
    cannot be ended (the role may not signal them) the upload is waited for, at most ``wait_s``
    (:data:`FENCE_WAIT_S`). Returns the transactions resolved meanwhile."""
    wait_s = FENCE_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    resolved: list[str] = []
    while not store.take_fence(key_groups, fence):
        if time.monotonic() > deadline:
            raise StateBackendError(f"{store.what}: key groups {key_groups.start}-{key_groups.stop - 1} stayed locked "
                                    f"for {wait_s:g} s by a transaction of an earlier attempt")
        store.end_earlier_sessions()
        commit, rollback = resolve_prepared(store, prefix, key_groups, restored)
        resolved += commit + rollback
    return resolved


def resolve_prepared(store: Store, prefix: str, key_groups: range, restored: int | None) -> tuple[list[str], list[str]]:
    """Commit and roll back the prepared transactions of ``key_groups`` as a start from
    ``restored`` decides (:func:`~epochal.state.postgres.epochs.resolve`); returns their ids."""
    commit, rollback = resolve(store.prepared(prefix), restored, key_groups)
    for gid in rollback:
        store.finish_prepared(str(gid), commit=False)
    for gid in commit:
        store.finish_prepared(str(gid), commit=True)
    return [str(g) for g in commit], [str(g) for g in rollback]


def resolve_restore(store: Store, mvcc: bool, namespace: str, table: str, uid: str, prefix: str,
                    key_groups: range, checkpoint_id: int, fence: int) -> dict[str, Any]:
    """Make the database hold checkpoint ``checkpoint_id`` of operator ``uid``'s ``key_groups``,
    owned by ``fence`` (:func:`take_fence`, first), or raise :class:`CheckpointError` saying why
    it cannot; returns what was done (for the backend's ``started`` statistics)."""
    if mvcc:
        take_fence(store, prefix, key_groups, fence, checkpoint_id)  # before the failed attempt's versions go
        if store.committed_row(namespace) is None:
            raise CheckpointError(f"checkpoint {checkpoint_id}: namespace '{namespace}' has no state in "
                                  f"{table}_versions of this database (another database, or dropped?)")
        horizon = store.horizon()
        if horizon > checkpoint_id:
            raise CheckpointError(
                f"checkpoint {checkpoint_id} can no longer be restored from PostgreSQL: the versions it reads "
                f"were collected (operator '{uid}' of namespace '{namespace}' keeps the versions of "
                f"checkpoint {horizon} on, those of the retained checkpoints); restore a newer checkpoint or a "
                "savepoint")
        dropped = store.drop_after(key_groups, checkpoint_id)
        store.set_committed(namespace, checkpoint_id, forward_only=False)
        return {"mode": "restored", "checkpoint": checkpoint_id, "dropped_versions": dropped}
    commit, rollback = resolve_prepared(store, prefix, key_groups, checkpoint_id)
    fenced = take_fence(store, prefix, key_groups, fence, checkpoint_id)  # usually at once: nothing holds them now
    markers = store.markers(key_groups)
    wrong = {g: markers.get(g) for g in key_groups if markers.get(g) != checkpoint_id}
    if wrong:
        newer = {g: c for g, c in wrong.items() if c is not None and c > checkpoint_id}
        shown = ", ".join(f"{g}: {c if c is not None else 'none'}" for g, c in sorted(wrong.items())[:8])
        if newer:
            raise CheckpointError(
                f"checkpoint {checkpoint_id} can no longer be restored from PostgreSQL: the database holds a "
                f"later checkpoint's state of operator '{uid}' (key group: checkpoint {shown}). The "
                "non-MVCC PostgreSQL backend keeps only the latest completed checkpoint: restore that one, "
                "take savepoints to go back, or use mvcc=True (versions of every retained checkpoint)")
        raise CheckpointError(
            f"checkpoint {checkpoint_id}: the state of operator '{uid}' in namespace '{namespace}' "
            f"is not in {table} of this database (key group: checkpoint {shown}); another database, "
            "or was the table changed?")
    return {"mode": "restored", "checkpoint": checkpoint_id, "committed": commit, "rolled_back": rollback,
            "resolved_while_fencing": fenced}


def roll_back_all(store: Store, prefix: str, key_groups: range, fence: int) -> list[str]:
    """Roll back every prepared transaction of ``key_groups`` and take their fence (a start
    without this backend's checkpoint); returns the transactions' ids."""
    _, rollback = resolve_prepared(store, prefix, key_groups, None)
    return rollback + take_fence(store, prefix, key_groups, fence, None)


def start_fresh(backend: Any, restore: Any | None) -> None:
    """Start ``backend`` (a :class:`~epochal.state.postgres.backend.PostgresKeyedStateBackend` whose store
    is open) empty: its prepared transactions rolled back and its key groups of the namespace
    cleared; then load the state ``restore`` holds in another backend's format (a heap or RocksDB
    checkpoint, a savepoint), if any."""
    store = backend.store
    rolled_back = roll_back_all(store, backend.prefix, backend.key_groups, backend.fence)
    store.clear(backend.key_groups)
    checkpoint_id = int(restore.checkpoint_id) if restore is not None else 0
    loaded = 0
    if restore is not None:
        loaded = _load_canonical(backend, restore, checkpoint_id)
    if backend.mvcc:  # a new history: no version of it was collected
        store.set_committed(backend.namespace, checkpoint_id, forward_only=False)
        store.set_horizon(checkpoint_id)
    elif restore is not None:
        store.set_markers(backend.key_groups, checkpoint_id)
    backend.log.committed = checkpoint_id
    backend.committed_epoch = checkpoint_id
    backend._completed_ids = [checkpoint_id] if restore is not None else []
    backend.started.update(mode="loaded" if restore is not None else "fresh", checkpoint=checkpoint_id,
                           loaded=loaded, rolled_back=rolled_back)


def _load_canonical(backend: Any, restore: Any, checkpoint_id: int) -> int:
    """Write the key groups ``restore`` holds for ``backend``'s subtask (any other backend's
    format) into the database, and into its cache while it has room; returns the entries loaded."""
    store = backend.store
    rows: list[tuple[int, bytes, int, bytes]] = []
    loaded = 0
    keep = backend.config.cache_entries
    for group, states in restore.keyed_groups(backend.uid, backend.key_groups):
        cached = backend._groups[group]
        for name, entries in states.items():
            state = backend._state_id(name)
            values = cached.values_of(state)
            for key, value in entries.items():
                stored_key, stored = backend._encode_key(key), dumps(value)
                rows.append((group, stored_key, state, stored))
                if loaded < keep:
                    values[stored_key] = stored
                loaded += 1
        if len(rows) >= WRITE_CHUNK:
            store.write_restored(rows, checkpoint_id)
            rows = []
    store.write_restored(rows, checkpoint_id)
    if loaded > keep:  # the cache could not take it all: read what it lacks from the database
        for cached in backend._groups.values():
            cached.drop()
        backend._incomplete = len(backend._groups)
    backend._cached = min(loaded, keep)
    return loaded
