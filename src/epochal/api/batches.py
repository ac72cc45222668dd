"""Batch streams: DataStreams whose elements are ``pyarrow.RecordBatch``es, with column-based
operations beside the row API (docs/columnar.md).

::

    totals = (env.from_batches(make_batch, count=1_000)          # fn(i) -> pyarrow.RecordBatch
              .filter_batches(lambda b: pc.greater(b["amount"], 0))
              .key_by("user")
              .agg(total=("amount", "sum"), orders=("amount", "count")))
    totals.rows().print()                                         # (user, total, orders) tuples

Every operation works on whole batches (Arrow's compute kernels, or pandas, polars, numpy in
``map_batches``); keyed exchanges split batches by key group in compiled code and channels
between workers carry Arrow IPC. A row stream becomes a batch stream with ``to_batches()`` and
back with ``rows()``; both kinds of stream live in one job.

Every batch of a stream has one schema. Where the schema is known when the job is planned
(Parquet, Delta, a DataFrame, Kafka, ``to_batches(schema=...)``), a missing column or an
aggregate that does not apply to a column's type is a :class:`~epochal.errors.PlanError` before
the job starts; otherwise the first batch is checked and the job fails with the same message,
naming the operator and the column.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from epochal.api.datastream import DataStream
from epochal.api.event_time import WatermarkStrategy, event_time_input
from epochal.api.fields import check_callable
from epochal.connectors.base import Sink
from epochal.errors import PlanError
from epochal.plan.column_keygroups import ColumnKeys, KeyGroupBatchPartitioner
from epochal.plan.logical import Transformation
from epochal.runtime.columnar.aggregates import check_schema, parse_aggregates
from epochal.runtime.columnar.batches import BATCH_FORMATS, batch_format_module
from epochal.runtime.columnar.keyed import KeyedAggregateOperator, WindowAggregateOperator
from epochal.runtime.columnar.operators import (
    ColumnTimestamps,
    FilterBatchesOperator,
    MapBatchesOperator,
    RowsOperator,
    ToBatchesOperator,
)
from epochal.runtime.operators.base import Operator
from epochal.runtime.windows.time_windows import WatermarkGenerator
from epochal.validation import check_number

if TYPE_CHECKING:
    from epochal.api.environment import Environment


def mark_batches(operator: Operator) -> Operator:
    """Mark ``operator`` as emitting record batches: its edges send each batch as it comes
    (a record batch is already a batch of rows) and carry them as Arrow IPC."""
    operator.emits_batches = True
    return operator


def _columns(columns: str | Sequence[str], method: str) -> list[str]:
    names = [columns] if isinstance(columns, str) else list(columns) if isinstance(columns, (list, tuple)) else None
    if not names or not all(isinstance(name, str) and name for name in names):
        raise PlanError(f"{method} takes a column name or a list of column names, got {columns!r}")
    if len(set(names)) != len(names):
        raise PlanError(f"{method} names a column twice: {names}")
    return names


class BatchStream(DataStream):
    """A stream of ``pyarrow.RecordBatch``es of one schema (``schema``, where known when planned)."""

    def __init__(self, env: Environment, node: Transformation, schema: pa.Schema | None = None) -> None:
        super().__init__(env, node)
        #: the batches' schema, where it is known before the job runs (None: from the first batch)
        self.schema = schema

    def _check_columns(self, method: str, keys: Sequence[str] = (), aggregates: Any = (),
                       extra: Sequence[str] = ()) -> None:
        """A PlanError now for a missing column or an aggregate that does not apply, where the
        schema is known."""
        if self.schema is None:
            return
        try:
            check_schema(self.schema, keys, aggregates, method, extra)
        except ValueError as error:
            raise PlanError(str(error)) from None

    def _batches(self, operation: str, name: str, operator: Operator, functions: list[Any],
                 schema: pa.Schema | None = None, inputs: list[int] | None = None) -> BatchStream:
        if hasattr(operator, "input_schema"):
            operator.input_schema = self.schema
        stream = self._add(operation, name, mark_batches(operator), functions, inputs)
        return BatchStream(self.env, stream.node, schema)

    def map_batches(self, fn: Callable[[Any], Any], batch_format: str = "pyarrow") -> BatchStream:
        """``fn(batch)`` for every batch, returning the new batch: a ``pyarrow.RecordBatch`` (or
        Table) with ``batch_format="pyarrow"``; with ``"pandas"``, ``"polars"`` or ``"numpy"`` it
        is handed a pandas DataFrame, a polars DataFrame or a dict of column name -> numpy array
        and returns the same form. What it returns must keep one schema from batch to batch."""
        check_callable(fn, "map_batches")
        if batch_format not in BATCH_FORMATS:
            raise PlanError(f"map_batches(batch_format={batch_format!r}): the formats are "
                            + ", ".join(repr(f) for f in BATCH_FORMATS))
        module = batch_format_module(batch_format)
        if module is not None:
            try:
                __import__(module)
            except ImportError:
                raise PlanError(f"map_batches(batch_format={batch_format!r}) needs {module}: pip install {module} "
                                "(or epochal[columnar]) on the driver and the executors") from None
        return self._batches("map_batches", "MapBatches", MapBatchesOperator(fn, batch_format), [fn])

    def filter_batches(self, fn: Callable[[pa.RecordBatch], Any]) -> BatchStream:
        """Keep the rows of each batch where ``fn(batch)`` is true: ``fn`` returns a boolean mask,
        a ``pyarrow.BooleanArray`` or a numpy bool array, one value per row (a null drops its row)."""
        check_callable(fn, "filter_batches")
        return self._batches("filter_batches", "FilterBatches", FilterBatchesOperator(fn), [fn], self.schema)

    def with_watermarks(self, timestamp: Any, max_out_of_orderness: float | None = None) -> BatchStream:
        """Event time from the column ``timestamp`` (numbers, or an Arrow timestamp read as integers of
        its unit): every 200 ms at most, each subtask emits the watermark ``max event time seen -
        max_out_of_orderness - 1``, as the row API's ``with_watermarks`` does."""
        if not isinstance(timestamp, str):
            raise PlanError("with_watermarks on a batch stream takes the name of its event-time column, e.g. "
                            f"with_watermarks(\"ts\"); got {timestamp!r}")
        self._check_columns("with_watermarks", extra=[timestamp])
        ooo = max_out_of_orderness or 0
        check_number(ooo, "max_out_of_orderness", strict=False)
        times = ColumnTimestamps(timestamp)
        origin = f"with_watermarks({timestamp!r}), max_out_of_orderness={ooo:g}"
        generator = WatermarkGenerator(times, ooo, origin=origin)
        return self._batches("watermarks", "Watermarks", generator, [], self.schema)

    def key_by(self, columns: Any) -> KeyedBatchStream:  # type: ignore[override]
        """Partition by the values of ``columns`` (a name or a list of names): rows with equal keys
        go to the same subtask, through the key group a row job's ``key_by`` returning the same
        value (one column) or tuple of values (several) would give them."""
        if callable(columns):
            raise PlanError("key_by on a batch stream takes column names (key_by(\"user\") or key_by([\"user\", "
                            "\"day\"])); for a key selector of rows, call rows() first")
        names = _columns(columns, "key_by")
        self._check_columns("key_by", keys=names)
        keys = ColumnKeys(names)
        node = self.env.graph.add("partition", "KeyBy", [self.node.id],
                                  partitioner=KeyGroupBatchPartitioner(keys, self.env.max_parallelism))
        return KeyedBatchStream(self.env, node, names, self.schema)

    def rows(self) -> DataStream:
        """A row stream: every row of every batch as a tuple of its values in column order."""
        operator = RowsOperator()
        operator.input_schema = self.schema
        return self._add("rows", "Rows", operator, [])

    def to_batches(self, schema: pa.Schema | None = None, max_rows: int | None = None) -> BatchStream:
        """Already a batch stream: a PlanError (``to_batches`` converts a row stream)."""
        raise PlanError("to_batches() converts a row stream; this stream already carries record batches")

    def union(self, *others: DataStream) -> DataStream:
        """Merge batch streams of one schema into one."""
        for other in others:
            if not isinstance(other, BatchStream):
                raise PlanError("union() of a batch stream takes batch streams; convert row streams with "
                                "to_batches() (or this one with rows())")
            if self.schema is not None and other.schema is not None and not other.schema.equals(self.schema):
                raise PlanError(f"union() of batch streams of different schemas: {self.schema} and {other.schema}")
        stream = super().union(*others)
        mark_batches(stream.node.operator)  # type: ignore[arg-type]
        return BatchStream(self.env, stream.node, self.schema)

    def _partition(self, partitioner: Any, name: str) -> DataStream:
        stream = super()._partition(partitioner, name)
        return BatchStream(self.env, stream.node, self.schema)

    def map(self, fn: Callable[[Any], Any]) -> DataStream:
        """``fn(batch)`` for each record batch, as a row stream's ``map`` (the result is a row
        stream of whatever ``fn`` returns; ``map_batches`` keeps a batch stream)."""
        return super().map(fn)

    def _sink(self, sink: Sink, name: str | None, default_name: str | None = None) -> DataStream:
        return sink_batches(self, sink, name, default_name)


