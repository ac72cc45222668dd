"""WindowedStream: a keyed stream cut into windows, by shape (time or count, tumbling or sliding)
or by any window assigner with triggers, allowed lateness and late side outputs.

``keyed.window(size, timestamp, slide)`` and ``keyed.count_window(size, slide)`` keep their
dedicated operators (:mod:`epochal.runtime.windows.time_windows`, :mod:`epochal.runtime.windows.count_windows`).
A window assigner (:func:`assigner_window`), a ``trigger``, an ``allowed_lateness``, a late side
output, a window function or ``process`` run the general window operator
(:mod:`epochal.runtime.windows.operator`); see docs/windows.md.
"""

from __future__ import annotations

import operator as _op
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from epochal.api.event_time import WatermarkStrategy, event_time_input
from epochal.api.fields import Field, check_callable, check_field, field_getter
from epochal.errors import PlanError
from epochal.runtime.operators.aggregates import (
    AvgFunction,
    CountAggregate,
    FieldAggregate,
    FoldAggregate,
    ReduceAggregate,
    check_aggregate_function,
)
from epochal.runtime.operators.base import Operator
from epochal.runtime.operators.functions import tag_id
from epochal.runtime.windows.assigners import (
    GLOBAL_WINDOW,
    EventTimeSessionWindows,
    GlobalWindow,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
    WindowResult,
)
from epochal.runtime.windows.context import ProcessWindowFunction, WindowContext, as_window_function
from epochal.runtime.windows.count_windows import CountWindowOperator
from epochal.runtime.windows.operator import WindowOperator
from epochal.runtime.windows.shapes import CountWindows, TimeWindows
from epochal.runtime.windows.time_windows import FunctionAggregate, TimeWindowOperator
from epochal.runtime.windows.triggers import (
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerResult,
)
from epochal.validation import check_number

if TYPE_CHECKING:
    from epochal.api.datastream import DataStream
    from epochal.api.keyed import KeyedStream

__all__ = [
    "GLOBAL_WINDOW", "CountTrigger", "EventTimeSessionWindows", "EventTimeTrigger", "GlobalWindow", "GlobalWindows",
    "NeverTrigger", "ProcessWindowFunction", "ProcessingTimeSessionWindows", "ProcessingTimeTrigger",
    "PurgingTrigger", "SlidingEventTimeWindows", "SlidingProcessingTimeWindows", "TimeWindow", "Trigger",
    "TriggerResult", "TumblingEventTimeWindows", "TumblingProcessingTimeWindows", "WindowAssigner",
    "WindowContext", "WindowResult", "WindowedStream", "assigner_window", "count_windows", "keyed_window",
    "time_windows",
]


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


def assigner_window(keyed: KeyedStream, assigner: WindowAssigner,
                    timestamp: Callable[[Any], Any] | WatermarkStrategy | None = None) -> WindowedStream:
    """``keyed`` windowed by ``assigner`` (Flink's ``keyBy(...).window(assigner)``).

    Event-time assigners need ``timestamp(record)``, the record's event time (records carry none;
    without ``timestamp``, that of a ``with_watermarks`` whose records reach the window unchanged,
    through partitioning and filters, is used). When no watermarks reach the window and its input
    is unbounded, it makes them from ``timestamp`` (see :func:`~epochal.api.event_time.event_time_input`;
    a :class:`WatermarkStrategy` as ``timestamp`` sets their out-of-orderness). Processing-time
    assigners window by the wall clock and take none; global windows may take one (their
    trigger sees it)."""
    if not isinstance(assigner, WindowAssigner):
        raise PlanError(f"window() takes a size or a WindowAssigner (e.g. TumblingEventTimeWindows.of(10)), "
                        f"got {type(assigner).__name__}: {assigner!r}")
    if assigner.is_event_time:
        function, keyed = event_time_input(keyed, timestamp, f"window({assigner!r})")
        return WindowedStream(keyed, assigner, function)
    if isinstance(timestamp, WatermarkStrategy):
        timestamp = timestamp.assigner("window()")
    if timestamp is not None:
        check_callable(timestamp, "window")
        if not isinstance(assigner, GlobalWindows):
            raise PlanError(f"window({assigner!r}) follows the wall clock: it takes no timestamp function")
    return WindowedStream(keyed, assigner, timestamp)


