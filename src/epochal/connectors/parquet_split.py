"""A Parquet file as a split, read a row group at a time: what the Parquet file source
(:class:`~epochal.connectors.files.ParquetFileSource`), the Delta Lake source (each data file of
a snapshot) and the DataFrame source (each file of a DataFrame's snapshot) read by.

Its position is ``(row_group, row_within_group)``: the next row to read. Rows come as dicts or
tuples (:func:`~epochal.connectors.file_splits.rows_of`), or, for a batch stream
(``batches=True``), as one ``pyarrow.RecordBatch`` per read: the next ``batch_rows`` rows
(:data:`BATCH_ROWS` unless given), cut from a large row group or gathered from consecutive small
ones, as Arrow read them: no Python per row. The position after a read says which row the next
batch starts at, so a restored split continues at the checkpointed row whatever the batches'
boundaries were. Memory stays bounded by the largest row group (plus one batch).
The file is opened on first read (on the worker); pickling drops the open file.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from epochal.connectors.file_splits import FileRef, FileSplit, rows_of
from epochal.errors import PlanError, SourceError
from epochal.validation import check_number

__all__ = ["BATCH_ROWS", "ParquetSplit", "check_batch_rows", "footer_schema"]

#: The rows of a record batch a batch-stream read returns by default (the last batch of a file
#: may have fewer): row groups are cut into, or gathered up to, batches of this many rows.
BATCH_ROWS = 65_536


def check_batch_rows(batch_rows: Any, where: str) -> int:
    """``batch_rows`` checked (a whole number > 0; a :class:`~epochal.errors.PlanError` naming
    ``where`` otherwise) and returned as an int."""
    check_number(batch_rows, f"{where}: batch_rows", integer=True)
    return int(batch_rows)


def footer_schema(file: FileRef, columns: list[str] | None, where: str) -> pa.Schema:
    """The Arrow schema of the Parquet file ``file`` as its footer gives it (what its row groups
    read as), ``columns`` selected in their order, without metadata: a batch source's schema,
    read on the driver from the footer alone. Raises :class:`~epochal.errors.PlanError` naming
    ``where`` for a column the file lacks, :class:`~epochal.errors.SourceError` for a file that
    cannot be read as Parquet."""
    try:
        with file.filesystem().open_input_file(file.path) as handle:
            schema = pq.read_schema(handle)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"{where}: cannot read the schema of {file}: not a readable Parquet file: {exc}") from exc
    if columns is not None:
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise PlanError(f"{where}: no column {missing[0]!r} in {file} (its columns: {', '.join(schema.names)})")
        schema = pa.schema([schema.field(c) for c in columns])
    return schema.remove_metadata()


class ParquetSplit(FileSplit):
    """The rows of one Parquet file; the position is ``(row_group, row_within_group)``."""

    _TRANSIENT: tuple[str, ...] = ("_parquet", "_file", "_table")
    #: a batch stream's split (read_batch returns record batches); the class default serves
    #: splits pickled before the option existed
    batches: bool = False

    def __init__(self, file: FileRef, columns: list[str] | None, as_dicts: bool, batches: bool = False,
                 batch_rows: int = BATCH_ROWS) -> None:
        self.file = file
        #: a batch stream's split: read_batch returns one record batch of up to ``batch_rows`` rows
        self.batches = batches
        self.batch_rows = batch_rows
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
        if self.batches:
            return self._read_record_batch(groups)
        out: list[Any] = []
        while len(out) < max_records and self._group < groups:
            table = self._row_group()
            take = min(max_records - len(out), table.num_rows - self._row)
            if take > 0:
                out.extend(rows_of(table.slice(self._row, take), self.as_dicts))
                self._row += take
            if self._row >= table.num_rows:
                self._group, self._row, self._table = self._group + 1, 0, None
        if not out and self._group >= groups:
            return None
        return out

    def _row_group(self) -> pa.Table:
        """The current row group (read now if it is not yet)."""
        if self._table is None:
            assert self._parquet is not None
            try:
                self._table = self._parquet.read_row_group(self._group, columns=self.columns)
            except (pa.ArrowException, OSError) as exc:
                raise self._fail(f"cannot read row group {self._group}", exc) from exc
        return self._table

    def _read_record_batch(self, groups: int) -> list[Any] | None:
        """The next up to ``batch_rows`` rows as one record batch (from one row group or several
        consecutive ones; empty row groups are skipped), or None after the last row."""
        limit = getattr(self, "batch_rows", BATCH_ROWS)
        pieces: list[pa.Table] = []
        rows = 0
        while rows < limit and self._group < groups:
            table = self._row_group()
            take = min(limit - rows, table.num_rows - self._row)
            if take > 0:
                pieces.append(self.piece(table.slice(self._row, take)))
                rows += take
                self._row += take
            if self._row >= table.num_rows:
                self._group, self._row, self._table = self._group + 1, 0, None
        if not pieces:
            return None
        part = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)
        return [self.to_batch(part)]

    def piece(self, part: pa.Table) -> pa.Table:
        """Rows of one row group as the batch stream carries them (the Delta source adds its
        partition columns and casts to the table's schema here); by default as read."""
        return part

    @staticmethod
    def to_batch(part: pa.Table) -> pa.RecordBatch:
        """``part`` as one record batch, its columns' chunks combined (a copy only where a
        column has several), without schema metadata."""
        part = part.replace_schema_metadata(None)
        batches = part.combine_chunks().to_batches()
        if len(batches) == 1:
            return batches[0]
        return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in part.schema], schema=part.schema)

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
