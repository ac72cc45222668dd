"""WindowedStream: a keyed stream cut into windows, time or count, tumbling or sliding."""

from __future__ import annotations

import operator as _op
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from epochal.api.fields import Field, check_callable, check_field, field_getter
from epochal.errors import PlanError
from epochal.runtime.aggregates import (
    AvgFunction,
    CountAggregate,
    FieldAggregate,
    FoldAggregate,
    ReduceAggregate,
    check_aggregate_function,
)
from epochal.runtime.count_windows import CountWindowOperator
from epochal.runtime.operators import Operator
from epochal.runtime.window_assigners import CountWindows, TimeWindows
from epochal.runtime.windows import FunctionAggregate, TimeWindowOperator

if TYPE_CHECKING:
    from epochal.api.datastream import DataStream, KeyedStream


def time_windows(size: Any, slide: Any) -> TimeWindows:
    """``TimeWindows(size, slide)``, or one :class:`PlanError` naming the bad argument."""
    try:
        return TimeWindows(size, slide)
    except (TypeError, ValueError) as error:
        raise PlanError(f"window(): {error}") from None


def count_windows(size: Any, slide: Any) -> CountWindows:
    """``CountWindows(size, slide)``, or one :class:`PlanError` naming the bad argument."""
    try:
        return CountWindows(size, slide)
    except (TypeError, ValueError) as error:
        raise PlanError(f"count_window(): {error}") from None


class WindowedStream:
    """A keyed stream cut into windows; an aggregation makes it a stream of one record per key
    and window: ``(key, window start, result)`` for time windows (:meth:`KeyedStream.window`),
    ``(key, result)`` for count windows (:meth:`KeyedStream.count_window`).

    Time windows fire when the watermark reaches their end (``start + size - 1``), and every
    open one fires when a bounded input ends; records of windows that already fired are late and
    dropped (counted in ``JobResult.late_records_dropped``). Count windows fire with their
    ``size``-th record; when the input ends, windows that are not full never fire. Windows are
    managed keyed state: checkpoints hold them and a restore at another parallelism moves them
    with their keys.
    """

    def __init__(self, keyed: KeyedStream, windows: TimeWindows | CountWindows,
                 timestamp: Callable[[Any], Any] | None = None) -> None:
        self.keyed = keyed
        self.windows = windows
        self.size = windows.size
        self.slide = windows.slide
        self.timestamp = timestamp

    def _window(self, name: str, aggregate: Callable[[Any, Any], Any], functions: list[Any]) -> DataStream:
        keyed = self.keyed
        windows = self.windows
        slide = f", slide {windows.slide}" if windows.sliding else ""
        operator: Operator
        if isinstance(windows, CountWindows):
            operator = CountWindowOperator(keyed.key_selector, windows, aggregate)
            return keyed._add("count_window", f"CountWindow({windows.size}{slide}) {name}", operator,
                              [keyed.key_selector, *functions])
        timestamp = cast(Callable[[Any], Any], self.timestamp)  # time windows always have one
        operator = TimeWindowOperator(keyed.key_selector, timestamp, windows, aggregate)
        return keyed._add("window", f"Window({windows.size}{slide}) {name}", operator,
                          [keyed.key_selector, timestamp, *functions])

    def count(self) -> DataStream:
        """Records per key and window."""
        return self._window("Count", CountAggregate(), [])

    def reduce(self, fn: Callable[[Any, Any], Any]) -> DataStream:
        """``fn(accumulated, record)`` over each key's records in the window (the first record
        starts it); the result is the accumulated record."""
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

    def avg(self, value: Field = None) -> DataStream:
        """Mean of ``value(record)`` (the record itself by default; or of a field name or tuple
        index) per key and window, a float."""
        getter = None if value is None else field_getter(value, "avg")
        return self._window("Avg", FunctionAggregate(AvgFunction(getter)), [value] if callable(value) else [])

    def aggregate(self, function: Any) -> DataStream:
        """Any AggregateFunction (Flink's): an object with ``create_accumulator()``,
        ``add(record, accumulator) -> accumulator``, ``merge(a, b) -> accumulator`` and
        ``get_result(accumulator) -> result``; each window starts from ``create_accumulator()``
        and emits ``get_result``. ``add`` may change the accumulator in place and return it."""
        if isinstance(function, type):
            raise PlanError(f"aggregate() takes an AggregateFunction object, got the class {function.__name__}: "
                            f"pass {function.__name__}(...)")
        try:
            check_aggregate_function(function, "aggregate()")
        except TypeError as error:
            raise PlanError(str(error)) from None
        return self._window(type(function).__name__, FunctionAggregate(function), [function])