def keyed_window(keyed: KeyedStream, size_or_assigner: Any,
                 timestamp: Callable[[Any], Any] | WatermarkStrategy | None = None,
                 slide: Any = None) -> WindowedStream:
    """What ``KeyedStream.window`` does: an assigner (:func:`assigner_window`) or event-time
    windows of a size (tumbling, or sliding by ``slide``), which need ``timestamp``."""
    if isinstance(size_or_assigner, WindowAssigner):
        if slide is not None:
            raise PlanError("window(assigner) takes no slide: the assigner has it (SlidingEventTimeWindows.of(...))")
        return assigner_window(keyed, size_or_assigner, timestamp)
    windows = time_windows(size_or_assigner, slide)
    function, keyed = event_time_input(keyed, timestamp, f"window({size_or_assigner!r})")
    return WindowedStream(keyed, windows, function)


class WindowedStream:
    """A keyed stream cut into windows; an aggregation (``count``, ``sum``, ``min``, ``max``,
    ``avg``, ``reduce``, ``aggregate``) or ``process`` makes it a stream again.

    Windows of a shape (:meth:`KeyedStream.window` with a size, :meth:`KeyedStream.count_window`):
    time windows emit ``(key, window start, result)`` when the watermark reaches their end
    (``start + size - 1``), and every open one fires when a bounded input ends; records of
    windows that already fired are late and dropped (counted in
    ``JobResult.late_records_dropped``). Count windows emit ``(key, result)`` with their
    ``size``-th record; when the input ends, windows that are not full never fire.

    Windows of an assigner (and time windows given a trigger, a lateness, a late side output, a
    window function or ``process``) emit a :class:`WindowResult` per firing, equal to ``(key,
    window start, result)``, or what the window function returns. :meth:`trigger`,
    :meth:`allowed_lateness` and :meth:`side_output_late_data` configure them and return this
    stream. Windows are managed keyed state: checkpoints hold them and a restore at another
    parallelism moves them with their keys.
    """

    def __init__(self, keyed: KeyedStream, windows: TimeWindows | CountWindows | WindowAssigner,
                 timestamp: Callable[[Any], Any] | None = None) -> None:
        self.keyed = keyed
        self.windows = windows
        self.size = getattr(windows, "size", None)
        self.slide = getattr(windows, "slide", None)
        self.timestamp = timestamp
        self._trigger: Trigger | None = None
        self._lateness: Any = 0
        self._late_tag: str | None = None

    # ---------------------------------------------------------------- configuration
    def trigger(self, trigger: Trigger) -> WindowedStream:
        """Fire windows with ``trigger`` instead of the assigner's default (Flink's ``trigger``)."""
        if not isinstance(trigger, Trigger):
            raise PlanError(f"trigger() takes a Trigger (e.g. CountTrigger.of(3)), got {type(trigger).__name__}")
        self._assigner("trigger")
        self._trigger = trigger
        return self

    def allowed_lateness(self, lateness: Any) -> WindowedStream:
        """Keep event-time windows ``lateness`` past their end: records that arrive by then are
        added and re-fire the window (a late firing); later ones are late."""
        check_number(lateness, "allowed lateness", strict=False)
        self._assigner("allowed_lateness")
        self._lateness = lateness
        return self

    def side_output_late_data(self, tag: Any) -> WindowedStream:
        """Send late records to the side output ``tag`` (an OutputTag; read it with
        ``side_output(tag)`` on the windowed result) instead of dropping them."""
        try:
            self._late_tag = tag_id(tag, "side_output_late_data()")
        except TypeError as error:
            raise PlanError(str(error)) from None
        self._assigner("side_output_late_data")
        return self

    def _assigner(self, method: str) -> WindowAssigner:
        """The window assigner equivalent to these windows, for the general window operator."""
        windows = self.windows
        if isinstance(windows, WindowAssigner):
            return windows
        if isinstance(windows, CountWindows):
            raise PlanError(f"{method}() is not available on count_window(): use "
                            f"window(GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(n)))")
        if windows.sliding:
            return SlidingEventTimeWindows.of(windows.size, windows.slide)
        return TumblingEventTimeWindows.of(windows.size)

    # ---------------------------------------------------------------- building
    def _general(self, name: str, aggregate: Callable[[Any, Any], Any] | None,
                 function: ProcessWindowFunction | None, functions: list[Any]) -> DataStream:
        keyed = self.keyed
        assigner = self._assigner(name.lower())
        try:
            operator = WindowOperator(keyed.key_selector, assigner, trigger=self._trigger, timestamp=self.timestamp,
                                      aggregate=aggregate, function=function, allowed_lateness=self._lateness,
                                      late_tag=self._late_tag)
        except TypeError as error:
            raise PlanError(f"window({assigner!r}).{name.lower()}(): {error}") from None
        trigger = f" {self._trigger!r}" if self._trigger is not None else ""
        return keyed._add("window", f"Window({assigner!r}{trigger}) {name}", operator,
                          [keyed.key_selector, self.timestamp, assigner, self._trigger, *functions])

    def _window(self, name: str, aggregate: Callable[[Any, Any], Any], functions: list[Any],
                window_function: Any = None) -> DataStream:
        function = None
        if window_function is not None:
            try:
                function = as_window_function(window_function)
            except TypeError as error:
                raise PlanError(f"{name.lower()}(window_function=...) {error}") from None
            functions = [*functions, window_function]
        windows = self.windows
        if (isinstance(windows, WindowAssigner) or function is not None or self._trigger is not None
                or self._lateness or self._late_tag is not None):
            return self._general(name, aggregate, function, functions)
        keyed = self.keyed
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

    # ---------------------------------------------------------------- functions
    def process(self, function: ProcessWindowFunction | Callable[..., Any]) -> DataStream:
        """A full-window function: ``function.process(key, context, elements)`` (or a plain
        ``fn(key, context, elements)``) gets all records of the window, in arrival order, per
        firing and returns (or yields) the records to emit; ``context.window()`` is the window.
        Keeps every record of open windows in state: prefer an aggregation when one fits."""
        try:
            wrapped = as_window_function(function)
        except TypeError as error:
            raise PlanError(f"process() {error}") from None
        return self._general("Process", None, wrapped, [function])

    def count(self) -> DataStream:
        """Records per key and window."""
        return self._window("Count", CountAggregate(), [])

    def reduce(self, fn: Callable[[Any, Any], Any], window_function: Any = None) -> DataStream:
        """``fn(accumulated, record)`` over each key's records in the window (the first record
        starts it); the result is the accumulated record. With ``window_function`` (a
        ProcessWindowFunction or ``fn(key, context, [result])``) a firing emits what it returns.
        ``fn`` returns a new value and leaves its arguments as they are (a snapshot may share
        them); an accumulator that changes in place belongs in :meth:`aggregate`."""
        check_callable(fn, "reduce")
        return self._window("Reduce", ReduceAggregate(fn), [fn], window_function)

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

    def aggregate(self, function: Any, window_function: Any = None) -> DataStream:
        """Any AggregateFunction (Flink's): an object with ``create_accumulator()``,
        ``add(record, accumulator) -> accumulator``, ``merge(a, b) -> accumulator`` and
        ``get_result(accumulator) -> result``; each window starts from ``create_accumulator()``
        and emits ``get_result`` (or, with ``window_function``, what it returns for
        ``[get_result]``). ``add`` may change the accumulator in place and return it."""
        if isinstance(function, type):
            raise PlanError(f"aggregate() takes an AggregateFunction object, got the class {function.__name__}: "
                            f"pass {function.__name__}(...)")
        try:
            check_aggregate_function(function, "aggregate()")
        except TypeError as error:
            raise PlanError(str(error)) from None
        return self._window(type(function).__name__, FunctionAggregate(function), [function], window_function)
