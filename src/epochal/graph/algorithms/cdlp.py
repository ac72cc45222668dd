"""Community detection by label propagation as LDBC Graphalytics defines it (the Graphalytics
benchmark specification v1.0.x, arXiv:2011.15028, "Algorithms: Community Detection using
Label-Propagation (CDLP)" and its pseudo-code appendix; after Raghavan et al., made deterministic).

``L_0(v) = v``; iteration *i* gives every vertex the most frequent label of iteration *i-1* among
its in- and out-neighbours, the smallest such label on a tie, and a vertex without neighbours
keeps its label. In a directed graph a neighbour linked both ways is counted twice (once per
edge, so a self-loop counts its own vertex twice); in an undirected graph every neighbour counts
once. Synchronous: every vertex reads the previous iteration's labels (the engine's table), for a
fixed number of iterations; a job whose labels stop changing halts early with the same result.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from epochal.graph.algorithms._csr import row_mode, rows_of, unique_pairs
from epochal.graph.partition import Partition
from epochal.graph.program import StepResult, SuperstepContext, VectorProgram


class CDLP(VectorProgram):
    """``iterations`` rounds of label propagation; int64 labels."""

    directions: ClassVar[str] = "both"

    def __init__(self, iterations: int = 10) -> None:
        if iterations < 0:
            raise ValueError(f"CDLP needs 0 or more iterations, not {iterations}")
        self.iterations = int(iterations)
        self.max_supersteps = self.iterations

    def init(self, part: Partition, ctx: SuperstepContext) -> StepResult:
        return StepResult(part.ids.copy())

    def compute(self, part: Partition, table: np.ndarray, ctx: SuperstepContext) -> StepResult:
        rows, slots = rows_of(part.nbr_ptr), part.nbr_slot
        if not part.directed:
            # N(v) is a set: an edge the input repeats (or gives in both orientations) is one neighbour
            rows, slots = unique_pairs(rows, slots)
        return StepResult(row_mode(rows, table[slots], table[:part.num_masters]))
