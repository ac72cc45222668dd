"""Local clustering coefficient as LDBC Graphalytics defines it (the Graphalytics benchmark
specification v1.0.x, arXiv:2011.15028, "Algorithms: Local Clustering Coefficient (LCC)" and its
pseudo-code appendix).

``N(v)`` is the set of v's in- and out-neighbours, v itself excluded. If ``|N(v)| < 2`` the
coefficient is 0; otherwise it is the number of edges ``(u, w)`` of the graph with ``u, w`` in
``N(v)`` and ``u != w`` divided by ``|N(v)| (|N(v)| - 1)``, in float64. Edges are directed: in a
directed graph ``(u, w)`` and ``(w, u)`` count separately; an undirected edge goes both ways, so
it counts twice and the coefficient is the usual ``2 * triangles / (d (d - 1))``. Edges form a set
(a repeated edge counts once) and self-loops never count.

One superstep after ``init``: the neighbourhoods are structure, not values, so every master's
coefficient comes from its partition's adjacency (``adjacency = True``: every table vertex, the
replicas included, carries its out-neighbour ids) with one sparse matrix product: with ``M`` the
0/1 master-by-table neighbour matrix and ``A`` the 0/1 table-by-table edge matrix, the edge count
of ``v`` is the sum of row ``v`` of ``(M A) ∘ M`` (∘: elementwise), its ``|N(v)|`` the sum of row
``v`` of ``M``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from epochal.graph.algorithms._csr import rows_of, unique_pairs
from epochal.graph.partition import Partition
from epochal.graph.program import StepResult, SuperstepContext, VectorProgram


def _matrix(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    """The 0/1 matrix of the distinct ``(row, col)`` pairs with ``row != col``."""
    keep = rows != cols
    rows, cols = unique_pairs(rows[keep], cols[keep])
    return sp.csr_matrix((np.ones(rows.size, dtype=np.int64), (rows, cols)), shape=shape)


class LCC(VectorProgram):
    """Every vertex's local clustering coefficient (float64); see the module docstring."""

    directions: ClassVar[str] = "both"
    adjacency: ClassVar[bool] = True
    max_supersteps = 1

    def init(self, part: Partition, ctx: SuperstepContext) -> StepResult:
        return StepResult(np.zeros(part.num_masters))

    def compute(self, part: Partition, table: np.ndarray, ctx: SuperstepContext) -> StepResult:
        assert part.table_out_ptr is not None and part.table_out_ids is not None, "LCC needs adjacency"
        n, size = part.num_masters, part.table_size
        # masters are table slots 0..n-1, so a master's own slot is its row
        neighbours = _matrix(rows_of(part.nbr_ptr), part.nbr_slot, (n, size))
        # out-edges between table vertices (an out-neighbour outside the table is no master's neighbour)
        by_id = np.argsort(part.table_ids)
        sorted_ids = part.table_ids[by_id]
        pos = np.minimum(np.searchsorted(sorted_ids, part.table_out_ids), max(size - 1, 0))
        inside = sorted_ids[pos] == part.table_out_ids if size else np.zeros(0, dtype=bool)
        edges = _matrix(rows_of(part.table_out_ptr)[inside], by_id[pos[inside]], (size, size))
        links = np.asarray((neighbours @ edges).multiply(neighbours).sum(axis=1), dtype=np.int64).ravel()
        degree = np.diff(neighbours.indptr)
        possible = degree * (degree - 1)
        lcc = np.zeros(n)
        np.divide(links, possible, out=lcc, where=degree >= 2)
        return StepResult(lcc)
