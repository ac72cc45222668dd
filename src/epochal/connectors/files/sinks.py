"""File sinks: text lines and Parquet, exactly-once under checkpointing, on any filesystem
pyarrow knows (see :mod:`epochal.filesystems`).

Two-phase commit of one file per subtask and checkpoint epoch: written under
``<dir>/_pending/`` (hidden from readers) and renamed into place when the checkpoint completes.
Sinks are picklable descriptions; writers, created on the worker, hold the file handles.
"""

from __future__ import annotations

import codecs
import os
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from epochal.connectors.base import EXACTLY_ONCE, Sink, SinkContext, TransactionalSinkWriter
from epochal.connectors.file_splits import batches_as_table
from epochal.errors import PlanError
from epochal.filesystems import TEXT_CHUNK as _TEXT_CHUNK
from epochal.filesystems import is_uri as _is_uri
from epochal.filesystems import join as _join
from epochal.filesystems import resolve as _resolve

#: Where in-progress and pre-committed files wait, inside the sink's directory (hidden from
#: readers, which skip names starting with ``_`` or ``.``).
PENDING_DIR = "_pending"


class FileCommittable(NamedTuple):
    """A pre-committed file: where it waits under ``_pending/`` and the name it is committed
    under (both paths on the sink's filesystem, absolute, so valid from any later attempt)."""

    pending: str
    final: str


def _check_directory(directory: Any, kind: str) -> str:
    """``directory`` checked, local paths made absolute (on the driver: executors' working
    directories differ); URIs are kept as given."""
    if not isinstance(directory, str) or not directory:
        raise PlanError(f"{kind}: directory must be a non-empty path or URI, got {directory!r}")
    if _is_uri(directory):
        try:
            pafs.FileSystem.from_uri(directory)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise PlanError(f"{kind}: cannot use directory {directory!r}: {exc}") from exc
        return directory
    return os.path.abspath(directory)


def _fsync(path: str) -> None:
    """Force a local file's (or directory's) data and metadata to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _TwoPhaseFileWriter(TransactionalSinkWriter):
    """What the file sinks share: each epoch's records go to an in-progress file under
    ``<dir>/_pending/`` whose name no other writer uses; ``pre_commit(n)`` completes and closes
    it (fsync on local disks) and returns a :class:`FileCommittable`; ``commit`` renames it to
    ``part-<subtask>-<n>-<writer>-<seq><ext>`` in ``<dir>``. Renaming again is harmless, so a
    repeated commit (after a restore) is a no-op; ``close()`` without ``pre_commit`` removes
    the open epoch's file.

    Subclasses write to the stream :meth:`_begin` opens and complete their format in
    :meth:`_finish` (called before the stream is closed).
    """

    extension = ""

    def __init__(self, directory: str, context: SinkContext) -> None:
        self.directory = directory
        self.fs, self.root = _resolve(directory)
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.pending_dir = _join(self.root, PENDING_DIR)
        self.fs.create_dir(self.pending_dir, recursive=True)
        self.subtask = context.subtask_index
        self.instance = uuid.uuid4().hex[:12]  # no two writers, of any attempt or run, share a name
        self.sequence = 0
        self.path: str | None = None  # the open epoch's in-progress file
        self._stream: Any = None

    def _begin(self) -> Any:
        """Open the in-progress file of a new epoch; returns its output stream."""
        self.sequence += 1
        self.path = _join(self.pending_dir, f"part-{self.subtask:05d}-{self.instance}-{self.sequence:06d}"
                                            f"{self.extension}.inprogress")
        self._stream = self.fs.open_output_stream(self.path, compression=None, buffer_size=_TEXT_CHUNK)
        return self._stream

    def _finish(self) -> None:
        """Complete the epoch's file before its stream is closed (Parquet writes its footer)."""

    def _discard(self) -> None:
        """Drop the open epoch's format state (the file itself is removed by ``close``)."""

    def flush(self) -> None:
        if self._stream is not None:
            self._stream.flush()

    def pre_commit(self, checkpoint_id: int) -> FileCommittable | None:
        if self.path is None:
            return None  # no records in this epoch: no file
        self._finish()
        self._stream.close()
        self._stream = None
        if self.local:
            _fsync(self.path)
        final = _join(self.root, f"part-{self.subtask:05d}-{checkpoint_id:06d}-{self.instance}-"
                                 f"{self.sequence:06d}{self.extension}")
        committable = FileCommittable(self.path, final)
        self.path = None
        return committable

    def commit(self, committables: list[Any]) -> None:
        directories = set()
        for pending, final in committables:
            if self._move(pending, final) and self.local:
                directories.add(os.path.dirname(final))
        for directory in directories:
            _fsync(directory)  # the renames themselves survive a machine crash

    def _exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def _move(self, pending: str, final: str) -> bool:
        """Rename ``pending`` to ``final``; False if that was done before (a repeated commit)."""
        try:
            if self.local:
                os.replace(pending, final)
            else:
                self.fs.move(pending, final)
            return True
        except (OSError, pa.ArrowException):
            if self._exists(pending):
                raise
            if self._exists(final):
                return False  # committed before: this is a commit repeated after a restore
            raise RuntimeError(
                f"cannot commit {final}: its pre-committed file {pending} is gone and it was never "
                f"committed (was {PENDING_DIR}/ cleaned up while a job could still commit it?)") from None

    def close(self) -> None:
        """Abort the open epoch: its file is removed (no checkpoint refers to it); files already
        pre-committed stay for a later commit."""
        path = self.path
        if path is None:
            return
        self.path = None
        try:
            self._discard()
            if self._stream is not None:
                self._stream.close()
        except (OSError, pa.ArrowException):
            pass
        finally:
            self._stream = None
            try:
                self.fs.delete_file(path)
            except (OSError, pa.ArrowException):
                pass  # never visible; cleanup_pending removes it


