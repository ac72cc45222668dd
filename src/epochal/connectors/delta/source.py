"""The Delta Lake source: a table at a version or a timestamp, bounded and replayable, split by data
file; optionally following the table's new versions as an unbounded source.

A bounded source resolves the version on the driver (``deltalake``) and makes one split per data
file of that snapshot, read a row group at a time like
:class:`~epochal.connectors.files.ParquetFileSource` (position: row group and row),
with the partition columns added from the file's partition values and every row cast to the
table's schema. With ``batches=True`` it is a batch stream's source: each read gives one
``pyarrow.RecordBatch`` of the table's schema (the next ``batch_rows`` rows of the file, partition
columns and casts done by Arrow, no Python per row), at the same positions.

Following (``follow=True``) makes one split per reading subtask. Split *k* of *n* reads its share
of the snapshot's files (every *n*-th, by path), then the data files each later version adds
(``_delta_log/<version>.json``: *add* actions with ``dataChange``), its share again by path.
Its position is ``(version, file index, row group, row)``. Versions that only rearrange data
(compaction) add nothing to read; versions that remove data (a delete, an update, an overwrite)
cannot be followed as appends and fail the read, unless ``skip_change_commits=True`` skips them
(Spark's Delta streaming source does the same).
"""

from __future__ import annotations

import json
import time
import zlib
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs

from epochal.connectors.base import Source, SourceSplit
from epochal.connectors.delta import tables as dt
from epochal.connectors.file_splits import FileRef, rows_of
from epochal.connectors.parquet_split import BATCH_ROWS, ParquetSplit, check_batch_rows
from epochal.errors import PlanError, SourceError
from epochal.filesystems import is_uri, join, resolve

__all__ = ["DeltaSource"]

#: (path relative to the table, decoded; partition values) of one data file.
DataFile = tuple[str, tuple[tuple[str, str | None], ...]]


class _Table:
    """What every split of one source needs: where the table is, its schema, what to read."""

    def __init__(self, uri: str, schema: pa.Schema, partition_columns: list[str], columns: list[str] | None,
                 as_dicts: bool, batches: bool = False, batch_rows: int = BATCH_ROWS) -> None:
        self.uri = uri
        #: a batch stream's source: reads give record batches of up to ``batch_rows`` rows
        self.batches = batches
        self.batch_rows = batch_rows
        self.schema = schema
        self.partition_columns = partition_columns
        self.columns = columns
        self.as_dicts = as_dicts

    def ref(self, relative: str) -> FileRef:
        _, root = resolve(self.uri)
        path = join(root, relative)
        if is_uri(self.uri):
            return FileRef(join(self.uri, relative), path, join(self.uri, relative))
        return FileRef(None, path, path)

    def columnar(self, batch: pa.Table, partition: tuple[tuple[str, str | None], ...]) -> pa.Table:
        """Rows of a data file as a table of the schema (``columns`` selected): the partition
        columns added from the file's partition values, every column cast to its type, columns
        the file lacks (added to the table after it was written) null. All in Arrow."""
        values = dict(partition)
        columns = []
        for field in self.schema:
            if field.name in values:
                value = dt.typed_partition_value(values[field.name], field.type)
                columns.append(pa.nulls(batch.num_rows, type=field.type) if value is None else
                               pa.repeat(pa.scalar(value, type=field.type), batch.num_rows))
            elif field.name in batch.column_names:
                columns.append(batch.column(field.name).cast(field.type))
            else:  # a column added to the table after this file was written
                columns.append(pa.nulls(batch.num_rows, type=field.type))
        table = pa.Table.from_arrays(columns, schema=self.schema)
        return table if self.columns is None else table.select(self.columns)

    def rows(self, batch: pa.Table, partition: tuple[tuple[str, str | None], ...]) -> list[Any]:
        """The rows of one batch of a data file (:meth:`columnar`) as dicts or tuples."""
        return rows_of(self.columnar(batch, partition), self.as_dicts)


class _DeltaFileSplit(ParquetSplit):
    """One data file of a snapshot: a Parquet split whose rows get the partition columns (for a
    batch stream: :class:`ParquetSplit`'s record batches, each piece made :meth:`_Table.columnar`)."""

    def __init__(self, table: _Table, data_file: DataFile) -> None:
        batches = getattr(table, "batches", False)
        super().__init__(table.ref(data_file[0]), None, table.as_dicts, batches,
                         getattr(table, "batch_rows", BATCH_ROWS))
        self.table = table
        self.partition = data_file[1]

    def piece(self, part: pa.Table) -> pa.Table:
        return self.table.columnar(part, self.partition)

    def read_batch(self, max_records: int) -> list[Any] | None:
        if self.batches:
            return super().read_batch(max_records)
        if self._parquet is None:
            self.open()
        assert self._parquet is not None
        groups = self._parquet.num_row_groups
        if self._group >= groups:
            return None
        table = self._row_group()
        take = min(max_records, table.num_rows - self._row)
        out = self.table.rows(table.slice(self._row, take), self.partition) if take > 0 else []
        self._row += max(take, 0)
        if self._row >= table.num_rows:
            self._group, self._row, self._table = self._group + 1, 0, None
        return out


