"""The worker side of ``Environment.from_dataframe``: a Spark DataFrame's snapshot, read by split.

On the driver, ``from_dataframe`` has Spark write the DataFrame as Parquet into a snapshot
directory (one file per Spark partition, written by the executors: nothing is collected onto the
driver) and builds a :class:`DataFrameSource` from the directory and the DataFrame's schema. Here
each file is one split, read a row group at a time (position: row group and row, as for
:class:`~epochal.connectors.files.ParquetFileSource`), and every row is turned into
what ``df.collect()`` returns: a ``pyspark.sql.Row`` whose values have the Python types Spark
gives (timestamps as naive local datetimes, maps as dicts, structs as Rows, binary as bytes like
Spark 4's default ``spark.sql.execution.pyspark.binaryAsBytes``).

With ``batches=True`` the source is a batch stream's: the snapshot's rows as
``pyarrow.RecordBatch``es of up to ``batch_rows`` rows, exactly as Arrow reads the Parquet Spark
wrote (no Python per row, no conversion to Spark's Python values: timestamps are Arrow
``timestamp[us, tz=UTC]``, dates ``date32``, decimals ``decimal128``, maps Arrow maps), at the same
splits and positions as rows.
"""

from __future__ import annotations

import calendar
import datetime
from typing import Any

from epochal.connectors.base import Source, SourceSplit
from epochal.connectors.file_splits import list_files
from epochal.connectors.parquet_split import BATCH_ROWS, ParquetSplit, check_batch_rows, footer_schema

__all__ = ["DataFrameSource"]

_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()


def _micros(value: datetime.datetime) -> int:
    """Microseconds since the epoch of a datetime (aware: its instant; naive: read as UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC)
    return calendar.timegm(value.timetuple()) * 1_000_000 + value.microsecond


def _internal(value: Any, kind: Any) -> Any:
    """A value read from the snapshot as Spark's internal Python form of ``kind`` (what
    ``StructType.fromInternal`` takes: timestamps and intervals as microseconds, dates as days,
    structs as tuples)."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(kind, (T.TimestampType, T.TimestampNTZType)):
        return _micros(value)
    if isinstance(kind, T.DateType):
        return value.toordinal() - _EPOCH_ORDINAL
    if isinstance(kind, T.DayTimeIntervalType):
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if isinstance(kind, T.ArrayType):
        return [_internal(v, kind.elementType) for v in value]
    if isinstance(kind, T.MapType):
        items = value.items() if isinstance(value, dict) else value
        return {_internal(k, kind.keyType): _internal(v, kind.valueType) for k, v in items}
    if isinstance(kind, T.StructType):
        if isinstance(value, dict):
            return tuple(_internal(value.get(f.name), f.dataType) for f in kind.fields)
        return tuple(_internal(v, f.dataType) for v, f in zip(value, kind.fields, strict=True))
    return value


class _DataFrameSplit(ParquetSplit):
    """One Parquet file of the snapshot (one Spark partition); rows as ``df.collect()`` gives them."""

    _TRANSIENT: tuple[str, ...] = (*ParquetSplit._TRANSIENT, "_schema")

    def __init__(self, file: Any, schema_json: str, batches: bool = False, batch_rows: int = BATCH_ROWS) -> None:
        super().__init__(file, None, as_dicts=False, batches=batches, batch_rows=batch_rows)
        self.schema_json = schema_json
        self._schema: Any = None

    def read_batch(self, max_records: int) -> list[Any] | None:
        rows = super().read_batch(max_records)
        if not rows or self.batches:  # a batch stream's record batches are Arrow's, as read
            return rows
        schema = self._schema
        if schema is None:
            import json

            from pyspark.sql.types import StructType

            schema = self._schema = StructType.fromJson(json.loads(self.schema_json))
        fields = [(i, f.dataType) for i, f in enumerate(schema.fields)]
        out = []
        for row in rows:
            values = list(row)
            for index, kind in fields:
                values[index] = _internal(values[index], kind)
            out.append(schema.fromInternal(tuple(values)))
        return out


class DataFrameSource(Source):
    """The rows of a DataFrame snapshot written by ``Environment.from_dataframe`` into
    ``directory`` (Parquet, one file per Spark partition), as ``pyspark.sql.Row`` objects of the
    schema ``schema_json`` (``StructType.json()``). Bounded and replayable; one split per file,
    positioned at ``(row_group, row_within_group)``.

    With ``batches=True``: a batch stream's source (docs/columnar.md), the snapshot's record
    batches of up to ``batch_rows`` rows as Arrow reads them (Spark's types as Parquet stores them:
    timestamps in microseconds, UTC), no Python per row; :meth:`batch_schema` is the snapshot's
    Arrow schema, known when the job is planned."""

    def __init__(self, directory: str, schema_json: str, batches: bool = False,
                 batch_rows: int = BATCH_ROWS) -> None:
        self.directory = directory
        self.schema_json = schema_json
        self.batches = bool(batches)
        self.produces_batches = self.batches
        self.batch_rows = check_batch_rows(batch_rows, "from_dataframe()")

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [_DataFrameSplit(f, self.schema_json, self.batches, self.batch_rows)
                for f in list_files(self.directory, "DataFrame snapshot")]

    def batch_schema(self) -> Any:
        """For a batch stream: the snapshot's Arrow schema, from its first file's footer (every
        file of one Spark write has the DataFrame's schema); None for a row source."""
        if not self.batches:
            return None
        return footer_schema(list_files(self.directory, "DataFrame snapshot")[0], None, "from_dataframe()")
