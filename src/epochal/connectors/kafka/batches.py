"""Kafka records as a batch stream's record batches (``KafkaSource(batches=True)``).

A ``consume()`` call's messages become one ``pyarrow.RecordBatch``: each column is built by one
list comprehension over the messages and one ``pyarrow.array`` call; with ``value_format="json"``
the values are decoded by one ``pyarrow.json.read_json`` over the batch's values, one per line
(:func:`decode_json`). The reader keeps each partition's position as it does for records, so a
batch never straddles what a checkpoint records (a checkpoint barrier comes between two reads).
"""

from __future__ import annotations

import io
import re
from itertools import repeat
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

#: The columns every batch has besides the values'.
RESERVED = ("key", "value", "topic", "partition", "offset", "timestamp")

_META = [pa.field("topic", pa.string()), pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
         pa.field("timestamp", pa.int64())]

#: A line of nothing but JSON whitespace inside newline-joined values: pyarrow reads no row of it.
_BLANK_LINE = re.compile(rb"\n[ \t]*\n")
#: The most bytes one ``read_json`` block may have (its ``block_size`` is an int32).
_MAX_BLOCK = (1 << 31) - 2
#: What pyarrow raises for input that is not JSON of the schema (invalid UTF-8 in a string
#: raises UnicodeDecodeError while pyarrow turns its message into a str, or reads as a string
#: that only :func:`_read`'s full validation finds invalid).
_DECODE_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError)
_ROW_NUMBER = re.compile(r" in row (\d+)")


def batch_schema(value_schema: pa.Schema | None) -> pa.Schema:
    """The schema of a source's batches: key, then value (binary) or ``value_schema``'s columns,
    then topic, partition, offset, timestamp."""
    values = [pa.field("value", pa.binary())] if value_schema is None else list(value_schema)
    return pa.schema([pa.field("key", pa.binary()), *values, *_META])


def decode_json(values: list[bytes | None], schema: pa.Schema) -> tuple[list[pa.Array], list[tuple[int, str]]]:
    """``values`` decoded as JSON objects of ``schema``: the columns of those that are, in order,
    and ``(index, reason)`` of those that are not (the columns then leave them out).

    One ``read_json`` call over the values joined by newlines decodes them all when each is one
    line of one object, which the join checks without a call per value (no value holds a line
    break, none is blank: then every line is one row or an error, and as many rows as values
    means each is its own). Otherwise, and when that call fails, the values are decoded in parts
    (:meth:`_JsonDecoder.decode`) down to single values, decoded alone (a pretty-printed object
    spanning lines too): a bad value costs a few calls where pyarrow names its row, about twice
    log2(batch size) where it does not.

    Fields not in the schema are ignored; a missing field is null (a schema's non-nullable field
    makes it an error). A null value (a Kafka tombstone) and the JSON value ``null`` are a row of
    nulls. A top-level ``null`` that begins a ``read_json`` block crashes pyarrow 26
    (apache/arrow#47409): every call here reads one block, and a ``null`` that begins it is read
    as ``{}``.
    """
    decoder = _JsonDecoder(schema)
    decoder.decode([b"{}" if v is None else v for v in values])
    if not decoder.tables:
        return [pa.array([], type=field.type) for field in schema], decoder.bad
    table = decoder.tables[0] if len(decoder.tables) == 1 else pa.concat_tables(decoder.tables)
    return [table.column(name).combine_chunks() for name in schema.names], decoder.bad


class _JsonDecoder:
    """:func:`decode_json`'s work: the tables of the parts of the values that decode, in order,
    and the bad values' indices and reasons."""

    def __init__(self, schema: pa.Schema) -> None:
        self.lines_options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        self.value_options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore",
                                                 newlines_in_values=True)
        self.tables: list[pa.Table] = []
        self.bad: list[tuple[int, str]] = []

    def decode(self, lines: list[bytes]) -> None:
        """Decode ``lines`` into :attr:`tables` and :attr:`bad`: the whole in one call, else in
        parts. A part that fails is cut before and after the line its error names (pyarrow counts
        rows, which are lines where every line before is one object: only a hint, since every
        part is checked again) and the rest halved, else it is halved; a part of one value is
        decoded alone. A loop, not recursion: a batch may hold thousands of bad values."""
        pending = [(0, len(lines))] if lines else []
        while pending:
            start, end = pending.pop()
            if end - start == 1:
                table, reason = self.one(lines[start])
                if table is None:
                    self.bad.append((start, reason))
                else:
                    self.tables.append(table)
                continue
            table, hint = self.joined(lines[start:end])
            if table is not None:
                self.tables.append(table)
                continue
            if hint is not None and 0 <= hint < end - start:
                cut = start + hint
                middle = (cut + 1 + end) // 2  # (the rest in halves: joining it costs its length)
                parts = [(start, cut), (cut, cut + 1), (cut + 1, middle), (middle, end)]
            else:
                middle = (start + end) // 2
                parts = [(start, middle), (middle, end)]
            pending.extend(part for part in reversed(parts) if part[1] > part[0])

    def joined(self, lines: list[bytes]) -> tuple[pa.Table | None, int | None]:
        """``lines`` (two or more) in one call: their table, one row per line; or None when they
        are not one line of one object each, and the index of a line that is not, where known."""
        data = b"\n".join(lines)
        if len(data) > _MAX_BLOCK or b"\r" in data or data.count(b"\n") != len(lines) - 1:
            return None, None
        if _blank(lines[0]):
            return None, 0
        if _blank(lines[-1]):
            return None, len(lines) - 1
        blank = _BLANK_LINE.search(data)
        if blank is not None:
            return None, data.count(b"\n", 0, blank.start()) + 1
        if lines[0].strip() == b"null":
            data = b"{}" + data[len(lines[0]):]
        try:
            table = _read(data, self.lines_options)
        except _DECODE_ERRORS as error:
            row = _ROW_NUMBER.search(str(error)) if not isinstance(error, UnicodeDecodeError) else None
            return None, None if row is None else int(row.group(1))
        return (table, None) if table.num_rows == len(lines) else (None, None)

    def one(self, value: bytes) -> tuple[pa.Table | None, str]:
        """One value alone (line breaks allowed): its one-row table, or None and why not."""
        text = value.strip()
        if not text:
            return None, "an empty value, not a JSON object"
        if len(value) > _MAX_BLOCK:
            return None, f"a value of {len(value)} bytes, more than pyarrow.json reads at once"
        try:
            table = _read(b"{}" if text == b"null" else value, self.value_options)
        except UnicodeDecodeError:
            return None, "not UTF-8 JSON"
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            return None, _ROW_NUMBER.sub("", str(error))
        if table.num_rows != 1:
            return None, f"{table.num_rows} JSON values, not one object"
        return table, ""


