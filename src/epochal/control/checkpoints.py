"""The checkpoint coordinator on the driver (papers/000 §4.2, papers/001 §3.2).

It triggers checkpoint *n* on every worker (sources inject barrier *n*), collects one
acknowledgement per subtask with the handles of its state files, and completes *n* by writing
the metadata atomically; only then does it notify the workers, which is when transactional
sinks commit. A checkpoint that times out or is declined (an upload failed) is aborted; more
consecutive failures than tolerated fail the job. Completed checkpoints beyond the retained
number are deleted, oldest first, never the latest. Statistics of every checkpoint are kept
in memory and appended as JSON lines to ``<storage>/checkpoint_stats.jsonl``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from epochal.config import CheckpointConfig
from epochal.errors import PlanError
from epochal.messages import Ack, CheckpointAbort, CheckpointComplete, Decline, ToWorker, TriggerCheckpoint
from epochal.state.storage import CheckpointStorage


@dataclass
class PendingCheckpoint:
    """A triggered checkpoint waiting for acknowledgements."""

    checkpoint_id: int
    triggered_at: float  # wall clock, for the statistics
    started: float  # monotonic, for timeouts and durations
    expected: set[tuple[int, int]]
    acks: dict[tuple[int, int], Ack] = field(default_factory=dict)


class CheckpointCoordinator:
    """Triggers, completes, aborts and retains checkpoints of one job."""

    def __init__(self, config: CheckpointConfig, storage: CheckpointStorage, job_name: str,
                 subtasks: dict[tuple[int, int], str],
                 vertex_parallelism: dict[int, int], max_parallelism: int,
                 broadcast: Callable[[ToWorker], None], first_id: int = 1,
                 split_layout: dict[str, int] | None = None,
                 operators: dict[str, dict[str, str]] | None = None) -> None:
        self.config = config
        self.storage = storage
        self.job_name = job_name
        self.subtasks = subtasks
        self.vertex_parallelism = vertex_parallelism
        self.max_parallelism = max_parallelism
        self.broadcast = broadcast
        self.split_layout = split_layout or {}
        #: uid -> {"name", "kind"} of every operator, recorded in the metadata so that a restore
        #: into a changed job can say whose state nobody claims.
        self.operators = operators or {}
        self.next_id = first_id
        #: Records the sources had read before the current attempt (as of the checkpoint it
        #: restored), and the total each completed checkpoint covers: each record counts once.
        self.records_base = 0
        self.source_records: dict[int, int] = {}
        self.pending: dict[int, PendingCheckpoint] = {}
        self.completed: list[int] = storage.completed()
        #: Statistics of every checkpoint; appended under ``_stats_lock`` (read from other threads
        #: through :meth:`stats_snapshot`).
        self.stats: list[dict[str, Any]] = []
        self._stats_lock = threading.Lock()
        self.consecutive_failures = 0
        self.last_end = 0.0
        self.last_trigger = 0.0
        self.paused = False

    @property
    def latest_completed(self) -> int | None:
        return self.completed[-1] if self.completed else None

    # ---------------------------------------------------------------- triggering
    def maybe_trigger(self, now: float) -> int | None:
        """Trigger a periodic checkpoint when the interval, pause and concurrency allow."""
        if self.paused or self.config.interval is None:
            return None
        if len(self.pending) >= self.config.max_concurrent:
            return None
        if now - self.last_trigger < self.config.interval or now - self.last_end < self.config.min_pause:
            return None
        return self.trigger(now)

    def trigger(self, now: float) -> int:
        checkpoint_id = self.next_id
        self.next_id += 1
        self.last_trigger = now
        self.pending[checkpoint_id] = PendingCheckpoint(checkpoint_id, time.time(), now, set(self.subtasks))
        self.broadcast(TriggerCheckpoint(checkpoint_id))
        return checkpoint_id

    # ---------------------------------------------------------------- acknowledgements
    def on_ack(self, message: Ack, now: float) -> int | None:
        """Record one subtask's acknowledgement; returns the id if the checkpoint completed."""
        pending = self.pending.get(message.checkpoint_id)
        if pending is None:
            return None  # late ack of an aborted checkpoint
        pending.acks[(message.vertex, message.subtask)] = message
        if set(pending.acks) != pending.expected:
            return None
        self._complete(pending, now)
        return pending.checkpoint_id

    def _complete(self, pending: PendingCheckpoint, now: float) -> None:
        operators: dict[str, Any] = {}
        for (vertex, subtask), ack in pending.acks.items():
            for uid, handle in ack.handles.items():
                entry = operators.setdefault(uid, {"vertex": vertex, "parallelism": self.vertex_parallelism[vertex],
                                                   **self.operators.get(uid, {}), "subtasks": {}})
                entry["subtasks"][str(subtask)] = handle
        metadata = {"checkpoint_id": pending.checkpoint_id, "job": self.job_name,
                    "timestamp": pending.triggered_at, "max_parallelism": self.max_parallelism,
                    "split_layout": self.split_layout, "operators": operators}
        self.storage.write_metadata(pending.checkpoint_id, metadata)
        del self.pending[pending.checkpoint_id]
        # older pending checkpoints can no longer be useful
        for older in [c for c in self.pending if c < pending.checkpoint_id]:
            self.abort(older, "a newer checkpoint completed", now, count_failure=False)
        self.completed.append(pending.checkpoint_id)
        self.source_records[pending.checkpoint_id] = self.records_base + sum(
            int(a.stats.get("source_records", 0)) for a in pending.acks.values())
        self.consecutive_failures = 0
        self.last_end = now
        acks = list(pending.acks.values())
        self._record({
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
        })
        self.broadcast(CheckpointComplete(pending.checkpoint_id))
        self._retain()

    def _retain(self) -> None:
        while len(self.completed) > self.config.retained:
            self.storage.delete(self.completed.pop(0))

    # ---------------------------------------------------------------- failures
    def on_decline(self, message: Decline, now: float) -> bool:
        """A subtask could not write its snapshot; returns False when failures exceed tolerance."""
        return self.abort(message.checkpoint_id, f"declined by worker {message.worker}: {message.reason}", now)

    def check_timeouts(self, now: float) -> bool:
        for pending in list(self.pending.values()):
            if now - pending.started > self.config.timeout:
                if not self.abort(pending.checkpoint_id, f"timed out after {self.config.timeout:g} s", now):
                    return False
        return True

    def abort(self, checkpoint_id: int, reason: str, now: float, count_failure: bool = True) -> bool:
        """Abort a pending checkpoint; returns False when failures exceed the tolerated number."""
        pending = self.pending.pop(checkpoint_id, None)
        if pending is None:
            return True
        self.last_end = now
        self.storage.delete(checkpoint_id)
        self._record({"checkpoint_id": checkpoint_id, "status": "aborted", "reason": reason,
                      "trigger_time": pending.triggered_at, "duration_s": now - pending.started})
        self.broadcast(CheckpointAbort(checkpoint_id))
        if count_failure:
            self.consecutive_failures += 1
        return self.consecutive_failures <= self.config.tolerable_failures

    def abort_all(self, reason: str) -> None:
        """On a job failure: forget pending checkpoints (they can never complete)."""
        now = time.monotonic()
        for checkpoint_id in list(self.pending):
            self.abort(checkpoint_id, reason, now, count_failure=False)

    def stats_snapshot(self) -> list[dict[str, Any]]:
        """A copy of the statistics so far (safe from any thread)."""
        with self._stats_lock:
            return list(self.stats)

    def _record(self, entry: dict[str, Any]) -> None:
        with self._stats_lock:
            self.stats.append(entry)
        try:
            self.storage.fs.create_dir(self.storage.root, recursive=True)
            with self.storage.fs.open_append_stream(f"{self.storage.root}/checkpoint_stats.jsonl") as out:
                out.write((json.dumps(entry) + "\n").encode())
        except (OSError, NotImplementedError):
            pass  # statistics must never fail a checkpoint (object stores may not append)


