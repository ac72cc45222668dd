"""Keyed aggregations as accumulator functions: ``aggregate(accumulator or MISSING, record)``.

One class per built-in aggregation (``reduce``, ``count``, ``sum/min/max`` by value or by field,
``min_by/max_by``), the field access they share (:func:`get_field`, :func:`replace_field`), and
the two output forms (:func:`emit_value`, :func:`emit_key_value`). Keyed reduce operators and
windows (:mod:`epochal.runtime.operators`, :mod:`epochal.runtime.windows`) fold records with them;
all are plain picklable classes, so they travel to the workers inside the plan.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

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
        raise type(error)(f"record {text} has no field {field!r} ({type(error).__name__}: {error})") from None


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
