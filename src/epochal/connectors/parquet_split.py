"""A Parquet file as a split, read a row group at a time: what the Parquet file source
(:class:`~epochal.connectors.files.ParquetFileSource`), the Delta Lake source (each data file of
a snapshot) and the DataFrame source (each file of a DataFrame's snapshot) read by.

Its position is ``(row_group, row_within_group)``; rows come as dicts or tuples
(:func:`~epochal.connectors.file_splits.rows_of`), or, for a batch stream (``batches=True``), as
``pyarrow.RecordBatch``es of up to :data:`BATCH_ROWS` rows of one row group, one per read, no
Python per row; memory stays bounded by the largest row group.
The file is opened on first read (on the worker); pickling drops the open file.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from epochal.connectors.file_splits import FileRef, FileSplit, rows_of
from epochal.errors import SourceError

__all__ = ["BATCH_ROWS", "ParquetSplit"]

#: The most rows of a record batch a batch-stream read returns (a row group is cut into these).
BATCH_ROWS = 65_536


class ParquetSplit(FileSplit):
    """The rows of one Parquet file; the position is ``(row_group, row_within_group)``."""

    _TRANSIENT: tuple[str, ...] = ("_parquet", "_file", "_table")

    def __init__(self, file: FileRef, columns: list[str] | None, as_dicts: bool, batches: bool = False) -> None:
        self.file = file
        #: a batch stream's split: read_batch returns record batches
        self.batches = batches
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
        if getattr(self, "batches", False):
            return self._read_record_batch(groups)
        out: list[Any] = []
        while len(out) < max_records and self._group < groups:
            if self._table is None:
                try:
                    self._table = self._parquet.read_row_group(self._group, columns=self.columns)
                except (pa.ArrowException, OSError) as exc:
                    raise self._fail(f"cannot read row group {self._group}", exc) from exc
            take = min(max_records - len(out), self._table.num_rows - self._row)
            if take > 0:
                out.extend(rows_of(self._table.slice(self._row, take), self.as_dicts))
                self._row += take
            if self._row >= self._table.num_rows:
                self._group, self._row, self._table = self._group + 1, 0, None
        if not out and self._group >= groups:
            return None
        return out

    def _read_record_batch(self, groups: int) -> list[Any] | None:
        """The next up to :data:`BATCH_ROWS` rows of the current row group as one record batch
        (an empty row group gives an empty batch), or None after the last row group."""
        if self._group >= groups:
            return None
        if self._table is None:
            try:
                self._table = self._parquet.read_row_group(self._group, columns=self.columns)  # type: ignore[union-attr]
            except (pa.ArrowException, OSError) as exc:
                raise self._fail(f"cannot read row group {self._group}", exc) from exc
        table = self._table
        take = min(BATCH_ROWS, table.num_rows - self._row)
        part = table.slice(self._row, take).combine_chunks()
        batch = self.to_batch(part)
        self._row += take
        if self._row >= table.num_rows:
            self._group, self._row, self._table = self._group + 1, 0, None
        return [batch]

    def to_batch(self, part: pa.Table) -> pa.RecordBatch:
        """A slice of a row group as the record batch the stream carries (subclasses add columns)."""
        batches = part.to_batches()
        return batches[0] if len(batches) == 1 else pa.RecordBatch.from_pylist([], schema=part.schema)

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