def check_restore(metadata: dict[str, Any], location: str, operators: dict[str, dict[str, str]],
                  allow_non_restored_state: bool = False) -> list[dict[str, Any]]:
    """Match a checkpoint's state to the operators of the job restoring it, as Flink does.

    ``operators`` maps every uid of the new job to its ``{"name", "kind"}``. State of a uid no
    operator claims would be dropped without a word, so it fails the restore with a
    :class:`PlanError` naming every such piece of state, unless ``allow_non_restored_state``;
    returns what is skipped (uid, name, kind and what state it held).
    """
    state = metadata.get("operators", {})
    skipped = []
    for uid in sorted(state):
        if uid in operators:
            continue
        entry = state[uid]
        handles = list(entry.get("subtasks", {}).values())
        parts = [part for part in ("keyed", "operator") if any(part in h for h in handles)]
        skipped.append({"uid": uid, "name": entry.get("name"), "kind": entry.get("kind"),
                        "state": " and ".join(f"{p} state" for p in parts) or "state",
                        "subtasks": len(handles)})
    if not skipped or allow_non_restored_state:
        return skipped
    lines = []
    for item in skipped:
        owner = f"operator '{item['name']}' ({item['kind']})" if item["name"] else "an operator"
        line = f"  - uid '{item['uid']}': {item['state']} of {owner}, {item['subtasks']} subtask(s)"
        idle = [f"'{info['name']}' (uid '{uid}')" for uid, info in operators.items()
                if item["kind"] is not None and info.get("kind") == item["kind"] and uid not in state]
        if idle:
            line += (f"; this job's {item['kind']} operator(s) {', '.join(idle)} restore nothing: if one of them is "
                     f"the same operator, set .uid('{item['uid']}') on it")
        lines.append(line)
    count = f"{len(skipped)} operator{'s' if len(skipped) > 1 else ''}"
    raise PlanError(
        f"cannot restore checkpoint {location}: it holds state of {count} that no operator of this job claims "
        f"(uid{'s' if len(skipped) > 1 else ''} {', '.join(repr(i['uid']) for i in skipped)}); restoring would drop "
        "it without a word:\n" + "\n".join(lines) + "\n"
        "State is matched by operator uid: the one set with .uid(), else '<kind>:<name>' from the operator's "
        ".name(), else '<kind>-<n>' from its position among the job's operators of that kind. Give the operators "
        "that own this state their old uid with .uid(...), or pass allow_non_restored_state=True to execute() "
        "to start without it")
