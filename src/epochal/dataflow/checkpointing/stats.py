"""Statistics of every checkpoint: kept in memory (and appended to ``checkpoint_stats.jsonl`` by the driver).

Owns the list of entries (one per completed or aborted checkpoint or savepoint, in the order they
ended) and their fields; a savepoint's entry has ``savepoint`` (its location) and ``format``.
Entries are appended on the JobMaster's coordinator thread and read from any thread through
:meth:`CheckpointStatsTracker.snapshot`, under a lock. Each method returns the entry it added;
the coordinator has the driver append it to the JSON lines file
(:class:`~epochal.control.checkpoint_files.RecordStats`, best effort: statistics never fail a
checkpoint).
"""

from __future__ import annotations

import threading
from typing import Any

from epochal.dataflow.checkpointing.pending import PendingCheckpoint
from epochal.state.storage import state_files


class CheckpointStatsTracker:
    """The statistics of a job's checkpoints."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def completed(self, pending: PendingCheckpoint, now: float) -> dict[str, Any]:
        acks = list(pending.acks.values())
        return self._record({
            "checkpoint_id": pending.checkpoint_id, "status": "completed", "trigger_time": pending.triggered_at,
            "duration_s": now - pending.started,
            "bytes": sum(a.stats["bytes"] for a in acks),
            "alignment_s_max": max(a.stats["alignment_s"] for a in acks),
            "sync_s_max": max(a.stats["sync_s"] for a in acks),
            "async_s_max": max(a.stats["async_s"] for a in acks),
            "alignment_buffered_bytes": sum(a.stats.get("buffered_bytes", 0) for a in acks),
            "alignment_spilled_bytes": sum(a.stats.get("spilled_bytes", 0) for a in acks),
            "loop_log_records": sum(a.stats.get("loop_log_records", 0) for a in acks),
            "subtasks": {f"{v}/{s}": a.stats for (v, s), a in pending.acks.items()},
            "state_bytes": state_bytes(pending),
            **_savepoint(pending),
        })

    def aborted(self, pending: PendingCheckpoint, reason: str, now: float) -> dict[str, Any]:
        return self._record({"checkpoint_id": pending.checkpoint_id, "status": "aborted", "reason": reason,
                             "trigger_time": pending.triggered_at, "duration_s": now - pending.started,
                             **_savepoint(pending)})

    def snapshot(self) -> list[dict[str, Any]]:
        """A copy of the statistics so far (safe from any thread)."""
        with self._lock:
            return list(self.entries)

    def _record(self, entry: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.entries.append(entry)
        return entry


def state_bytes(pending: PendingCheckpoint) -> dict[str, int]:
    """Operator uid -> bytes of the state a completed checkpoint holds for it, over its subtasks
    (every file its handles reference: an incremental chain's or a RocksDB checkpoint's shared
    files too, so this is the state's size, not what this checkpoint wrote)."""
    sizes: dict[str, int] = {}
    for ack in pending.acks.values():
        for uid, handle in ack.handles.items():
            size = sum(int(f.get("size", 0)) for part in ("keyed", "operator") if part in handle
                       for f in state_files(handle[part]))
            sizes[uid] = sizes.get(uid, 0) + size
    return sizes


def _savepoint(pending: PendingCheckpoint) -> dict[str, Any]:
    """A savepoint's entry says where it went (``savepoint``) and its ``format``."""
    target = pending.savepoint
    return {} if target is None else {"savepoint": target.location, "format": target.format}
