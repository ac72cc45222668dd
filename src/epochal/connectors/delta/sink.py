"""The Delta Lake sink: appends (optionally partitioned) to a Delta table, exactly once.

Two-phase commit over the Delta transaction log. Between barriers each subtask writes its records
into Parquet data files inside the table's directory (one open file per partition value): data
files no commit refers to, so no reader sees them. On the barrier of checkpoint *n* the files are
completed (pre-commit) and their *add* actions become the committable. When *n* completes, one
Delta commit per subtask adds them, carrying the transaction ``(app_id, n)``; ``app_id`` names the
job run, the sink and the subtask that pre-committed (``epochal-<job id>-<sink uid>-<subtask>``).

A restored attempt commits the restored checkpoint's committables again. delta-rs records a
transaction but does not enforce it, so before every commit the writer reads
``transaction_version(app_id)``: committables at or below it were committed before and are
skipped. Re-adding the same files would otherwise put the same rows into a new table version:
every reader of the table's changes (a streaming reader, Change Data Feed,
:class:`~epochal.connectors.delta.source.DeltaSource` following the table) would get them twice,
and after a compaction a snapshot reader too.

Other writers (another job, a Spark batch job, a compaction) may commit to the same table: a
blind append conflicts with none of what Delta lets them do concurrently, and delta-rs retries the
commit at the next version. A change of the table's schema or protocol is not retried: it fails
with a :class:`~epochal.errors.SinkError` that names it.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from epochal.connectors.base import EXACTLY_ONCE, Sink, SinkContext, TransactionalSinkWriter
from epochal.connectors.delta import tables as dt
from epochal.errors import PlanError, SinkError
from epochal.filesystems import join, resolve

__all__ = ["DeltaCommittable", "DeltaSink"]

_log = logging.getLogger("epochal")


class DeltaCommittable(NamedTuple):
    """The files one subtask pre-committed at checkpoint ``version``, to be added by one Delta
    commit carrying the transaction ``(app_id, version)``. ``adds`` are ``(path relative to the
    table, size, partition values, modification time in ms, stats JSON)``; ``schema`` is the
    files' Arrow schema, serialized (it creates the table when the first commit finds none)."""

    app_id: str
    version: int
    adds: tuple[tuple[str, int, tuple[tuple[str, str | None], ...], int, str], ...]
    schema: bytes


#: Rows a data file's row groups hold (batches are gathered up to this before they are written).
ROW_GROUP_ROWS = 128 * 1024


class _OpenFile:
    """One data file being written in the current epoch: its writer, path, row count, and the
    batches not yet written (gathered into row groups of :data:`ROW_GROUP_ROWS` rows)."""

    def __init__(self, writer: pq.ParquetWriter, relative: str, partition: tuple[tuple[str, str | None], ...]) -> None:
        self.writer = writer
        self.relative = relative
        self.partition = partition
        self.rows = 0
        self.waiting: list[pa.Table] = []
        self.waiting_rows = 0

    def append(self, table: pa.Table) -> None:
        self.waiting.append(table)
        self.waiting_rows += table.num_rows
        self.rows += table.num_rows
        if self.waiting_rows >= ROW_GROUP_ROWS:
            self.write_waiting()

    def write_waiting(self) -> None:
        if self.waiting:
            self.writer.write_table(pa.concat_tables(self.waiting), row_group_size=max(ROW_GROUP_ROWS,
                                                                                        self.waiting_rows))
            self.waiting, self.waiting_rows = [], 0

    def close_with_stats(self) -> str:
        """Write the footer; the file's Delta statistics (JSON) from its row groups' statistics:
        the record count, null counts, and min/max of integer and date columns (whose order
        readers agree on; strings, floats with NaN and timestamps have subtler Delta rules)."""
        self.write_waiting()
        self.writer.close()
        stats: dict[str, Any] = {"numRecords": self.rows}
        metadata = getattr(getattr(self.writer, "writer", None), "metadata", None)
        if metadata is None:
            return json.dumps(stats)
        nulls: dict[str, int] = {}
        low: dict[str, Any] = {}
        high: dict[str, Any] = {}
        kinds = {f.name: f.type for f in self.writer.schema}
        for group in range(metadata.num_row_groups):
            row_group = metadata.row_group(group)
            for index in range(row_group.num_columns):
                column = row_group.column(index)
                name, statistics = column.path_in_schema, column.statistics
                if name not in kinds or statistics is None:
                    continue
                if statistics.has_null_count:
                    nulls[name] = nulls.get(name, 0) + statistics.null_count
                kind = kinds[name]
                if statistics.has_min_max and (pa.types.is_integer(kind) or pa.types.is_date(kind)):
                    low[name] = statistics.min if name not in low else min(low[name], statistics.min)
                    high[name] = statistics.max if name not in high else max(high[name], statistics.max)
        plain = lambda values: {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in values.items()}  # noqa: E731
        stats.update(minValues=plain(low), maxValues=plain(high), nullCount=nulls)
        return json.dumps(stats)