def _blank(line: bytes) -> bool:
    return not line.strip(b" \t")


def _read(data: bytes, options: Any) -> pa.Table:
    """``data`` read by ``pyarrow.json`` as one block, and validated in full: pyarrow reads
    invalid UTF-8 inside a JSON string into a string column as it is (about 7 ns a row)."""
    table = pajson.read_json(io.BytesIO(data), parse_options=options,
                             read_options=pajson.ReadOptions(use_threads=False, block_size=len(data) + 1))
    table.validate(full=True)
    return table


def partition_runs(topics: list[str], partitions: list[int]) -> tuple[list[tuple[int, int]], pa.Array, pa.Array]:
    """The ranges ``[start, end)`` of consecutive messages of one topic's partition (a
    ``consume()`` returns each partition's messages in runs), found by Arrow compute over the
    partition (and topic) columns, and those columns, which :func:`record_batch` takes."""
    n = len(partitions)
    partition_column = pa.array(partitions, type=pa.int32())
    if not n:
        return [], pa.array([], type=pa.string()), partition_column
    change = pc.not_equal(partition_column.slice(1), partition_column.slice(0, n - 1))
    if topics.count(topics[0]) == n:  # one topic (whose messages share its name's str: a C loop)
        topic_column = pa.repeat(pa.scalar(topics[0], type=pa.string()), n)
    else:
        topic_column = pa.array(topics, type=pa.string())
        change = pc.or_(change, pc.not_equal(topic_column.slice(1), topic_column.slice(0, n - 1)))
    bounds = [0, *(index + 1 for index in pc.indices_nonzero(change).to_pylist()), n]
    return list(zip(bounds, bounds[1:], strict=False)), topic_column, partition_column


def record_batch(keys: list[bytes | None], values: list[Any], topic_column: pa.Array, partition_column: pa.Array,
                 offsets: list[int], timestamps: list[int], value_schema: pa.Schema | None,
                 rows: list[bool] | None = None) -> pa.RecordBatch:
    """One batch of the source's schema from the messages' fields: the values as binary, or,
    with ``value_schema``, ``values`` is :func:`decode_json`'s columns, which hold only the
    messages whose ``rows`` entry is True (None: all) and the batch only those messages."""
    columns: list[Any] = [pa.array(keys, type=pa.binary()), topic_column, partition_column,
                          pa.array(offsets, type=pa.int64()), pa.array(timestamps, type=pa.int64())]
    if rows is not None:
        mask = pa.array(rows, type=pa.bool_())
        columns = [column.filter(mask) for column in columns]
    decoded = [pa.array(values, type=pa.binary())] if value_schema is None else values
    return pa.RecordBatch.from_arrays([columns[0], *decoded, *columns[1:]], schema=batch_schema(value_schema))


def _bytes_column(batch: pa.RecordBatch, name: str) -> list[bytes | None]:
    """A binary or string column's values as bytes (strings as their UTF-8); any width or view
    of either (``large_string``, ``binary_view``, ``fixed_size_binary``...)."""
    column = batch.column(name)
    kind = column.type
    if not any(test(kind) for test in _BYTES_TYPES):
        raise ValueError(f"KafkaSink writes a batch's {name!r} column as bytes: it must be binary or string, "
                         f"not {kind} (cast it in map_batches first)")
    if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        column = column.cast(pa.large_binary())
    return column.to_pylist()


_BYTES_TYPES = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view, pa.types.is_fixed_size_binary,
                pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)


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
