"""The committed views a worker answers ``read_committed`` queries from (papers/001 §4.3's
future work: workers hold on to the state of completed snapshots).

At each checkpoint's barrier the worker hands over a view of every queryable state of each of
its subtasks (``{query name: {key group: {key: value}}}``, the groups any read-only mapping: a
copy, a heap snapshot's, or a RocksDB local checkpoint's), taken on the processing thread, so
nothing changes it afterwards; the view becomes the committed one when the JobMaster says the
checkpoint completed, and is dropped when it is aborted. A restore makes the restored state the
committed view (the restored checkpoint completed). Committed views only move forward: a
completion older than the committed one is ignored, and a savepoint never becomes one (a restart
restores the latest *checkpoint*, which may be older than a savepoint). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: query name -> key group -> key -> value
Views = dict[str, dict[int, Mapping[Any, Any]]]


class CommittedViews:
    """Views per checkpoint, pending and committed."""

    def __init__(self) -> None:
        #: checkpoint id -> the views taken at its barrier (merged over the worker's subtasks)
        self.pending: dict[int, Views] = {}
        #: the completed checkpoint the committed views are of (None: none yet)
        self.checkpoint_id: int | None = None
        self.views: Views = {}

    def taken(self, checkpoint_id: int, views: Views) -> None:
        """The views of one subtask at checkpoint ``checkpoint_id``'s barrier."""
        if self.checkpoint_id is not None and checkpoint_id <= self.checkpoint_id:
            return
        merged = self.pending.setdefault(checkpoint_id, {})
        for name, groups in views.items():
            merged.setdefault(name, {}).update(groups)

    def completed(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed: its views become the committed ones."""
        views = self.pending.pop(checkpoint_id, None)
        if views is None or (self.checkpoint_id is not None and checkpoint_id <= self.checkpoint_id):
            return  # (a savepoint's id, or no queryable state on this worker)
        for older in [c for c in self.pending if c < checkpoint_id]:
            del self.pending[older]
        self.checkpoint_id = checkpoint_id
        self.views = views

    def aborted(self, checkpoint_id: int) -> None:
        self.pending.pop(checkpoint_id, None)

    def restored(self, checkpoint_id: int, views: Views) -> None:
        """The subtasks restored checkpoint ``checkpoint_id``: one subtask's restored views."""
        self.pending.clear()
        if self.checkpoint_id != checkpoint_id:
            self.checkpoint_id = checkpoint_id
            self.views = {}
        for name, groups in views.items():
            self.views.setdefault(name, {}).update(groups)

    def groups(self, name: str) -> dict[int, Mapping[Any, Any]]:
        return self.views.get(name, {})
