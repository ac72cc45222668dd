"""Record batches as the elements of a batch stream: checking them, converting them to the forms
user functions take (pandas, polars, numpy) and back, and to and from rows.

A batch stream's element is one ``pyarrow.RecordBatch``; an operator's input and output are
lists of them, as a row stream's are lists of records. Every batch of one stream has one schema:
:class:`SchemaGuard` holds an operator to the first schema it saw and names the column that
changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

#: The forms ``map_batches`` hands a batch to its function in (``batch_format=``).
BATCH_FORMATS = ("pyarrow", "pandas", "polars", "numpy")


def schema_change(before: pa.Schema, after: pa.Schema) -> str:
    """In words, how ``after`` differs from ``before``: the first column added, removed or retyped."""
    for field in before:
        if field.name not in after.names:
            return f"column {field.name!r} ({field.type}) is gone"
        now = after.field(field.name).type
        if now != field.type:
            return f"column {field.name!r} was {field.type} and is now {now}"
    for field in after:
        if field.name not in before.names:
            return f"column {field.name!r} ({field.type}) is new"
    return f"the columns were {before.names} and are now {after.names}"


class SchemaGuard:
    """Holds one operator's input to one schema: the first batch's (or one known when planned).

    ``check(batch)`` raises TypeError for an element that is not a RecordBatch and ValueError,
    naming the operator and the column, for a batch whose schema differs from the first."""

    __slots__ = ("schema", "where")

    def __init__(self, where: str, schema: pa.Schema | None = None) -> None:
        self.where = where
        self.schema = schema

    def check(self, batch: Any) -> pa.RecordBatch:
        if type(batch) is not pa.RecordBatch:
            raise TypeError(f"{self.where} takes pyarrow.RecordBatch elements, got a {type(batch).__name__}: "
                            "only batch streams (from_batches, batches=True sources, to_batches(), "
                            "map_batches) feed it")
        schema = batch.schema
        if self.schema is None:
            self.schema = schema
        elif schema is not self.schema and not schema.equals(self.schema):
            raise ValueError(f"{self.where} got a batch whose schema changed mid-stream: "
                             f"{schema_change(self.schema, schema)}. Every batch of a stream must have one "
                             "schema: cast the batches to one schema where they are made (RecordBatch.cast)")
        return batch


def to_format(batch: pa.RecordBatch, batch_format: str) -> Any:
    """``batch`` as ``map_batches(batch_format=...)`` hands it to the user's function."""
    if batch_format == "pyarrow":
        return batch
    if batch_format == "pandas":
        return batch.to_pandas()
    if batch_format == "polars":
        import polars

        return polars.from_arrow(batch)
    return {name: column.to_numpy(zero_copy_only=False) for name, column in zip(batch.schema.names, batch.columns,
                                                                                 strict=True)}


def from_format(value: Any, batch_format: str, where: str) -> list[pa.RecordBatch]:
    """What a ``map_batches`` function returned, as record batches (a Table may give several, an
    empty one none). Raises TypeError, naming ``where``, for a value not of ``batch_format``."""
    if batch_format == "pyarrow":
        if type(value) is pa.RecordBatch:
            return [value]
        if isinstance(value, pa.Table):
            return value.to_batches()
        raise TypeError(f"{where} returned a {type(value).__name__}; with batch_format=\"pyarrow\" it must "
                        "return a pyarrow.RecordBatch (or a pyarrow.Table)")
    if batch_format == "pandas":
        import pandas

        if not isinstance(value, pandas.DataFrame):
            raise TypeError(f"{where} returned a {type(value).__name__}; with batch_format=\"pandas\" it must "
                            "return a pandas.DataFrame")
        return [pa.RecordBatch.from_pandas(value, preserve_index=False)]
    if batch_format == "polars":
        import polars

        if not isinstance(value, polars.DataFrame):
            raise TypeError(f"{where} returned a {type(value).__name__}; with batch_format=\"polars\" it must "
                            "return a polars.DataFrame")
        return value.to_arrow().to_batches()
    if not isinstance(value, dict) or not all(isinstance(name, str) for name in value):
        raise TypeError(f"{where} returned a {type(value).__name__}; with batch_format=\"numpy\" it must return "
                        "a dict of column name -> numpy array")
    try:
        return [pa.RecordBatch.from_pydict({name: pa.array(column) for name, column in value.items()})]
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as error:
        raise TypeError(f"{where} returned columns Arrow cannot take as one batch: {error}") from None


def batch_format_module(batch_format: str) -> str | None:
    """The package ``batch_format`` needs beside pyarrow (None: none)."""
    return {"pandas": "pandas", "polars": "polars"}.get(batch_format)


def rows_of(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    """The rows of ``batch`` as tuples, in column order."""
    if batch.num_columns == 0:
        return [()] * batch.num_rows
    return list(zip(*(column.to_pylist() for column in batch.columns), strict=True))


def _fields_of(record: Any) -> list[str] | None:
    """The field names a record brings (a dict's keys, a Row's or namedtuple's fields), or None."""
    if isinstance(record, dict):
        return [str(name) for name in record]
    names = getattr(record, "__fields__", None) or getattr(record, "_fields", None)
    return list(names) if names is not None else None


def batch_of_rows(rows: Sequence[Any], schema: pa.Schema | None, where: str) -> pa.RecordBatch:
    """Rows as one batch. With ``schema``: tuples in its column order, or dicts by its column
    names. Without: dicts (columns by their keys, in the first row's order), named tuples and
    Spark Rows (by their fields), other tuples (columns ``f0``, ``f1``...), or scalars (one column
    ``value``); Arrow infers the types."""
    if not rows:
        if schema is None:
            raise ValueError("an empty batch without a schema")
        return schema.empty_table().to_batches()[0] if schema.names else pa.record_batch([], schema=schema)
    first = rows[0]
    try:
        if isinstance(first, dict):
            names = schema.names if schema is not None else [str(n) for n in first]
            columns = [[row.get(name) for row in rows] for name in names]
        elif isinstance(first, tuple):
            width = len(first)
            names = schema.names if schema is not None else (_fields_of(first) or [f"f{i}" for i in range(width)])
            if any(len(row) != len(names) for row in rows):
                raise ValueError(f"rows of {len(names)} values are expected ({', '.join(names)}); "
                                 f"got one of {next(len(row) for row in rows if len(row) != len(names))}")
            columns = [list(column) for column in zip(*rows, strict=True)]
        else:
            names = schema.names if schema is not None else ["value"]
            if len(names) != 1:
                raise ValueError(f"rows of {len(names)} columns must be tuples or dicts, got a {type(first).__name__}")
            columns = [list(rows)]
        if schema is not None:
            return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)],
                                              schema=schema)
        return pa.RecordBatch.from_arrays([pa.array(c) for c in columns], names=names)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: records cannot become one batch: {error}") from None