class _DeltaWriter(TransactionalSinkWriter):
    """One subtask's writer: data files per epoch, one Delta commit per completed checkpoint."""

    def __init__(self, sink: DeltaSink, context: SinkContext) -> None:
        self.sink = sink
        self.uri = sink.table
        self.fs, self.root = resolve(self.uri)
        self.subtask = context.subtask_index
        job = context.job_id or uuid.uuid4().hex[:12]
        self.app_id = f"epochal-{job}-{context.operator_uid or context.operator_name}-{context.subtask_index}"
        self.instance = uuid.uuid4().hex[:12]
        self.schema: pa.Schema | None = sink.schema
        self.partition_by = list(sink.partition_by)
        existing = self._table()
        if existing is not None:
            self.schema = dt.arrow_schema(existing)
            self.partition_by = list(existing.metadata().partition_columns)
        self.files: dict[tuple[Any, ...], _OpenFile] = {}
        self.sequence = 0

    # ------------------------------------------------------------------ writing
    def _table(self) -> Any:
        """The table, or None while it does not exist (the driver checked that the path was free
        or a Delta table; this writer's own data files may be there before the first commit)."""
        try:
            return dt.open_table(self.uri, self.sink.storage_options)
        except LookupError:
            return None

    def write_batch(self, records: list[Any]) -> None:
        """Add ``records`` (dicts, tuples in the schema's order, or a batch stream's record
        batches, taken as they are: no Python per row) to this epoch's data files, split by
        partition value in Arrow. Empty batches add nothing."""
        batches = bool(records) and type(records[0]) is pa.RecordBatch
        if batches:
            records = [batch for batch in records if batch.num_rows]
        if not records:
            return
        where = f"the Delta table {self.uri}"
        try:
            table = dt.records_to_arrow(records, self.schema, where)
        except ValueError as exc:
            raise SinkError(f"DeltaSink: {exc}") from exc
        if self.schema is None:
            such = f"record batches with columns {', '.join(table.column_names)}" if batches else \
                f"records such as {records[0]!r}"
            nulls = [f.name for f in table.schema if pa.types.is_null(f.type)]
            if nulls:
                raise SinkError(f"DeltaSink: cannot infer the type of field {nulls[0]!r} of {where} from {such} "
                                "(all None): give DeltaSink a schema")
            missing = [c for c in self.partition_by if c not in table.column_names]
            if missing:
                raise SinkError(f"DeltaSink: partition column {missing[0]!r} is not a field of {such} for {where}")
            self.schema = dt.delta_schema(table.schema)
            table = table.cast(self.schema)
        if not self.partition_by:
            self._append((), table)
            return
        for key, part in _by_partition(table, self.partition_by):
            self._append(key, part)

    def _append(self, key: tuple[Any, ...], table: pa.Table) -> None:
        data = table.drop_columns(self.partition_by) if self.partition_by else table
        open_file = self.files.get(key)
        if open_file is None:
            open_file = self.files[key] = self._open(key, data.schema)
        open_file.append(data)

    def _open(self, key: tuple[Any, ...], schema: pa.Schema) -> _OpenFile:
        try:
            partition = tuple((c, dt.partition_value(v)) for c, v in zip(self.partition_by, key, strict=True))
        except ValueError as exc:
            raise SinkError(f"DeltaSink: {exc} (table {self.uri})") from exc
        directory = "/".join(dt.partition_dir(c, v) for c, v in partition)
        self.sequence += 1
        name = f"part-{self.subtask:05d}-{self.instance}-{self.sequence:06d}.epochal.snappy.parquet"
        relative = f"{directory}/{name}" if directory else name
        path = join(self.root, relative)
        self.fs.create_dir(join(self.root, directory) if directory else self.root, recursive=True)
        stream = self.fs.open_output_stream(path)
        writer = pq.ParquetWriter(stream, schema, compression="snappy", coerce_timestamps="us",
                                  allow_truncated_timestamps=True)
        return _OpenFile(writer, relative, partition)

    # ------------------------------------------------------------------ two-phase commit
    def pre_commit(self, checkpoint_id: int) -> DeltaCommittable | None:
        if not self.files:
            return None
        adds = []
        now = int(time.time() * 1000)
        for open_file in self.files.values():
            stats = open_file.close_with_stats()  # writes the footer and closes the stream
            size = self.fs.get_file_info(join(self.root, open_file.relative)).size
            adds.append((open_file.relative, size, open_file.partition, now, stats))
        self.files = {}
        assert self.schema is not None
        return DeltaCommittable(self.app_id, checkpoint_id, tuple(adds), self.schema.serialize().to_pybytes())

    def commit(self, committables: list[Any]) -> None:
        by_app: dict[str, list[DeltaCommittable]] = {}
        for committable in committables:
            by_app.setdefault(committable.app_id, []).append(DeltaCommittable(*committable))
        for app_id, pending in by_app.items():
            self._commit_app(app_id, sorted(pending, key=lambda c: c.version))

    def _commit_app(self, app_id: str, pending: list[DeltaCommittable]) -> None:
        from deltalake.exceptions import CommitFailedError, DeltaError

        retries = self.sink.max_commit_retries
        for attempt in range(retries + 1):
            table = self._table() or self._create(pending[0])
            done = table.transaction_version(app_id)
            due = pending if done is None or not self.sink.skip_committed else [c for c in pending if c.version > done]
            if not due:
                _log.info("Delta table %s has %s's commit of checkpoint %s already", self.uri, app_id,
                          pending[-1].version)
                return
            schema = pa.ipc.read_schema(pa.py_buffer(due[-1].schema))
            self._check_fits(table, schema)
            try:
                self._write_transaction(table, app_id, due, schema)
                return
            except CommitFailedError as exc:
                if attempt == retries:
                    raise SinkError(f"DeltaSink: cannot commit checkpoint {due[-1].version} to {self.uri} after "
                                    f"{retries + 1} tries: {exc}") from exc
                _log.warning("Delta commit of %s to %s conflicted (%s); retrying", app_id, self.uri, exc)
                time.sleep(min(0.05 * 2 ** attempt, 2.0))
            except DeltaError as exc:
                raise SinkError(f"DeltaSink: cannot commit checkpoint {due[-1].version} to {self.uri}: {exc}") from exc

    def _write_transaction(self, table: Any, app_id: str, due: list[DeltaCommittable], schema: pa.Schema) -> None:
        from deltalake import CommitProperties, Transaction
        from deltalake.transaction import AddAction

        actions = [AddAction(path, size, dict(partition), mtime, True, stats)
                   for c in due for path, size, partition, mtime, stats in c.adds]
        properties = CommitProperties(app_transactions=[Transaction(app_id, due[-1].version)],
                                      max_commit_retries=self.sink.max_commit_retries,
                                      custom_metadata={"epochal.checkpoints": [c.version for c in due]})
        table.create_write_transaction(actions, "append", dt.arrow_schema(table),
                                       list(table.metadata().partition_columns), commit_properties=properties)

    def _check_fits(self, table: Any, schema: pa.Schema) -> None:
        table_schema = dt.arrow_schema(table)
        partition = list(table.metadata().partition_columns)
        problem = dt.describe_mismatch(table_schema, schema)
        if problem is None and partition != self.partition_by:
            problem = f"the table is partitioned by {partition}, the sink by {self.partition_by}"
        if problem is not None:
            raise SinkError(f"DeltaSink: the records do not match the schema of the Delta table {self.uri}: {problem}")

    def _create(self, first: DeltaCommittable) -> Any:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        schema = pa.ipc.read_schema(pa.py_buffer(first.schema))
        try:
            return DeltaTable.create(self.uri, schema, mode="ignore", partition_by=self.partition_by or None,
                                     storage_options=self.sink.storage_options)
        except DeltaError as exc:
            table = self._table()  # another subtask created it first
            if table is None:
                raise SinkError(f"DeltaSink: cannot create the Delta table {self.uri}: {exc}") from exc
            return table

    def close(self) -> None:
        """Abort the open epoch: its data files are removed (no commit will ever add them)."""
        files, self.files = self.files, {}
        for open_file in files.values():
            try:
                open_file.writer.close()
                self.fs.delete_file(join(self.root, open_file.relative))
            except (OSError, pa.ArrowException):
                pass  # never referenced by the log: VACUUM removes it


