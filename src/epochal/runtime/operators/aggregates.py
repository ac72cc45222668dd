"""Keyed aggregations as accumulator functions: ``aggregate(accumulator or MISSING, record)``.

One class per built-in aggregation (``reduce``, ``count``, ``sum/min/max`` by value or by field,
``min_by/max_by``), the field access they share (:func:`get_field`, :func:`replace_field`), and
the two output forms (:func:`emit_value`, :func:`emit_key_value`). Keyed reduce operators and
windows (:mod:`epochal.runtime.operators.base`, :mod:`epochal.runtime.windows.time_windows`) fold records with them;
all are plain picklable classes, so they travel to the workers inside the plan.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from epochal.errors import record_named

#: The accumulator of a key that has none yet.
MISSING = object()


class ReduceAggregate:
    """``reduce(fn)``: the first record, then ``fn(accumulator, record)``."""

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn

    def __call__(self, acc: Any, record: Any) -> Any:
        return record if acc is MISSING else self.fn(acc, record)


class CountAggregate:
    """``count()``: the number of records seen for the key."""

    def __call__(self, acc: Any, record: Any) -> int:
        return 1 if acc is MISSING else acc + 1


class FoldAggregate:
    """``sum``/``min``/``max``: folds ``value(record)`` with a binary function."""

    def __init__(self, value: Callable[[Any], Any] | None, combine: Callable[[Any, Any], Any]) -> None:
        self.value = value
        self.combine = combine

    def __call__(self, acc: Any, record: Any) -> Any:
        value = record if self.value is None else self.value(record)
        return value if acc is MISSING else self.combine(acc, value)


def get_field(record: Any, field: str | int) -> Any:
    """``record``'s field ``field``: a tuple/list index (int), else a mapping key or an attribute.

    Raises a ``LookupError``/``AttributeError`` that names the field and the record."""
    try:
        if isinstance(field, int) or isinstance(record, Mapping):
            return record[field]
        return getattr(record, field)
    except (LookupError, AttributeError, TypeError) as error:
        text = repr(record)
        text = text if len(text) <= 80 else text[:77] + "..."
        raise record_named(type(error)(f"record {text} has no field {field!r} ({type(error).__name__}: {error})")) \
            from None


def replace_field(record: Any, field: str | int, value: Any) -> Any:
    """A copy of ``record`` whose field ``field`` is ``value`` (``record`` is not changed)."""
    if isinstance(field, int):
        if hasattr(record, "_replace"):  # named tuple
            return record._replace(**{record._fields[field]: value})
        if isinstance(record, tuple):
            index = field % len(record)
            return record[:index] + (value,) + record[index + 1:]
        copied = list(record)
        copied[field] = value
        return copied
    if isinstance(record, Mapping):
        return {**record, field: value}
    if dataclasses.is_dataclass(record):
        return dataclasses.replace(record, **{field: value})  # type: ignore[type-var]
    copied = copy.copy(record)
    setattr(copied, field, value)
    return copied


class FieldAggregate:
    """``sum/min/max(field)`` (Flink's field form): the key's first record, with ``field`` holding
    the running aggregate of that field over the key's records."""

    def __init__(self, field: str | int, combine: Callable[[Any, Any], Any]) -> None:
        self.field = field
        self.combine = combine

    def __call__(self, acc: Any, record: Any) -> Any:
        value = get_field(record, self.field)
        if acc is MISSING:
            return record
        return replace_field(acc, self.field, self.combine(get_field(acc, self.field), value))


class ByFieldAggregate:
    """``min_by/max_by``: the record with the smallest (largest) ``value(record)``; on ties the
    earliest such record stays, as in Flink."""

    def __init__(self, value: Callable[[Any], Any], largest: bool) -> None:
        self.value = value
        self.largest = largest

    def __call__(self, acc: Any, record: Any) -> Any:
        value = self.value(record)
        if acc is MISSING:
            return record
        best = self.value(acc)
        return record if (value > best if self.largest else value < best) else acc


def emit_value(key: Any, value: Any) -> Any:
    """Output of ``reduce``: the accumulated record itself."""
    return value


def emit_key_value(key: Any, value: Any) -> tuple[Any, Any]:
    """Output of ``count``/``sum``/``min``/``max``: ``(key, aggregate)``."""
    return (key, value)


# ---------------------------------------------------------------------- AggregateFunctions
# Window aggregates as Flink's AggregateFunction (epochal.state.descriptors.AggregateFunction):
# ``create_accumulator() -> acc``, ``add(value, acc) -> acc``, ``merge(a, b) -> acc``,
# ``get_result(acc) -> result``. The built-ins keep accumulators immutable (``add`` returns a new
# one), so a window's state can be copied into a checkpoint by reference.
class _ValueFunction:
    """Base of the built-ins: ``value(record)`` (the record itself by default) is aggregated."""

    def __init__(self, value: Callable[[Any], Any] | None = None) -> None:
        self.value = value

    def _of(self, record: Any) -> Any:
        return record if self.value is None else self.value(record)


class CountFunction(_ValueFunction):
    """Records per window."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, record: Any, acc: int) -> int:
        return acc + 1

    def merge(self, a: int, b: int) -> int:
        return a + b

    def get_result(self, acc: int) -> int:
        return acc


class SumFunction(_ValueFunction):
    """Sum of ``value(record)``."""

    def create_accumulator(self) -> Any:
        return 0

    def add(self, record: Any, acc: Any) -> Any:
        return acc + self._of(record)

    def merge(self, a: Any, b: Any) -> Any:
        return a + b

    def get_result(self, acc: Any) -> Any:
        return acc


class _Empty:
    """The accumulator of min/max before any record; pickled by name, so it stays itself."""

    def __reduce__(self) -> str:
        return "EMPTY"

    def __repr__(self) -> str:
        return "EMPTY"


EMPTY = _Empty()


class _ExtremeFunction(_ValueFunction):
    largest = False

    def create_accumulator(self) -> Any:
        return EMPTY

    def add(self, record: Any, acc: Any) -> Any:
        return self.merge(acc, self._of(record))

    def merge(self, a: Any, b: Any) -> Any:
        if a is EMPTY:
            return b
        if b is EMPTY:
            return a
        return (b if b > a else a) if self.largest else (b if b < a else a)

    def get_result(self, acc: Any) -> Any:
        return None if acc is EMPTY else acc


class MinFunction(_ExtremeFunction):
    """Minimum of ``value(record)`` (None for no records)."""


class MaxFunction(_ExtremeFunction):
    """Maximum of ``value(record)`` (None for no records)."""

    largest = True


class AvgFunction(_ValueFunction):
    """Mean of ``value(record)``; the accumulator is ``(sum, count)``."""

    def create_accumulator(self) -> tuple[Any, int]:
        return (0, 0)

    def add(self, record: Any, acc: tuple[Any, int]) -> tuple[Any, int]:
        return (acc[0] + self._of(record), acc[1] + 1)

    def merge(self, a: tuple[Any, int], b: tuple[Any, int]) -> tuple[Any, int]:
        return (a[0] + b[0], a[1] + b[1])

    def get_result(self, acc: tuple[Any, int]) -> float | None:
        return acc[0] / acc[1] if acc[1] else None


#: The built-in window aggregates by name.
BUILTIN_FUNCTIONS: dict[str, type[_ValueFunction]] = {
    "count": CountFunction, "sum": SumFunction, "min": MinFunction, "max": MaxFunction, "avg": AvgFunction}


def check_aggregate_function(function: Any, where: str) -> None:
    """Raise ``TypeError`` naming what ``function`` lacks to be an AggregateFunction."""
    missing = [name for name in ("create_accumulator", "add", "merge", "get_result")
               if not callable(getattr(function, name, None))]
    if missing:
        raise TypeError(f"{where} needs an AggregateFunction with create_accumulator(), add(value, accumulator), "
                        f"merge(a, b) and get_result(accumulator); {type(function).__name__} has no "
                        f"{', '.join(missing)}")


class RollingFunction:
    """A rolling aggregate (``aggregate(accumulator or MISSING, record)``: ``reduce``, ``sum`` by
    field...) as an AggregateFunction whose result is the accumulator, for runtimes that fold
    windows with AggregateFunctions. Its empty accumulator is :data:`EMPTY` (it pickles as
    itself); ``merge`` is not defined for rolling aggregates."""

    def __init__(self, rolling: Callable[[Any, Any], Any]) -> None:
        self.rolling = rolling

    def create_accumulator(self) -> Any:
        return EMPTY

    def add(self, record: Any, acc: Any) -> Any:
        return self.rolling(MISSING if acc is EMPTY else acc, record)

    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError("a rolling aggregate (reduce, sum/min/max by field) cannot merge accumulators")

    def get_result(self, acc: Any) -> Any:
        return None if acc is EMPTY else acc
