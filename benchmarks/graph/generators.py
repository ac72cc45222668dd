"""Reproducible synthetic graphs for the graph benchmarks, generated with vectorised numpy.

* :func:`rmat` -- an R-MAT / Kronecker power-law graph with the Graph500 parameters
  (a=0.57, b=0.19, c=0.19, d=0.05): scale *s* gives 2^s vertices and ``edge_factor * 2^s`` edge
  samples; self-loops and duplicate edges are removed (so a little fewer edges remain), and the
  vertex ids are relabelled by a random permutation onto sparse 64-bit ids, some of them at or
  above 2^31 (as real inputs have, and to exercise id handling beyond int32). Isolated vertices
  stay in the graph (they are PageRank's dangling vertices). Directed. Graph500 also perturbs
  the probabilities per level ("noise"); this generator does not.
* :func:`road_grid` -- a road-like 2-D grid: 2^s vertices on a ``2^floor(s/2) x 2^ceil(s/2)``
  lattice joined to their right and lower neighbours, about 30 % of those edges dropped so that
  the mean degree (~2.8) is that of a road network such as RoadCA (1.97M vertices, 2.77M
  undirected edges), undirected, with log-normal weights (mu=0.4, sigma=1.2), the distribution
  papers/003 §6.1 assigns to RoadCA for SSSP. Ids are relabelled like :func:`rmat`'s.

The same ``(scale, seed)`` gives the same graph on every machine (numpy's PCG64 generator).
:func:`write_edge_text` writes a graph's edges as ``src dst`` lines for the Spark peers, which
read text as Spark's own PageRank example does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from epochal.graph.model import Graph

#: Graph500's R-MAT initiator probabilities (d = 1 - a - b - c = 0.05).
RMAT_A, RMAT_B, RMAT_C = 0.57, 0.19, 0.19
EDGE_FACTOR = 16
#: Log-normal edge weights of papers/003 §6.1 (from the Facebook user-interaction graph).
WEIGHT_MU, WEIGHT_SIGMA = 0.4, 1.2
#: Share of the grid's lattice edges kept: 4-neighbour lattice degree ~4 -> road-like ~2.8.
GRID_KEEP = 0.7
#: Sparse ids are drawn from [0, 2^ID_BITS): most of them are >= 2^31.
ID_BITS = 34


@dataclass
class BenchGraph:
    """A generated graph: the epochal :class:`Graph` plus what the peers and the report need."""

    name: str
    kind: str  # "rmat" or "grid"
    scale: int
    seed: int
    graph: Graph
    #: dense indices (positions in ``graph.vertices``) of every edge's endpoints
    src_index: np.ndarray
    dst_index: np.ndarray
    #: SSSP's source vertex id (grid graphs), else None
    source: int | None = None

    @property
    def num_vertices(self) -> int:
        return self.graph.num_vertices

    @property
    def num_edges(self) -> int:
        return self.graph.num_edges


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (a sort and a mask: faster than ``np.unique``'s hashing here)."""
    values = np.sort(values)
    return values[np.r_[True, values[1:] != values[:-1]]] if values.size else values


def sparse_ids(count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct int64 ids drawn uniformly from ``[0, 2^ID_BITS)``, in random order."""
    ids = np.zeros(0, dtype=np.int64)
    while ids.size < count:
        ids = _sorted_unique(np.concatenate([ids, rng.integers(0, 2**ID_BITS, size=count - ids.size + 16,
                                                               dtype=np.int64)]))
    chosen = rng.choice(ids, size=count, replace=False)
    return chosen.astype(np.int64)


def relabelled(name: str, kind: str, scale: int, seed: int, n: int, src: np.ndarray, dst: np.ndarray,
                rng: np.random.Generator, *, directed: bool, weights: np.ndarray | None = None,
                source: int | None = None) -> BenchGraph:
    """The graph on dense vertices ``0..n-1`` with every vertex renamed to a random sparse id
    (``source``: a dense vertex, SSSP's source, renamed likewise)."""
    label = sparse_ids(n, rng)  # dense vertex i is called label[i]: a random permutation of sparse ids
    order = np.argsort(label)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n, dtype=np.int64)  # label[i] is vertices[position[i]]
    vertices = label[order]
    graph = Graph(vertices, label[src], label[dst], directed, weights)
    graph.validate()
    return BenchGraph(name, kind, scale, seed, graph, position[src], position[dst],
                      None if source is None else int(label[source]))


def rmat(scale: int, seed: int = 1, edge_factor: int = EDGE_FACTOR) -> BenchGraph:
    """A Graph500 R-MAT graph of 2^scale vertices (see the module docstring)."""
    if not 1 <= scale <= 30:
        raise ValueError(f"R-MAT scale must be between 1 and 30, not {scale}")
    rng = np.random.default_rng([seed, scale, 0])
    n, m = 1 << scale, edge_factor << scale
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    ab, abc = RMAT_A + RMAT_B, RMAT_A + RMAT_B + RMAT_C
    for bit in range(scale):  # one quadrant choice per level, for all edges at once
        r = rng.random(m)
        src |= (r >= ab).astype(np.int64) << bit  # quadrants c and d: lower half
        dst |= (((r >= RMAT_A) & (r < ab)) | (r >= abc)).astype(np.int64) << bit  # quadrants b and d
    keep = src != dst
    pairs = _sorted_unique((src[keep] << scale) | dst[keep])  # drops duplicates, sorts by (src, dst)
    src, dst = pairs >> scale, pairs & (n - 1)
    shuffle = rng.permutation(src.size)  # edge order of a real file, not sorted
    return relabelled(f"rmat-{scale}", "rmat", scale, seed, n, src[shuffle], dst[shuffle], rng, directed=True)


def road_grid(scale: int, seed: int = 1, keep: float = GRID_KEEP) -> BenchGraph:
    """A road-like weighted grid of 2^scale vertices (see the module docstring); SSSP's source is
    the vertex nearest the centre (in row-major order) that has an edge."""
    if not 2 <= scale <= 30:
        raise ValueError(f"grid scale must be between 2 and 30, not {scale}")
    rng = np.random.default_rng([seed, scale, 1])
    rows, cols = 1 << (scale // 2), 1 << (scale - scale // 2)
    n = rows * cols
    cell = np.arange(n, dtype=np.int64).reshape(rows, cols)
    right = np.stack([cell[:, :-1].ravel(), cell[:, 1:].ravel()])
    down = np.stack([cell[:-1, :].ravel(), cell[1:, :].ravel()])
    lattice = np.concatenate([right, down], axis=1)
    lattice = lattice[:, rng.random(lattice.shape[1]) < keep]
    lattice = lattice[:, rng.permutation(lattice.shape[1])]
    src, dst = lattice[0], lattice[1]
    weights = rng.lognormal(WEIGHT_MU, WEIGHT_SIGMA, size=src.size)
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    with_edges = np.flatnonzero(degree > 0)
    source = int(with_edges[np.argmin(np.abs(with_edges - cell[rows // 2, cols // 2]))])
    return relabelled(f"grid-{scale}", "grid", scale, seed, n, src, dst, rng, directed=False, weights=weights,
                       source=source)


def write_edge_text(bench: BenchGraph, path: Path) -> Path:
    """Write the edges as ``src dst`` lines (the input format of Spark's PageRank example)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    table = pa.table({"src": bench.graph.src, "dst": bench.graph.dst})
    pacsv.write_csv(table, path, write_options=pacsv.WriteOptions(include_header=False, delimiter=" "))
    return path
