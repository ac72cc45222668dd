"""File sources (and, re-exported, sinks): text lines, CSV and Parquet, on any filesystem pyarrow knows.

A path is a plain local path, a ``file://`` URI, or any URI that
:meth:`pyarrow.fs.FileSystem.from_uri` understands (``s3://``, ``gs://``, ``hdfs://`` ...). A source
path names a file, a directory (its regular files, sorted, not recursive) or, for local paths
only, a glob pattern. Files whose name starts with ``.`` or ``_`` (``.crc``, ``_SUCCESS``) are
skipped unless named explicitly. Every file is one split, and every split records a position it
can seek back to, so file sources are replayable from a checkpoint.

The sinks (:class:`TextFileSink`, :class:`ParquetFileSink`) live in
:mod:`epochal.connectors.file_sinks` and are importable from here too.

Everything here is picklable: the objects hold only strings and numbers until ``open()`` (or a
sink writer, created on the worker) creates the filesystem and file handles, and pickling drops
those again.
"""

from __future__ import annotations

import codecs
import glob
import os
import re
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from epochal.connectors.base import Source, SourceSplit
from epochal.connectors.file_sinks import (  # re-exported: importable from here too
    PENDING_DIR,
    FileCommittable,
    ParquetFileSink,
    TextFileSink,
)
from epochal.connectors.filesystems import TEXT_CHUNK as _TEXT_CHUNK
from epochal.connectors.filesystems import is_hidden as _is_hidden
from epochal.connectors.filesystems import is_uri as _is_uri
from epochal.connectors.filesystems import join as _join
from epochal.connectors.filesystems import resolve as _resolve
from epochal.errors import PlanError, SourceError

_GLOB_CHARS = re.compile(r"[*?\[]")
_CSV_BLOCK_SIZE: int | None = None  # bytes per CSV record batch; None: pyarrow's default (1 MiB)

__all__ = ["CsvFileSource", "FileCommittable", "PENDING_DIR", "ParquetFileSink", "ParquetFileSource",
           "TextFileSink", "TextFileSource"]


class _FileRef:
    """Where one file lives, as picklable strings.

    ``root`` is the URI the user gave (to recreate the filesystem on a worker) or ``None`` for a
    local path; ``path`` is the filesystem-internal path of the file; ``display`` is how messages
    and split ids name it (the URI or local path of the file itself).
    """

    __slots__ = ("display", "path", "root")

    def __init__(self, root: str | None, path: str, display: str) -> None:
        self.root = root
        self.path = path
        self.display = display

    def __getstate__(self) -> tuple[str | None, str, str]:
        return self.root, self.path, self.display

    def __setstate__(self, state: tuple[str | None, str, str]) -> None:
        self.root, self.path, self.display = state

    def filesystem(self) -> pafs.FileSystem:
        if self.root is None:
            return pafs.LocalFileSystem()
        return pafs.FileSystem.from_uri(self.root)[0]

    def __str__(self) -> str:
        return self.display


def _list_files(location: str, kind: str) -> list[_FileRef]:
    """The files ``location`` names (file, directory or local glob), sorted; raise if none."""
    try:
        fs, path = _resolve(location)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SourceError(f"{kind} source: cannot resolve path {location!r}: {exc}") from exc
    root = location if _is_uri(location) else None
    try:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            return [_FileRef(root, path, location if root else path)]
        if info.type == pafs.FileType.Directory:
            entries = fs.get_file_info(pafs.FileSelector(path, recursive=False))
            files = sorted(e.path for e in entries if e.type == pafs.FileType.File and not _is_hidden(e.path))
            if not files:
                raise SourceError(f"{kind} source: directory {location!r} contains no (non-hidden) files")
            return [_FileRef(root, f, _join(location, f[len(path):].lstrip("/")) if root else f)
                    for f in files]
        if isinstance(fs, pafs.LocalFileSystem) and _GLOB_CHARS.search(path):
            files = sorted(p for p in glob.glob(path) if os.path.isfile(p) and not _is_hidden(p))
            if not files:
                raise SourceError(f"{kind} source: pattern {location!r} matches no files")
            # Each match is a local file: refer to it by its plain path.
            return [_FileRef(None, os.path.abspath(f), os.path.abspath(f)) for f in files]
    except SourceError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"{kind} source: cannot list {location!r}: {exc}") from exc
    raise SourceError(f"{kind} source: path {location!r} does not exist")


