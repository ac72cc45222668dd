"""Loading a :class:`~epochal.graph.model.Graph` from files and tables, with one clear error per bad input.

This module owns every way a graph gets into epochal:

- :func:`load_graph`: the LDBC Graphalytics format (EVLP): a vertex file with one id per line and
  an edge file with ``src dst`` or ``src dst weight`` per line, fields separated by single spaces;
  further columns (EVLP properties) are allowed and ignored.
- :func:`load_edge_list`: an edge list alone (SNAP style): vertices are the edges' endpoints,
  ``#`` lines are comments, fields are separated by a space or a tab.
- :func:`load_graph_parquet`, :func:`load_graph_csv` (with a header) and
  :func:`graph_from_dataframes` (Spark): tables ``vertices(id, ...)`` and ``edges(src, dst, ...)``.

Text files are parsed by pyarrow's CSV reader (multi-threaded, so tens of millions of edges load
in seconds), from local paths or any URI :func:`epochal.connectors.filesystems.resolve` knows;
compressed files (``.gz``, ``.bz2``, ``.zst``, ...) are decompressed on the fly. pyarrow's errors
carry no line numbers, so after a failure the file is scanned once more in Python to find the first
bad line. Every problem raises one :class:`GraphInputError` that names the file, the line (or row)
and what to do about it.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from epochal.connectors.filesystems import resolve
from epochal.graph.model import Graph, GraphInputError

_INT64 = np.iinfo(np.int64)
#: what pyarrow accepts as an int64 and as a float64 (to find the line it refused)
_INT_FIELD = re.compile(rb"\s*-?[0-9]+\s*")
_FLOAT_FIELD = re.compile(rb"\s*[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)\s*",
                          re.IGNORECASE)
#: the longest excerpt of a bad line a message quotes
_EXCERPT = 60


@dataclass(frozen=True)
class _TextFile:
    """A text file being loaded: the name messages use, where it is, and how its lines look."""

    location: str
    fs: pafs.FileSystem
    path: str
    #: SNAP style: ``#`` starts a comment line, fields may be separated by tabs
    snap: bool = False
    delimiter: str = " "

    @property
    def separator(self) -> str:
        return "single spaces" if self.delimiter == " " else "tabs"

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """``(line number, text without the line end)`` of every line that holds data."""
        with self.fs.open_input_stream(self.path) as raw:
            for number, line in enumerate(io.BufferedReader(raw), start=1):
                text = line.rstrip(b"\r\n")
                if text and not (self.snap and text.startswith(b"#")):
                    yield number, text

    def line_numbers(self, rows: Sequence[int]) -> dict[int, int]:
        """The line number of each data row (0-based, in file order) in ``rows``."""
        wanted, found = set(rows), {}
        for row, (number, _) in enumerate(self.lines()):
            if row in wanted:
                found[row] = number
                if len(found) == len(wanted):
                    break
        return found

    def at(self, number: int) -> str:
        return f"{self.location}, line {number}"


def _open_text(location: str, what: str, *, snap: bool = False) -> _TextFile:
    """The text file at ``location`` (``what``: "vertex file", ...), which must exist."""
    fs, path = resolve(location)
    kind = fs.get_file_info(path).type
    if kind == pafs.FileType.NotFound:
        raise GraphInputError(f"{location}: the {what} does not exist; check the path")
    if kind == pafs.FileType.Directory:
        raise GraphInputError(f"{location}: the {what} is a directory; give the path of the file itself")
    return _TextFile(location, fs, path, snap)


def _quote(text: bytes) -> str:
    shown = text.decode("utf-8", "replace")
    return repr(shown if len(shown) <= _EXCERPT else shown[:_EXCERPT] + "...")


def _check_line(src: _TextFile, number: int, text: bytes, width: int, kinds: dict[int, str],
                meaning: str) -> None:
    """Raise the error for line ``number`` if pyarrow cannot read it as ``width`` fields of ``kinds``."""
    fields = text.split(src.delimiter.encode())
    if b"" in fields:
        raise GraphInputError(f"{src.at(number)}: {_quote(text)} has an empty field (a doubled, leading or trailing "
                              f"separator); separate the fields by {src.separator}")
    if 2 in kinds and len(fields) == 2:
        raise GraphInputError(f"{src.at(number)}: {_quote(text)} has no weight; a weighted edge file needs "
                              f"'{meaning}' on every line: add the weights or load the graph unweighted")
    if len(fields) != width:
        layout = meaning if width == max(kinds) + 1 else f"{meaning} and {width - max(kinds) - 1} more"
        raise GraphInputError(f"{src.at(number)}: expected {width} fields separated by {src.separator}, found "
                              f"{len(fields)}: {_quote(text)}; every line needs the same fields ({layout})")
    for column, kind in kinds.items():
        field = fields[column]
        if kind == "id" and not (_INT_FIELD.fullmatch(field) and _INT64.min <= int(field) <= _INT64.max):
            raise GraphInputError(f"{src.at(number)}: {_quote(field)} is not a vertex id (ids are integers from "
                                  f"-2^63 to 2^63-1) in {_quote(text)}; fix or remove the line")
        if kind == "weight" and not _FLOAT_FIELD.fullmatch(field):
            raise GraphInputError(f"{src.at(number)}: weight {_quote(field)} is not a number in {_quote(text)}; "
                                  "fix or remove the line")


def _read_columns(src: _TextFile, kinds: dict[int, str], meaning: str) -> list[np.ndarray] | None:
    """The columns ``kinds`` (index -> "id" or "weight") of every data line, or None for an empty file.

    The first data line fixes the number of fields; it must hold every column in ``kinds``.
    """
    skipped, first = 0, None
    for number, text in src.lines():
        first, skipped = (number, text), number - 1
        break
    if first is None:
        return None
    if src.snap and b"\t" in first[1]:
        src = _TextFile(src.location, src.fs, src.path, src.snap, "\t")
    width = len(first[1].split(src.delimiter.encode()))
    _check_line(src, *first, max(width, max(kinds) + 1), kinds, meaning)
    names = [f"f{i}" for i in range(width)]
    types = {names[i]: pa.int64() if kind == "id" else pa.float64() for i, kind in kinds.items()}

    def parse(stream: Any, skip: int) -> pa.Table:
        return pacsv.read_csv(
            stream, read_options=pacsv.ReadOptions(column_names=names, skip_rows=skip),
            parse_options=pacsv.ParseOptions(delimiter=src.delimiter, quote_char=False),
            convert_options=pacsv.ConvertOptions(column_types=types, include_columns=list(types), null_values=[],
                                                 quoted_strings_can_be_null=False))

    try:
        with src.fs.open_input_stream(src.path) as stream:
            table = parse(stream, skipped)
    except (pa.ArrowInvalid, OSError) as error:
        if not isinstance(error, pa.ArrowInvalid):
            raise GraphInputError(f"{src.location}: cannot be read ({error}); check the file") from error
        for number, text in src.lines():
            _check_line(src, number, text, width, kinds, meaning)
        try:  # every data line looks good: comment lines among them (SNAP) stopped pyarrow
            table = parse(pa.BufferReader(b"".join(text + b"\n" for _, text in src.lines())), 0)
        except pa.ArrowInvalid:
            raise GraphInputError(f"{src.location}: cannot be read ({error}); make every line '{meaning}' "
                                  f"with fields separated by {src.separator}") from error
    return [table.column(names[i]).to_numpy() for i in kinds]


# -- where a bad vertex or edge is, for the messages ----------------------------------------------------------


class _Rows:
    """Names the vertex and edge rows of tables: ``"<table>, row <i>"`` (0-based)."""

    def __init__(self, vertices: str, edges: str) -> None:
        self.names = {"vertex": vertices, "edge": edges}

    def positions(self, kind: str, rows: Sequence[int]) -> list[str]:
        """Where each of ``rows`` (of the ``kind`` table, "vertex" or "edge") is within its table."""
        return [f"row {r}" for r in rows]

    def where(self, kind: str, row: int) -> str:
        return f"{self.names[kind]}, {self.positions(kind, [row])[0]}"


class _Lines(_Rows):
    """Names the vertex and edge rows of text files by line number (found by scanning the file)."""

    def __init__(self, vertices: _TextFile | None, edges: _TextFile) -> None:
        super().__init__(vertices.location if vertices else "", edges.location)
        self.files = {"vertex": vertices, "edge": edges}

    def positions(self, kind: str, rows: Sequence[int]) -> list[str]:
        src = self.files[kind]
        assert src is not None
        numbers = src.line_numbers(rows)
        return [f"line {numbers[r]}" for r in rows]


# -- building the graph -------------------------------------------------------------------------------------


def _sorted_unique_ids(ids: np.ndarray, rows: _Rows) -> np.ndarray:
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


def _explain(error: GraphInputError, graph: Graph, rows: _Rows, vertices_name: str) -> GraphInputError:
    """``error`` from :meth:`Graph.validate`, located at the edge row it is about."""
    for end in (graph.src, graph.dst):
        unknown = ~np.isin(end, graph.vertices)
        if unknown.any():
            i = int(np.argmax(unknown))
            return GraphInputError(f"{rows.where('edge', i)}: edge {int(graph.src[i])} -> {int(graph.dst[i])} "
                                   f"names vertex {int(end[i])}, which is not in {vertices_name}; "
                                   "add the vertex or remove the edge")
    if graph.weights is not None and not np.isfinite(graph.weights).all():
        i = int(np.argmin(np.isfinite(graph.weights)))
        return GraphInputError(f"{rows.where('edge', i)}: edge {int(graph.src[i])} -> {int(graph.dst[i])} "
                               f"has weight {float(graph.weights[i])}; weights must be finite numbers")
    return GraphInputError(f"{rows.names['edge']}: {error}")


def _assemble(ids: np.ndarray | None, src: np.ndarray, dst: np.ndarray, *, directed: bool,
              weights: np.ndarray | None, properties: dict[str, np.ndarray], rows: _Rows,
              vertices_name: str) -> Graph:
    """A validated graph; ``ids`` (any order, with ``properties`` aligned to it) or None: the endpoints."""
    src = np.ascontiguousarray(src, dtype=np.int64)
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    if ids is None:
        vertices = np.union1d(src, dst)
    else:
        order = _sorted_unique_ids(np.asarray(ids, dtype=np.int64), rows)
        vertices = np.asarray(ids, dtype=np.int64)[order]
        properties = {name: np.asarray(values)[order] for name, values in properties.items()}
    graph = Graph(vertices, src, dst, directed,
                  None if weights is None else np.ascontiguousarray(weights, dtype=np.float64), properties)
    try:
        graph.validate()
    except GraphInputError as error:
        raise _explain(error, graph, rows, vertices_name) from None
    return graph


# -- text formats ---------------------------------------------------------------------------------------------


def load_graph(vertices_path: str, edges_path: str, *, directed: bool = True, weighted: bool = False) -> Graph:
    """The graph in LDBC Graphalytics files ``vertices_path`` (``G.v``) and ``edges_path`` (``G.e``).

    Vertex ids are any 64-bit integers, in any order; ``weighted`` reads each edge's third field
    as its float64 weight (without it, a third field is ignored). Raises :class:`GraphInputError`
    naming the file and line of the first bad input.
    """
    vertex_file = _open_text(vertices_path, "vertex file")
    edge_file = _open_text(edges_path, "edge file")
    ids = _read_columns(vertex_file, {0: "id"}, "vertex-id")
    src, dst, weights = _edge_columns(edge_file, weighted)
    return _assemble(np.empty(0, np.int64) if ids is None else ids[0], src, dst, directed=directed,
                     weights=weights, properties={},
                     rows=_Lines(vertex_file, edge_file), vertices_name=f"the vertex file {vertices_path}")


def load_edge_list(path: str, *, directed: bool = True, weighted: bool = False) -> Graph:
    """The graph of the edge list at ``path`` (SNAP style): vertices are the edges' endpoints.

    Lines are ``src dst`` or ``src dst weight``, separated by a space or a tab (as the first data
    line is); lines starting with ``#`` and empty lines are skipped.
    """
    edge_file = _open_text(path, "edge list", snap=True)
    src, dst, weights = _edge_columns(edge_file, weighted)
    return _assemble(None, src, dst, directed=directed, weights=weights, properties={},
                     rows=_Lines(None, edge_file), vertices_name="the edge list")


def _edge_columns(edge_file: _TextFile, weighted: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Source, destination and weight (None when not ``weighted``) columns of an edge file."""
    kinds = {0: "id", 1: "id", 2: "weight"} if weighted else {0: "id", 1: "id"}
    columns = _read_columns(edge_file, kinds, "src dst weight" if weighted else "src dst")
    if columns is None:
        columns = [np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)]
    return columns[0], columns[1], columns[2] if weighted else None


