"""Materialising captured state into checkpoint files, and reading it back on restore.

A subtask's keyed state of one operator becomes one file of per-key-group pickles, with the
offset, length and CRC of each group in the handle; a restore reads only the ranges of the
groups the new subtask owns, whatever the parallelism was. Operator state is one pickle per
subtask and operator, redistributed on restore (split or union).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from epochal.state.operator_state import redistribute
from epochal.state.storage import CheckpointError, CheckpointStorage, crc

Captured = dict[str, dict[str, Any]]  # uid -> {"keyed": {group: {name: {key: value}}}, "operator": {...}}


def materialize(storage: CheckpointStorage, checkpoint_id: int, subtask: int, captured: Captured) -> dict[str, Any]:
    """Serialise and write one subtask's captured state; returns handles per operator uid."""
    handles: dict[str, Any] = {}
    for uid, parts in captured.items():
        handle: dict[str, Any] = {}
        keyed = parts.get("keyed")
        if keyed:
            chunks, groups, offset = [], {}, 0
            for group in sorted(keyed):
                blob = pickle.dumps(keyed[group], protocol=5)
                chunks.append(blob)
                groups[str(group)] = [offset, len(blob), crc(blob)]
                offset += len(blob)
            written = storage.write_file(checkpoint_id, f"{uid}-{subtask}.keyed", b"".join(chunks))
            handle["keyed"] = {"file": written["file"], "size": written["size"], "groups": groups}
        operator = parts.get("operator")
        if operator:
            handle["operator"] = storage.write_file(checkpoint_id, f"{uid}-{subtask}.operator",
                                                    pickle.dumps(operator, protocol=5))
        if handle:
            handles[uid] = handle
    return handles


def handle_bytes(handles: dict[str, Any]) -> int:
    """Bytes a subtask wrote for one checkpoint."""
    total = 0
    for handle in handles.values():
        for part in ("keyed", "operator"):
            if part in handle:
                total += handle[part]["size"]
    return total


class RestoreSource:
    """The state of one completed checkpoint, read lazily by the subtasks that restore from it."""

    def __init__(self, storage: CheckpointStorage, checkpoint_id: int, metadata: dict[str, Any]) -> None:
        self.storage = storage
        self.checkpoint_id = checkpoint_id
        self.metadata = metadata

    def _subtasks(self, uid: str) -> list[dict[str, Any]]:
        operator = self.metadata.get("operators", {}).get(uid)
        if operator is None:
            return []
        subtasks = operator["subtasks"]
        return [subtasks[key] for key in sorted(subtasks, key=int)]

    def keyed_groups(self, uid: str, key_groups: range) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(group, {state name: {key: value}})`` for every owned key group with state."""
        for handle in self._subtasks(uid):
            keyed = handle.get("keyed")
            if not keyed:
                continue
            for group_text, (offset, length, checksum) in keyed["groups"].items():
                group = int(group_text)
                if group in key_groups:
                    data = self.storage.read_file(self.checkpoint_id, keyed, offset, length, checksum)
                    yield group, _unpickle(data, keyed["file"])

    def operator_lists(self, uid: str, index: int, parallelism: int) -> dict[str, list[Any]]:
        """Operator list state for new subtask ``index`` of ``parallelism``, redistributed."""
        old = []
        for handle in self._subtasks(uid):
            part = handle.get("operator")
            old.append(_unpickle(self.storage.read_file(self.checkpoint_id, part), part["file"]) if part else {})
        return redistribute(old, index, parallelism)


def _unpickle(data: bytes, name: str) -> Any:
    try:
        return pickle.loads(data)
    except Exception as error:
        raise CheckpointError(f"checkpoint state file {name} cannot be decoded: {error}") from error
