"""Alternating least squares on a rating graph, the collaborative-filtering workload papers/003
§6 evaluates (ALS on SYN-GL; the formulation of Zhou et al., "Large-scale Parallel Collaborative
Filtering for the Netflix Prize", 2008, with a plain ridge term; not a Graphalytics algorithm).

The input is a directed bipartite graph: an edge ``u -> i`` with weight ``r`` says user ``u``
rated item ``i`` with ``r``. Users are the vertices with out-edges, items those with in-edges;
none may have both (:meth:`ALS.check`). Every vertex holds a factor vector of length ``rank``,
initially :func:`initial_factors` (a hash of its id, so any partitioning starts alike). ALS
minimises ``sum (r_ui - x_u . y_i)^2 + lambda (sum |x_u|^2 + sum |y_i|^2)`` by alternating exact
solves: odd supersteps give every user ``x_u = (Y_u^T Y_u + lambda I)^-1 Y_u^T r_u`` from the
factors of the items it rated (the table of the superstep before), even supersteps do the same
for items from their users. One iteration is a user step then an item step, so ``iterations``
iterations take ``2 * iterations`` supersteps; a vertex with no ratings keeps its initial factor.

Values are 2-D (one row of ``rank`` float64 per vertex). The k-by-k systems are built and solved
batched with numpy, in blocks of rows to bound the memory of the outer products.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from epochal.graph.algorithms._checks import require_weights
from epochal.graph.algorithms._csr import rows_of, segment_sum
from epochal.graph.model import Graph, GraphInputError
from epochal.graph.partition import Partition
from epochal.graph.placement import mix64
from epochal.graph.program import StepResult, SuperstepContext, VectorProgram

#: how many outer products (entries times rank squared floats) one block builds at the most
_BLOCK_FLOATS = 1 << 22


def initial_factors(ids: np.ndarray, rank: int) -> np.ndarray:
    """Each vertex's initial factor vector: ``rank`` numbers in [0, 1) hashed from its id."""
    base = mix64(np.asarray(ids, dtype=np.int64))
    mixed = mix64(base[:, None] + np.arange(rank, dtype=np.uint64)[None, :])
    return (mixed >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def solve_normal_equations(ptr: np.ndarray, factors: np.ndarray, ratings: np.ndarray,
                           regularization: float) -> np.ndarray:
    """Per CSR row: ``x = (Y^T Y + regularization I)^-1 Y^T r`` over its entries' factor rows ``Y``
    and ratings ``r`` (``factors``: one row per entry). Returns one ``x`` per row."""
    n, rank = ptr.size - 1, factors.shape[1]
    gram = np.empty((n, rank, rank))
    rhs = segment_sum(ptr, factors * ratings[:, None])
    per_block = max(_BLOCK_FLOATS // max(rank * rank, 1), 1)
    start = 0
    while start < n:
        stop = int(np.searchsorted(ptr, ptr[start] + per_block, side="right")) - 1
        stop = min(max(stop, start + 1), n)
        lo, hi = int(ptr[start]), int(ptr[stop])
        block = factors[lo:hi]
        gram[start:stop] = segment_sum(ptr[start:stop + 1] - lo, block[:, :, None] * block[:, None, :])
        start = stop
    gram += regularization * np.eye(rank)
    return np.linalg.solve(gram, rhs[:, :, None])[:, :, 0]


class ALS(VectorProgram):
    """``iterations`` ALS iterations with factors of length ``rank``; see the module docstring."""

    directions: ClassVar[str] = "both"

    def __init__(self, rank: int = 10, regularization: float = 0.05, iterations: int = 10) -> None:
        if rank < 1:
            raise ValueError(f"the ALS rank must be 1 or more, not {rank}")
        if not regularization > 0:
            raise ValueError(f"the ALS regularization must be positive, not {regularization}")
        if iterations < 0:
            raise ValueError(f"ALS needs 0 or more iterations, not {iterations}")
        self.rank = int(rank)
        self.regularization = float(regularization)
        self.iterations = int(iterations)
        self.max_supersteps = 2 * self.iterations

    def check(self, graph: Graph) -> None:
        """A directed graph of ratings (edge weights) from users to items, no vertex both."""
        if not graph.directed:
            raise GraphInputError("ALS needs a directed rating graph (edges from users to items); "
                                  "this graph is undirected")
        require_weights(graph, "ALS", "rating")
        both = np.intersect1d(graph.src, graph.dst)
        if both.size:
            raise GraphInputError(f"vertex {int(both[0])} both rates (has out-edges) and is rated (has in-edges); "
                                  "ALS needs a bipartite graph whose edges go from users to items")

    def init(self, part: Partition, ctx: SuperstepContext) -> StepResult:
        return StepResult(initial_factors(part.ids, self.rank))

    def compute(self, part: Partition, table: np.ndarray, ctx: SuperstepContext) -> StepResult:
        assert part.nbr_weight is not None, "ALS runs on rating graphs only (see check)"
        users_turn = ctx.superstep % 2 == 1
        role = part.out_degree > 0 if users_turn else part.in_degree > 0
        solving = np.flatnonzero(role)
        ptr = np.zeros(solving.size + 1, dtype=np.int64)
        np.cumsum(np.diff(part.nbr_ptr)[solving], out=ptr[1:])
        entries = np.flatnonzero(role[rows_of(part.nbr_ptr)])
        values = table[:part.num_masters].copy()
        values[solving] = solve_normal_equations(ptr, table[part.nbr_slot[entries]], part.nbr_weight[entries],
                                                 self.regularization)
        return StepResult(values)