# -- tables: Parquet, CSV with a header, Spark DataFrames -----------------------------------------------------


def _int_column(table: pa.Table, name: str, where: str, rows: _Rows, kind: str) -> np.ndarray:
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


def _no_nulls(column: pa.ChunkedArray, name: str, rows: _Rows, kind: str) -> None:
    if column.null_count:
        i = int(np.argmax(column.is_null().to_numpy(zero_copy_only=False)))
        raise GraphInputError(f"{rows.where(kind, i)}: {name!r} is null; every {kind} needs a {name!r}")


def _graph_from_tables(vertices: pa.Table | None, edges: pa.Table, *, directed: bool, weight_column: str | None,
                       property_columns: Sequence[str], rows: _Rows) -> Graph:
    """The graph of ``vertices(id, *property_columns)`` (None: the endpoints) and ``edges(src, dst[, weight])``."""
    vertex_where, edge_where = rows.names["vertex"], rows.names["edge"]
    ids, properties = None, {}
    if vertices is not None:
        ids = _int_column(vertices, "id", vertex_where, rows, "vertex")
        properties = {name: _column(vertices, name, vertex_where, "the property column").to_numpy()
                      for name in property_columns}
    elif property_columns:
        raise GraphInputError("vertex properties need a vertex table; give the vertices as well as the edges")
    src = _int_column(edges, "src", edge_where, rows, "edge")
    dst = _int_column(edges, "dst", edge_where, rows, "edge")
    weights = None
    if weight_column is not None:
        column = _column(edges, weight_column, edge_where, "the weight column")
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise GraphInputError(f"{edge_where}: weight column {weight_column!r} has type {column.type}; "
                                  "weights must be numbers")
        _no_nulls(column, weight_column, rows, "edge")
        weights = column.cast(pa.float64()).to_numpy()
    return _assemble(ids, src, dst, directed=directed, weights=weights, properties=properties, rows=rows,
                     vertices_name=f"the vertices ({vertex_where})")


