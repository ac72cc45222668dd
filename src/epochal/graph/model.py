"""The graph a job runs on, as the driver holds it: vertex ids, edges, weights, direction.

:class:`Graph` is the loaded input before partitioning: sorted unique vertex ids (arbitrary
64-bit integers, not necessarily dense), edge endpoints as ids, optional float64 weights and
per-vertex properties. It checks what every algorithm relies on (every edge names a known
vertex), finds repeated edges for the loaders (which refuse or drop them) and converts ids to
dense indices for partitioning. For an undirected graph each edge is stored once, as given;
partitions see it in both directions.

The errors about input live here too: :class:`GraphInputError`, and :class:`EdgeInputError` for
a problem with one edge, which carries the edge's index so that a loader or the command line can
name the edge by its line or row instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from epochal.errors import EpochalError

#: the vertex-membership check uses a lookup table (one byte per id between the smallest and the
#: largest vertex id) when it holds at most this many bytes per vertex or edge; else it sorts
_TABLE_BYTES_PER_ITEM = 8
#: an odd 64-bit constant (2^64 / golden ratio) that mixes an edge's source into its hash key
_MIX = np.uint64(0x9E3779B97F4A7C15)


class GraphInputError(EpochalError, ValueError):
    """The graph input is malformed (unknown vertex, bad line, bad weight): nothing ran."""


class EdgeInputError(GraphInputError):
    """A :class:`GraphInputError` about one edge: ``edge`` is its index in the graph's edge arrays,
    ``src`` and ``dst`` its endpoints, ``problem`` the message after the edge's name."""

    def __init__(self, edge: int, src: int, dst: int, problem: str) -> None:
        super().__init__(f"edge {edge} ({src} -> {dst}) {problem}")
        self.edge, self.src, self.dst, self.problem = edge, src, dst, problem

    def at(self, where: str) -> str:
        """The message with the edge named by where it is (``"G.e, line 7"``) instead of its index."""
        return f"{where}: edge {self.src} -> {self.dst} {self.problem}"


