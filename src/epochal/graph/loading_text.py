"""Loading a graph from text files: LDBC Graphalytics vertex and edge files, and SNAP edge lists.

This module owns the text formats of :mod:`epochal.graph.loading`:

- :func:`load_graph` (and :func:`load_graph_located`, which also says where each edge is): the LDBC
  Graphalytics format (EVLP): a vertex file with one id per line and an edge file with ``src dst``
  or ``src dst weight`` per line, fields separated by single spaces; further columns (EVLP
  properties) are allowed and ignored.
- :func:`load_edge_list`: an edge list alone (SNAP style): vertices are the edges' endpoints,
  ``#`` lines are comments, fields are separated by a space or a tab.

Files are parsed by pyarrow's CSV reader (multi-threaded, so tens of millions of edges load in
seconds), from local paths or any URI :func:`epochal.filesystems.resolve` knows;
compressed files (``.gz``, ``.bz2``, ``.zst``, ...) are decompressed on the fly. pyarrow's errors
carry no line numbers, so after a failure the file is scanned once more in Python to find the first
bad line. Every problem raises one :class:`GraphInputError` naming the file and line.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs

from epochal.filesystems import resolve
from epochal.graph.loading_assembly import Duplicates, EdgeLocator, Rows, assemble, check_duplicates
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


def line_problem(text: bytes, delimiter: str, width: int, kinds: dict[int, str], meaning: str) -> str | None:
    """What is wrong with a data line that pyarrow cannot read as ``width`` fields of ``kinds``
    (the message after ``"<file>, line <n>: "``), or None if nothing is."""
    separator = "single spaces" if delimiter == " " else "tabs"
    fields = text.split(delimiter.encode())
    if b"" in fields:
        return (f"{_quote(text)} has an empty field (a doubled, leading or trailing separator); separate the "
                f"fields by {separator}")
    if 2 in kinds and len(fields) == 2:
        return (f"{_quote(text)} has no weight; a weighted edge file needs '{meaning}' on every line: add the "
                "weights or load the graph unweighted")
    if len(fields) != width:
        layout = meaning if width == max(kinds) + 1 else f"{meaning} and {width - max(kinds) - 1} more"
        return (f"expected {width} fields separated by {separator}, found {len(fields)}: {_quote(text)}; every "
                f"line needs the same fields ({layout})")
    for column, kind in kinds.items():
        field = fields[column]
        if kind == "id" and not (_INT_FIELD.fullmatch(field) and _INT64.min <= int(field) <= _INT64.max):
            return (f"{_quote(field)} is not a vertex id (ids are integers from -2^63 to 2^63-1) in "
                    f"{_quote(text)}; fix or remove the line")
        if kind == "weight" and not _FLOAT_FIELD.fullmatch(field):
            return f"weight {_quote(field)} is not a number in {_quote(text)}; fix or remove the line"
    return None


def _check_line(src: _TextFile, number: int, text: bytes, width: int, kinds: dict[int, str],
                meaning: str) -> None:
    """Raise the error for line ``number`` if pyarrow cannot read it as ``width`` fields of ``kinds``."""
    problem = line_problem(text, src.delimiter, width, kinds, meaning)
    if problem is not None:
        raise GraphInputError(f"{src.at(number)}: {problem}")


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


class _Lines(Rows):
    """Names the vertex and edge rows of text files by line number (found by scanning the file)."""

    def __init__(self, vertices: _TextFile | None, edges: _TextFile) -> None:
        super().__init__(vertices.location if vertices else "", edges.location)
        self.files = {"vertex": vertices, "edge": edges}

    def positions(self, kind: str, rows: Sequence[int]) -> list[str]:
        src = self.files[kind]
        assert src is not None
        numbers = src.line_numbers(rows)
        return [f"line {numbers[r]}" for r in rows]


def load_graph(vertices_path: str, edges_path: str, *, directed: bool = True, weighted: bool = False,
               duplicates: Duplicates = "error") -> Graph:
    """The graph in LDBC Graphalytics files ``vertices_path`` (``G.v``) and ``edges_path`` (``G.e``).

    Vertex ids are any 64-bit integers, in any order; ``weighted`` reads each edge's third field
    as its float64 weight (without it, a third field is ignored). Raises :class:`GraphInputError`
    naming the file and line of the first bad input. Graphalytics lists each edge once (an
    undirected graph's edge in one order only), so a repeated edge raises, naming both lines;
    ``duplicates="drop"`` keeps the first of each instead and logs a warning.
    """
    return load_graph_located(vertices_path, edges_path, directed=directed, weighted=weighted,
                              duplicates=duplicates)[0]


def load_graph_located(vertices_path: str, edges_path: str, *, directed: bool = True, weighted: bool = False,
                       duplicates: Duplicates = "error") -> tuple[Graph, EdgeLocator]:
    """As :func:`load_graph`, with where each edge is: ``locator.where(i)`` -> ``"G.e, line 7"``."""
    check_duplicates(duplicates)
    vertex_file = _open_text(vertices_path, "vertex file")
    edge_file = _open_text(edges_path, "edge file")
    ids = _read_columns(vertex_file, {0: "id"}, "vertex-id")
    src, dst, weights = _edge_columns(edge_file, weighted)
    return assemble(np.empty(0, np.int64) if ids is None else ids[0], src, dst, directed=directed,
                    weights=weights, properties={}, rows=_Lines(vertex_file, edge_file),
                    vertices_name=f"the vertex file {vertices_path}", duplicates=duplicates)


def load_edge_list(path: str, *, directed: bool = True, weighted: bool = False,
                   duplicates: Duplicates = "drop") -> Graph:
    """The graph of the edge list at ``path`` (SNAP style): vertices are the edges' endpoints.

    Lines are ``src dst`` or ``src dst weight``, separated by a space or a tab (as the first data
    line is); lines starting with ``#`` and empty lines are skipped.

    Repeated edges are dropped by default (the first of each is kept, with a logged warning): SNAP
    lists many undirected graphs with each edge in both orders (``u v`` and ``v u``), which loaded
    with ``directed=False`` are the same edge; ``duplicates="error"`` refuses them instead, naming
    both lines.
    """
    check_duplicates(duplicates)
    edge_file = _open_text(path, "edge list", snap=True)
    src, dst, weights = _edge_columns(edge_file, weighted)
    return assemble(None, src, dst, directed=directed, weights=weights, properties={},
                    rows=_Lines(None, edge_file), vertices_name="the edge list", duplicates=duplicates)[0]


def _edge_columns(edge_file: _TextFile, weighted: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Source, destination and weight (None when not ``weighted``) columns of an edge file."""
    kinds = {0: "id", 1: "id", 2: "weight"} if weighted else {0: "id", 1: "id"}
    columns = _read_columns(edge_file, kinds, "src dst weight" if weighted else "src dst")
    if columns is None:
        columns = [np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)]
    return columns[0], columns[1], columns[2] if weighted else None