class KeyedBatchStream(BatchStream):
    """A batch stream partitioned by key columns; ``agg`` and ``window`` aggregate per key."""

    def __init__(self, env: Environment, node: Transformation, keys: list[str], schema: pa.Schema | None) -> None:
        super().__init__(env, node, schema)
        self.keys = keys
        #: the query name the next ``agg``'s state gets (:meth:`as_queryable_state`)
        self.queryable_name: str | None = None

    def as_queryable_state(self, name: str) -> KeyedBatchStream:
        """The next ``agg`` keeps each key's accumulators queryable as ``name`` while the job runs
        (``QueryableStateClient(job).get(name, key)``; the value is the accumulator tuple, see
        :meth:`agg`)."""
        if not isinstance(name, str) or not name:
            raise PlanError(f"as_queryable_state needs a non-empty name, not {name!r}")
        stream = KeyedBatchStream(self.env, self.node, self.keys, self.schema)
        stream.queryable_name = name
        return stream

    def agg(self, **aggregates: tuple[str, str]) -> BatchStream:
        """Running aggregates per key, in update mode: for each input batch, one output row per
        key the batch changed, holding that key's aggregates so far: the key columns, then one
        column per aggregate in the order given. ``name=("column", function)`` with function one
        of ``sum``, ``count``, ``min``, ``max``, ``mean``, ``first``, ``last`` (nulls skipped, as
        in SQL; see :mod:`epochal.runtime.columnar.aggregates`).

        The accumulators are keyed state (value state ``"aggregates"``, a tuple per key with one
        item per aggregate, a mean's the pair ``(sum, count)``): checkpointed, restored at any
        parallelism, in every state backend. ``final_results()`` (or the batch runtime mode)
        emits only each key's final row when a bounded input ends."""
        try:
            parsed = parse_aggregates(aggregates, "agg()")
        except ValueError as error:
            raise PlanError(str(error)) from None
        self._check_columns("agg()", keys=self.keys, aggregates=parsed)
        operator = KeyedAggregateOperator(self.keys, parsed)
        operator.queryable_name = self.queryable_name
        return self._batches("agg", "Aggregate", operator, [])

    def window(self, size: Any, timestamp: Any = None,  # type: ignore[override]
               slide: Any = None) -> WindowedBatchStream:
        """Event-time windows per key of ``size`` (in the unit of the ``timestamp`` column),
        tumbling, or sliding with a new window every ``slide``; window ``start`` covers ``[start,
        start + size)`` and starts are multiples of ``slide`` (of ``size`` when tumbling). Without
        ``timestamp``, the column of the ``with_watermarks`` upstream. Aggregate with ``agg``."""
        check_number(size, "window size")
        if self.queryable_name is not None:
            raise PlanError(f"as_queryable_state({self.queryable_name!r}) applies to agg(): a window's state is not "
                            "queryable; call it on the keyed stream whose agg() you want to query")
        if slide is not None:
            check_number(slide, "window slide")
            if slide > size:
                raise PlanError(f"window(size={size}, slide={slide}): the slide may not exceed the size")
        column = timestamp
        if column is None:
            times = self._event_time()
            column = times.column if isinstance(times, ColumnTimestamps) else None
        if not isinstance(column, str):
            raise PlanError("window() on a batch stream needs timestamp=\"column\", the event-time column (or "
                            "with_watermarks(\"column\") before the key_by)")
        self._check_columns("window()", extra=[column])
        return WindowedBatchStream(self, size, slide, column)


