"""PageRank as LDBC Graphalytics defines it (the Graphalytics benchmark specification v1.0.x,
arXiv:2011.15028, "Algorithms: PageRank (PR)" and its pseudo-code appendix).

``PR_0(v) = 1/|V|``; iteration *i* computes, from the ranks of iteration *i-1*,

    PR_i(v) = (1-d)/|V| + d * sum_{u in N_in(v)} PR_{i-1}(u)/|N_out(u)| + d/|V| * sum_{u in D} PR_{i-1}(u)

where ``D`` is the set of dangling vertices (no out-edges), for a fixed number of iterations, in
float64. An undirected graph's edges go both ways. Superstep *i* is iteration *i*; the dangling
sum of iteration *i-1* travels as the ``dangling`` sum aggregator, so a superstep needs nothing
but the table and last superstep's aggregates.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from epochal.graph.algorithms._csr import segment_sum
from epochal.graph.partition import Partition
from epochal.graph.program import StepResult, SuperstepContext, VectorProgram


class PageRank(VectorProgram):
    """``iterations`` PageRank iterations with damping factor ``damping``; float64 ranks."""

    aggregators: ClassVar[dict[str, str]] = {"dangling": "sum"}
    selfish_safe: ClassVar[bool] = True  # a rank is computed from the in-neighbours' ranks only

    def __init__(self, iterations: int = 10, damping: float = 0.85) -> None:
        if iterations < 0:
            raise ValueError(f"PageRank needs 0 or more iterations, not {iterations}")
        if not 0.0 <= damping <= 1.0:
            raise ValueError(f"the damping factor must lie in [0, 1], not {damping}")
        self.iterations = int(iterations)
        self.damping = float(damping)
        self.max_supersteps = self.iterations

    @staticmethod
    def _dangling(part: Partition, ranks: np.ndarray) -> dict[str, Any]:
        """This partition's share of the dangling sum."""
        return {"dangling": float(ranks[part.out_degree == 0].sum())}

    def init(self, part: Partition, ctx: SuperstepContext) -> StepResult:
        ranks = np.full(part.num_masters, 1.0 / max(ctx.num_vertices, 1))
        return StepResult(ranks, aggregates=self._dangling(part, ranks))

    def compute(self, part: Partition, table: np.ndarray, ctx: SuperstepContext) -> StepResult:
        degree = part.table_out_degree
        # a vertex read as an in-neighbour has an out-edge, so its degree is at least one
        share = table / np.maximum(degree, 1)
        incoming = segment_sum(part.nbr_ptr, share[part.nbr_slot])
        n, d = max(ctx.num_vertices, 1), self.damping  # (a graph without vertices has no ranks)
        ranks = (1.0 - d) / n + d * incoming + d / n * ctx.aggregates.get("dangling", 0.0)
        return StepResult(ranks, aggregates=self._dangling(part, ranks))