def _wanted(weight_column: str | None, property_columns: Sequence[str]) -> tuple[list[str], list[str]]:
    """The columns to read of the vertex and the edge table."""
    return ["id", *property_columns], ["src", "dst", *([weight_column] if weight_column else [])]


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


def _load_tables(vertices_path: str | None, edges_path: str, open_dataset: Callable[..., pads.Dataset], *,
                 directed: bool, weight_column: str | None, property_columns: Sequence[str]) -> Graph:
    vertex_columns, edge_columns = _wanted(weight_column, property_columns)
    vertices = None if vertices_path is None else _read_dataset(vertices_path, vertex_columns, "vertex table",
                                                                open_dataset)
    edges = _read_dataset(edges_path, edge_columns, "edge table", open_dataset)
    return _graph_from_tables(vertices, edges, directed=directed, weight_column=weight_column,
                              property_columns=property_columns, rows=_Rows(vertices_path or "", edges_path))


def load_graph_parquet(vertices_path: str | None, edges_path: str, *, directed: bool = True,
                       weight_column: str | None = None, property_columns: Sequence[str] = ()) -> Graph:
    """The graph of Parquet files or directories ``vertices(id, ...)`` and ``edges(src, dst, ...)``.

    ``vertices_path`` None: the vertices are the edges' endpoints. ``weight_column`` names the
    edges' weight column; ``property_columns`` the vertex columns kept as ``Graph.properties``.
    """
    return _load_tables(vertices_path, edges_path, lambda path, fs: pads.dataset(path, filesystem=fs,
                                                                                 format="parquet"),
                        directed=directed, weight_column=weight_column, property_columns=property_columns)


