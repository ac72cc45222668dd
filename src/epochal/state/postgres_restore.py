"""Restores of the PostgreSQL backend (:mod:`epochal.state.postgres`) in the database: a restore of
its own checkpoint resolves what earlier attempts left (non-MVCC: commits the prepared transactions
of the restored checkpoint and earlier, rolls back later ones; MVCC: drops the versions written
after it) and checks that the database holds that checkpoint; a fresh start rolls back every
prepared transaction of the subtask's key groups. Nothing is loaded either way."""

from __future__ import annotations

from typing import Any

from epochal.state.postgres_epochs import resolve
from epochal.state.postgres_store import Store
from epochal.state.storage import CheckpointError


def resolve_restore(store: Store, mvcc: bool, namespace: str, table: str, uid: str, prefix: str,
                    key_groups: range, checkpoint_id: int) -> dict[str, Any]:
    """Make the database hold checkpoint ``checkpoint_id`` of operator ``uid``'s ``key_groups``,
    or raise :class:`CheckpointError` saying why it cannot; returns what was done (for the
    backend's ``started`` statistics)."""
    if mvcc:
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
    commit, rollback = resolve(store.prepared(prefix), checkpoint_id, key_groups)
    for gid in rollback:
        store.finish_prepared(str(gid), commit=False)
    for gid in commit:
        store.finish_prepared(str(gid), commit=True)
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
    return {"mode": "restored", "checkpoint": checkpoint_id, "committed": [str(g) for g in commit],
            "rolled_back": [str(g) for g in rollback]}


def roll_back_all(store: Store, prefix: str, key_groups: range) -> list[str]:
    """Roll back every prepared transaction of ``key_groups`` (a start without this backend's
    checkpoint); returns their ids."""
    _, rollback = resolve(store.prepared(prefix), None, key_groups)
    for gid in rollback:
        store.finish_prepared(str(gid), commit=False)
    return [str(g) for g in rollback]
