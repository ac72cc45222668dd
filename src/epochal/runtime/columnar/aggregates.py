"""Column aggregates of a keyed batch stream: what ``agg(name=("column", "sum"), ...)`` means,
done a whole batch at a time.

An aggregation runs in two steps per input batch. :meth:`Aggregation.partial` groups the batch
by its key columns (Arrow's hash group-by, in C) into one row per distinct key holding that
batch's partial accumulators; :meth:`Aggregation.merge` combines them with the keys' stored
accumulators column by column (``pyarrow.compute``), and :meth:`Aggregation.results` turns
accumulators into the output columns.

Every aggregate skips nulls, as SQL's do: ``count`` counts a column's non-null values, ``sum``,
``min``, ``max`` and ``mean`` of a key whose values were all null are null, ``first`` and
``last`` are the first and last non-null value in arrival order. ``sum`` of an integer column
is an ``int64`` and fails (OverflowError) when it leaves int64's range instead of wrapping;
``mean`` is a ``float64``.

The accumulator of a key, as keyed state stores it (and queryable state and the state
DataFrame reader show it), is a tuple with one item per aggregate in the order given; a mean's
item is the pair ``(sum, count)``, every other item is the aggregate's value so far.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: The aggregate functions ``agg`` takes.
FUNCTIONS = ("sum", "count", "min", "max", "mean", "first", "last")


@dataclass(frozen=True)
class Aggregate:
    """One output column: ``name`` is ``function`` of ``column``."""

    name: str
    column: str
    function: str

    def applies_to(self, kind: pa.DataType) -> bool:
        """Whether this function is defined on a column of type ``kind``."""
        if self.function in ("count", "first", "last"):
            return True
        numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
        if self.function in ("sum", "mean"):
            return numeric or pa.types.is_boolean(kind)
        comparable = (numeric or pa.types.is_boolean(kind) or pa.types.is_string(kind)
                      or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
                      or pa.types.is_large_binary(kind) or pa.types.is_temporal(kind))
        return comparable  # min, max


def parse_aggregates(named: Mapping[str, Any], where: str) -> tuple[Aggregate, ...]:
    """``agg``'s keyword arguments as aggregates, checked: each is ``name=("column", "function")``.

    Raises:
        ValueError: naming the argument that is not of that form, or an unknown function.
    """
    if not named:
        raise ValueError(f"{where} needs at least one aggregate, e.g. agg(total=(\"amount\", \"sum\"))")
    aggregates = []
    for name, spec in named.items():
        if (not isinstance(spec, tuple) or len(spec) != 2 or not isinstance(spec[0], str) or not spec[0]
                or not isinstance(spec[1], str)):
            raise ValueError(f"{where}: {name}={spec!r} must be a pair (\"column\", \"function\"), "
                             f"e.g. {name}=(\"amount\", \"sum\")")
        if spec[1] not in FUNCTIONS:
            raise ValueError(f"{where}: {name}={spec!r} names the function {spec[1]!r}; the functions are "
                             + ", ".join(FUNCTIONS))
        aggregates.append(Aggregate(name, spec[0], spec[1]))
    return tuple(aggregates)


def check_schema(schema: pa.Schema, keys: Sequence[str], aggregates: Sequence[Aggregate], where: str,
                 extra: Sequence[str] = ()) -> None:
    """Raise ValueError naming ``where`` and the column if a key column or an aggregate's column
    is missing from ``schema``, or an aggregate does not apply to its column's type; ``extra``:
    more columns that must exist (a window's timestamp column)."""
    names = schema.names
    for column in [*keys, *extra]:
        if column not in names:
            raise ValueError(f"{where}: the batches have no column {column!r} (they have {', '.join(names) or 'none'})")
    for aggregate in aggregates:
        if aggregate.column not in names:
            raise ValueError(f"{where}: aggregate {aggregate.name!r} reads column {aggregate.column!r}, which the "
                             f"batches do not have (they have {', '.join(names) or 'none'})")
        kind = schema.field(aggregate.column).type
        if not aggregate.applies_to(kind):
            raise ValueError(f"{where}: aggregate {aggregate.name!r}: {aggregate.function} does not apply to column "
                             f"{aggregate.column!r} of type {kind}")
    taken = set(keys) | set(extra)
    for aggregate in aggregates:
        if aggregate.name in taken:
            raise ValueError(f"{where}: aggregate {aggregate.name!r} has the name of a key column; name it otherwise")


#: Arrow's hash aggregate each function's partial accumulators are made with.
_PARTIAL = {"sum": ("sum",), "count": ("count",), "min": ("min",), "max": ("max",), "mean": ("sum", "count"),
            "first": ("first",), "last": ("last",)}


#: 2^63 less what float64 may round a sum near it by: beyond this an int64 sum is not to be trusted.
_INT64_LIMIT = float(2**63) * (1 - 2**-40)

#: How partial fields of one key are combined by a hash aggregation (:meth:`Aggregation.combine`).
_COMBINE = {"sum": "sum", "count": "sum", "min": "min", "max": "max", "first": "first", "last": "last"}


def _options(function: str) -> pc.FunctionOptions | None:
    """Arrow's options for a partial field's hash aggregate: nulls skipped, an all-null group's
    sum, min and max null (made per call: Arrow's option objects do not pickle)."""
    if function == "count":
        return pc.CountOptions(mode="only_valid")
    if function in ("sum", "min", "max"):
        return pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)
    return None