class _LazySplit(SourceSplit):
    """Base of the file splits: drops the attributes named in ``_TRANSIENT`` when pickled."""

    _TRANSIENT: tuple[str, ...] = ()
    file: _FileRef

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in self._TRANSIENT:
            state[name] = None
        return state

    def _fail(self, what: str, exc: BaseException) -> SourceError:
        return SourceError(f"cannot read {self.file}: {what}: {exc}")


# --------------------------------------------------------------------------------------------
# Text lines


def _check_line_encoding(encoding: str) -> None:
    """Reject encodings in which a newline is not the single byte ``\\n`` (UTF-16, UTF-32).

    Lines are found by searching bytes for ``\\n``, which keeps positions exact byte offsets;
    that is only correct for ASCII-compatible encodings (UTF-8, Latin-1, cp1252, Shift-JIS ...).
    """
    try:
        codecs.lookup(encoding)
        one, two = "\n".encode(encoding), "\n\n".encode(encoding)
    except LookupError as exc:
        raise PlanError(f"TextFileSource: unknown encoding {encoding!r}") from exc
    if not one.endswith(b"\n") or len(two) - len(one) != 1:
        raise PlanError(f"TextFileSource: encoding {encoding!r} is not ASCII-compatible; "
                        "use UTF-8, Latin-1 or another encoding in which a newline is one byte")


class _TextSplit(_LazySplit):
    """The lines of one text file; the position is the byte offset of the next line."""

    _TRANSIENT = ("_file", "_buf")

    def __init__(self, file: _FileRef, encoding: str) -> None:
        self.file = file
        self.split_id = str(file)
        self.encoding = encoding
        self._offset = 0  # file offset of _buf[0]
        self._pos = 0  # index in _buf of the next unread byte
        self._buf = b""
        self._eof = False
        self._file: Any = None

    def open(self) -> None:
        try:
            self._file = self.file.filesystem().open_input_file(self.file.path)
        except (pa.ArrowException, OSError) as exc:
            raise self._fail("cannot open", exc) from exc
        self._reset(self._offset + self._pos)

    def _reset(self, offset: int) -> None:
        self._offset, self._pos, self._buf, self._eof = offset, 0, b"", False
        if self._file is not None:
            self._file.seek(offset)

    def _fill(self) -> None:
        """Drop consumed bytes and append the next chunk of the file (or note the end)."""
        chunk = self._file.read(_TEXT_CHUNK)
        self._offset += self._pos
        self._buf = self._buf[self._pos:] + chunk
        self._pos = 0
        if not chunk:
            self._eof = True

    def read_batch(self, max_records: int) -> list[str] | None:
        if self._file is None:
            self.open()
        start = self._offset + self._pos
        raw: list[bytes] = []
        buf, pos = self._buf, self._pos
        while len(raw) < max_records:
            newline = buf.find(b"\n", pos)
            if newline >= 0:
                raw.append(buf[pos:newline])
                pos = newline + 1
                continue
            if self._eof:
                if pos < len(buf):  # a last line without a trailing newline
                    raw.append(buf[pos:])
                    pos = len(buf)
                break
            self._pos = pos
            try:
                self._fill()
            except (pa.ArrowException, OSError) as exc:
                raise self._fail(f"read error at byte {self._offset + self._pos}", exc) from exc
            buf, pos = self._buf, self._pos
        self._pos = pos
        if not raw:
            return None if self._eof and pos >= len(buf) else []
        return self._decode(raw, start)

    def _decode(self, raw: list[bytes], start: int) -> list[str]:
        """Decode raw lines (``\r`` stripped); ``start`` is the byte offset of the first one."""
        encoding = self.encoding
        lines = []
        for line in raw:
            try:
                lines.append((line[:-1] if line.endswith(b"\r") else line).decode(encoding))
            except UnicodeDecodeError as exc:
                raise SourceError(f"cannot read {self.file}: the line at byte {start} is not valid "
                                  f"{encoding}: {exc}") from exc
            start += len(line) + 1
        return lines

    def position(self) -> int:
        return self._offset + self._pos

    def seek(self, position: int) -> None:
        position = int(position)
        if position < 0:
            raise SourceError(f"cannot seek {self.file} to byte {position}")
        self._reset(position)

    def close(self) -> None:
        if self._file is not None:
            offset = self.position()
            self._file.close()
            self._file = None
            self._offset, self._pos, self._buf = offset, 0, b""


