"""Single-source shortest paths as LDBC Graphalytics defines it (the Graphalytics benchmark
specification v1.0.x, arXiv:2011.15028, "Algorithms: Single-Source Shortest Paths (SSSP)" and its
pseudo-code appendix): every vertex's distance from the root, the smallest sum of edge weights
over the paths from the root along out-edges (an undirected graph's edges go both ways), as
float64; a vertex the root does not reach gets infinity.

Weights must be present and not negative (zero is allowed); :meth:`SSSP.check` refuses a graph
without weights or with a negative one. Dynamic Bellman-Ford: each superstep a vertex relaxes
only the in-edges whose source's distance changed in the previous superstep, and the job halts
when no distance changes. Each distance is the sum of a path's weights added from the root
outwards, as Dijkstra's algorithm adds them, so the result is the same to the last bit.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from epochal.graph.algorithms._checks import require_non_negative_weights, require_vertex
from epochal.graph.algorithms._propagation import MinPropagation, source_init
from epochal.graph.model import Graph
from epochal.graph.partition import Partition
from epochal.graph.program import StepResult, SuperstepContext


class SSSP(MinPropagation):
    """Shortest-path lengths (float64) from ``source``; see the module docstring."""

    unreached: ClassVar[float] = float("inf")

    def __init__(self, source: int) -> None:
        self.source = int(source)

    def check(self, graph: Graph) -> None:
        """Weights present, none negative, and the source a vertex of ``graph``."""
        require_non_negative_weights(graph, "SSSP")
        require_vertex(graph, self.source)

    def init(self, part: Partition, ctx: SuperstepContext) -> StepResult:
        return source_init(part, self.source, np.inf, np.float64)

    def offers(self, part: Partition, table: np.ndarray, entries: np.ndarray) -> np.ndarray:
        """A reached in-neighbour offers its distance plus the edge's weight."""
        assert part.nbr_weight is not None, "SSSP runs on weighted graphs only (see check)"
        return table[part.nbr_slot[entries]] + part.nbr_weight[entries]
