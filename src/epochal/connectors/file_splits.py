"""What the file sources share (those of files, Delta Lake tables and DataFrame snapshots): which
files a source path names, the base of their splits, and rows of Arrow data as Python values.

A path is a plain local path, a ``file://`` URI, or any URI that
:meth:`pyarrow.fs.FileSystem.from_uri` understands. It names a file, a directory (its regular
files, sorted, not recursive) or, for local paths only, a glob pattern; hidden files (``.`` or
``_`` names) are skipped unless named explicitly. :func:`list_files` turns it into one picklable
:class:`FileRef` per file, and every file source makes one :class:`FileSplit` per file;
:func:`rows_of` turns what pyarrow read into dicts or tuples.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from epochal.connectors.base import SourceSplit
from epochal.errors import SourceError
from epochal.filesystems import is_hidden as _is_hidden
from epochal.filesystems import is_uri as _is_uri
from epochal.filesystems import join as _join
from epochal.filesystems import resolve as _resolve

_GLOB_CHARS = re.compile(r"[*?\[]")

__all__ = ["FileRef", "FileSplit", "batches_as_table", "file_sizes", "list_files", "rows_of"]


class FileRef:
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


def list_files(location: str, kind: str) -> list[FileRef]:
    """The files ``location`` names (file, directory or local glob), sorted; raise if none."""
    try:
        fs, path = _resolve(location)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SourceError(f"{kind} source: cannot resolve path {location!r}: {exc}") from exc
    root = location if _is_uri(location) else None
    try:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            return [FileRef(root, path, location if root else path)]
        if info.type == pafs.FileType.Directory:
            entries = fs.get_file_info(pafs.FileSelector(path, recursive=False))
            files = sorted(e.path for e in entries if e.type == pafs.FileType.File and not _is_hidden(e.path))
            if not files:
                raise SourceError(f"{kind} source: directory {location!r} contains no (non-hidden) files")
            return [FileRef(root, f, _join(location, f[len(path):].lstrip("/")) if root else f)
                    for f in files]
        if isinstance(fs, pafs.LocalFileSystem) and _GLOB_CHARS.search(path):
            files = sorted(p for p in glob.glob(path) if os.path.isfile(p) and not _is_hidden(p))
            if not files:
                raise SourceError(f"{kind} source: pattern {location!r} matches no files")
            # Each match is a local file: refer to it by its plain path.
            return [FileRef(None, os.path.abspath(f), os.path.abspath(f)) for f in files]
    except SourceError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"{kind} source: cannot list {location!r}: {exc}") from exc
    raise SourceError(f"{kind} source: path {location!r} does not exist")


def file_sizes(files: list[FileRef]) -> list[int | None]:
    """The size in bytes now of each of ``files`` (what one :func:`list_files` call returned: one
    filesystem), None where the filesystem cannot say: one listing call, on the driver at submit,
    for the sources' progress."""
    if not files:
        return []
    try:
        infos = files[0].filesystem().get_file_info([f.path for f in files])
    except (pa.ArrowException, OSError):
        return [None] * len(files)
    return [info.size if info.type == pafs.FileType.File and info.size is not None else None for info in infos]


class FileSplit(SourceSplit):
    """Base of the file splits: drops the attributes named in ``_TRANSIENT`` when pickled."""

    _TRANSIENT: tuple[str, ...] = ()
    file: FileRef

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in self._TRANSIENT:
            state[name] = None
        return state

    def _fail(self, what: str, exc: BaseException) -> SourceError:
        return SourceError(f"cannot read {self.file}: {what}: {exc}")


def rows_of(batch: pa.RecordBatch | pa.Table, as_dicts: bool) -> list[Any]:
    """The rows of ``batch`` as Python dicts or tuples."""
    if as_dicts:
        return batch.to_pylist()
    return list(zip(*(column.to_pylist() for column in batch.columns), strict=True))


def batches_as_table(batches: list[Any], schema: pa.Schema | None, where: str, *,
                     extra_columns: bool = True) -> pa.Table:
    """A batch stream's record batches (``pyarrow.RecordBatch``es, at least one) as one table for
    a columnar sink, without copying their columns: with ``schema``, its columns selected by name
    (in any order; columns it lacks dropped, or with ``extra_columns=False`` refused) and cast to
    its types. Raises ValueError naming ``where`` and the column for batches of different
    schemas, a batch that lacks one of the schema's columns (or has one it lacks, if refused), a
    value that does not fit its type, or a null where it allows none."""
    try:
        table = pa.Table.from_batches(batches)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"the record batches for {where} do not share one schema: {exc}") from exc
    if schema is None:
        return table
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise ValueError(f"the record batches for {where} have no column {missing[0]!r} (they have "
                         f"{', '.join(table.column_names)}; the schema has {', '.join(schema.names)})")
    extra = [name for name in table.column_names if name not in schema.names]
    if extra and not extra_columns:
        raise ValueError(f"the record batches for {where} have a column {extra[0]!r} the schema does not have "
                         f"({', '.join(schema.names)})")
    table = table.select(schema.names)
    for field, column in zip(schema, table.columns, strict=True):
        if not field.nullable and column.null_count:
            raise ValueError(f"column {field.name!r} of the record batches for {where} has {column.null_count} "
                             "null(s); the schema does not allow nulls there")
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"the record batches for {where} do not fit its schema ({schema}): {exc}") from exc