def _by_partition(table: pa.Table, columns: list[str]) -> list[tuple[tuple[Any, ...], pa.Table]]:
    """``table`` split by the values of ``columns``: each distinct key (a tuple of Python values,
    None for null) with its rows in their order, keys in the order of their first row. One Arrow
    hash aggregation; Python runs per key, not per row."""
    import numpy as np

    if table.num_rows == 0:
        return []
    position = "__epochal_row"
    while position in columns:
        position += "_"
    indexed = table.select(columns).append_column(position, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    grouped = indexed.group_by(columns, use_threads=False).aggregate([(position, "list")])
    keys = list(zip(*(grouped.column(c).to_pylist() for c in columns), strict=True))
    if len(keys) == 1:
        return [(keys[0], table)]
    rows = grouped.column(f"{position}_list")
    return [(key, table.take(rows[index].values)) for index, key in enumerate(keys)]


class DeltaSink(Sink):
    """Appends records to the Delta table at ``table`` (a local path or a URI), exactly once.

    Records are dicts (field -> value), or tuples in ``schema`` order, or (``accepts_batches``) a
    batch stream's ``pyarrow.RecordBatch``es, written as they are: their columns matched by name
    to the table's schema (one either lacks is refused) and cast to it, split by partition value
    in Arrow, no Python per row; the two-phase commit below is the same for both. Without
    ``schema`` the table's schema is used, or, for a table that does not exist yet, one inferred
    from the first records (the table is created by the first commit). A record that does not
    fit the schema fails the job with a :class:`~epochal.errors.SinkError` naming the field and
    the record (for batches: the column).

    ``partition_by`` names columns to partition a new table by (an existing table keeps its
    own). Output becomes visible once per checkpoint: one Delta commit per sink subtask carrying
    the transaction ``(app_id, checkpoint id)``, which a restored attempt checks so that nothing
    is committed twice. Without checkpointing everything is committed when the input ends.
    Files of aborted epochs stay in the table's directory unreferenced until a ``VACUUM``.

    ``storage_options`` go to ``deltalake`` (object store credentials); data files are written
    through pyarrow's filesystems, so URIs must be ones pyarrow understands too.

    ``exclusive`` (default): while the job runs no other epochal job may write the table (see
    :mod:`epochal.control.sink_claims`): a job restored from a savepoint of this one while it
    still runs would append its output again. ``exclusive=False`` lets several jobs append to
    one table at once (Delta's optimistic concurrency keeps their commits apart); keeping forks
    out is then yours.
    """

    guarantee = EXACTLY_ONCE
    #: a batch stream's record batches are written as they are (no Python per row)
    accepts_batches = True
    #: Skip committables whose transaction the table already has (the check delta-rs leaves to
    #: writers). Turned off only to show that it is needed.
    skip_committed = True

    def __init__(self, table: str, *, schema: pa.Schema | None = None, partition_by: Sequence[str] = (),
                 storage_options: dict[str, str] | None = None, max_commit_retries: int = 10,
                 exclusive: bool = True) -> None:
        try:
            self.table = dt.table_uri(table, "DeltaSink")
        except ValueError as exc:
            raise PlanError(str(exc)) from exc
        if schema is not None and not isinstance(schema, pa.Schema):
            raise PlanError(f"DeltaSink: schema must be a pyarrow.Schema, got {type(schema).__name__}")
        if isinstance(partition_by, str):
            partition_by = [partition_by]
        self.partition_by = list(partition_by)
        self.storage_options = dict(storage_options) if storage_options else None
        self.max_commit_retries = int(max_commit_retries)
        self.exclusive = bool(exclusive)
        self.schema = dt.delta_schema(schema) if schema is not None else None
        if self.schema is not None:
            missing = [c for c in self.partition_by if c not in self.schema.names]
            if missing:
                raise PlanError(f"DeltaSink: partition column {missing[0]!r} is not in the schema "
                                f"({', '.join(self.schema.names)})")
        self._check_table()

    def _check_table(self) -> None:
        """At submit time: the path is a Delta table or free, and matches what was given."""
        try:
            table = dt.open_table(self.table, self.storage_options)
        except LookupError as exc:
            if dt.exists_as_other(self.table):
                raise PlanError(f"DeltaSink: {self.table} exists and is not a Delta table") from exc
            return
        partition = list(table.metadata().partition_columns)
        if self.partition_by and self.partition_by != partition:
            raise PlanError(f"DeltaSink: the Delta table {self.table} is partitioned by {partition}, "
                            f"not {self.partition_by}")
        if self.schema is not None:
            problem = dt.describe_mismatch(dt.arrow_schema(table), self.schema)
            if problem is not None:
                raise PlanError(f"DeltaSink: the schema given does not match the Delta table {self.table}: {problem}")

    def create_writer(self, context: SinkContext) -> TransactionalSinkWriter:
        return _DeltaWriter(self, context)

    def claim_location(self) -> str | None:
        return self.table if self.exclusive else None
