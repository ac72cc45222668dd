"""The stateless operators of batch streams: ``map_batches``, ``filter_batches``, the column
timestamps of ``with_watermarks("column")``, and the conversions between rows and batches
(``rows()``, ``to_batches()``).

Each works on whole record batches: one Python call per batch, the per-row work inside Arrow
(or pandas, polars, numpy, as the user's function chooses). Errors name the operator (the
runner wraps them) and the column.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from epochal.runtime.columnar.batches import SchemaGuard, batch_of_rows, from_format, rows_of, to_format
from epochal.runtime.operators.base import Operator
from epochal.runtime.operators.functions import RuntimeContext


class BatchOperator(Operator):
    """An operator of a batch stream: its input batches are checked against one schema."""

    #: the schema its input is known to have when planned (None: the first batch's)
    input_schema: pa.Schema | None = None

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        self.guard = SchemaGuard(f"operator '{self.name}'", self.input_schema)


class MapBatchesOperator(BatchOperator):
    """``map_batches(fn, batch_format)``: ``fn`` takes each batch in ``batch_format`` and returns
    one in that form; its output is checked to keep one schema."""

    def __init__(self, fn: Callable[[Any], Any], batch_format: str = "pyarrow") -> None:
        self.fn = fn
        self.batch_format = batch_format

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        super().open(context, send_to_driver)
        self.output_guard = SchemaGuard(f"the function of map_batches '{self.name}'")

    def process_batch(self, batch: list[Any]) -> list[Any]:
        out: list[pa.RecordBatch] = []
        check, fn, batch_format = self.guard.check, self.fn, self.batch_format
        where = f"the function of map_batches '{self.name}'"
        for element in batch:
            produced = from_format(fn(to_format(check(element), batch_format)), batch_format, where)
            for made in produced:
                out.append(self.output_guard.check(made))
        return out


def boolean_mask(mask: Any, rows: int, where: str) -> pa.BooleanArray:
    """What a ``filter_batches`` function returned, as a BooleanArray of ``rows`` values."""
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    if isinstance(mask, np.ndarray):
        if mask.dtype != np.bool_:
            raise TypeError(f"{where} returned a numpy array of {mask.dtype}; it must return a boolean mask "
                            "(a numpy bool array or a pyarrow BooleanArray)")
        mask = pa.array(mask)
    elif not isinstance(mask, pa.BooleanArray):
        kind = f"an array of {mask.type}" if isinstance(mask, pa.Array) else f"a {type(mask).__name__}"
        raise TypeError(f"{where} returned {kind}; it must return a boolean mask (a numpy bool array or a "
                        "pyarrow BooleanArray), one value per row")
    if len(mask) != rows:
        raise ValueError(f"{where} returned a mask of {len(mask)} values for a batch of {rows} rows")
    return mask


class FilterBatchesOperator(BatchOperator):
    """``filter_batches(fn)``: keeps the rows where ``fn(batch)``'s mask is true (null: dropped)."""

    def __init__(self, fn: Callable[[pa.RecordBatch], Any]) -> None:
        self.fn = fn

    def process_batch(self, batch: list[Any]) -> list[Any]:
        out = []
        where = f"the function of filter_batches '{self.name}'"
        for element in batch:
            element = self.guard.check(element)
            mask = boolean_mask(self.fn(element), element.num_rows, where)
            kept = element.filter(mask, null_selection_behavior="drop")
            if kept.num_rows:
                out.append(kept)
        return out


class ColumnTimestamps:
    """Event time of a batch stream: the timestamps are the values of ``column``.

    Called on a batch (as a row stream's timestamp function is called on a record), it returns
    the batch's latest event time, which is what a watermark generator needs of it; an empty
    batch has none (``-inf``). Numeric columns are read as they are, timestamp columns as
    integers in their unit."""

    def __init__(self, column: str) -> None:
        self.column = column

    def values(self, batch: pa.RecordBatch) -> np.ndarray:
        """The event times of every row of ``batch`` (numpy); ValueError for a missing column,
        nulls, or a type that is no time."""
        try:
            column = batch.column(self.column)
        except KeyError:
            raise ValueError(f"the batches have no timestamp column {self.column!r} (they have "
                             f"{', '.join(batch.schema.names) or 'none'})") from None
        return event_times(column, self.column)

    def __call__(self, batch: pa.RecordBatch) -> Any:
        if type(batch) is not pa.RecordBatch:
            raise TypeError(f"with_watermarks({self.column!r}) reads a column of record batches, got a "
                            f"{type(batch).__name__}")
        if batch.num_rows == 0:
            return float("-inf")
        return self.values(batch).max().item()

    def __repr__(self) -> str:
        return f"column {self.column!r}"


def event_times(column: pa.Array, name: str) -> np.ndarray:
    """``column``'s values as event times (numbers; a timestamp or date column as integers of its
    unit). ValueError for nulls or another type."""
    kind = column.type
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_duration(kind):
        column = column.cast(pa.int64() if kind.bit_width == 64 else pa.int32())
    elif not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        raise ValueError(f"the timestamp column {name!r} is of type {kind}; event times must be numbers or "
                         "Arrow timestamps")
    if column.null_count:
        raise ValueError(f"the timestamp column {name!r} has {column.null_count} null value(s); every row needs "
                         "an event time (fill or filter them first)")
    return column.to_numpy(zero_copy_only=False)


class RowsOperator(BatchOperator):
    """``rows()``: each batch as its rows, tuples of the values in column order."""

    def process_batch(self, batch: list[Any]) -> list[Any]:
        out: list[Any] = []
        for element in batch:
            out.extend(rows_of(self.guard.check(element)))
        return out


class ToBatchesOperator(Operator):
    """``to_batches(schema, max_rows)``: a row stream's records as record batches: every input
    batch of the runtime (up to the batch size, or ``max_rows`` rows) becomes one."""

    def __init__(self, schema: pa.Schema | None = None, max_rows: int | None = None) -> None:
        self.schema = schema
        self.max_rows = max_rows

    def process_batch(self, batch: list[Any]) -> list[Any]:
        if not batch:
            return []
        step = self.max_rows or len(batch)
        where = f"operator '{self.name}'"
        out = []
        for start in range(0, len(batch), step):
            made = batch_of_rows(batch[start:start + step], self.schema, where)
            if self.schema is None:
                self.schema = made.schema  # one schema for the stream: the first batch's
            elif made.schema != self.schema:
                made = _cast(made, self.schema, where)
            out.append(made)
        return out


def _cast(batch: pa.RecordBatch, schema: pa.Schema, where: str) -> pa.RecordBatch:
    """``batch`` in ``schema`` (later batches of ``to_batches`` without a schema keep the first's
    types: a column that was all null or all int in the first may need a cast)."""
    try:
        if batch.schema.names != schema.names:
            raise ValueError(f"the records' fields are {batch.schema.names}, and were {schema.names}")
        return pa.RecordBatch.from_arrays([pc.cast(c, f.type) for c, f in zip(batch.columns, schema, strict=True)],
                                          schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
        raise ValueError(f"{where}: records no longer fit the first batch's schema ({schema}): {error}; pass "
                         "to_batches(schema=...)") from None
