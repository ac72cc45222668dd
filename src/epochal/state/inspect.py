"""What a savepoint or checkpoint holds, read from its metadata alone (no state file is opened).

``epochal.savepoint_info(path)`` is what ``epochal savepoint info PATH`` prints: the job it came
from and when, its format, and per operator (by uid) its name and operation, parallelism, keyed
states with their state types, how many key groups hold state, and bytes.
:func:`dispose_savepoint` deletes a savepoint directory (never a job's checkpoint).
"""

from __future__ import annotations

import datetime
from typing import Any

from epochal.errors import PlanError
from epochal.state.checkpoint_dirs import resolve_restore_path
from epochal.state.storage import CheckpointError, is_savepoint, state_files


def savepoint_info(path: str) -> dict[str, Any]:
    """What the savepoint (or checkpoint) at ``path`` holds, as plain JSON-able values.

    Raises :class:`~epochal.state.storage.CheckpointError` if there is none, or its metadata is
    damaged."""
    storage, checkpoint_id = resolve_restore_path(path)
    metadata = storage.read_metadata(checkpoint_id)
    savepoint = metadata.get("savepoint") or {}
    operators = {}
    for uid, operator in sorted(metadata.get("operators", {}).items()):
        states: dict[str, str] = {}
        entries: dict[str, int] = {}
        counted = True  # every subtask with keyed state recorded its keys per state
        groups, size, operator_state = 0, 0, False
        for handle in operator.get("subtasks", {}).values():
            states.update(handle.get("states", {}))
            if handle.get("states"):
                counted = counted and "entries" in handle
                for name, count in handle.get("entries", {}).items():
                    entries[name] = entries.get(name, 0) + int(count)
            keyed = handle.get("keyed")
            if keyed is not None:
                groups += _key_groups(keyed)
            operator_state = operator_state or "operator" in handle
            for part in ("keyed", "operator"):
                size += sum(f.get("size", 0) for f in state_files(handle[part])) if part in handle else 0
        operators[uid] = {"name": operator.get("name"), "operation": operator.get("operation", operator.get("kind")),
                          "parallelism": operator.get("parallelism"), "states": states,
                          "key_groups_with_state": groups,
                          "entries": {name: entries.get(name, 0) for name in states} if counted and states else {},
                          "operator_state": operator_state, "bytes": size}
    taken = metadata.get("timestamp")
    return {"path": storage.location(checkpoint_id), "type": "savepoint" if is_savepoint(metadata) else "checkpoint",
            "checkpoint_id": checkpoint_id, "job": metadata.get("job"), "job_id": savepoint.get("job_id"),
            "format": savepoint.get("format", "checkpoint"), "taken_at": taken,
            "taken_at_text": datetime.datetime.fromtimestamp(taken).isoformat(timespec="seconds") if taken else None,
            "max_parallelism": metadata.get("max_parallelism"), "operators": operators,
            "bytes": sum(o["bytes"] for o in operators.values())}


def format_savepoint_info(info: dict[str, Any]) -> str:
    """``info`` (of :func:`savepoint_info`) as a person reads it."""
    job_id = f" (id {info['job_id']})" if info["job_id"] else ""
    lines = [f"{info['type']} {info['path']}",
             f"  job {info['job']!r}{job_id}, "
             f"checkpoint {info['checkpoint_id']}, taken {info['taken_at_text'] or '?'}, format {info['format']}, "
             f"max_parallelism {info['max_parallelism']}, {_size(info['bytes'])}"]
    for uid, operator in info["operators"].items():
        states = ", ".join(f"{name} ({kind})" for name, kind in sorted(operator["states"].items())) or "none"
        lines.append(f"  - uid {uid!r}: {operator['name'] or '?'} ({operator['operation'] or '?'}), parallelism "
                     f"{operator['parallelism']}, keyed states: {states}, state in "
                     f"{operator['key_groups_with_state']} of {info['max_parallelism']} key groups"
                     f"{', operator state' if operator['operator_state'] else ''}, {_size(operator['bytes'])}")
    return "\n".join(lines)


def dispose_savepoint(path: str) -> str:
    """Delete the savepoint directory at ``path``; returns it. Refuses anything that is not a
    savepoint (a job's checkpoints are deleted by its retention)."""
    storage, checkpoint_id = resolve_restore_path(path)
    metadata = storage.read_metadata(checkpoint_id)
    if not is_savepoint(metadata):
        raise PlanError(f"{path} is a checkpoint of job {metadata.get('job')!r}, not a savepoint: checkpoints "
                        "are deleted by the job's retention (enable_checkpointing(retained=N))")
    try:
        storage.fs.delete_dir(storage.root)
    except OSError as error:
        raise CheckpointError(f"cannot delete savepoint {path}: {error}", path=path) from error
    return storage.location(checkpoint_id)


def _key_groups(keyed: dict[str, Any]) -> int:
    if "groups" in keyed:
        return len(keyed["groups"])
    if "chain" in keyed:
        return len({g for link in keyed["chain"] for g in link.get("groups", {})})
    if "key_groups" in keyed:
        start, stop = keyed["key_groups"]
        return int(stop) - int(start)
    return 0


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return f"{count} B"