class TextFileSource(Source):
    """The lines of text files, without their line ends (``\\n`` or ``\\r\\n``); one split per file.

    Each split remembers the byte offset of its next line, so a restarted job continues
    exactly where the checkpoint left off without re-reading the file from the start.
    """

    def __init__(self, path: str, encoding: str = "utf-8") -> None:
        _check_line_encoding(encoding)
        self.path = path
        self.encoding = encoding

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [_TextSplit(f, self.encoding) for f in _list_files(self.path, "text file")]


# --------------------------------------------------------------------------------------------
# CSV


def _rows(batch: pa.RecordBatch | pa.Table, as_dicts: bool) -> list[Any]:
    """The rows of ``batch`` as Python dicts or tuples."""
    if as_dicts:
        return batch.to_pylist()
    return list(zip(*(column.to_pylist() for column in batch.columns), strict=True))


class _CsvSplit(_LazySplit):
    """The rows of one CSV file; the position is the number of rows already returned."""

    _TRANSIENT = ("_reader", "_file", "_pending")

    def __init__(self, file: _FileRef, has_header: bool, column_names: list[str] | None,
                 as_dicts: bool, delimiter: str) -> None:
        self.file = file
        self.split_id = str(file)
        self.has_header = has_header
        self.column_names = column_names
        self.as_dicts = as_dicts
        self.delimiter = delimiter
        self._rows_returned = 0
        self._reader: Any = None
        self._file: Any = None
        self._pending: pa.RecordBatch | None = None  # the unread rest of the current batch
        self._exhausted = False

    def _options(self) -> tuple[pacsv.ReadOptions, pacsv.ParseOptions]:
        if self.column_names is not None:
            skip = 1 if self.has_header else 0
            read = pacsv.ReadOptions(column_names=list(self.column_names), skip_rows=skip)
        else:
            read = pacsv.ReadOptions(autogenerate_column_names=not self.has_header)
        if _CSV_BLOCK_SIZE is not None:
            read.block_size = _CSV_BLOCK_SIZE
        return read, pacsv.ParseOptions(delimiter=self.delimiter)

    def open(self) -> None:
        self._start(self._rows_returned)

    def _start(self, skip: int) -> None:
        """(Re)open the file and skip its first ``skip`` data rows."""
        self.close()
        self._rows_returned, self._pending, self._exhausted = 0, None, False
        try:
            self._file = self.file.filesystem().open_input_file(self.file.path)
        except (pa.ArrowException, OSError) as exc:
            raise self._fail("cannot open", exc) from exc
        read, parse = self._options()
        try:
            self._reader = pacsv.open_csv(self._file, read_options=read, parse_options=parse)
        except pa.ArrowInvalid as exc:
            if str(exc).startswith("Empty CSV file"):
                self._exhausted = True
            else:
                raise self._fail("malformed CSV", exc) from exc
        except (pa.ArrowException, OSError) as exc:
            raise self._fail("malformed CSV", exc) from exc
        self._skip(skip)

    def _skip(self, skip: int) -> None:
        """Skip ``skip`` data rows from the current position, whole record batches where possible."""
        target = self._rows_returned + skip
        while skip > 0:
            pending = self._pending
            batch = pending if pending is not None and pending.num_rows else self._next_batch()
            if batch is None:
                raise SourceError(f"cannot seek {self.file} to row {target}: "
                                  f"the file has only {self._rows_returned} rows")
            take = min(skip, batch.num_rows)
            self._pending = batch.slice(take) if take < batch.num_rows else None
            self._rows_returned += take
            skip -= take

    def _next_batch(self) -> pa.RecordBatch | None:
        if self._exhausted:
            return None
        try:
            return self._reader.read_next_batch()
        except StopIteration:
            self._exhausted = True
            return None
        except (pa.ArrowException, OSError) as exc:
            raise self._fail(f"malformed CSV after data row {self._rows_returned}", exc) from exc

    def read_batch(self, max_records: int) -> list[Any] | None:
        if self._file is None:
            self.open()
        out: list[Any] = []
        while len(out) < max_records:
            if self._pending is None or self._pending.num_rows == 0:
                self._pending = self._next_batch()
                if self._pending is None:
                    break
                continue
            take = min(max_records - len(out), self._pending.num_rows)
            out.extend(_rows(self._pending.slice(0, take), self.as_dicts))
            self._pending = self._pending.slice(take)
            self._rows_returned += take
        if not out and self._exhausted:
            return None
        return out

    def position(self) -> int:
        return self._rows_returned

    def seek(self, position: int) -> None:
        position = int(position)
        if position < 0:
            raise SourceError(f"cannot seek {self.file} to row {position}")
        if self._file is None:
            self._rows_returned = position  # applied by open()
        elif position >= self._rows_returned:
            self._skip(position - self._rows_returned)  # forward: no need to re-read the start
        else:
            self._start(position)

    def close(self) -> None:
        self._reader = None
        self._pending = None
        if self._file is not None:
            self._file.close()
            self._file = None