def _checked_add(old: pa.Array, new: pa.Array) -> pa.Array:
    added = pc.add_checked(old, new)
    return pc.coalesce(added, old, new)


class Aggregation:
    """The aggregates of one ``agg`` over batches keyed by ``keys``; stateless (the operator keeps
    the accumulators), so one instance serves every batch."""

    def __init__(self, keys: Sequence[str], aggregates: Sequence[Aggregate]) -> None:
        self.keys = list(keys)
        self.aggregates = tuple(aggregates)
        #: (aggregate index, field index within its accumulator, Arrow function) per partial field
        self.fields: list[tuple[int, int, str]] = [
            (index, field, function) for index, aggregate in enumerate(self.aggregates)
            for field, function in enumerate(_PARTIAL[aggregate.function])]
        self._requests = [(self.aggregates[index].column, function) for index, _, function in self.fields]
        #: the accumulator of a key that has none yet: every aggregate's identity
        self.empty: tuple[Any, ...] = tuple((None, 0) if a.function == "mean" else 0 if a.function == "count" else None
                                            for a in self.aggregates)

    def partial(self, batch: pa.RecordBatch | pa.Table, group_columns: Sequence[str] | None = None) -> pa.Table:
        """One row per distinct key (``group_columns``, default the key columns) of ``batch``, in
        order of first appearance: the key columns, then one column per partial field."""
        by = self.keys if group_columns is None else list(group_columns)
        # Arrow names a group-by's outputs "<column>_<function>" beside the key columns, so the
        # columns are renamed first (k<i>, a<j>): no user column name can collide with another's.
        sources = list(dict.fromkeys(column for column, _ in self._requests))
        arrays = [batch.column(name) for name in by] + [batch.column(name) for name in sources]
        names = [f"k{i}" for i in range(len(by))] + [f"a{j}" for j in range(len(sources))]
        table = pa.Table.from_arrays(arrays, names=names)
        alias = {column: f"a{j}" for j, column in enumerate(sources)}
        requests = dict.fromkeys((alias[column], function) for column, function in self._requests)
        # Integer sums: Arrow's hash sum wraps past 2^63; a float64 shadow sum tells when it did.
        shadows = {alias[column]: f"f{j}" for j, column in enumerate(sources)
                   if any(c == column and f == "sum" for c, f in self._requests)
                   and pa.types.is_integer(table.column(alias[column]).type)}
        for name, shadow in shadows.items():
            table = table.append_column(shadow, pc.cast(table.column(name), pa.float64(), safe=False))
        grouped = table.group_by(names[:len(by)], use_threads=False).aggregate(
            [(column, function, _options(function)) for column, function in requests]
            + [(shadow, "sum", _options("sum")) for shadow in shadows.values()])
        for name, shadow in shadows.items():
            self._check_overflow(grouped.column(f"{shadow}_sum"), sources[int(name[1:])])
        columns = [grouped.column(f"k{i}") for i in range(len(by))]
        columns += [_sum_type(grouped.column(f"{alias[column]}_{function}"), function)
                    for column, function in self._requests]
        return pa.Table.from_arrays([c.combine_chunks() for c in columns],
                                    names=by + [f"__partial{i}" for i in range(len(self._requests))])

    def _check_overflow(self, shadow: pa.ChunkedArray | pa.Array, column: str) -> None:
        """Raise if a float64 shadow of an integer sum left int64's range (the sum wrapped)."""
        largest = pc.max(pc.abs(shadow)).as_py()
        if largest is not None and largest >= _INT64_LIMIT:
            names = [a.name for a in self.aggregates if a.column == column and a.function in ("sum", "mean")]
            raise OverflowError(f"the sum of column {column!r} (aggregate {', '.join(map(repr, names))}) left the "
                                "range of int64; cast the column to float64 or decimal before aggregating")

    def combine(self, tables: Sequence[pa.Table], group_columns: Sequence[str]) -> pa.Table:
        """Tables of :meth:`partial`'s layout (with ``group_columns`` as their keys) combined into
        one row per key, in order of first appearance, as :meth:`merge` would combine them, in one
        hash aggregation: sums and counts add up, min and max of the mins and maxes, the first
        non-null first (the earliest table's) and the last non-null last. A bool column
        ``__dirty`` is or-ed."""
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        by = list(group_columns)
        fields = [f"__partial{i}" for i in range(len(self.fields))]
        requests = [(name, _COMBINE[function], _options(_COMBINE[function]))
                    for name, (_, _, function) in zip(fields, self.fields, strict=True)]
        requests.append(("__dirty", "any", None))
        shadows = []
        for name, (index, _, function) in zip(fields, self.fields, strict=True):
            if function == "sum" and pa.types.is_integer(table.column(name).type):
                shadow = f"{name}_shadow"
                table = table.append_column(shadow, pc.cast(table.column(name), pa.float64(), safe=False))
                requests.append((shadow, "sum", _options("sum")))
                shadows.append((shadow, self.aggregates[index].column))
        grouped = table.group_by(by, use_threads=False).aggregate(requests)
        for shadow, column in shadows:
            self._check_overflow(grouped.column(f"{shadow}_sum"), column)
        columns = [grouped.column(name) for name in by]
        columns += [grouped.column(f"{name}_{function}") for name, function, _ in requests[:len(fields) + 1]]
        return pa.Table.from_arrays(columns, names=[*by, *fields, "__dirty"])

    def stored_fields(self, stored: Sequence[tuple[Any, ...]], types: Sequence[pa.DataType]) -> list[pa.Array]:
        """The stored accumulators of a run of keys (:attr:`empty` for a key with none yet) as one
        Arrow array per partial field, typed as the partial fields ``types`` (no Python call per key)."""
        arrays = []
        for (index, field, _), kind in zip(self.fields, types, strict=True):
            items = map(itemgetter(index), stored)
            if self.aggregates[index].function == "mean":
                items = map(itemgetter(field), items)
            arrays.append(pa.array(list(items), type=kind))
        return arrays

    def merge(self, old: Sequence[pa.Array], new: Sequence[pa.Array]) -> list[pa.Array]:
        """Stored accumulators ``old`` combined with a batch's partial ones ``new``, field by field
        (equal lengths: row i of both is one key)."""
        merged = []
        for (index, _, function), before, now in zip(self.fields, old, new, strict=True):
            if function == "sum":
                try:
                    merged.append(_checked_add(before, now))
                except pa.ArrowInvalid as error:
                    if "overflow" not in str(error):
                        raise
                    self._check_overflow(pa.array([float(2**63)]), self.aggregates[index].column)
            elif function == "count":
                merged.append(pc.add(before, now))
            elif function == "min":
                merged.append(pc.min_element_wise(before, now, skip_nulls=True))
            elif function == "max":
                merged.append(pc.max_element_wise(before, now, skip_nulls=True))
            elif function == "first":
                merged.append(pc.coalesce(before, now))
            else:  # last
                merged.append(pc.coalesce(now, before))
        return merged

    def accumulators(self, fields: Sequence[pa.Array]) -> list[tuple[Any, ...]]:
        """Per key, the tuple keyed state stores (see the module docstring), from merged fields."""
        lists = [field.to_pylist() for field in fields]
        position = 0
        items: list[Any] = []
        for aggregate in self.aggregates:
            if aggregate.function == "mean":
                items.append(zip(lists[position], lists[position + 1], strict=True))
                position += 2
            else:
                items.append(lists[position])
                position += 1
        return list(zip(*items, strict=True))

    def results(self, fields: Sequence[pa.Array]) -> list[pa.Array]:
        """The output columns, one per aggregate, from merged fields."""
        out = []
        position = 0
        for aggregate in self.aggregates:
            if aggregate.function == "mean":
                total, count = fields[position], fields[position + 1]
                position += 2
                divided = pc.divide(pc.cast(total, pa.float64()), pc.cast(count, pa.float64()))
                out.append(pc.if_else(pc.equal(count, 0), pa.scalar(None, pa.float64()), divided))
            else:
                out.append(fields[position])
                position += 1
        return out

    def stored_results(self, stored: Sequence[tuple[Any, ...]], types: Sequence[pa.DataType]) -> list[pa.Array]:
        """The output columns of stored accumulators (a window firing, final results)."""
        return self.results(self.stored_fields(stored, types))


def _sum_type(column: pa.ChunkedArray | pa.Array, function: str) -> pa.ChunkedArray | pa.Array:
    """Integer sums as int64 and counts as int64, whatever width Arrow chose (unsigned for
    unsigned input): one type per output column, whichever batch a key's sum came from."""
    kind = column.type
    if function in ("sum", "count") and pa.types.is_integer(kind) and kind != pa.int64():
        return pc.cast(column, pa.int64())
    return column
