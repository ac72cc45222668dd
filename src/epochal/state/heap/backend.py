"""The heap keyed-state backend: Python dicts per key group, full or incremental snapshots.

It keeps ``tables[state name][key group][key] = value``. Keeping key groups apart is what lets
a snapshot be written per key group and a restore with another parallelism read only the groups
it owns (papers/001 §3.1.2). A snapshot's synchronous part is :meth:`HeapKeyedStateBackend.capture`
(shallow copies of the per-group dicts; lists and maps, the only values state objects change in
place, are copied one level deeper; a value that user code may change in place is copied when the
state objects hand it over: :mod:`epochal.state.copy_on_write`) when a thread of the worker
writes it, or nothing but a
``fork()`` when a child process does (:mod:`epochal.dataflow.checkpointing.fork_snapshots`: the child reads the
tables as they were). With ``incremental``, the group dicts are
:class:`~epochal.state.incremental.TrackedDict` (or plain dicts whose writer logs each batch's
keys: :meth:`HeapKeyedStateBackend.batch_logged_table`) and a checkpoint writes only the keys
changed since the last completed one (:mod:`epochal.state.incremental`).
"""

from __future__ import annotations

from typing import Any

from epochal.config import StateBackendConfig
from epochal.state.backend import Captured, KeyedStateBackend
from epochal.state.incremental import DELETED, BatchLog, DeltaTracker, IncrementalCapture, SnapshotPlan, TrackedDict
from epochal.state.ttl import CLOCK, drop_expired

#: name -> key group -> key -> value
Tables = dict[str, dict[int, dict[Any, Any]]]


_DEEP_TYPES = {"list": list, "map": dict}