def _share(files: list[DataFile], index: int, count: int) -> list[DataFile]:
    """Split ``index``'s files of ``count``, chosen by a stable hash of the path."""
    return sorted(f for f in files if zlib.crc32(f[0].encode()) % count == index)


class _FollowSplit(SourceSplit):
    """Split ``index`` of ``count`` following the table from snapshot ``start``; see the module."""

    def __init__(self, table: _Table, start: int, snapshot: list[DataFile], index: int, count: int,
                 poll_interval: float, skip_change_commits: bool) -> None:
        self.split_id = f"{table.uri}#follow-{index}-of-{count}"
        self.table = table
        self.start = start
        self.snapshot = snapshot
        self.index = index
        self.count = count
        self.poll_interval = poll_interval
        self.skip_change_commits = skip_change_commits
        self.version, self.file_index, self.inner = start, 0, (0, 0)
        self._files: list[DataFile] | None = None  # this split's share of ``version``
        self._reader: _DeltaFileSplit | None = None
        self._next_poll = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_files": None, "_reader": None}

    def _files_of(self, version: int) -> list[DataFile] | None:
        """This split's share of what ``version`` adds; None if the version does not exist yet."""
        if version == self.start:
            return _share(self.snapshot, self.index, self.count)
        fs, root = resolve(self.table.uri)
        path = join(root, f"_delta_log/{version:020d}.json")
        try:
            with fs.open_input_stream(path) as stream:
                lines = stream.read().decode("utf-8").splitlines()
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException) as exc:
            if fs.get_file_info(path).type == pafs.FileType.NotFound:
                return None
            raise SourceError(f"cannot read version {version} of the Delta table {self.table.uri}: {exc}") from exc
        adds: list[DataFile] = []
        for line in lines:
            action = json.loads(line) if line.strip() else {}
            if "remove" in action and action["remove"].get("dataChange", True):
                if self.skip_change_commits:
                    return []
                raise SourceError(f"version {version} of the Delta table {self.table.uri} removes or changes rows "
                                  "(a delete, update or overwrite): following reads appends only "
                                  "(skip_change_commits=True skips such versions)")
            if "metaData" in action and version > self.start:
                raise SourceError(f"version {version} of the Delta table {self.table.uri} changes its schema or "
                                  "settings: start a new source at that version")
            add = action.get("add")
            if add and add.get("dataChange", True):
                adds.append((unquote(add["path"]), tuple(sorted(add.get("partitionValues", {}).items()))))
        return _share(adds, self.index, self.count)

    def read_batch(self, max_records: int) -> list[Any] | None:
        while True:
            if self._files is None:
                if time.monotonic() < self._next_poll:
                    return []
                self._files = self._files_of(self.version)
                if self._files is None:
                    self._next_poll = time.monotonic() + self.poll_interval
                    return []  # no such version yet: poll again later
            if self.file_index >= len(self._files):
                self.version, self.file_index, self.inner, self._files = self.version + 1, 0, (0, 0), None
                continue
            if self._reader is None:
                self._reader = _DeltaFileSplit(self.table, self._files[self.file_index])
                self._reader.seek(self.inner)
            out = self._reader.read_batch(max_records)
            if out is None:
                self._reader.close()
                self._reader = None
                self.file_index, self.inner = self.file_index + 1, (0, 0)
                continue
            self.inner = self._reader.position()
            return out

    def position(self) -> tuple[int, int, int, int]:
        return self.version, self.file_index, self.inner[0], self.inner[1]

    def seek(self, position: Any) -> None:
        version, file_index, group, row = (int(v) for v in position)
        self.close()
        self.version, self.file_index, self.inner, self._files = version, file_index, (group, row), None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class DeltaSource(Source):
    """The rows of the Delta table at ``table`` (a local path or a URI), as dicts or tuples, or
    with ``batches=True`` as a batch stream of record batches.

    Reads the latest version, or ``version`` (a number), or the version current at
    ``timestamp`` (a datetime or an ISO 8601 string): bounded and replayable, one split per
    data file. With ``follow=True`` it reads that snapshot and then every version appended
    after it, unbounded, checking for new versions every ``poll_interval`` seconds (see the
    module for what following allows). Tables with deletion vectors or column mapping are
    refused with a :class:`~epochal.errors.SourceError`, as is a path that is not a Delta table.

    ``batches=True`` makes it a batch stream's source (docs/columnar.md): each read gives one
    ``pyarrow.RecordBatch`` of up to ``batch_rows`` rows of one data file, of the table's schema
    (``columns`` selected, partition columns filled in, columns cast as for rows), made by Arrow
    with no Python per row. Splits and positions are the row source's, so a restored job
    continues at the checkpointed row. :meth:`batch_schema` reads the table's schema on the
    driver, so the batch API checks column names when the job is planned.
    """

    def __init__(self, table: str, *, version: int | None = None, timestamp: Any = None,
                 columns: list[str] | None = None, as_dicts: bool = True, follow: bool = False,
                 poll_interval: float = 1.0, skip_change_commits: bool = False,
                 storage_options: dict[str, str] | None = None, batches: bool = False,
                 batch_rows: int = BATCH_ROWS) -> None:
        if version is not None and timestamp is not None:
            raise SourceError("DeltaSource: give a version or a timestamp, not both")
        try:
            self.table = dt.table_uri(table, "DeltaSource")
        except ValueError as exc:
            raise SourceError(str(exc)) from exc
        self.version = version
        self.timestamp = timestamp
        self.columns = list(columns) if columns is not None else None
        self.as_dicts = as_dicts
        self.follow = follow
        self.bounded = not follow
        self.poll_interval = float(poll_interval)
        self.skip_change_commits = skip_change_commits
        self.storage_options = dict(storage_options) if storage_options else None
        #: a batch stream's source (docs/columnar.md): record batches of the table's schema
        self.batches = bool(batches)
        self.produces_batches = self.batches
        self.batch_rows = check_batch_rows(batch_rows, "DeltaSource")

    def batch_schema(self) -> pa.Schema | None:
        """For a batch stream: the table's Arrow schema at the version read (``columns``
        selected, in their order), read on the driver; None for a row source. Raises
        :class:`~epochal.errors.PlanError` for a column the table does not have and
        :class:`~epochal.errors.SourceError` for a path that is not a Delta table (or lacks the
        version)."""
        if not self.batches:
            return None
        at = self.version if self.version is not None else self.timestamp
        try:
            schema = dt.arrow_schema(dt.open_table(self.table, self.storage_options, at))
        except LookupError as exc:
            raise SourceError(f"DeltaSource: {exc}") from exc
        if self.columns is None:
            return schema
        missing = [c for c in self.columns if c not in schema.names]
        if missing:
            raise PlanError(f"DeltaSource: column {missing[0]!r} is not in the Delta table {self.table} "
                            f"(its columns: {', '.join(schema.names)})")
        return pa.schema([schema.field(c) for c in self.columns])

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        at = self.version if self.version is not None else self.timestamp
        try:
            table = dt.open_table(self.table, self.storage_options, at)
        except LookupError as exc:
            raise SourceError(f"DeltaSource: {exc}") from exc
        self._check_features(table)
        schema = dt.arrow_schema(table)
        if self.columns is not None:
            missing = [c for c in self.columns if c not in schema.names]
            if missing:
                raise SourceError(f"DeltaSource: column {missing[0]!r} is not in the Delta table {self.table} "
                                  f"(its columns: {', '.join(schema.names)})")
        info = _Table(self.table, schema, list(table.metadata().partition_columns), self.columns, self.as_dicts,
                      self.batches, self.batch_rows)
        actions = pa.table(table.get_add_actions(flatten=False)).to_pylist()
        files: list[DataFile] = sorted(
            (unquote(a["path"]),
             tuple(sorted((k, dt.partition_value(v)) for k, v in (a.get("partition") or {}).items())))
            for a in actions)
        if self.follow:
            return [_FollowSplit(info, table.version(), files, i, parallelism, self.poll_interval,
                                 self.skip_change_commits) for i in range(parallelism)]
        return [_DeltaFileSplit(info, f) for f in files]

    def _check_features(self, table: Any) -> None:
        protocol = table.protocol()
        features = set(protocol.reader_features or [])
        mapping = (table.metadata().configuration or {}).get("delta.columnMapping.mode", "none")
        if mapping != "none":
            raise SourceError(f"DeltaSource: the Delta table {self.table} uses column mapping ({mapping}), "
                              "which DeltaSource cannot read")
        if "deletionVectors" in features:
            actions = pa.table(table.get_add_actions(flatten=True))
            if "deletionVector.storageType" in actions.column_names or any(
                    name.startswith("deletionVector") and actions.column(name).null_count < actions.num_rows
                    for name in actions.column_names):
                raise SourceError(f"DeltaSource: the Delta table {self.table} has deletion vectors, which "
                                  "DeltaSource cannot apply: run OPTIMIZE (purge) first")
