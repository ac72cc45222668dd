"""WindowedStream: a keyed stream cut into tumbling event-time windows."""

from __future__ import annotations

import operator as _op
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from epochal.api.fields import Field, check_callable, check_field
from epochal.runtime.aggregates import CountAggregate, FieldAggregate, FoldAggregate, ReduceAggregate
from epochal.runtime.windows import TumblingWindowOperator

if TYPE_CHECKING:
    from epochal.api.datastream import DataStream, KeyedStream


class WindowedStream:
    """A keyed stream cut into tumbling event-time windows; an aggregation makes it a stream
    of ``(key, window start, result)``, one record per key and window."""

    def __init__(self, keyed: KeyedStream, size: float, timestamp: Callable[[Any], Any]) -> None:
        self.keyed = keyed
        self.size = size
        self.timestamp = timestamp

    def _window(self, name: str, aggregate: Callable[[Any, Any], Any], functions: list[Any]) -> DataStream:
        keyed = self.keyed
        operator = TumblingWindowOperator(keyed.key_selector, self.timestamp, self.size, aggregate)
        return keyed._add("window", f"Window({self.size}) {name}", operator,
                          [keyed.key_selector, self.timestamp, *functions])

    def count(self) -> DataStream:
        """Records per key and window."""
        return self._window("Count", CountAggregate(), [])

    def reduce(self, fn: Callable[[Any, Any], Any]) -> DataStream:
        """``fn(accumulated, record)`` over each key's records in the window."""
        check_callable(fn, "reduce")
        return self._window("Reduce", ReduceAggregate(fn), [fn])

    def _fold(self, name: str, value: Field, combine: Callable[[Any, Any], Any]) -> DataStream:
        if value is None or callable(value):
            return self._window(name, FoldAggregate(value, combine), [value])
        return self._window(name, FieldAggregate(check_field(value, name.lower()), combine), [])

    def sum(self, value: Field = None) -> DataStream:
        """Sum of ``value(record)`` (the record itself by default) per key and window; with a
        field name or tuple index, the window's first record with that field holding the sum."""
        return self._fold("Sum", value, _op.add)

    def min(self, value: Field = None) -> DataStream:
        """Minimum of ``value(record)`` (or of a field, as :meth:`sum`) per key and window."""
        return self._fold("Min", value, min)

    def max(self, value: Field = None) -> DataStream:
        """Maximum of ``value(record)`` (or of a field, as :meth:`sum`) per key and window."""
        return self._fold("Max", value, max)
