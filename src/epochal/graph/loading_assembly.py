"""The loaders' shared half: building a checked :class:`~epochal.graph.model.Graph` from the
columns a loader read, and naming where a bad vertex or edge is.

This module owns:

- :class:`Rows`: the names of the vertex and edge inputs and of their rows (``"e.csv, row 4"``);
  the text loaders (:mod:`epochal.graph.loading_text`) name lines instead.
- :func:`assemble`: orders the vertices (a repeated id raises, naming both rows), validates the
  graph (an unknown vertex or a non-finite weight raises, naming its row) and refuses or drops
  repeated edges as ``duplicates`` says (:data:`Duplicates`).
- :class:`EdgeLocator`: where each edge of a loaded graph came from, for problems found after
  loading (the command line names the line of SSSP's negative weight).

Repeated edges: LDBC Graphalytics allows each edge once; in an undirected graph ``u v`` and ``v u``
are the same edge. PageRank and directed CDLP would count a repeat twice, so by default a repeat
raises one :class:`GraphInputError` naming it and where it first was; ``duplicates="drop"`` keeps
the first of each and logs one warning (logger ``epochal.graph.loading``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from epochal.graph.model import EdgeInputError, Graph, GraphInputError, UnknownVertexError, sorted_unique

#: what the loaders do with an edge that repeats an earlier one: refuse the input, or drop the repeat
Duplicates = Literal["error", "drop"]
DUPLICATES: tuple[Duplicates, ...] = ("error", "drop")
REPEAT_REMEDY = ('list each edge once, or load with duplicates="drop" (command line: --drop-duplicate-edges) '
                 "to keep the first of each")

_log = logging.getLogger("epochal.graph.loading")


def check_duplicates(duplicates: str) -> None:
    """``duplicates`` must be one of :data:`DUPLICATES` (checked before anything is read)."""
    if duplicates not in DUPLICATES:
        raise GraphInputError(f'duplicates={duplicates!r} is not an option; use "error" (refuse repeated edges) '
                              'or "drop" (keep the first of each)')


class Rows:
    """Names the vertex and edge rows of tables: ``"<table>, row <i>"`` (0-based)."""

    def __init__(self, vertices: str, edges: str) -> None:
        self.names = {"vertex": vertices, "edge": edges}

    def positions(self, kind: str, rows: Sequence[int]) -> list[str]:
        """Where each of ``rows`` (of the ``kind`` table, "vertex" or "edge") is within its table."""
        return [f"row {r}" for r in rows]

    def where(self, kind: str, row: int) -> str:
        return f"{self.names[kind]}, {self.positions(kind, [row])[0]}"


@dataclass(frozen=True)
class EdgeLocator:
    """Where each edge of a loaded graph is in its input: ``where(i)`` -> ``"G.e, line 7"``."""

    rows: Rows
    #: the input row of each edge, when repeated edges were dropped; None: edge i is row i
    kept: np.ndarray | None = None

    def where(self, edge: int) -> str:
        """The file and line (or table and row) of the graph's edge ``edge`` (a text file is read again)."""
        return self.rows.where("edge", edge if self.kept is None else int(self.kept[edge]))


def _sorted_unique_ids(ids: np.ndarray, rows: Rows) -> np.ndarray:
    """The permutation that sorts ``ids``; a repeated id raises, naming both of its rows."""
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    repeats = ordered[1:] == ordered[:-1]
    if repeats.any():
        second = int(order[1:][repeats].min())
        first = int(np.flatnonzero(ids == ids[second])[0])
        at_second, at_first = rows.positions("vertex", [second, first])
        raise GraphInputError(f"{rows.names['vertex']}, {at_second}: vertex {int(ids[second])} is listed twice "
                              f"(first on {at_first}); list each vertex once")
    return order


def _located(error: GraphInputError, rows: Rows, vertices_name: str) -> GraphInputError:
    """``error`` from :meth:`Graph.validate`, naming the row of the edge it is about."""
    if isinstance(error, UnknownVertexError):
        return GraphInputError(f"{rows.where('edge', error.edge)}: edge {error.src} -> {error.dst} names vertex "
                               f"{error.vertex}, which is not in {vertices_name}; add the vertex or remove the edge")
    if isinstance(error, EdgeInputError):
        return GraphInputError(error.at(rows.where("edge", error.edge)))
    return GraphInputError(f"{rows.names['edge']}: {error}")


def _without_repeats(graph: Graph, duplicates: Duplicates, rows: Rows) -> tuple[Graph, np.ndarray | None]:
    """``graph`` and None when no edge repeats; else raise, or drop the repeats (``duplicates``) and
    return the graph of the first of each and the input rows of its edges."""
    repeats = graph.repeated_edges()
    if not repeats.size:
        return graph, None
    again = int(repeats[0])
    first = graph.first_occurrence(again)
    src, dst = int(graph.src[again]), int(graph.dst[again])
    if duplicates == "error":
        at_again, at_first = rows.positions("edge", [again, first])
        same = "" if int(graph.src[first]) == src else f" as {dst} -> {src}, the same edge in an undirected graph"
        raise GraphInputError(f"{rows.names['edge']}, {at_again}: edge {src} -> {dst} is listed twice "
                              f"(first on {at_first}{same}); {REPEAT_REMEDY}")
    keep = np.ones(graph.num_edges, dtype=bool)
    keep[repeats] = False
    kept = np.flatnonzero(keep)
    _log.warning("%s: dropped %d repeated edge(s) and kept the first of each; the first dropped is edge %d -> %d "
                 "(input edge %d, counted from 0), which repeats input edge %d (%d -> %d)", rows.names["edge"],
                 repeats.size, src, dst, again, first, graph.src[first], graph.dst[first])
    return graph.with_edges(kept), kept


def assemble(ids: np.ndarray | None, src: np.ndarray, dst: np.ndarray, *, directed: bool,
             weights: np.ndarray | None, properties: dict[str, np.ndarray], rows: Rows, vertices_name: str,
             duplicates: Duplicates) -> tuple[Graph, EdgeLocator]:
    """A validated graph and where its edges came from; ``ids`` (any order, with ``properties``
    aligned to it) or None: the vertices are the edges' endpoints."""
    src = np.ascontiguousarray(src, dtype=np.int64)
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    if ids is None:
        vertices = sorted_unique(np.concatenate([src, dst]))
    else:
        order = _sorted_unique_ids(np.asarray(ids, dtype=np.int64), rows)
        vertices = np.asarray(ids, dtype=np.int64)[order]
        properties = {name: np.asarray(values)[order] for name, values in properties.items()}
    graph = Graph(vertices, src, dst, directed,
                  None if weights is None else np.ascontiguousarray(weights, dtype=np.float64), properties)
    try:
        graph.validate()
    except GraphInputError as error:
        raise _located(error, rows, vertices_name) from None
    graph, kept = _without_repeats(graph, duplicates, rows)
    return graph, EdgeLocator(rows, kept)
