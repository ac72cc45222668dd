"""Dynamic minimum propagation, the superstep BFS, SSSP and WCC share (the dynamic computation over
replicas of papers/003 §6.2).

Each superstep a master's value becomes the smallest of its own value and the *offers* of the
neighbours it reads, but only of those whose value changed in the previous superstep (the
engine's ``ctx.changed``): an unchanged neighbour offered the same thing before, so only the
frontier's edges are relaxed, only changed values travel to replicas, and the job halts by itself
when nothing changes any more. Values only decrease, so the result is the least fixed point
``value(v) = min(value(v), min offer(u → v))``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from epochal.graph.partition import Partition
from epochal.graph.program import StepResult, SuperstepContext, VectorProgram

#: a frontier below 1/FRONTIER_SHARE of the table is relaxed through the reverse index
FRONTIER_SHARE = 16


class MinPropagation(VectorProgram):
    """A value per vertex lowered to the minimum its neighbours offer (see the module docstring).

    Subclasses give ``init`` and :meth:`offers`; ``unreached`` is the value of a vertex nothing has
    reached yet (it offers nothing), or None when every value is a real one.
    """

    unreached: ClassVar[int | float | None] = None

    def offers(self, part: Partition, table: np.ndarray, entries: np.ndarray) -> np.ndarray:
        """What the neighbour of each CSR entry in ``entries`` offers the master reading it
        (default: its value)."""
        return table[part.nbr_slot[entries]]

    def compute(self, part: Partition, table: np.ndarray, ctx: SuperstepContext) -> StepResult:
        changed = ctx.changed
        if changed is None:
            entries = np.arange(part.nbr_slot.size)
        else:
            slots = np.flatnonzero(changed)
            if slots.size * FRONTIER_SHARE < part.table_size and part.worth_indexing():
                entries = part.entries_reading(slots)  # a small frontier: only its edges, O(frontier)
            else:  # a large one: one pass over the edges beats gathering most of them
                entries = np.flatnonzero(changed[part.nbr_slot])
        if self.unreached is not None:
            entries = entries[table[part.nbr_slot[entries]] != self.unreached]
        values = table[:part.num_masters].copy()
        if entries.size:
            np.minimum.at(values, part.nbr_rows()[entries], self.offers(part, table, entries))
        return StepResult(values)


def source_init(part: Partition, source: int, unreached: int | float, dtype: type[np.generic]) -> StepResult:
    """Every master at ``unreached`` except ``source`` (if it is a master here) at 0, as ``dtype``."""
    values = np.full(part.num_masters, unreached, dtype=dtype)
    pos = int(np.searchsorted(part.ids, source))
    if pos < part.num_masters and int(part.ids[pos]) == source:
        values[pos] = 0
    return StepResult(values)