def load_graph_csv(vertices_path: str | None, edges_path: str, *, directed: bool = True,
                   weight_column: str | None = None, property_columns: Sequence[str] = (),
                   delimiter: str = ",") -> Graph:
    """As :func:`load_graph_parquet`, for CSV files (or directories of them) with a header line."""
    csv_format = pads.CsvFileFormat(parse_options=pacsv.ParseOptions(delimiter=delimiter))
    return _load_tables(vertices_path, edges_path, lambda path, fs: pads.dataset(path, filesystem=fs,
                                                                                 format=csv_format),
                        directed=directed, weight_column=weight_column, property_columns=property_columns)


def _collect(df: Any, columns: list[str]) -> pa.Table:
    """Columns ``columns`` of Spark DataFrame ``df`` on the driver, as Arrow (none if one is missing)."""
    if not set(columns) <= set(df.columns):  # no rows: the error lists the columns there are
        return pa.table({name: pa.array([]) for name in df.columns})
    selected = df.select(*columns)
    if hasattr(selected, "toArrow"):
        return selected.toArrow()
    return pa.Table.from_pandas(selected.toPandas(), preserve_index=False)


def graph_from_dataframes(vertices_df: Any, edges_df: Any, *, directed: bool = True, weight_column: str | None = None,
                          property_columns: Sequence[str] = ()) -> Graph:
    """The graph of Spark DataFrames ``vertices(id, ...)`` (None: the endpoints) and ``edges(src, dst, ...)``.

    Both are collected to the driver. ``weight_column`` names the edges' weight column;
    ``property_columns`` the vertex columns kept as ``Graph.properties`` (numpy arrays in vertex order).
    """
    vertex_columns, edge_columns = _wanted(weight_column, property_columns)
    vertices = None if vertices_df is None else _collect(vertices_df, vertex_columns)
    edges = _collect(edges_df, edge_columns)
    return _graph_from_tables(vertices, edges, directed=directed, weight_column=weight_column,
                              property_columns=property_columns, rows=_Rows("the vertex DataFrame",
                                                                            "the edge DataFrame"))
