"""IterativeStream: the head of a loop opened with ``DataStream.iterate()``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from epochal.api.datastream import DataStream
from epochal.api.fields import check_callable
from epochal.errors import PlanError
from epochal.runtime.operators.iteration import IterationHead, IterationTail


class IterativeStream(DataStream):
    """The head of a loop (see :meth:`DataStream.iterate`); close it with :meth:`close_with`."""

    def close_with(self, feedback: DataStream, key_by: Callable[[Any], Any] | None = None) -> DataStream:
        """Feed ``feedback`` back to the loop's head; returns ``feedback``.

        ``key_by`` partitions the feedback by key on its way back (equal keys reach the same head
        subtask), and lets a checkpoint store the loop's in-transit records per key group, so a
        restore with another parallelism places them with their keys.
        """
        if feedback.env is not self.env:
            raise PlanError("close_with() needs a stream of the same Environment")
        head: IterationHead = self.node.operator  # type: ignore[assignment]
        if len(self.node.inputs) > 1:
            raise PlanError(f"loop '{self.node.name}' is already closed: call close_with() once per iterate()")
        upstream = feedback
        if key_by is not None:
            check_callable(key_by, "close_with(key_by=...)")
            upstream = feedback.key_by(key_by)
            head.feedback_key = key_by
        # the tail is never chained: its edge to the head must stay a channel (the back-edge)
        tail = self.env.graph.add("iteration_tail", f"Iteration tail {head.loop_id}", [upstream.node.id],
                                  operator=IterationTail(head.loop_id), chaining=False,
                                  functions=[key_by] if key_by is not None else [])
        self.node.inputs.append(tail.id)
        return feedback
