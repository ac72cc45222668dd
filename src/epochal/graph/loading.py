"""Loading a :class:`~epochal.graph.model.Graph` from files and tables, with one clear error per bad input.

This module owns the public entry points of every way a graph gets into epochal; the work is
done in three modules behind it:

- :mod:`epochal.graph.loading_text`: :func:`load_graph` (and :func:`load_graph_located`), the LDBC
  Graphalytics vertex and edge files, and :func:`load_edge_list`, SNAP-style edge lists.
- :mod:`epochal.graph.loading_tables`: :func:`load_graph_parquet`, :func:`load_graph_csv` (with a
  header) and :func:`graph_from_dataframes` (Spark): tables ``vertices(id, ...)`` and
  ``edges(src, dst, ...)``.
- :mod:`epochal.graph.loading_assembly`: what they share: the checks of the assembled graph,
  repeated edges (``duplicates``: :data:`Duplicates`) and naming where a bad vertex or edge is
  (:class:`EdgeLocator`).

Every problem raises one :class:`GraphInputError` that names the file, the line (or row) and what
to do about it. A repeated edge (LDBC Graphalytics lists each edge once; in an undirected graph
``u v`` and ``v u`` are the same edge) raises too, unless ``duplicates="drop"``, which keeps the
first of each and logs a warning; that is the default of :func:`load_edge_list` only, because SNAP
lists undirected graphs with each edge in both orders.
"""

from __future__ import annotations

from epochal.graph.loading_assembly import DUPLICATES, Duplicates, EdgeLocator
from epochal.graph.loading_tables import graph_from_dataframes, load_graph_csv, load_graph_parquet
from epochal.graph.loading_text import load_edge_list, load_graph, load_graph_located
from epochal.graph.model import EdgeInputError, Graph, GraphInputError

__all__ = [
    "DUPLICATES",
    "Duplicates",
    "EdgeInputError",
    "EdgeLocator",
    "Graph",
    "GraphInputError",
    "graph_from_dataframes",
    "load_edge_list",
    "load_graph",
    "load_graph_csv",
    "load_graph_located",
    "load_graph_parquet",
]