class WindowedBatchStream:
    """A keyed batch stream cut into event-time windows; ``agg`` makes it a batch stream again."""

    def __init__(self, keyed: KeyedBatchStream, size: Any, slide: Any, column: str) -> None:
        self.keyed = keyed
        self.size = size
        self.slide = slide
        self.column = column

    def agg(self, **aggregates: tuple[str, str]) -> BatchStream:
        """Aggregates per key and window (functions as :meth:`KeyedBatchStream.agg`), one row per
        key and window when the watermark passes the window's last instant (``start + size - 1``):
        the key columns, ``window_start``, ``window_end``, the aggregates. Every open window fires
        when a bounded input ends; rows of windows that already fired are late, dropped and counted
        (``late_records_dropped``). Keyed state ``"aggregates"``: key -> ``{window start: accumulator
        tuple}``."""
        try:
            parsed = parse_aggregates(aggregates, "window().agg()")
        except ValueError as error:
            raise PlanError(str(error)) from None
        keyed = self.keyed
        keyed._check_columns("window().agg()", keys=keyed.keys, aggregates=parsed, extra=[self.column])
        times = ColumnTimestamps(self.column)
        _, stream = event_time_input(keyed, times, f"window({self.size!r})")  # type: ignore[arg-type]
        if stream.node is not keyed.node:  # a watermark generator was put before the key_by
            mark_batches(keyed.env.graph[stream.node.inputs[0]].operator)  # type: ignore[arg-type]
        operator = WindowAggregateOperator(keyed.keys, parsed, self.size, self.slide, times)
        operator.input_schema = keyed.schema
        node = keyed.env.graph.add("window_agg", "WindowAggregate", [stream.node.id],
                                   operator=mark_batches(operator), functions=[])
        return BatchStream(keyed.env, node)


def to_batches(stream: DataStream, schema: pa.Schema | None, max_rows: int | None) -> BatchStream:
    """What ``DataStream.to_batches`` does: the row stream's records as record batches."""
    if schema is not None and not isinstance(schema, pa.Schema):
        raise PlanError(f"to_batches(schema=...) takes a pyarrow.Schema, got {type(schema).__name__}")
    check_number(max_rows, "to_batches max_rows", integer=True, optional=True)
    node = stream.env.graph.add("to_batches", "ToBatches", [stream.node.id],
                                operator=mark_batches(ToBatchesOperator(schema, max_rows)), functions=[])
    return BatchStream(stream.env, node, schema)


def sink_batches(stream: BatchStream, sink: Sink, name: str | None, default_name: str | None) -> DataStream:
    """A batch stream into ``sink``: as batches where the sink takes them (``sink.accepts_batches``:
    Parquet, Delta, Kafka write a batch at a time), else row by row (``rows()``'s tuples)."""
    if getattr(sink, "accepts_batches", False):
        return DataStream._sink(stream, sink, name, default_name)
    return DataStream._sink(stream.rows(), sink, name, default_name)


__all__ = ["BatchStream", "KeyedBatchStream", "WindowedBatchStream", "WatermarkStrategy"]
