"""What the Delta Lake source and sink share (through ``deltalake``, the delta-rs binding): opening
a table with one readable error, the table's Arrow schema, records to Arrow with the failing field
named, and partition values as the Delta protocol serializes them.

Only this module and the Delta source and sink import ``deltalake``; it is imported on first use,
so jobs without Delta never load it.
"""

from __future__ import annotations

import datetime
import decimal
import os
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from epochal.connectors.file_splits import batches_as_table
from epochal.filesystems import is_uri

#: Characters Hive-style partition directories escape (Spark's ``ExternalCatalogUtils``).
_PATH_SAFE = "".join(chr(c) for c in range(32, 127) if chr(c) not in '"#%\'*/:=?\\{}[]^')


def table_uri(location: Any, kind: str) -> str:
    """``location`` checked: local paths made absolute (workers' directories differ), URIs as given."""
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if not isinstance(location, str) or not location:
        raise ValueError(f"{kind}: the table must be a non-empty path or URI, got {location!r}")
    return location if is_uri(location) else os.path.abspath(location)


def exists_as_other(uri: str) -> bool:
    """True when the local ``uri`` is a file, or a directory without a Delta log that holds more
    than hidden files (names starting with ``_`` or ``.``, such as a job's sink claim)."""
    if is_uri(uri) and not uri.startswith("file://"):
        return False
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    if os.path.isfile(path):
        return True
    if not os.path.isdir(path) or os.path.isdir(os.path.join(path, "_delta_log")):
        return False
    return any(not name.startswith(("_", ".")) for name in os.listdir(path))


def open_table(uri: str, storage_options: dict[str, str] | None, version: Any = None) -> Any:
    """The ``deltalake.DeltaTable`` at ``uri`` (at ``version``: a number, a timestamp string or a
    datetime); raises ``LookupError`` with a readable message when there is none."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    try:
        table = DeltaTable(uri, storage_options=storage_options)
    except TableNotFoundError as exc:
        if exists_as_other(uri):
            raise LookupError(f"{uri} is not a Delta table (it has no _delta_log/ with commits)") from exc
        raise LookupError(f"no Delta table at {uri}: {str(exc).splitlines()[0]}") from exc
    except (DeltaError, OSError) as exc:
        raise LookupError(f"cannot open the Delta table at {uri}: {exc}") from exc
    if version is not None:
        try:
            table.load_as_version(version)
        except (DeltaError, OSError, ValueError, TypeError) as exc:
            raise LookupError(f"the Delta table at {uri} has no version {version!r} "
                              f"(its latest is {table.version()}): {exc}") from exc
    return table


def arrow_schema(table: Any) -> pa.Schema:
    """The table's schema as a ``pyarrow.Schema``."""
    return pa.schema(table.schema().to_arrow())


