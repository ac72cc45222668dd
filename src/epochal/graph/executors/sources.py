"""A graph's input as Spark tasks read it: source descriptions, splits, and reading one split.

:class:`GraphSource` names the input of a graph (nothing is read when it is made): Graphalytics
files (:meth:`GraphSource.graphalytics`), a SNAP edge list (:meth:`GraphSource.edge_list`),
Parquet or CSV tables (:meth:`GraphSource.parquet`, :meth:`GraphSource.csv`) or Spark DataFrames
(:meth:`GraphSource.dataframes`), with the same options and the same errors as the driver's
loaders in :mod:`epochal.graph.loading`.

The driver cuts a file input into *splits* (:func:`text_splits`, :func:`table_splits`): byte
ranges of a text file (a line belongs to the split its first byte is in; a compressed file is one
split), one Parquet row group, one CSV file. A Spark task reads one split (:func:`read_split`) into
columns, each row with its *position* ``split << 40 | row`` (the row among the split's data rows):
positions order rows as the file does, so the first of two repeated edges and the order of a
vertex's neighbours are the driver loaders', and a position names the file and line (text) or
table and row of a bad row (:func:`text_lines_of`). A split that cannot be read is reported, not
raised (:class:`SplitProblem`), so that every task ends and the driver names the first problem.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from epochal.filesystems import resolve
from epochal.graph.executors.splits import Split, SplitColumns, SplitProblem, positions
from epochal.graph.loading_assembly import Duplicates, check_duplicates
from epochal.graph.loading_text import line_problem
from epochal.graph.model import GraphInputError

#: the largest and the smallest byte range one task reads of a text file
SPLIT_BYTES = 64 << 20
MIN_SPLIT_BYTES = 1 << 20
_COMPRESSED = (".gz", ".bz2", ".zst", ".lz4", ".br", ".zstd", ".snappy")
SOURCE_KINDS = ("graphalytics", "edge_list", "parquet", "csv", "dataframes")


@dataclass(frozen=True)
class GraphSource:
    """Where a graph's vertices and edges are, and how to read them (see the module docstring).

    ``vertices`` None: the vertices are the edges' endpoints (always so for an edge list). The
    options mean what they mean for :func:`~epochal.graph.loading.load_graph` (text: ``weighted``),
    :func:`~epochal.graph.loading.load_graph_parquet` (tables: ``weight_column``,
    ``property_columns``) and their ``duplicates``."""

    kind: str
    edges: Any
    vertices: Any = None
    directed: bool = True
    weighted: bool = False
    weight_column: str | None = None
    property_columns: tuple[str, ...] = ()
    duplicates: Duplicates = "error"
    delimiter: str = ","

    def __post_init__(self) -> None:
        if self.kind not in SOURCE_KINDS:
            raise GraphInputError(f"unknown graph source kind {self.kind!r}; one of {', '.join(SOURCE_KINDS)}")
        check_duplicates(self.duplicates)
        if self.property_columns and self.vertices is None:
            raise GraphInputError("vertex properties need a vertex table; give the vertices as well as the edges")

    @classmethod
    def graphalytics(cls, vertices: str, edges: str, *, directed: bool = True, weighted: bool = False,
                     duplicates: Duplicates = "error") -> GraphSource:
        """LDBC Graphalytics files ``G.v`` and ``G.e`` (as :func:`~epochal.graph.loading.load_graph`)."""
        return cls("graphalytics", edges, vertices, directed, weighted, duplicates=duplicates)

    @classmethod
    def edge_list(cls, path: str, *, directed: bool = True, weighted: bool = False,
                  duplicates: Duplicates = "drop") -> GraphSource:
        """A SNAP-style edge list (as :func:`~epochal.graph.loading.load_edge_list`)."""
        return cls("edge_list", path, None, directed, weighted, duplicates=duplicates)

    @classmethod
    def parquet(cls, vertices: str | None, edges: str, *, directed: bool = True, weight_column: str | None = None,
                property_columns: Sequence[str] = (), duplicates: Duplicates = "error") -> GraphSource:
        """Parquet files or directories (as :func:`~epochal.graph.loading.load_graph_parquet`)."""
        return cls("parquet", edges, vertices, directed, False, weight_column, tuple(property_columns), duplicates)

    @classmethod
    def csv(cls, vertices: str | None, edges: str, *, directed: bool = True, weight_column: str | None = None,
            property_columns: Sequence[str] = (), delimiter: str = ",", duplicates: Duplicates = "error"
            ) -> GraphSource:
        """CSV files or directories with a header (as :func:`~epochal.graph.loading.load_graph_csv`)."""
        return cls("csv", edges, vertices, directed, False, weight_column, tuple(property_columns), duplicates,
                   delimiter)

    @classmethod
    def dataframes(cls, vertices: Any, edges: Any, *, directed: bool = True, weight_column: str | None = None,
                   property_columns: Sequence[str] = (), duplicates: Duplicates = "error") -> GraphSource:
        """Spark DataFrames ``vertices(id, ...)`` (or None) and ``edges(src, dst, ...)``; rows are
        counted in the order ``collect`` would return them (partition by partition)."""
        return cls("dataframes", edges, vertices, directed, False, weight_column, tuple(property_columns),
                   duplicates)

    @property
    def text(self) -> bool:
        return self.kind in ("graphalytics", "edge_list")

    @property
    def weights(self) -> bool:
        """Whether edges carry weights."""
        return self.weighted if self.text else self.weight_column is not None


def first_data_line(location: str, what: str, snap: bool) -> tuple[int, bytes] | None:
    """``(line number, text)`` of the first data line of text file ``location`` (None: no data)."""
    from epochal.graph.loading_text import _open_text

    source = _open_text(location, what, snap=snap)
    for number, text in source.lines():
        return number, text
    return None


def text_splits(location: str, what: str, first_index: int, *, snap: bool, weighted: bool, parallelism: int
                ) -> list[Split]:
    """The splits of text file ``location`` (``what``: "vertex file", "edge file" or "edge list"),
    numbered from ``first_index``. Checks the first data line here (it fixes the delimiter and
    the number of fields), as the driver's loader does; raises :class:`GraphInputError`."""
    from epochal.graph.loading_text import _check_line, _open_text, _TextFile

    vertex = what == "vertex file"
    kinds = {0: "id"} if vertex else {0: "id", 1: "id", 2: "weight"} if weighted else {0: "id", 1: "id"}
    meaning = "vertex-id" if vertex else "src dst weight" if weighted else "src dst"
    source = _open_text(location, what, snap=snap)
    first = first_data_line(location, what, snap)
    if first is None:
        return []
    delimiter = "\t" if snap and b"\t" in first[1] else " "
    width = len(first[1].split(delimiter.encode()))
    checked = _TextFile(source.location, source.fs, source.path, snap, delimiter)
    _check_line(checked, first[0], first[1], max(width, max(kinds) + 1), kinds, meaning)
    size = source.fs.get_file_info(source.path).size or 0
    whole = Split(first_index, "vertex" if vertex else "edge", location, location, 0, None, snap=snap,
                  delimiter=delimiter, width=width, kinds=tuple(kinds.items()), meaning=meaning, first_line=first[0])
    if location.endswith(_COMPRESSED) or size == 0:
        return [whole]
    step = max(MIN_SPLIT_BYTES, min(SPLIT_BYTES, -(-size // max(parallelism, 1))))
    return [replace(whole, index=first_index + i, start=start, end=min(start + step, size))
            for i, start in enumerate(range(0, size, step))]


def split_bytes_of(split: Split) -> bytes:
    """The bytes of the lines ``split`` owns (every line whose first byte is in its range)."""
    fs, path = resolve(split.file)
    if split.end is None:
        with fs.open_input_stream(path) as stream:
            return bytes(stream.read())
    with fs.open_input_file(path) as handle:
        low = max(split.start - 1, 0)
        handle.seek(low)
        data = bytes(handle.read(split.end - low))
        if split.start > 0:
            cut = data.find(b"\n")  # data[0] is the byte before the range
            if cut < 0:
                return b""  # the range lies inside a line an earlier split owns
            data = data[cut + 1:]
        if data and not data.endswith(b"\n"):
            tail = [data]
            while True:
                more = bytes(handle.read(1 << 16))
                if not more:
                    break
                end = more.find(b"\n")
                if end >= 0:
                    tail.append(more[:end + 1])
                    break
                tail.append(more)
            data = b"".join(tail)
        return data


def _data_line(text: bytes, snap: bool) -> bool:
    return bool(text) and not (snap and text.startswith(b"#"))


def _owned_lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _read_text(split: Split) -> SplitColumns:
    data = split_bytes_of(split)
    kinds = dict(split.kinds)
    lines = _owned_lines(data)
    names = [f"f{i}" for i in range(split.width)]
    types = {names[i]: pa.int64() if kind == "id" else pa.float64() for i, kind in kinds.items()}

    def parse(buffer: bytes) -> pa.Table:
        return pacsv.read_csv(
            pa.BufferReader(buffer), read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(delimiter=split.delimiter, quote_char=False),
            convert_options=pacsv.ConvertOptions(column_types=types, include_columns=list(types), null_values=[],
                                                 quoted_strings_can_be_null=False))

    body = data
    if split.snap:  # leading comment lines (a SNAP header) would stop pyarrow
        while body.startswith(b"#"):
            cut = body.find(b"\n")
            body = b"" if cut < 0 else body[cut + 1:]
    table = None
    if body.strip():
        try:
            table = parse(body)
        except pa.ArrowInvalid:
            table = None
        if table is None:
            kept = []
            for number, line in enumerate(data.split(b"\n")[:lines]):
                text = line.rstrip(b"\r")
                if not _data_line(text, split.snap):
                    continue
                problem = line_problem(text, split.delimiter, split.width, kinds, split.meaning)
                if problem is not None:
                    return SplitColumns(np.zeros(0, np.int64), lines=lines, problem=SplitProblem(number, problem))
                kept.append(text)
            try:
                table = parse(b"".join(t + b"\n" for t in kept))
            except pa.ArrowInvalid as error:
                return SplitColumns(np.zeros(0, np.int64), lines=lines, problem=SplitProblem(
                    -1, f"cannot be read ({error}); make every line '{split.meaning}' with fields separated by "
                        f"{'single spaces' if split.delimiter == ' ' else 'tabs'}"))
    rows = 0 if table is None else table.num_rows
    out = SplitColumns(positions(split.index, rows), lines=lines)
    labels = ["id"] if split.what == "vertex" else ["src", "dst", "weight"]
    for (i, _), label in zip(kinds.items(), labels, strict=False):
        out.columns[label] = (np.zeros(0, np.float64 if label == "weight" else np.int64) if table is None
                              else table.column(names[i]).to_numpy())
    return out


def _owned(split: Split) -> Iterator[bytes]:
    """The lines ``split`` owns, one at a time (without holding the split in memory)."""
    fs, path = resolve(split.file)
    if split.end is None:
        with fs.open_input_stream(path) as stream:
            yield from io.BufferedReader(stream)
        return
    with fs.open_input_file(path) as handle:
        handle.seek(max(split.start - 1, 0))
        lines = io.BufferedReader(handle)
        offset = max(split.start - 1, 0)
        if split.start > 0:
            skipped = lines.readline()  # the rest of the line an earlier split owns (or a lone newline)
            offset += len(skipped)
        for line in lines:
            if offset >= split.end:
                return
            offset += len(line)
            yield line


def text_lines_of(split: Split, rows: Sequence[int]) -> list[int]:
    """The 0-based line (among the lines ``split`` owns) of each of its data ``rows`` (the split
    is read again, line by line: an error path)."""
    wanted, found = set(rows), {}
    row = 0
    for number, line in enumerate(_owned(split)):
        if _data_line(line.rstrip(b"\r\n"), split.snap):
            if row in wanted:
                found[row] = number
                if len(found) == len(wanted):
                    break
            row += 1
    return [found.get(r, -1) for r in rows]


def table_splits(location: str, what: str, first_index: int, table_format: str, columns: Sequence[str],
                 delimiter: str = ",") -> tuple[list[Split], pa.Schema]:
    """The splits of the Parquet or CSV dataset (file or directory) at ``location`` and its schema;
    raises :class:`GraphInputError` when it is missing or unreadable."""
    fs, path = resolve(location)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        raise GraphInputError(f"{location}: the {what} does not exist; check the path")
    try:
        dataset = pads.dataset(path, filesystem=fs, format=_format(table_format, delimiter))
        schema = dataset.schema
        files = list(dataset.files)
        splits: list[Split] = []
        for file in files:
            uri = file if not location.startswith(("s3://", "gs://", "hdfs://", "file://")) else \
                location.split("://", 1)[0] + "://" + file
            groups: list[int | None] = [None]
            if table_format == "parquet":
                groups = list(range(max(pq.ParquetFile(file, filesystem=fs).metadata.num_row_groups, 1)))
            for group in groups:
                splits.append(Split(first_index + len(splits), "vertex" if "vertex" in what else "edge", location,
                                    uri, row_group=group, table_format=table_format, columns=tuple(columns),
                                    delimiter=delimiter))
    except (pa.ArrowInvalid, OSError) as error:
        raise GraphInputError(f"{location}: the {what} cannot be read ({error}); check that it is the right file"
                              ) from error
    return splits, schema


def _format(table_format: str, delimiter: str) -> str | pads.FileFormat:
    if table_format == "parquet":
        return "parquet"
    return pads.CsvFileFormat(parse_options=pacsv.ParseOptions(delimiter=delimiter))


def _read_table(split: Split) -> pa.Table:
    fs, path = resolve(split.file)
    if split.table_format == "parquet":
        parquet = pq.ParquetFile(path, filesystem=fs)
        if parquet.metadata.num_row_groups == 0:
            return parquet.schema_arrow.empty_table().select(list(split.columns))
        return parquet.read_row_group(split.row_group or 0, columns=list(split.columns))
    dataset = pads.dataset(path, filesystem=fs, format=_format("csv", split.delimiter))
    return dataset.to_table(columns=list(split.columns))


def table_columns(table: pa.Table, split_index: int, what: str, weight_column: str | None,
                  property_columns: Sequence[str]) -> SplitColumns:
    """The columns of one table piece (a row group, a CSV file, a DataFrame partition), with
    null ids or weights and ids beyond int64 reported as a :class:`SplitProblem`."""
    out = SplitColumns(positions(split_index, table.num_rows), lines=table.num_rows)
    names = ["id"] if what == "vertex" else ["src", "dst"]
    for name in names:
        column = table.column(name)
        if column.null_count:
            row = int(np.argmax(column.is_null().to_numpy(zero_copy_only=False)))
            out.problem = SplitProblem(row, f"{name!r} is null; every {what} needs a {name!r}")
            return out
        try:
            out.columns[name] = column.cast(pa.int64()).to_numpy()
        except pa.ArrowInvalid as error:
            out.problem = SplitProblem(-1, f"column {name!r} holds an id beyond 64-bit signed integers ({error}); "
                                           "vertex ids must lie between -2^63 and 2^63-1")
            return out
    if what == "edge" and weight_column is not None:
        column = table.column(weight_column)
        if column.null_count:
            row = int(np.argmax(column.is_null().to_numpy(zero_copy_only=False)))
            out.problem = SplitProblem(row, f"{weight_column!r} is null; every edge needs a {weight_column!r}")
            return out
        out.columns["weight"] = column.cast(pa.float64()).to_numpy()
    if what == "vertex":
        for name in property_columns:
            out.columns[f"property:{name}"] = table.column(name).to_numpy()
    return out


def read_split(split: Split, weight_column: str | None = None, property_columns: Sequence[str] = ()) -> SplitColumns:
    """Read one split (in a Spark task); problems are reported in the result, not raised."""
    if split.table_format:
        try:
            table = _read_table(split)
        except (pa.ArrowInvalid, OSError) as error:
            return SplitColumns(np.zeros(0, np.int64), problem=SplitProblem(
                -1, f"cannot be read ({error}); check that it is the right file"))
        return table_columns(table, split.index, split.what, weight_column, property_columns)
    return _read_text(split)
