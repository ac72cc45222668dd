"""Joins on event time: the interval join of two keyed streams and window joins (Flink's
``KeyedStream.intervalJoin`` and ``DataStream.join`` / ``coGroup``).

::

    paid = (orders.key_by(lambda o: o.id)
            .interval_join(payments.key_by(lambda p: p.order), timestamp=lambda o: o.ts,
                           other_timestamp=lambda p: p.ts)
            .between(0, 60)                    # a payment 0..60 after its order
            .process())                        # (order, payment) pairs

    pairs = (clicks.join(views).where(lambda c: c.user).equal_to(lambda v: v.user)
             .window(10, timestamp=lambda c: c.ts, other_timestamp=lambda v: v.ts)
             .apply(lambda c, v: (c.user, c.page, v.page)))

Records carry no timestamps: each side's event time comes from a function (``timestamp`` for
this stream, ``other_timestamp`` for the other one; it defaults to ``timestamp``). Watermarks
come from ``with_watermarks`` upstream of both sides. The operators are in
:mod:`epochal.runtime.windows.joins`; their buffers are managed keyed state, cleaned up as the
watermark passes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from epochal.api.fields import check_callable
from epochal.api.windowed import time_windows
from epochal.errors import PlanError
from epochal.runtime.operators.functions import tag_id
from epochal.runtime.windows.assigners import SlidingEventTimeWindows, TumblingEventTimeWindows
from epochal.runtime.windows.joins import (
    IntervalJoinOperator,
    JoinContext,
    ProcessJoinFunction,
    as_process_join_function,
)
from epochal.runtime.windows.shapes import TimeWindows
from epochal.runtime.windows.window_join import CO_GROUP, FLAT_JOIN, JOIN, WindowJoinOperator
from epochal.validation import check_number

if TYPE_CHECKING:
    from epochal.api.datastream import DataStream
    from epochal.runtime.operators.functions import OutputTag

__all__ = ["IntervalJoin", "IntervalJoined", "JoinContext", "JoinedStreams", "ProcessJoinFunction", "WindowedJoin",
           "co_group", "interval_join", "join"]


def _check_stream(stream: Any, method: str) -> None:
    from epochal.api.datastream import DataStream

    if not isinstance(stream, DataStream):
        raise PlanError(f"{method}() takes a DataStream, got {type(stream).__name__}")


def _check_timestamp(timestamp: Any, method: str) -> None:
    if timestamp is None:
        raise PlanError(f"{method}() needs timestamp=...: records carry no event time, so the join reads it with "
                        "a function, e.g. timestamp=lambda record: record[1] (other_timestamp= for the other "
                        "stream, if it differs)")
    check_callable(timestamp, f"{method}(timestamp=...)")


def interval_join(keyed: DataStream, other: DataStream, timestamp: Callable[[Any], Any] | None = None,
                  other_timestamp: Callable[[Any], Any] | None = None) -> IntervalJoin:
    """``keyed.interval_join(other, ...)``: both streams keyed (``key_by``), their keys equal for
    records that belong together; ``timestamp(record)`` is the event time of ``keyed``'s
    records, ``other_timestamp`` (default: ``timestamp``) of ``other``'s. Continue with
    :meth:`IntervalJoin.between`."""
    _check_stream(other, "interval_join")
    if keyed._key_selector() is None:
        raise keyed._not_keyed("interval_join")
    if other._key_selector() is None:
        raise PlanError("interval_join() joins two keyed streams: key_by(...) the other stream too, e.g. "
                        "a.key_by(f).interval_join(b.key_by(g), timestamp=...)")
    if keyed.env is not other.env:
        raise PlanError("interval_join() needs streams of the same Environment")
    if timestamp is None:
        timestamp, other_timestamp = keyed._event_time(), other_timestamp or other._event_time()
    _check_timestamp(timestamp, "interval_join")
    if other_timestamp is not None:
        check_callable(other_timestamp, "interval_join(other_timestamp=...)")
    return IntervalJoin(keyed, other, timestamp, other_timestamp or timestamp)  # type: ignore[arg-type]


class IntervalJoin:
    """Two keyed streams to join by event time; :meth:`between` sets the interval."""

    def __init__(self, left: DataStream, right: DataStream, timestamp: Callable[[Any], Any],
                 other_timestamp: Callable[[Any], Any]) -> None:
        self.left, self.right = left, right
        self.timestamp, self.other_timestamp = timestamp, other_timestamp

    def between(self, lower: float, upper: float) -> IntervalJoined:
        """Join a left record at ``t`` with the right records of its key at ``t + lower`` to
        ``t + upper`` (both inclusive; either may be negative; ``lower <= upper``)."""
        check_number(lower, "interval join lower bound", minimum=None)
        check_number(upper, "interval join upper bound", minimum=None)
        if lower > upper:
            raise PlanError(f"between(lower, upper) needs lower <= upper, got between({lower}, {upper})")
        return IntervalJoined(self, lower, upper)


class IntervalJoined:
    """An interval join with its bounds; options return the same object, :meth:`process` the
    joined stream."""

    def __init__(self, join: IntervalJoin, lower: float, upper: float) -> None:
        self.join = join
        self.lower, self.upper = lower, upper
        self.lower_inclusive = self.upper_inclusive = True
        self.late_tags: list[str | None] = [None, None]

    def lower_bound_exclusive(self) -> IntervalJoined:
        """Leave out right records at exactly ``t + lower``."""
        self.lower_inclusive = False
        return self

    def upper_bound_exclusive(self) -> IntervalJoined:
        """Leave out right records at exactly ``t + upper``."""
        self.upper_inclusive = False
        return self

    def _tag(self, tag: OutputTag, method: str) -> str:
        try:
            return tag_id(tag, f"{method}()")
        except TypeError as error:
            raise PlanError(str(error)) from None

    def side_output_left_late_data(self, tag: OutputTag) -> IntervalJoined:
        """Send late records of this (the left) stream to side output ``tag`` instead of
        dropping them; read it with ``joined.side_output(tag)``."""
        self.late_tags[0] = self._tag(tag, "side_output_left_late_data")
        return self

    def side_output_right_late_data(self, tag: OutputTag) -> IntervalJoined:
        """Send late records of the other (the right) stream to side output ``tag``."""
        self.late_tags[1] = self._tag(tag, "side_output_right_late_data")
        return self

    def side_output_late_data(self, tag: OutputTag) -> IntervalJoined:
        """Send late records of both streams to side output ``tag``."""
        self.late_tags[:] = [self._tag(tag, "side_output_late_data")] * 2
        return self

    def process(self, fn: ProcessJoinFunction | Callable[..., Iterable[Any] | None] | None = None) -> DataStream:
        """The joined stream: for every pair, the records ``fn`` returns (a
        :class:`ProcessJoinFunction` or ``fn(left, right, ctx)``), or ``(left, right)``."""
        if self.lower == self.upper and not (self.lower_inclusive and self.upper_inclusive):
            raise PlanError(f"between({self.lower}, {self.upper}) with an exclusive bound is an empty interval: "
                            "it would join nothing")
        function = None
        if fn is not None:
            try:
                function = as_process_join_function(fn)
            except TypeError as error:
                raise PlanError(str(error)) from None
        join = self.join
        left, right = join.left, join.right
        key1, key2 = left._key_selector(), right._key_selector()
        operator = IntervalJoinOperator(key1, key2, join.timestamp,  # type: ignore[arg-type]
                                        join.other_timestamp, self.lower, self.upper,
                                        lower_inclusive=self.lower_inclusive, upper_inclusive=self.upper_inclusive,
                                        function=function, left_late_tag=self.late_tags[0],
                                        right_late_tag=self.late_tags[1])
        functions = [f for f in (function, key1, key2, join.timestamp, join.other_timestamp) if f is not None]
        return left._add("interval_join", "IntervalJoin", operator, functions, inputs=[left.node.id, right.node.id])


def join(stream: DataStream, other: DataStream) -> JoinedStreams:
    """``stream.join(other)``: an inner join per key and event-time window; continue with
    ``.where(key).equal_to(other_key).window(...).apply(fn)``."""
    return JoinedStreams(stream, other, co_group=False)


def co_group(stream: DataStream, other: DataStream) -> JoinedStreams:
    """``stream.co_group(other)``: both streams' records per key and window, handed to one
    function; continue with ``.where(key).equal_to(other_key).window(...).apply(fn)``."""
    return JoinedStreams(stream, other, co_group=True)


class JoinedStreams:
    """Two streams to join (or co-group) per key and window (Flink's ``JoinedStreams``)."""

    def __init__(self, first: DataStream, second: DataStream, co_group: bool = False,
                 key1: Callable[[Any], Any] | None = None, key2: Callable[[Any], Any] | None = None) -> None:
        self.method = "co_group" if co_group else "join"
        _check_stream(second, self.method)
        if first.env is not second.env:
            raise PlanError(f"{self.method}() needs streams of the same Environment")
        self.first, self.second = first, second
        self.co_group = co_group
        self.key1, self.key2 = key1, key2

    def where(self, key: Callable[[Any], Any]) -> JoinedStreams:
        """The key of this stream's records."""
        check_callable(key, "where")
        return JoinedStreams(self.first, self.second, self.co_group, key, None)

    def equal_to(self, key: Callable[[Any], Any]) -> JoinedStreams:
        """The key of the other stream's records (records join when both keys are equal)."""
        if self.key1 is None:
            raise PlanError(f"{self.method}(...).equal_to() comes after where(key): "
                            f"a.{self.method}(b).where(key_a).equal_to(key_b)")
        check_callable(key, "equal_to")
        return JoinedStreams(self.first, self.second, self.co_group, self.key1, key)

    def window(self, windows: float | TimeWindows | Any, timestamp: Callable[[Any], Any] | None = None,
               other_timestamp: Callable[[Any], Any] | None = None, slide: float | None = None) -> WindowedJoin:
        """Event-time windows: a size (tumbling, or sliding with ``slide``), a
        :class:`TimeWindows`, ``TumblingEventTimeWindows.of(size)``, ``SlidingEventTimeWindows.of(size,
        slide)``, or any assigner with ``starts(t)`` and ``closes(start, watermark)``.
        ``timestamp``/``other_timestamp`` (default: ``timestamp``) read the event times (default:
        those of the ``with_watermarks`` each stream's records come from unchanged)."""
        if self.key1 is None or self.key2 is None:
            raise PlanError(f"{self.method}(...).window() needs both keys first: "
                            f"a.{self.method}(b).where(key_a).equal_to(key_b).window(...)")
        if timestamp is None:
            timestamp, other_timestamp = self.first._event_time(), other_timestamp or self.second._event_time()
        _check_timestamp(timestamp, "window")
        if other_timestamp is not None:
            check_callable(other_timestamp, "window(other_timestamp=...)")
        if isinstance(windows, (TumblingEventTimeWindows, SlidingEventTimeWindows)):
            if windows.offset:
                raise PlanError("window joins take event-time windows without an offset")
            windows = TimeWindows(windows.size, getattr(windows, "slide", None))
        if callable(getattr(windows, "starts", None)) and callable(getattr(windows, "closes", None)):
            if slide is not None:
                raise PlanError("window(): slide= goes with a window size, not with a window assigner")
            assigner = windows
        else:
            assigner = time_windows(windows, slide)
        return WindowedJoin(self, assigner, timestamp, other_timestamp or timestamp)  # type: ignore[arg-type]


class WindowedJoin:
    """A window join (or co-group) ready for its function."""

    def __init__(self, streams: JoinedStreams, windows: Any, timestamp: Callable[[Any], Any],
                 other_timestamp: Callable[[Any], Any]) -> None:
        self.streams = streams
        self.windows = windows
        self.timestamp, self.other_timestamp = timestamp, other_timestamp

    def _describe(self) -> str:
        windows = self.windows
        if isinstance(windows, TimeWindows):
            return f"{windows.size}, slide {windows.slide}" if windows.sliding else f"{windows.size}"
        return type(windows).__name__

    def _build(self, mode: str, name: str, fn: Callable[..., Any]) -> DataStream:
        streams = self.streams
        check_callable(fn, "apply" if mode != FLAT_JOIN else "flat_apply")
        if isinstance(fn, type):
            raise PlanError(f"apply() takes a function, got the class {fn.__name__}")
        key1, key2 = streams.key1, streams.key2
        assert key1 is not None and key2 is not None
        first, second = streams.first.key_by(key1), streams.second.key_by(key2)
        operator = WindowJoinOperator(key1, key2, self.timestamp, self.other_timestamp, self.windows, fn, mode)
        functions = [fn, key1, key2, self.timestamp, self.other_timestamp]
        return first._add(mode, f"{name}({self._describe()})", operator, functions,
                          inputs=[first.node.id, second.node.id])

    def apply(self, fn: Callable[..., Any]) -> DataStream:
        """Join: ``fn(left, right)`` for every pair of each key's window (one output record per
        pair: an inner join). Co-group: every record of ``fn(key, lefts, rights)`` (an
        iterable or None) for every key and window with records on either side."""
        if self.streams.co_group:
            return self._build(CO_GROUP, "CoGroup", fn)
        return self._build(JOIN, "WindowJoin", fn)

    def flat_apply(self, fn: Callable[[Any, Any], Iterable[Any] | None]) -> DataStream:
        """Join only: every record of ``fn(left, right)`` (an iterable or None) per pair."""
        if self.streams.co_group:
            raise PlanError("flat_apply() is for join(); a co_group's apply(fn) already returns any number of records")
        return self._build(FLAT_JOIN, "WindowJoin", fn)
