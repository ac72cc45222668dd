"""Loading a graph from tables: Parquet and CSV files (or directories of them) and Spark DataFrames.

This module owns the table formats of :mod:`epochal.graph.loading`: :func:`load_graph_parquet`,
:func:`load_graph_csv` (with a header line) and :func:`graph_from_dataframes` read a vertex table
``vertices(id, ...)`` (optional: without it the vertices are the edges' endpoints) and an edge table
``edges(src, dst, ...)``, with an optional weight column and vertex property columns. Every problem
raises one :class:`GraphInputError` naming the table, the row (counted from 0) and what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from epochal.filesystems import resolve
from epochal.graph.loading_assembly import Duplicates, Rows, assemble, check_duplicates
from epochal.graph.model import Graph, GraphInputError


def _int_column(table: pa.Table, name: str, where: str, rows: Rows, kind: str) -> np.ndarray:
    """Column ``name`` of ``table`` as int64 ids; missing, null or non-integer values raise."""
    column = _column(table, name, where, "a column of vertex ids")
    if not (pa.types.is_integer(column.type) or pa.types.is_null(column.type)):  # null: an empty table
        raise GraphInputError(f"{where}: column {name!r} has type {column.type}; vertex ids must be integers")
    _no_nulls(column, name, rows, kind)
    try:
        return column.cast(pa.int64()).to_numpy()
    except pa.ArrowInvalid as error:
        raise GraphInputError(f"{where}: column {name!r} holds an id beyond 64-bit signed integers ({error}); "
                              "vertex ids must lie between -2^63 and 2^63-1") from None


def _column(table: pa.Table, name: str, where: str, meaning: str) -> pa.ChunkedArray:
    if name not in table.column_names:
        raise GraphInputError(f"{where} has no column {name!r} (columns: {', '.join(table.column_names) or 'none'}); "
                              f"name {meaning} {name!r}")
    return table.column(name)


def _no_nulls(column: pa.ChunkedArray, name: str, rows: Rows, kind: str) -> None:
    if column.null_count:
        i = int(np.argmax(column.is_null().to_numpy(zero_copy_only=False)))
        raise GraphInputError(f"{rows.where(kind, i)}: {name!r} is null; every {kind} needs a {name!r}")


@dataclass(frozen=True)
class _Shape:
    """What to read of the tables and how to build the graph (the loaders' keyword arguments)."""

    directed: bool
    weight_column: str | None
    property_columns: Sequence[str]
    duplicates: Duplicates

    def __post_init__(self) -> None:
        check_duplicates(self.duplicates)

    def wanted(self) -> tuple[list[str], list[str]]:
        """The columns to read of the vertex and the edge table."""
        weight = [self.weight_column] if self.weight_column else []
        return ["id", *self.property_columns], ["src", "dst", *weight]


def _graph_from_tables(vertices: pa.Table | None, edges: pa.Table, shape: _Shape, rows: Rows) -> Graph:
    """The graph of ``vertices(id, *property_columns)`` (None: the endpoints) and ``edges(src, dst[, weight])``."""
    vertex_where, edge_where = rows.names["vertex"], rows.names["edge"]
    ids, properties = None, {}
    if vertices is not None:
        ids = _int_column(vertices, "id", vertex_where, rows, "vertex")
        properties = {name: _column(vertices, name, vertex_where, "the property column").to_numpy()
                      for name in shape.property_columns}
    elif shape.property_columns:
        raise GraphInputError("vertex properties need a vertex table; give the vertices as well as the edges")
    src = _int_column(edges, "src", edge_where, rows, "edge")
    dst = _int_column(edges, "dst", edge_where, rows, "edge")
    weights, weight_column = None, shape.weight_column
    if weight_column is not None:
        column = _column(edges, weight_column, edge_where, "the weight column")
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise GraphInputError(f"{edge_where}: weight column {weight_column!r} has type {column.type}; "
                                  "weights must be numbers")
        _no_nulls(column, weight_column, rows, "edge")
        weights = column.cast(pa.float64()).to_numpy()
    return assemble(ids, src, dst, directed=shape.directed, weights=weights, properties=properties, rows=rows,
                    vertices_name=f"the vertices ({vertex_where})", duplicates=shape.duplicates)[0]


def _read_dataset(location: str, columns: list[str], what: str, open_dataset: Callable[..., pads.Dataset]) -> pa.Table:
    """Columns ``columns`` of the dataset (file or directory) at ``location``."""
    fs, path = resolve(location)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        raise GraphInputError(f"{location}: the {what} does not exist; check the path")
    try:
        dataset = open_dataset(path, fs)
        if not set(columns) <= set(dataset.schema.names):  # no rows: the error lists the columns there are
            return dataset.schema.empty_table()
        return dataset.to_table(columns=columns)
    except (pa.ArrowInvalid, OSError) as error:
        raise GraphInputError(f"{location}: the {what} cannot be read ({error}); check that it is the right file"
                              ) from error


def _load_tables(vertices_path: str | None, edges_path: str, file_format: str | pads.FileFormat,
                 shape: _Shape) -> Graph:
    def read(location: str, columns: list[str], what: str) -> pa.Table:
        return _read_dataset(location, columns, what,
                             lambda path, fs: pads.dataset(path, filesystem=fs, format=file_format))

    vertex_columns, edge_columns = shape.wanted()
    vertices = None if vertices_path is None else read(vertices_path, vertex_columns, "vertex table")
    edges = read(edges_path, edge_columns, "edge table")
    return _graph_from_tables(vertices, edges, shape, Rows(vertices_path or "", edges_path))


def load_graph_parquet(vertices_path: str | None, edges_path: str, *, directed: bool = True,
                       weight_column: str | None = None, property_columns: Sequence[str] = (),
                       duplicates: Duplicates = "error") -> Graph:
    """The graph of Parquet files or directories ``vertices(id, ...)`` and ``edges(src, dst, ...)``.

    ``vertices_path`` None: the vertices are the edges' endpoints. ``weight_column`` names the
    edges' weight column; ``property_columns`` the vertex columns kept as ``Graph.properties``.
    An edge that repeats an earlier one (in an undirected graph also in the other order) raises,
    naming both rows; ``duplicates="drop"`` keeps the first of each instead and logs a warning.
    """
    return _load_tables(vertices_path, edges_path, "parquet",
                        _Shape(directed, weight_column, property_columns, duplicates))


def load_graph_csv(vertices_path: str | None, edges_path: str, *, directed: bool = True,
                   weight_column: str | None = None, property_columns: Sequence[str] = (),
                   delimiter: str = ",", duplicates: Duplicates = "error") -> Graph:
    """As :func:`load_graph_parquet`, for CSV files (or directories of them) with a header line."""
    csv_format = pads.CsvFileFormat(parse_options=pacsv.ParseOptions(delimiter=delimiter))
    return _load_tables(vertices_path, edges_path, csv_format,
                        _Shape(directed, weight_column, property_columns, duplicates))


def _collect(df: Any, columns: list[str]) -> pa.Table:
    """Columns ``columns`` of Spark DataFrame ``df`` on the driver, as Arrow (none if one is missing)."""
    if not set(columns) <= set(df.columns):  # no rows: the error lists the columns there are
        return pa.table({name: pa.array([]) for name in df.columns})
    selected = df.select(*columns)
    if hasattr(selected, "toArrow"):
        return selected.toArrow()
    return pa.Table.from_pandas(selected.toPandas(), preserve_index=False)


def graph_from_dataframes(vertices_df: Any, edges_df: Any, *, directed: bool = True, weight_column: str | None = None,
                          property_columns: Sequence[str] = (), duplicates: Duplicates = "error") -> Graph:
    """The graph of Spark DataFrames ``vertices(id, ...)`` (None: the endpoints) and ``edges(src, dst, ...)``.

    Both are collected to the driver. ``weight_column`` names the edges' weight column;
    ``property_columns`` the vertex columns kept as ``Graph.properties`` (numpy arrays in vertex order);
    ``duplicates`` as for :func:`load_graph_parquet` (rows counted in the order ``collect`` returns them).
    """
    shape = _Shape(directed, weight_column, property_columns, duplicates)
    vertex_columns, edge_columns = shape.wanted()
    vertices = None if vertices_df is None else _collect(vertices_df, vertex_columns)
    edges = _collect(edges_df, edge_columns)
    return _graph_from_tables(vertices, edges, shape, Rows("the vertex DataFrame", "the edge DataFrame"))