class _TextFileWriter(_TwoPhaseFileWriter):
    extension = ".txt"

    def __init__(self, directory: str, context: SinkContext, format: Callable[[Any], str],
                 encoding: str) -> None:
        super().__init__(directory, context)
        self.format = format
        self.encoding = encoding

    def write_batch(self, records: list[Any]) -> None:
        if not records:
            return
        stream = self._stream
        if stream is None:
            stream = self._begin()
        fmt = self.format
        stream.write("".join([f"{fmt(record)}\n" for record in records]).encode(self.encoding))


class TextFileSink(Sink):
    """One line per record, ``format(record)``, in ``directory``: exactly once under checkpointing.

    Two-phase commit: each subtask writes the records of a checkpoint epoch to an in-progress
    file under ``<directory>/_pending/``, closes it durably at the checkpoint's barrier and
    renames it to ``part-<subtask>-<checkpoint>-<writer>-<seq>.txt`` when the checkpoint
    completes (a restarted job commits the files of the checkpoint it restored again, which is
    harmless). Readers that skip names starting with ``_`` or ``.`` (epochal's file sources,
    Spark, pyarrow datasets) therefore see every record exactly once, and never a record of an
    uncompleted checkpoint. Output becomes visible once per checkpoint; without checkpointing it
    is committed when the input ends, so an unbounded job needs checkpointing to commit anything.

    A subtask or epoch without records writes no file. The directory is created if missing;
    files already in it are left alone (names never repeat). After a crash, ``_pending/`` may
    hold files of aborted epochs: never visible, removable once no job writes there
    (``epochal.connectors.files.cleanup_pending``).
    """

    guarantee = EXACTLY_ONCE

    def __init__(self, directory: str, format: Callable[[Any], str] = str, encoding: str = "utf-8") -> None:
        kind = type(self).__name__
        self.directory = _check_directory(directory, kind)
        if not callable(format):
            raise PlanError(f"{kind}: format must be callable, got {format!r}")
        try:
            codecs.lookup(encoding)
        except LookupError as exc:
            raise PlanError(f"{kind}: unknown encoding {encoding!r}") from exc
        self.format = format
        self.encoding = encoding

    def create_writer(self, context: SinkContext) -> TransactionalSinkWriter:
        return _TextFileWriter(self.directory, context, self.format, self.encoding)

    def claim_location(self) -> str:
        return self.directory


