"""Loops (iterations): the head and tail operators, and the head's back-edge log.

A loop declared with ``stream.iterate()`` / ``close_with(feedback)`` runs as an *iteration head*
(which merges the loop's input with the feedback) and an *iteration tail* (which receives the
feedback), with equal parallelism, so slot sharing puts head ``i`` and tail ``i`` on worker
``i`` and the tail -> head back-edge is an in-memory channel. That channel has unbounded
credit: a loop can never deadlock on its own backpressure.

Snapshots follow papers/000 Algorithm 2 (see :mod:`epochal.dataflow.checkpointing.barriers`): once the head's
regular inputs delivered barrier *n* it captures its state, forwards *n* into the loop and logs
every record arriving on the back-edge until *n* comes back around; that log, the records in
transit inside the loop at the cut, is stored with snapshot *n*. With keyed feedback the log
is stored per key group (so a restore with another parallelism gives each head the records of
the key groups it owns); otherwise as operator list state (split on restore). A restored head
re-emits its log into the loop before any new input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from epochal.plan.keygroups import key_group_of
from epochal.runtime.operators.base import Operator
from epochal.state.operator_state import SPLIT

LOG_STATE = "back-edge-log"


class IterationHead(Operator):
    """Merges a loop's input with its feedback; holds the back-edge log's restore side."""

    def __init__(self, loop_id: int) -> None:
        self.loop_id = loop_id
        #: The feedback's key selector when ``close_with(..., key_by=...)`` was used.
        self.feedback_key: Callable[[Any], Any] | None = None
        #: Records of the restored back-edge log, re-emitted before any new input.
        self.replay: list[Any] = []

    def log_state(self, records: list[Any], max_parallelism: int) -> dict[str, Any]:
        """The snapshot parts holding a back-edge log: per key group if the feedback is keyed."""
        if self.feedback_key is None:
            return {"keyed": None, "operator": {LOG_STATE: (SPLIT, list(records))}}
        groups: dict[int, list[Any]] = {}
        key = self.feedback_key
        for record in records:
            groups.setdefault(key_group_of(key(record), max_parallelism), []).append(record)
        return {"keyed": {group: {LOG_STATE: {0: items}} for group, items in groups.items()}, "operator": None}

    def restore_log(self, restore: Any, key_groups: range, index: int, parallelism: int) -> None:
        """Load the back-edge log records this head subtask re-emits after a restore."""
        if self.feedback_key is not None:
            for _, states in restore.keyed_groups(self.uid, key_groups):
                self.replay.extend(states.get(LOG_STATE, {}).get(0, []))
        else:
            self.replay.extend(restore.operator_lists(self.uid, index, parallelism).get(LOG_STATE, []))


class IterationTail(Operator):
    """Receives a loop's feedback and passes it to the co-located head over the back-edge."""

    def __init__(self, loop_id: int) -> None:
        self.loop_id = loop_id