class UnknownVertexError(EdgeInputError):
    """An edge names a vertex that is not in the graph's vertex list (``end``: "source" or "destination")."""

    def __init__(self, edge: int, src: int, dst: int, end: str, vertex: int) -> None:
        super().__init__(edge, src, dst, f"names {end} vertex {vertex}, which is not in the vertex list; "
                                         "add it to the vertices or drop the edge")
        self.end, self.vertex = end, vertex


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values``, sorted (a sort and a comparison of neighbours: numpy 2.3+'s
    ``np.unique`` hashes and is several times slower on large int64 arrays)."""
    ordered = np.sort(values)
    if ordered.size < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


@dataclass
class Graph:
    """A directed or undirected graph with int64 vertex ids.

    Contract: ``vertices`` is sorted and unique; ``src``/``dst`` name only vertices in it (checked
    by :meth:`validate`, which loaders call); ``weights`` is None or one float64 per edge.
    """

    vertices: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    directed: bool = True
    weights: np.ndarray | None = None
    #: name -> one value per vertex (in ``vertices`` order)
    properties: dict[str, np.ndarray] = field(default_factory=dict)
    _dense: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_edges(cls, src: np.ndarray | list[int], dst: np.ndarray | list[int], *, directed: bool = True,
                   weights: np.ndarray | list[float] | None = None,
                   vertices: np.ndarray | list[int] | None = None) -> Graph:
        """A graph of these edges; the vertices are ``vertices`` (deduplicated; they must include every
        endpoint) or, without them, the edges' endpoints. Repeated edges are kept (loaders check them)."""
        src_a = np.asarray(src, dtype=np.int64)
        dst_a = np.asarray(dst, dtype=np.int64)
        ids = sorted_unique(np.concatenate([src_a, dst_a]) if vertices is None
                            else np.asarray(vertices, dtype=np.int64))
        w = None if weights is None else np.asarray(weights, dtype=np.float64)
        graph = cls(ids, src_a, dst_a, directed, w)
        graph.validate()
        return graph

    @property
    def num_vertices(self) -> int:
        return int(self.vertices.size)

    @property
    def num_edges(self) -> int:
        return int(self.src.size)

    def index_of(self, ids: np.ndarray) -> np.ndarray:
        """Dense indices (positions in ``vertices``) of ``ids``, all of which must be vertices.

        Large arrays go through pyarrow's hash lookup (about twice as fast as a binary search of
        each id on millions of edges)."""
        if ids.size < 4096:
            return np.searchsorted(self.vertices, ids)
        found = pc.index_in(pa.array(ids, type=pa.int64()), value_set=pa.array(self.vertices, type=pa.int64()))
        return found.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)

    def dense_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(source, destination)`` of every edge as dense indices (computed once, then kept;
        the edge arrays must not change afterwards)."""
        if self._dense is None:
            self._dense = (self.index_of(self.src), self.index_of(self.dst))
        return self._dense

    def validate(self) -> None:
        """Raise :class:`GraphInputError` naming the first edge whose endpoint is not a vertex
        (:class:`UnknownVertexError`; sources are checked before destinations) or whose weight is
        not a finite number (:class:`EdgeInputError`)."""
        if self.vertices.size and np.any(self.vertices[1:] <= self.vertices[:-1]):
            raise GraphInputError("vertex ids must be unique (a vertex is listed twice)")
        if self.src.shape != self.dst.shape:
            raise GraphInputError("edge sources and destinations differ in length")
        if self.weights is not None and self.weights.shape != self.src.shape:
            raise GraphInputError("there must be one weight per edge")
        table = self._vertex_table()
        for name, ends in (("source", self.src), ("destination", self.dst)):
            if ends.size and not self._all_vertices(ends, table):
                i = int(np.argmax(~self._are_vertices(ends, table)))
                raise UnknownVertexError(i, int(self.src[i]), int(self.dst[i]), name, int(ends[i]))
        if self.weights is not None and not np.all(np.isfinite(self.weights)):
            i = int(np.argmax(~np.isfinite(self.weights)))
            raise EdgeInputError(i, int(self.src[i]), int(self.dst[i]),
                                 f"has weight {float(self.weights[i])}; weights must be finite numbers")

    def _vertex_table(self) -> np.ndarray | None:
        """``table[id - vertices[0]]`` is True for the vertices, when the id range is small enough."""
        if not (self.vertices.size and self.src.size):
            return None
        span = int(self.vertices[-1]) - int(self.vertices[0]) + 1
        if span > _TABLE_BYTES_PER_ITEM * max(self.vertices.size, self.src.size):
            return None
        table = np.zeros(span, dtype=bool)
        table[self.vertices - self.vertices[0]] = True
        return table

    def _all_vertices(self, ends: np.ndarray, table: np.ndarray | None) -> bool:
        """Whether every id in (non-empty) ``ends`` is a vertex: a table lookup, or a sort of ``ends``
        and one search of its distinct values (in order, so it stays in cache)."""
        if not self.vertices.size or ends.min() < self.vertices[0] or ends.max() > self.vertices[-1]:
            return False
        if table is not None:
            return bool(table[ends - self.vertices[0]].all())
        distinct = sorted_unique(ends)
        return bool(np.array_equal(self.vertices[np.searchsorted(self.vertices, distinct)], distinct))

    def _are_vertices(self, ends: np.ndarray, table: np.ndarray | None) -> np.ndarray:
        """Per id in ``ends``, whether it is a vertex (to find the first one that is not)."""
        if not self.vertices.size:
            return np.zeros(ends.shape, dtype=bool)
        low, high = self.vertices[0], self.vertices[-1]
        inside = (ends >= low) & (ends <= high)
        if table is not None:
            return inside & table[np.where(inside, ends - low, 0)]
        pos = np.minimum(np.searchsorted(self.vertices, ends), self.vertices.size - 1)
        return inside & (self.vertices[pos] == ends)

    def repeated_edges(self) -> np.ndarray:
        """Indices (ascending) of the edges that repeat an earlier edge: the same source and
        destination or, in an undirected graph, the same two endpoints in either order."""
        first, second = self.src, self.dst
        if not self.directed:
            first, second = np.minimum(first, second), np.maximum(first, second)
        if first.size < 2:
            return np.empty(0, dtype=np.int64)
        keys, exact = _pair_keys(first, second)
        ordered = np.sort(keys)
        if not np.any(ordered[1:] == ordered[:-1]):
            return np.empty(0, dtype=np.int64)
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        same = ordered[1:] == ordered[:-1]
        if exact:  # within a run of equal keys the earliest edge comes first and the rest repeat it
            return np.sort(order[1:][same])
        in_runs = np.zeros(order.size, dtype=bool)  # hashed keys: compare the endpoints where keys meet
        in_runs[1:] |= same
        in_runs[:-1] |= same
        candidates = np.sort(order[in_runs])
        by_pair = candidates[np.lexsort((second[candidates], first[candidates]))]  # stable: earliest first
        again = (first[by_pair][1:] == first[by_pair][:-1]) & (second[by_pair][1:] == second[by_pair][:-1])
        return np.sort(by_pair[1:][again])

    def first_occurrence(self, edge: int) -> int:
        """The index of the first edge that is the same edge as edge ``edge`` (itself if none is earlier)."""
        s, d = self.src[edge], self.dst[edge]
        same = (self.src == s) & (self.dst == d)
        if not self.directed:
            same |= (self.src == d) & (self.dst == s)
        return int(np.argmax(same))

    def with_edges(self, edges: np.ndarray) -> Graph:
        """This graph with only the edges at indices ``edges`` (vertices and properties unchanged)."""
        return Graph(self.vertices, self.src[edges], self.dst[edges], self.directed,
                     None if self.weights is None else self.weights[edges], self.properties)


def _pair_keys(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, bool]:
    """One sortable key per ``(first, second)`` pair, and whether equal keys mean equal pairs: exact
    when the ids span at most ~3e9 values (``span^2`` fits in 63 bits), else a hash whose rare
    collisions the caller resolves by comparing the pairs themselves."""
    low = min(int(first.min()), int(second.min()))
    span = max(int(first.max()), int(second.max())) - low + 1
    if span * span < 2**63:
        return (first - np.int64(low)) * np.int64(span) + (second - np.int64(low)), True
    return (np.asarray(first, dtype=np.int64).view(np.uint64) * _MIX
            + np.asarray(second, dtype=np.int64).view(np.uint64)), False