def delta_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as the Delta table will store it and give it back (Delta's types: large strings
    are strings, timestamps microseconds), so records written with it match the table."""
    from deltalake import Schema

    return pa.schema(Schema.from_arrow(schema).to_arrow())


def describe_mismatch(expected: pa.Schema, actual: pa.Schema) -> str | None:
    """What differs between a table's schema and another one, naming fields; None if they match."""
    problems = []
    theirs = {f.name: f for f in actual}
    for field in expected:
        other = theirs.pop(field.name, None)
        if other is None:
            problems.append(f"field {field.name!r} ({field.type}) is missing")
        elif not _same_type(field.type, other.type):
            problems.append(f"field {field.name!r} is {other.type}, the table has {field.type}")
    problems.extend(f"field {name!r} ({f.type}) is not in the table" for name, f in theirs.items())
    return "; ".join(problems) or None


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_bytes(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Equal types, counting the string (and binary) flavours as one: Delta stores one of each."""
    return a.equals(b) or (_is_text(a) and _is_text(b)) or (_is_bytes(a) and _is_bytes(b))


def records_to_arrow(records: list[Any], schema: pa.Schema | None, where: str) -> pa.Table:
    """``records`` (dicts, or tuples in ``schema`` order) as an Arrow table of ``schema`` (inferred
    from the records when None). A record that does not fit raises ``ValueError`` naming the field
    and the record."""
    first = records[0]
    if type(first) is pa.RecordBatch:  # a batch stream's record batches, written as they are
        return batches_as_table(records, schema, where, extra_columns=False)  # as a dict's extra field
    if isinstance(first, dict):
        if schema is None:
            try:
                return pa.Table.from_pylist(records)
            except (pa.ArrowException, TypeError, ValueError) as exc:
                raise ValueError(f"cannot infer a schema for {where} from records such as {first!r}: {exc}") from exc
        if (all(type(r) is dict for r in records) and set(map(len, records)) == {len(schema)}
                and set().union(*records) == set(schema.names)):
            try:  # the common case, in C++: every record has exactly the schema's fields
                return _checked_nulls(pa.Table.from_pylist(records, schema=schema), records, where)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                pass  # a value does not fit: the slow path below names the field and the record
        names = set(schema.names)
        for record in records:
            if not isinstance(record, dict):
                raise ValueError(f"record {record!r} for {where} is not a dict like the others")
            extra = [k for k in record if k not in names]
            if extra:
                raise ValueError(f"record {record!r} for {where}: field {extra[0]!r} is not in the schema "
                                 f"({', '.join(schema.names)})")
        columns = [[record.get(name) for record in records] for name in schema.names]
    else:
        if schema is None:
            raise ValueError(f"records for {where} are {type(first).__name__}, not dicts: give a schema to "
                             "write tuples")
        width = len(schema)
        for record in records:
            if not isinstance(record, (tuple, list)) or len(record) != width:
                raise ValueError(f"record {record!r} for {where} does not have the schema's {width} fields "
                                 f"({', '.join(schema.names)})")
        columns = [list(column) for column in zip(*records, strict=True)]
    arrays = []
    for field, values in zip(schema, columns, strict=True):
        try:
            array = pa.array(values, type=field.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            bad = _first_bad(values, field.type)
            record = records[bad] if bad is not None else "?"
            raise ValueError(f"field {field.name!r} ({field.type}) of record {record!r} for {where}: {exc}") from exc
        arrays.append(array)
    return _checked_nulls(pa.Table.from_arrays(arrays, schema=schema), records, where)


def _checked_nulls(table: pa.Table, records: list[Any], where: str) -> pa.Table:
    """``table``, or a ValueError naming the first record with a null where the schema forbids one."""
    for field, column in zip(table.schema, table.columns, strict=True):
        if not field.nullable and column.null_count:
            bad = column.is_null().to_pylist().index(True)
            raise ValueError(f"field {field.name!r} of record {records[bad]!r} for {where} is None; the schema "
                             "does not allow nulls there")
    return table


def _first_bad(values: list[Any], type_: pa.DataType) -> int | None:
    for index, value in enumerate(values):
        try:
            pa.array([value], type=type_)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return index
    return None


def partition_value(value: Any) -> str | None:
    """A partition column's value as the Delta protocol serializes it in ``partitionValues``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, (datetime.date, int, float, decimal.Decimal, str)):
        return value.isoformat() if isinstance(value, datetime.date) else str(value)
    if isinstance(value, bytes):
        return value.decode("latin-1")
    raise ValueError(f"cannot partition by a value of type {type(value).__name__}: {value!r}")


def partition_dir(column: str, value: str | None) -> str:
    """The Hive-style directory of one partition value (``__HIVE_DEFAULT_PARTITION__`` for null)."""
    text = "__HIVE_DEFAULT_PARTITION__" if value is None else quote(value, safe=_PATH_SAFE)
    return f"{quote(column, safe=_PATH_SAFE)}={text}"


def typed_partition_value(text: str | None, type_: pa.DataType) -> Any:
    """A ``partitionValues`` string back as a Python value of the column's type."""
    if text is None:
        return None
    if _is_text(type_):
        return text
    if pa.types.is_timestamp(type_) and type_.tz is not None and "+" not in text and not text.endswith("Z"):
        text += "+00:00"  # stored in UTC without an offset
    return pa.array([text]).cast(type_)[0].as_py()
