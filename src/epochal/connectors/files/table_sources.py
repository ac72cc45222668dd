"""The table file sources, read with pyarrow: :class:`CsvFileSource` and :class:`ParquetFileSource`.

Both return rows as dicts (column -> value) or tuples, one split per file. A CSV split's position
is the number of rows it has returned; a Parquet split's is ``(row_group, row_within_group)``
(:mod:`epochal.connectors.parquet_split`, which the Delta Lake and DataFrame sources read by too).
Which files a path names is decided in :mod:`epochal.connectors.file_splits`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from epochal.connectors.base import Source, SourceSplit
from epochal.connectors.file_splits import FileRef, FileSplit, list_files, rows_of
from epochal.connectors.parquet_split import BATCH_ROWS, ParquetSplit, check_batch_rows, footer_schema
from epochal.errors import PlanError, SourceError

_CSV_BLOCK_SIZE: int | None = None  # bytes per CSV record batch; None: pyarrow's default (1 MiB)

__all__ = ["CsvFileSource", "ParquetFileSource"]


# --------------------------------------------------------------------------------------------
# CSV


class _CsvSplit(FileSplit):
    """The rows of one CSV file; the position is the number of rows already returned."""

    _TRANSIENT = ("_reader", "_file", "_pending")

    def __init__(self, file: FileRef, has_header: bool, column_names: list[str] | None,
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
            out.extend(rows_of(self._pending.slice(0, take), self.as_dicts))
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
                for f in list_files(self.path, "CSV file")]


# --------------------------------------------------------------------------------------------
# Parquet


class ParquetFileSource(Source):
    """The rows of Parquet files, as dicts or tuples (in ``columns`` order); one split per file.

    Reads one row group at a time, so memory stays bounded by the largest row group. A split's
    position is ``(row_group, row_within_group)``, the next row: a restored job continues there.

    With ``batches=True`` it is a batch stream's source (docs/columnar.md), Arrow all the way:
    each read gives one ``pyarrow.RecordBatch`` of the next ``batch_rows`` rows of a file (cut
    from a row group or gathered from consecutive ones, as Arrow read them: no Python per row),
    at the same splits and positions as rows. Its schema (the first file's footer, ``columns``
    selected) is known when the job is planned, so a column the batch API names that the files
    lack is a :class:`~epochal.errors.PlanError` then; a later file of another schema fails the
    job naming the changed column. ``as_dicts`` does not apply to batches.
    """

    def __init__(self, path: str, *, columns: list[str] | None = None, as_dicts: bool = True,
                 batches: bool = False, batch_rows: int = BATCH_ROWS) -> None:
        self.path = path
        self.columns = list(columns) if columns is not None else None
        self.as_dicts = as_dicts
        self.batches = bool(batches)
        self.produces_batches = self.batches
        self.batch_rows = check_batch_rows(batch_rows, f"read_parquet({path!r})")

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [ParquetSplit(f, self.columns, self.as_dicts, self.batches, self.batch_rows)
                for f in list_files(self.path, "Parquet file")]

    def batch_schema(self) -> pa.Schema | None:
        """For a batch stream: the first file's Arrow schema (``columns`` selected), read from its
        footer on the driver; None for a row source. Raises
        :class:`~epochal.errors.PlanError` for a column the file lacks and
        :class:`~epochal.errors.SourceError` when there is no readable file."""
        if not self.batches:
            return None
        return footer_schema(list_files(self.path, "Parquet file")[0], self.columns, f"read_parquet({self.path!r})")
