"""The graph a job runs on, as the driver holds it: vertex ids, edges, weights, direction.

:class:`Graph` is the loaded input before partitioning: sorted unique vertex ids (arbitrary
64-bit integers, not necessarily dense), edge endpoints as ids, optional float64 weights and
per-vertex properties. It checks what every algorithm relies on (every edge names a known
vertex) and converts ids to dense indices for partitioning. For an undirected graph each edge
is stored once, as given; partitions see it in both directions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from epochal.errors import EpochalError


class GraphInputError(EpochalError, ValueError):
    """The graph input is malformed (unknown vertex, bad line, bad weight): nothing ran."""


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

    @classmethod
    def from_edges(cls, src: np.ndarray | list[int], dst: np.ndarray | list[int], *, directed: bool = True,
                   weights: np.ndarray | list[float] | None = None,
                   vertices: np.ndarray | list[int] | None = None) -> Graph:
        """A graph of these edges; vertices default to the edges' endpoints (plus ``vertices``)."""
        src_a = np.asarray(src, dtype=np.int64)
        dst_a = np.asarray(dst, dtype=np.int64)
        ids = np.union1d(src_a, dst_a) if vertices is None else np.unique(np.asarray(vertices, dtype=np.int64))
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
        """Dense indices (positions in ``vertices``) of ``ids``, all of which must be vertices."""
        return np.searchsorted(self.vertices, ids)

    def validate(self) -> None:
        """Raise :class:`GraphInputError` naming the first edge whose endpoint is not a vertex."""
        if self.vertices.size and np.any(self.vertices[1:] <= self.vertices[:-1]):
            raise GraphInputError("vertex ids must be unique (a vertex is listed twice)")
        if self.src.shape != self.dst.shape:
            raise GraphInputError("edge sources and destinations differ in length")
        if self.weights is not None and self.weights.shape != self.src.shape:
            raise GraphInputError("there must be one weight per edge")
        for name, ends in (("source", self.src), ("destination", self.dst)):
            if not ends.size:
                continue
            pos = np.searchsorted(self.vertices, ends)
            bad = (pos >= self.vertices.size) | (self.vertices[np.minimum(pos, self.vertices.size - 1)] != ends) \
                if self.vertices.size else np.ones(ends.shape, dtype=bool)
            if bad.any():
                i = int(np.argmax(bad))
                raise GraphInputError(
                    f"edge {i} ({int(self.src[i])} -> {int(self.dst[i])}) names {name} vertex {int(ends[i])}, "
                    "which is not in the vertex list; add it to the vertices or drop the edge")
        if self.weights is not None and not np.all(np.isfinite(self.weights)):
            i = int(np.argmax(~np.isfinite(self.weights)))
            raise GraphInputError(f"edge {i} ({int(self.src[i])} -> {int(self.dst[i])}) has weight "
                                  f"{self.weights[i]}; weights must be finite numbers")