class CsvFileSource(Source):
    """The rows of CSV files, as dicts (column -> value) or tuples; one split per file.

    Values are typed by pyarrow's inference on the start of each file (ints, floats, bools,
    timestamps, strings; empty cells are ``None``). A malformed row fails the read with a
    :class:`SourceError` naming the file: rows are never dropped silently.
    """

    def __init__(self, path: str, *, has_header: bool = True, column_names: list[str] | None = None,
                 as_dicts: bool = True, delimiter: str = ",") -> None:
        if len(delimiter) != 1:
            raise PlanError(f"CsvFileSource: delimiter must be one character, got {delimiter!r}")
        self.path = path
        self.has_header = has_header
        self.column_names = list(column_names) if column_names is not None else None
        self.as_dicts = as_dicts
        self.delimiter = delimiter

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [_CsvSplit(f, self.has_header, self.column_names, self.as_dicts, self.delimiter)
                for f in _list_files(self.path, "CSV file")]


# --------------------------------------------------------------------------------------------
# Parquet


class _ParquetSplit(_LazySplit):
    """The rows of one Parquet file; the position is ``(row_group, row_within_group)``."""

    _TRANSIENT = ("_parquet", "_file", "_table")

    def __init__(self, file: _FileRef, columns: list[str] | None, as_dicts: bool) -> None:
        self.file = file
        self.split_id = str(file)
        self.columns = columns
        self.as_dicts = as_dicts
        self._group = 0
        self._row = 0
        self._parquet: pq.ParquetFile | None = None
        self._file: Any = None
        self._table: pa.Table | None = None  # the current row group, loaded lazily

    def open(self) -> None:
        try:
            self._file = self.file.filesystem().open_input_file(self.file.path)
            self._parquet = pq.ParquetFile(self._file)
        except (pa.ArrowException, OSError) as exc:
            self.close()
            raise self._fail("not a readable Parquet file", exc) from exc
        self._table = None

    def read_batch(self, max_records: int) -> list[Any] | None:
        if self._parquet is None:
            self.open()
        assert self._parquet is not None
        groups = self._parquet.num_row_groups
        out: list[Any] = []
        while len(out) < max_records and self._group < groups:
            if self._table is None:
                try:
                    self._table = self._parquet.read_row_group(self._group, columns=self.columns)
                except (pa.ArrowException, OSError) as exc:
                    raise self._fail(f"cannot read row group {self._group}", exc) from exc
            take = min(max_records - len(out), self._table.num_rows - self._row)
            if take > 0:
                out.extend(_rows(self._table.slice(self._row, take), self.as_dicts))
                self._row += take
            if self._row >= self._table.num_rows:
                self._group, self._row, self._table = self._group + 1, 0, None
        if not out and self._group >= groups:
            return None
        return out

    def position(self) -> tuple[int, int]:
        return self._group, self._row

    def seek(self, position: tuple[int, int]) -> None:
        group, row = (int(v) for v in position)
        if group < 0 or row < 0:
            raise SourceError(f"cannot seek {self.file} to position {position!r}")
        if self._parquet is not None:
            groups = self._parquet.num_row_groups
            if group > groups or (group < groups and row > self._parquet.metadata.row_group(group).num_rows):
                raise SourceError(f"cannot seek {self.file} to position {position!r}: "
                                  f"the file has {groups} row groups")
        self._group, self._row, self._table = group, row, None

    def close(self) -> None:
        self._parquet = None
        self._table = None
        if self._file is not None:
            self._file.close()
            self._file = None


class ParquetFileSource(Source):
    """The rows of Parquet files, as dicts or tuples (in ``columns`` order); one split per file.

    Reads one row group at a time, so memory stays bounded by the largest row group.
    """

    def __init__(self, path: str, *, columns: list[str] | None = None, as_dicts: bool = True) -> None:
        self.path = path
        self.columns = list(columns) if columns is not None else None
        self.as_dicts = as_dicts

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [_ParquetSplit(f, self.columns, self.as_dicts) for f in _list_files(self.path, "Parquet file")]
