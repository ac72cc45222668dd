"""Kafka records as a batch stream's record batches (``KafkaSource(batches=True)``).

A ``consume()`` call's messages become one ``pyarrow.RecordBatch``: each column is built by one
list comprehension over the messages and one ``pyarrow.array`` call; with ``value_format="json"``
the values are decoded by one ``pyarrow.json.read_json`` over the batch's values, one per line.
The reader keeps each partition's position as it does for records, so a batch never straddles
what a checkpoint records (a checkpoint barrier comes between two reads).
"""

from __future__ import annotations

import io
from itertools import repeat
from typing import Any

import pyarrow as pa
import pyarrow.json as pajson

#: The columns every batch has besides the values'.
RESERVED = ("key", "value", "topic", "partition", "offset", "timestamp")

_META = [pa.field("topic", pa.string()), pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
         pa.field("timestamp", pa.int64())]


def batch_schema(value_schema: pa.Schema | None) -> pa.Schema:
    """The schema of a source's batches: key, then value (binary) or ``value_schema``'s columns,
    then topic, partition, offset, timestamp."""
    values = [pa.field("value", pa.binary())] if value_schema is None else list(value_schema)
    return pa.schema([pa.field("key", pa.binary()), *values, *_META])


def json_columns(values: list[bytes | None], schema: pa.Schema) -> tuple[list[pa.Array], list[int]]:
    """``values`` decoded as JSON objects of ``schema`` in one call: its columns, and the indices of
    the values that are not (empty when all are; then the columns are None-free of them). A null
    value is a row of nulls."""
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    lines = [b"{}" if v is None else v for v in values]
    try:
        table = pajson.read_json(io.BytesIO(b"\n".join(lines)), parse_options=options,
                                 read_options=pajson.ReadOptions(use_threads=False, block_size=1 << 24))
        if table.num_rows == len(values):
            return [table.column(name).combine_chunks() for name in schema.names], []
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    # some value is not one line of JSON of the schema (or holds a raw newline): one value at a time
    tables, bad = [], []
    for index, line in enumerate(lines):
        try:
            one = pajson.read_json(io.BytesIO(line), parse_options=options)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            bad.append(index)
            continue
        if one.num_rows != 1:
            bad.append(index)
            continue
        tables.append(one)
    if not tables:
        return [pa.array([], type=field.type) for field in schema], bad
    table = pa.concat_tables(tables)
    return [table.column(name).combine_chunks() for name in schema.names], bad


def record_batch(keys: list[bytes | None], values: list[bytes | None], topics: list[str], partitions: list[int],
                 offsets: list[int], timestamps: list[int], value_schema: pa.Schema | None) -> pa.RecordBatch:
    """One batch of the source's schema from the messages' fields (values decoded already where
    ``value_schema`` is given: then ``values`` is the list of decoded columns)."""
    columns: list[Any] = [pa.array(keys, type=pa.binary())]
    columns += [pa.array(values, type=pa.binary())] if value_schema is None else values
    columns += [pa.array(topics, type=pa.string()), pa.array(partitions, type=pa.int32()),
                pa.array(offsets, type=pa.int64()), pa.array(timestamps, type=pa.int64())]
    return pa.RecordBatch.from_arrays(columns, schema=batch_schema(value_schema))


def _bytes_column(batch: pa.RecordBatch, name: str) -> list[bytes | None]:
    """A binary or string column's values as bytes (strings as their UTF-8)."""
    column = batch.column(name)
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        column = column.cast(pa.binary() if pa.types.is_string(kind) else pa.large_binary())
    elif not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        raise ValueError(f"KafkaSink writes a batch's {name!r} column as bytes: it must be binary or string, "
                         f"not {kind} (cast it in map_batches first)")
    return column.to_pylist()


def serialized_rows(batch: pa.RecordBatch, topic: str) -> list[tuple[str, bytes | None, bytes | None, None, None]]:
    """``(topic, key, value, None, None)`` of every row of ``batch``: its ``value`` column (and
    ``key`` column, if any) as bytes."""
    if "value" not in batch.schema.names:
        raise ValueError(f"KafkaSink writes a batch's 'value' column (and 'key', if any); the batches have "
                         f"{', '.join(batch.schema.names) or 'no columns'}: name the column to write 'value' "
                         "(or give KafkaSink value=fn(row) to write rows)")
    values = _bytes_column(batch, "value")
    keys = _bytes_column(batch, "key") if "key" in batch.schema.names else repeat(None)
    return list(zip(repeat(topic), keys, values, repeat(None), repeat(None)))