class _ParquetFileWriter(_TwoPhaseFileWriter):
    extension = ".parquet"

    def __init__(self, directory: str, context: SinkContext, schema: pa.Schema | None) -> None:
        super().__init__(directory, context)
        self.schema = schema
        self._writer: pq.ParquetWriter | None = None

    def _table(self, records: list[Any]) -> pa.Table:
        schema = self.schema
        try:
            if type(records[0]) is pa.RecordBatch:  # a batch stream's: written as they are
                return batches_as_table(records, schema, self.directory)
            if isinstance(records[0], dict):
                return pa.Table.from_pylist(records, schema=schema)
            if schema is None:
                raise TypeError(f"records are {type(records[0]).__name__}, not dicts; give ParquetFileSink "
                                "a schema to write tuples")
            width = len(schema)
            if any(len(record) != width for record in records):
                bad = next(record for record in records if len(record) != width)
                raise ValueError(f"record {bad!r} has {len(bad)} fields, the schema has {width}")
            columns = list(zip(*records, strict=True))
            arrays = [pa.array(column, type=field.type)
                      for column, field in zip(columns, schema, strict=True)]
            return pa.Table.from_arrays(arrays, schema=schema)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise type(exc)(f"cannot write records to {self.directory} "
                            f"(schema {schema if schema is not None else 'not yet known'}): {exc}") from exc

    def write_batch(self, records: list[Any]) -> None:
        """Write ``records`` (dicts, tuples, or a batch stream's record batches, written as they
        are) to this epoch's file as one table; nothing, and no file, for no rows."""
        if records and type(records[0]) is pa.RecordBatch:
            records = [batch for batch in records if batch.num_rows]
        if not records:
            return
        table = self._table(records)
        if self.schema is None:
            self.schema = table.schema  # inferred from the first batch, enforced on later ones
        writer = self._writer
        if writer is None:
            writer = self._writer = pq.ParquetWriter(self._begin(), self.schema)
        writer.write_table(table)

    def _finish(self) -> None:
        self._writer.close()  # type: ignore[union-attr]  # writes the footer: the file is readable
        self._writer = None

    def _discard(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()


class ParquetFileSink(Sink):
    """Records as Parquet files in ``directory``: exactly once under checkpointing.

    Each subtask writes one Parquet file per checkpoint epoch (one row group per batch), by the
    same two-phase commit as :class:`TextFileSink`: the file is completed (footer written) and
    synced at the checkpoint's barrier and committed as
    ``part-<subtask>-<checkpoint>-<writer>-<seq>.parquet`` when the checkpoint completes, so
    every committed file is readable and holds only records of completed checkpoints. A subtask
    or epoch without records writes no file.

    Records are dicts, or tuples in schema field order when ``schema`` is given. Without a
    schema it is inferred from the first batch, so give one when a first batch may not show
    every column's type (e.g. all ``None``). A batch stream's record batches are written as they
    are (``accepts_batches``): one write of the batches the writer is handed, no Python per row,
    their columns selected and cast to ``schema`` when one is given (an error names a column
    that is missing or does not fit); empty batches write nothing. The two-phase commit is the
    same for rows and batches.
    """

    guarantee = EXACTLY_ONCE
    accepts_batches = True

    def __init__(self, directory: str, schema: pa.Schema | None = None) -> None:
        self.directory = _check_directory(directory, "ParquetFileSink")
        if schema is not None and not isinstance(schema, pa.Schema):
            raise PlanError(f"ParquetFileSink: schema must be a pyarrow.Schema, got {type(schema).__name__}")
        self.schema = schema

    def create_writer(self, context: SinkContext) -> TransactionalSinkWriter:
        return _ParquetFileWriter(self.directory, context, self.schema)

    def claim_location(self) -> str:
        return self.directory
