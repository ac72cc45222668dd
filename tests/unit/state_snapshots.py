"""Checkpoints and savepoints of known keyed state, written without Spark as a job writes them
(every backend's format), for the tests of the state DataFrames."""

from __future__ import annotations

import os
from typing import Any

from epochal.plan.keygroups import key_group_of, key_group_range
from epochal.state.descriptors import MapStateDescriptor, ValueStateDescriptor
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.snapshot import materialize
from epochal.state.storage import CheckpointStorage, SavepointStorage

#: uid -> state name -> key -> value
States = dict[str, dict[str, dict[Any, Any]]]


def _backend(kind: str, max_parallelism: int, groups: range, directory: str) -> Any:
    if kind == "rocksdb":
        from epochal.state.rocksdb.backend import RocksDBKeyedStateBackend
        from epochal.state.rocksdb.checkpoints import RocksDBSnapshots

        backend = RocksDBKeyedStateBackend(max_parallelism, groups, directory)
        backend.snapshots = RocksDBSnapshots(backend)
        return backend
    return HeapKeyedStateBackend(max_parallelism, groups, incremental=kind == "incremental")


def _put(backend: Any, name: str, key: Any, value: Any) -> None:
    descriptor = MapStateDescriptor(name) if isinstance(value, dict) else ValueStateDescriptor(name)
    backend.set_current_key(key)
    state = backend.get_state(descriptor)
    if isinstance(value, dict):
        state.clear()
        for k, v in value.items():
            state.put(k, v)
    elif value is None:
        state.clear()
    else:
        state.update(value)


def write_checkpoints(root: str, kind: str, rounds: list[States], parallelism: int = 2, max_parallelism: int = 16,
                      operator_state: dict[str, dict[str, tuple[str, list[Any]]]] | None = None,
                      savepoint: str | None = None) -> str:
    """Run ``rounds`` of state changes (a value of None deletes the key) on ``parallelism``
    subtasks of backend ``kind`` (``heap``, ``incremental``, ``rocksdb``), a completed checkpoint
    after each; returns the last one's path (or, ``savepoint`` ``canonical`` or ``native``, a
    savepoint of that format of the end state, written to ``root``/savepoint)."""
    storage = CheckpointStorage(root)
    uids = sorted({uid for states in rounds for uid in states})
    backends = {(uid, i): _backend(kind, max_parallelism, key_group_range(i, parallelism, max_parallelism),
                                   os.path.join(root, "db", f"{uid}-{i}"))
                 for uid in uids for i in range(parallelism)}
    last = ""
    for checkpoint_id, states in enumerate(rounds, start=1):
        for uid, by_name in states.items():
            for name, entries in by_name.items():
                for key, value in entries.items():
                    owner = key_group_of(key, max_parallelism) * parallelism // max_parallelism
                    _put(backends[(uid, owner)], name, key, value)
        final = savepoint and checkpoint_id == len(rounds)
        target = SavepointStorage(os.path.join(root, "savepoint")) if final else storage
        operators: dict[str, Any] = {}
        for (uid, index), backend in backends.items():
            plan = backend.begin_savepoint(checkpoint_id, savepoint == "native") if final \
                else backend.begin_snapshot(checkpoint_id)
            lists = (operator_state or {}).get(uid, {})
            handles = materialize(target, checkpoint_id, index, {uid: {
                "keyed": backend.capture_snapshot(plan), "operator": {n: lists[n] for n in lists},
                "states": dict(backend.state_types)}})
            if uid in handles:
                if not final:
                    backend.snapshot_written(checkpoint_id, handles[uid]["keyed"])
                entry = operators.setdefault(uid, {"vertex": 0, "parallelism": parallelism, "name": uid,
                                                   "operation": "process", "subtasks": {}})
                entry["subtasks"][str(index)] = handles[uid]
        metadata: dict[str, Any] = {"checkpoint_id": checkpoint_id, "job": "test", "timestamp": 1.0,
                                    "max_parallelism": max_parallelism, "split_layout": {}, "operators": operators}
        if final:
            metadata["savepoint"] = {"format": savepoint, "job_id": "test", "stop": False}
        target.write_metadata(checkpoint_id, metadata)
        last = target.location(checkpoint_id)
        for backend in backends.values():
            backend.checkpoint_completed(checkpoint_id)
    for backend in backends.values():
        getattr(backend, "dispose", lambda: None)()
    return last


def end_state(rounds: list[States]) -> States:
    """What ``rounds`` leave: the oracle of the last checkpoint."""
    out: States = {}
    for states in rounds:
        for uid, by_name in states.items():
            for name, entries in by_name.items():
                table = out.setdefault(uid, {}).setdefault(name, {})
                for key, value in entries.items():
                    if value is None:
                        table.pop(key, None)
                    else:
                        table[key] = value
    return out
