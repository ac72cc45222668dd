"""Input checks the built-in algorithms share: each raises one :class:`GraphInputError` that says
what is wrong with the graph or the parameters and how to fix it, before anything runs."""

from __future__ import annotations

import numpy as np

from epochal.graph.model import EdgeInputError, Graph, GraphInputError


class NegativeWeightError(EdgeInputError):
    """Edge ``edge`` has the negative weight ``weight`` and ``algorithm`` needs weights of 0 or more."""

    def __init__(self, edge: int, src: int, dst: int, weight: float, algorithm: str) -> None:
        super().__init__(edge, src, dst, f"has negative weight {weight!r}; {algorithm} needs weights of 0 or more")
        self.weight, self.algorithm = weight, algorithm


def require_vertex(graph: Graph, vertex: int) -> None:
    """The source vertex ``vertex`` must be one of ``graph``'s vertices."""
    pos = int(np.searchsorted(graph.vertices, vertex))
    if pos >= graph.num_vertices or int(graph.vertices[pos]) != vertex:
        raise GraphInputError(f"source vertex {vertex} is not in the graph; "
                              "pick one of its vertices with --source-vertex")


def require_weights(graph: Graph, algorithm: str, meaning: str = "weight") -> np.ndarray:
    """``graph``'s edge weights; ``algorithm`` (named in the message) cannot run without them."""
    if graph.weights is None:
        raise GraphInputError(f"{algorithm} needs a {meaning} on every edge and this graph has no edge weights; "
                              f"load it with a {meaning} column")
    return graph.weights


def require_non_negative_weights(graph: Graph, algorithm: str) -> None:
    """Every edge weight must be present and not negative; the first negative edge is named by its
    index (:class:`NegativeWeightError`, whose ``edge`` the command line turns into a line number)."""
    weights = require_weights(graph, algorithm)
    negative = weights < 0
    if negative.any():
        i = int(np.argmax(negative))
        raise NegativeWeightError(i, int(graph.src[i]), int(graph.dst[i]), float(weights[i]), algorithm)