class HeapKeyedStateBackend(KeyedStateBackend):
    """Keyed state of one operator subtask, kept in Python dicts, partitioned by key group.

    ``incremental``: checkpoints write only what changed since the last completed one, and every
    ``full_every``-th file of a chain is a full checkpoint again (see the module docstring)."""

    shares_values = True

    def __init__(self, max_parallelism: int, key_groups: range, incremental: bool = False,
                 full_every: int = 8) -> None:
        super().__init__(max_parallelism, key_groups)
        self.tables: Tables = {}
        self.tracker = DeltaTracker(full_every) if incremental else None
        self._dict: type[dict[Any, Any]] = TrackedDict if incremental else dict
        #: incremental: the states whose writer logs its batches (their groups are plain dicts)
        self.batch_logs: dict[str, BatchLog] = {}

    def capture(self) -> Captured:
        """Synchronous part of a snapshot: a copy per key group, ``{group: {name: {key: value}}}``.

        After it returns the live tables may change freely; the copy is serialised later. States
        with a TTL config that has ``cleanup_in_snapshot`` are copied without their expired values
        (:func:`~epochal.state.ttl.drop_expired`); the live tables keep them. The value objects
        are the live ones until the state objects copy them before user code may change them
        in place (:mod:`epochal.state.copy_on_write`).
        """
        by_group: Captured = {}
        now = CLOCK.now()
        for name, groups in self.tables.items():
            state_type = self.state_types.get(name, "value")
            deep = _DEEP_TYPES.get(state_type)
            ttl = self.ttl_configs.get(name)
            if ttl is not None and not ttl.cleanup_in_snapshot:
                ttl = None
            for group, entries in groups.items():
                if not entries:
                    continue
                if ttl is not None:  # snapshot cleanup: expired values are left out
                    copied = drop_expired(entries, state_type, ttl, now)
                    if not copied:
                        continue
                else:
                    copied = {k: deep(v) for k, v in entries.items()} if deep else entries.copy()
                by_group.setdefault(group, {})[name] = copied
        self.shared.share(self.tables)
        return by_group

    def owned_table(self, name: str) -> dict[int, dict[Any, Any]]:  # type: ignore[override]
        """State ``name``'s table with a dict for every key group this subtask owns, so that
        operators accessing state inline (built-in aggregations, windows) index it by key group
        without a missing-group check per record. Empty groups are left out of snapshots."""
        table = self.tables.get(name)
        if table is None or len(table) < len(self.key_groups):  # once per name: it is on hot paths
            table = self.tables.setdefault(name, {})
            for group in self.key_groups:
                if group not in table:
                    table[group] = self._dict()
        return table

    def batch_logged_table(self, name: str) -> tuple[Any, BatchLog | None]:
        """Incremental: state ``name``'s groups become plain dicts and its writer's
        :class:`~epochal.state.incremental.BatchLog` records what changes (a log the groups had
        already is carried over)."""
        table = self.owned_table(name)
        if self.tracker is None:
            return table, None
        log = self.batch_logs.get(name)
        if log is None:
            log = self.batch_logs[name] = BatchLog(table)
            for group, entries in table.items():
                if type(entries) is TrackedDict:
                    if entries.changes:
                        log.pieces.append((entries.take_changes(), group))
                    table[group] = dict(entries)
        return table, log

    def restore_group(self, group: int, states: dict[str, dict[Any, Any]]) -> None:
        """Load one key group's state (only groups this subtask owns are ever passed)."""
        for name, entries in states.items():
            self.tables.setdefault(name, {})[group] = self._dict(entries)

    def entry_count(self) -> int:
        return sum(len(e) for groups in self.tables.values() for e in groups.values())

    def state_entries(self) -> dict[str, int]:
        """Exact: the sizes of the per-group dicts (one ``len`` per owned group and state)."""
        return {name: sum(len(e) for e in groups.values()) for name, groups in self.tables.items()}

    # ------------------------------------------------------------------ incremental checkpoints
    def begin_snapshot(self, checkpoint_id: int) -> SnapshotPlan | None:
        if self.tracker is None:
            return None
        return self.tracker.begin(checkpoint_id, self.tables.items(), self.batch_logs)

    def capture_snapshot(self, plan: Any) -> Any:
        """A full copy (no plan, or a full incremental checkpoint), or the entries ``plan``
        changed: each key's value now, or :data:`~epochal.state.incremental.DELETED`."""
        if plan is None:
            return self.capture()
        if plan.full:
            return IncrementalCapture(plan, self.capture())
        data: dict[int, dict[str, dict[Any, Any]]] = {}
        now = CLOCK.now()
        for name, groups in plan.changed_keys().items():
            table = self.tables.get(name, {})
            state_type = self.state_types.get(name, "value")
            deep = _DEEP_TYPES.get(state_type)
            ttl = self.ttl_configs.get(name)
            for group, keys in groups.items():
                entries = table.get(group, {})
                changed = {key: entries.get(key, DELETED) for key in keys}
                if ttl is not None and ttl.cleanup_in_snapshot:  # expired: as good as deleted
                    live = drop_expired({k: v for k, v in changed.items() if v is not DELETED}, state_type, ttl, now)
                    changed = {key: live.get(key, DELETED) for key in changed}
                elif deep is not None:
                    changed = {k: v if v is DELETED else deep(v) for k, v in changed.items()}
                data.setdefault(group, {})[name] = changed
            self.shared.share((name,))
        return IncrementalCapture(plan, data)

    def snapshot_written(self, checkpoint_id: int, handle: dict[str, Any]) -> None:
        if self.tracker is not None and "chain" in handle:
            self.tracker.written(checkpoint_id, tuple(handle["chain"]))

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        if self.tracker is not None:
            self.tracker.completed(checkpoint_id)


def create(config: StateBackendConfig, max_parallelism: int, key_groups: range, name: str, **_: Any) -> \
        HeapKeyedStateBackend:
    """The heap backend of one keyed operator subtask, as
    :func:`epochal.state.backends.create_backend` makes it (``config.incremental``,
    ``config.full_every``)."""
    return HeapKeyedStateBackend(max_parallelism, key_groups, config.incremental, config.full_every)
