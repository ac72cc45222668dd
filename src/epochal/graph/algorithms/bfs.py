"""Breadth-first search as LDBC Graphalytics defines it (the Graphalytics benchmark specification
v1.0.x, arXiv:2011.15028, "Algorithms: Breadth-First Search (BFS)" and its pseudo-code appendix):
every vertex's depth, the number of edges on a shortest path from the root along out-edges (an
undirected graph's edges go both ways).

The root has depth 0; a vertex the root does not reach gets 9223372036854775807 (2^63 - 1, the
specification's positive infinity for integer output). Dynamic: a vertex reads its in-neighbours
and only those whose depth changed in the previous superstep, so superstep *k* settles the
vertices at depth *k* and the job halts one superstep after the last of them.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from epochal.graph.algorithms._checks import require_vertex
from epochal.graph.algorithms._propagation import MinPropagation, source_init
from epochal.graph.model import Graph
from epochal.graph.partition import Partition
from epochal.graph.program import StepResult, SuperstepContext

#: the depth of a vertex the root does not reach
UNREACHABLE = int(np.iinfo(np.int64).max)


class BFS(MinPropagation):
    """Depths (int64) from ``source``; see the module docstring."""

    unreached: ClassVar[int] = UNREACHABLE

    def __init__(self, source: int) -> None:
        self.source = int(source)

    def check(self, graph: Graph) -> None:
        """The source must be a vertex of ``graph``."""
        require_vertex(graph, self.source)

    def init(self, part: Partition, ctx: SuperstepContext) -> StepResult:
        return source_init(part, self.source, UNREACHABLE, np.int64)

    def offers(self, part: Partition, table: np.ndarray, entries: np.ndarray) -> np.ndarray:
        """A reached in-neighbour offers its depth plus one."""
        return table[part.nbr_slot[entries]] + 1
