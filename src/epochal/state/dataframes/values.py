"""Python state values as Spark columns, and Spark column values back as Python state values.

epochal keeps keyed state as pickled Python objects. In a DataFrame a value comes out as a Spark
type where it is plain data (:func:`infer_type`):

=======================================  ===========================================
Python value                             Spark type
=======================================  ===========================================
``bool``                                 ``boolean``
``int`` (64-bit)                         ``bigint`` (``long``)
``float`` (or ints and floats mixed)     ``double``
``str`` / ``bytes``                      ``string`` / ``binary``
``tuple`` (a named tuple: its names)     ``struct<_1, _2, ...>``
``list``                                 ``array<T>``
``dict``                                 ``map<K, V>``
a window (``TimeWindow``)                ``struct<start, end>``
anything else, or types that differ      ``binary``: the value's pickle (:data:`PICKLED`)
=======================================  ===========================================

A pickled column says so in its field metadata (``{"epochal.encoding": "pickle"}``) and is read
back with :func:`decode_value` (``pickle.loads``; the classes of the values must be importable).
The types are inferred from a sample of the state; a value later in the state that does not fit
the sampled type fails the read with an error that says to pass a schema or ``valueFormat
pickle``.

The other way (:func:`to_python`, for the savepoint writer): a struct becomes a tuple, a map a
dict, an array a list, ``bytearray`` bytes, and a pickled column is unpickled.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

#: the field metadata of a column of pickled values
ENCODING = "epochal.encoding"
PICKLED = "pickle"
_LONG = 1 << 63
#: how many values a type is inferred from
SAMPLE = 2000


class Unsupported(Exception):
    """A value (or a mix of values) that has no Spark type: it is pickled instead."""


def decode_value(data: bytes | bytearray | None) -> Any:
    """A pickled state value (a ``binary`` column whose field metadata says ``pickle``) as the
    Python object it was: ``pickle.loads``. The value's classes must be importable where it runs
    (as a UDF: on the executors too)."""
    return None if data is None else pickle.loads(bytes(data))


#: ``epochal.decode_state_value``: the decoder of pickled columns
decode_state_value = decode_value


def _is_window(value: Any) -> bool:
    return type(value).__name__ == "TimeWindow" and isinstance(value, tuple) and len(value) == 2


def _is_global_window(value: Any) -> bool:
    return type(value).__name__ == "GlobalWindow"


def _type_of(value: Any) -> T.DataType | None:
    """The Spark type of one value; None for ``None`` (fits any type)."""
    if value is None or _is_global_window(value):
        return None
    kind = type(value)
    if kind is bool:
        return T.BooleanType()
    if kind is int:
        if not -_LONG <= value < _LONG:
            raise Unsupported("an int beyond 64 bits")
        return T.LongType()
    if kind is float:
        return T.DoubleType()
    if kind is str:
        return T.StringType()
    if kind in (bytes, bytearray):
        return T.BinaryType()
    if _is_window(value):
        return T.StructType([T.StructField("start", _type_of(value[0]) or T.LongType()),
                             T.StructField("end", _type_of(value[1]) or T.LongType())])
    if isinstance(value, tuple):
        names = getattr(value, "_fields", None) or [f"_{i + 1}" for i in range(len(value))]
        if kind is not tuple and not hasattr(value, "_fields"):
            raise Unsupported(f"a {kind.__name__}")
        return T.StructType([T.StructField(str(n), _type_of(v) or T.NullType())
                             for n, v in zip(names, value, strict=True)])
    if kind is list:
        return T.ArrayType(infer_type(value, nested=True))
    if kind is dict:
        return T.MapType(infer_type(value.keys(), nested=True), infer_type(value.values(), nested=True))
    raise Unsupported(f"a {kind.__name__}")


def merge_types(a: T.DataType | None, b: T.DataType | None) -> T.DataType | None:
    """The type both values fit (``long`` and ``double`` make ``double``); :class:`Unsupported`
    if there is none."""
    if a is None or isinstance(a, T.NullType):
        return b
    if b is None or isinstance(b, T.NullType) or a == b:
        return a
    numbers = (T.LongType, T.DoubleType)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return T.DoubleType()
    if isinstance(a, T.StructType) and isinstance(b, T.StructType) and len(a.fields) == len(b.fields) \
            and a.names == b.names:
        return T.StructType([T.StructField(x.name, merge_types(x.dataType, y.dataType) or T.NullType())
                             for x, y in zip(a.fields, b.fields, strict=True)])
    if isinstance(a, T.ArrayType) and isinstance(b, T.ArrayType):
        return T.ArrayType(merge_types(a.elementType, b.elementType) or T.NullType())
    if isinstance(a, T.MapType) and isinstance(b, T.MapType):
        return T.MapType(merge_types(a.keyType, b.keyType) or T.NullType(),
                         merge_types(a.valueType, b.valueType) or T.NullType())
    raise Unsupported(f"values of types {a.simpleString()} and {b.simpleString()}")


def infer_type(values: Iterable[Any], nested: bool = False) -> T.DataType:
    """The Spark type every one of ``values`` fits, or :class:`Unsupported` (``nested``: inside
    a list or dict, where ``None`` alone stays ``null``)."""
    found: T.DataType | None = None
    for value in values:
        found = merge_types(found, _type_of(value))
    if found is None:
        return T.NullType() if nested else T.StringType()
    return found


def column_type(sample: list[Any], value_format: str) -> T.StructField:
    """The field of a column whose values look like ``sample`` (named ``value``; renamed by the
    caller): the inferred type, or binary of pickles when ``value_format`` is ``pickle`` or the
    values have no Spark type."""
    if value_format != PICKLED:
        try:
            found = infer_type(sample)
            if not _has_null_type(found):
                return T.StructField("value", found, nullable=True)
        except Unsupported:
            pass
    return T.StructField("value", T.BinaryType(), nullable=True, metadata={ENCODING: PICKLED})


def _has_null_type(kind: T.DataType) -> bool:
    if isinstance(kind, T.NullType):
        return True
    if isinstance(kind, T.StructType):
        return any(_has_null_type(f.dataType) for f in kind.fields)
    if isinstance(kind, T.ArrayType):
        return _has_null_type(kind.elementType)
    if isinstance(kind, T.MapType):
        return _has_null_type(kind.keyType) or _has_null_type(kind.valueType)
    return False


def arrow_type(kind: T.DataType) -> pa.DataType:
    """The Arrow type Spark reads as ``kind``."""
    simple: dict[type, pa.DataType] = {T.BooleanType: pa.bool_(), T.LongType: pa.int64(), T.IntegerType: pa.int32(),
                                       T.DoubleType: pa.float64(), T.FloatType: pa.float32(),
                                       T.StringType: pa.string(), T.BinaryType: pa.binary(), T.NullType: pa.null()}
    if type(kind) in simple:
        return simple[type(kind)]
    if isinstance(kind, T.StructType):
        return pa.struct([pa.field(f.name, arrow_type(f.dataType)) for f in kind.fields])
    if isinstance(kind, T.ArrayType):
        return pa.list_(arrow_type(kind.elementType))
    if isinstance(kind, T.MapType):
        return pa.map_(arrow_type(kind.keyType), arrow_type(kind.valueType))
    raise Unsupported(f"Spark type {kind.simpleString()}")


def is_pickled(field: T.StructField) -> bool:
    return isinstance(field.dataType, T.BinaryType) and field.metadata.get(ENCODING) == PICKLED


def preparer(field: T.StructField) -> Callable[[list[Any]], list[Any]] | None:
    """What turns a list of Python values into what ``pa.array(..., type)`` takes for ``field``;
    None: they go as they are (the fast path of plain values)."""
    if is_pickled(field):
        return lambda values: [None if v is None else pickle.dumps(v, protocol=5) for v in values]
    if _needs_walk(field.dataType):
        return lambda values: [_conform(v) for v in values]
    return None


def _needs_walk(kind: T.DataType) -> bool:
    return isinstance(kind, (T.StructType, T.ArrayType, T.MapType))


def _conform(value: Any) -> Any:
    """Values pyarrow takes for a nested type: a global window as null, sets of pairs as dicts."""
    if value is None or _is_global_window(value):
        return None
    if isinstance(value, tuple):
        return tuple(_conform(v) for v in value)
    if isinstance(value, list):
        return [_conform(v) for v in value]
    if isinstance(value, dict):
        return {_conform(k): _conform(v) for k, v in value.items()}
    return value


def to_python(value: Any, pickled: bool = False) -> Any:
    """A value of a Spark row as the Python state value it stands for (see the module docstring)."""
    if value is None:
        return None
    if pickled:
        return decode_value(value)
    if isinstance(value, T.Row):
        return tuple(to_python(v) for v in value)
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, list):
        return [to_python(v) for v in value]
    if isinstance(value, dict):
        return {to_python(k): to_python(v) for k, v in value.items()}
    return value
