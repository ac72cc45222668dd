"""Key groups of a whole column of keys at once: the key groups of the batch (columnar) path.

A batch stream keyed by columns (``key_by("user")``, ``key_by(["user", "day"])``) places each
row by the key the row path would give it: the column's value (``as_py()``) for one key column,
the tuple of the values for several. :func:`key_groups_of_columns` returns exactly
``[key_group_of(key, max_parallelism) for key in keys]`` (:mod:`epochal.plan.keygroups`), so a
row job and a batch job put equal keys in the same key group and restore each other's state.

Contract: ``columns`` are Arrow arrays (or chunked arrays) of equal length; the result is an
``int32`` numpy array of that length.

What is compiled: where the extension ``epochal.plan._column_keygroups`` is built (C, by
``pip install`` where a C compiler is; optional), the columns of these types are hashed from
their Arrow buffers with no Python call per row (murmur3 over the bytes of
:func:`~epochal.plan.keygroups.key_group_bytes`, written by the C code):

* int8..int64 and uint8..uint64 (the decimal digits, as ``str(int)``), bool (as the ints 1 and 0);
* string, large_string, string_view (UTF-8); binary, large_binary, binary_view,
  fixed_size_binary (the bytes);
* the null type, and dictionary-encoded columns of any of these (decoded first);
* nulls of every column (``None``).

What falls back: a key of one column of any other type (floats, decimals, dates, timestamps,
lists, extension types, ...) goes through the row path's own :func:`key_groups_of`, row by row;
in a key of several columns only such a column is encoded in Python (``stable_key_bytes`` of each
value, the tuple's item encoding), the rest stay compiled. Without the extension (or for a
``max_parallelism`` outside 1..2**31) every call takes the row path. Slower, the same groups, and
the same kinds of error (a ``TypeError`` for a value without a stable encoding, though in a key
of several columns not always naming the same value; a ``ValueError`` for columns of unequal
length). String columns are taken as valid UTF-8, as Arrow requires: where a column built from
raw buffers breaks that, the compiled path hashes its bytes and the row path fails to decode them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from epochal.plan.keygroups import key_groups_of, stable_key_bytes
from epochal.plan.partitioners import Partitioner

_native: Any
try:
    from epochal.plan import _column_keygroups as _native  # type: ignore[attr-defined,no-redef]
except ImportError:  # built without a C compiler
    _native = None


def column_keys(columns: Sequence[pa.Array]) -> list[Any]:
    """The Python keys of the rows: each row's value for one column, the tuple of its values for
    several (what a row job's ``key_by`` on the same fields returns)."""
    if len(columns) == 1:
        return columns[0].to_pylist()
    return list(zip(*(column.to_pylist() for column in columns), strict=True))


def key_groups_of_columns(columns: Sequence[pa.Array | pa.ChunkedArray], max_parallelism: int) -> np.ndarray:
    """The key group of every row's key (see the module docstring), as an ``int32`` array.

    Equal to ``[key_group_of(k, max_parallelism) for k in column_keys(columns)]``, whichever
    path computes it.

    Raises:
        ValueError: for columns of unequal length.
        TypeError: for a value without a stable encoding (as :func:`key_group_of`).
    """
    arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    if _native is None or not arrays or not 1 <= max_parallelism <= _MAX_GROUPS:
        return _row_path(arrays, max_parallelism)
    rows = len(arrays[0])
    if any(len(array) != rows for array in arrays):
        raise ValueError(f"key columns of unequal length: {[len(array) for array in arrays]}")
    specs = []
    for array in arrays:
        spec = _compiled_spec(array)
        if spec is None:
            if len(arrays) == 1:
                return _row_path(arrays, max_parallelism)
            spec = _compiled_spec(_encoded_in_python(array), tag=0)
            assert spec is not None
        specs.append(spec)
    out = np.empty(rows, dtype=np.int32)
    _native.key_groups(out, max_parallelism, specs)
    return out


#: the largest max_parallelism whose key groups all fit an int32
_MAX_GROUPS = 2**31
#: the view types (pyarrow 16 and later) and the plain type each is hashed as
_VIEWS: dict[pa.DataType, pa.DataType] = {
    getattr(pa, view)(): plain() for view, plain in (("string_view", pa.string), ("binary_view", pa.binary))
    if hasattr(pa, view)}


def _row_path(columns: Sequence[pa.Array], max_parallelism: int) -> np.ndarray:
    """The exact fallback: the row path's key group of each row's Python key."""
    return np.asarray(key_groups_of(column_keys(columns), max_parallelism), dtype=np.int32)


def _compiled_spec(array: pa.Array, tag: int | None = None) -> tuple[Any, ...] | None:
    """The column as the extension takes it, ``(kind, tag, offset, validity, offsets, data,
    width)`` (see ``_column_keygroups.c``), or None for a type it does not hash. ``tag`` 0: the
    values are already ``stable_key_bytes`` (a binary column from :func:`_encoded_in_python`)."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        return _compiled_spec(array.dictionary_decode(), tag)
    if _VIEWS.get(kind) is not None:  # string_view, binary_view: their plain forms
        return _compiled_spec(array.cast(_VIEWS[kind]), tag)
    if pa.types.is_null(kind):
        return (_native.NULL, ord("n"), 0, None, None, None, 0)
    buffers = array.buffers()
    validity = buffers[0] if array.null_count else None
    if pa.types.is_string(kind) or pa.types.is_binary(kind):
        native_kind, width = _native.BINARY32, 0
    elif pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        native_kind, width = _native.BINARY64, 0
    elif pa.types.is_fixed_size_binary(kind):
        native_kind, width = _native.FIXED, kind.byte_width
    elif pa.types.is_signed_integer(kind):
        native_kind, width = _native.INT, kind.bit_width // 8
    elif pa.types.is_unsigned_integer(kind):
        native_kind, width = _native.UINT, kind.bit_width // 8
    elif pa.types.is_boolean(kind):
        native_kind, width = _native.BOOL, 0
    else:
        return None
    if tag is None:
        tag = ord("s") if pa.types.is_string(kind) or pa.types.is_large_string(kind) else \
            ord("i") if native_kind in (_native.INT, _native.UINT, _native.BOOL) else ord("y")
    if native_kind in (_native.BINARY32, _native.BINARY64):
        return (native_kind, tag, array.offset, validity, buffers[1], buffers[2], 0)
    return (native_kind, tag, array.offset, validity, None, buffers[1], width)


def _encoded_in_python(array: pa.Array) -> pa.Array:
    """A column the extension does not hash, as the tuple item encoding of each row's value
    (``stable_key_bytes(value)``, tag included; ``b"n"`` for a null): a large_binary column."""
    return pa.array([stable_key_bytes(value) for value in array.to_pylist()], pa.large_binary())


class ColumnKeys:
    """The key of a batch stream's rows: the values of ``columns`` (a key selector for batches).

    ``of(batch)`` gives the Python keys of every row, ``groups(batch, max_parallelism)`` their key
    groups as a numpy array; the partitioner and the keyed operators use the same."""

    def __init__(self, columns: list[str]) -> None:
        self.columns = list(columns)

    def arrays(self, batch: pa.RecordBatch | pa.Table) -> list[pa.Array]:
        try:
            arrays = [batch.column(name) for name in self.columns]
        except KeyError:
            missing = next(c for c in self.columns if c not in batch.schema.names)
            raise ValueError(f"key_by({self!r}): the batches have no column {missing!r} (they have "
                             f"{', '.join(batch.schema.names) or 'none'})") from None
        return [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]

    def groups(self, batch: pa.RecordBatch | pa.Table, max_parallelism: int) -> np.ndarray:
        return key_groups_of_columns(self.arrays(batch), max_parallelism)

    def __repr__(self) -> str:
        return repr(self.columns[0]) if len(self.columns) == 1 else repr(self.columns)


class KeyGroupBatchPartitioner(Partitioner):
    """A batch stream's keyed exchange: each record batch is split by the key groups of its key
    columns (hashed once per batch, :mod:`epochal.plan.column_keygroups`), into one slice per
    consumer subtask that owns rows of it. The same key groups as the row path's for the same
    keys, so row and batch jobs place (and restore) keys alike."""

    strategy = "hash"

    def __init__(self, keys: ColumnKeys, max_parallelism: int) -> None:
        self.keys = keys
        self.max_parallelism = max_parallelism
        self._tables: dict[int, np.ndarray] = {}

    def _owners(self, n: int) -> np.ndarray:
        """Key group -> consumer index for ``n`` consumers, in the narrowest unsigned type (numpy
        sorts those by radix), computed once per ``n``."""
        owners = self._tables.get(n)
        if owners is None:
            kind = np.uint8 if n <= 256 else np.uint16 if n <= 65536 else np.uint32
            owners = self._tables[n] = (np.arange(self.max_parallelism, dtype=np.int64) * n
                                        // self.max_parallelism).astype(kind)
        return owners

    def split(self, batch: list[Any], n: int) -> list[list[Any]]:
        if n == 1:
            return [batch]
        targets: list[list[Any]] = [[] for _ in range(n)]
        for element in batch:
            if element.num_rows == 0:
                continue
            owners = self._owners(n)[self.keys.groups(element, self.max_parallelism)]
            counts = np.bincount(owners, minlength=n)
            nonzero = np.flatnonzero(counts)
            if len(nonzero) == 1:
                targets[int(nonzero[0])].append(element)
                continue
            ordered = element.take(pa.array(np.argsort(owners, kind="stable")))  # radix sort: small ints
            offset = 0
            for target, count in enumerate(counts.tolist()):
                if count:
                    targets[target].append(ordered.slice(offset, count))
                    offset += count
        return targets
