"""Windows and window assigners of the general window operator (Flink's ``WindowAssigner``s).

A window assigner says which windows a record belongs to, on which clock, whether windows merge,
and which trigger fires them by default:

=====================================  ===============  =========  ==========================
assigner                               clock            merging    default trigger
=====================================  ===============  =========  ==========================
``TumblingEventTimeWindows.of``        event time       no         ``EventTimeTrigger``
``SlidingEventTimeWindows.of``         event time       no         ``EventTimeTrigger``
``TumblingProcessingTimeWindows.of``   wall clock       no         ``ProcessingTimeTrigger``
``SlidingProcessingTimeWindows.of``    wall clock       no         ``ProcessingTimeTrigger``
``EventTimeSessionWindows``            event time       yes        ``EventTimeTrigger``
``ProcessingTimeSessionWindows``       wall clock       yes        ``ProcessingTimeTrigger``
``GlobalWindows.create``               none             no         ``NeverTrigger``
=====================================  ===============  =========  ==========================

Time windows are :class:`TimeWindow` values ``[start, end)``; a window start is
``t - (t - offset) % slide`` as in Flink. Event times are in the unit of the user's
``timestamp(record)``; wall-clock times are seconds (``time.time()``, floats). Session windows of
a record are ``[t, t + gap)``; two sessions of a key merge when they intersect or touch
(``a.start <= b.end and a.end >= b.start``, Flink's rule). Every value here is picklable and
immutable, shared by all keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from epochal.errors import PlanError
from epochal.runtime.windows.triggers import EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger, Trigger
from epochal.validation import check_number


class TimeWindow(tuple):
    """The window ``[start, end)``: a ``(start, end)`` tuple (hashes, compares and sorts as one),
    with ``max_timestamp() == end - 1``, the last event time it holds (Flink's)."""

    __slots__ = ()

    def __new__(cls, start: Any, end: Any) -> TimeWindow:
        return tuple.__new__(cls, (start, end))

    @property
    def start(self) -> Any:
        return self[0]

    @property
    def end(self) -> Any:
        return self[1]

    def max_timestamp(self) -> Any:
        return self[1] - 1

    def intersects(self, other: TimeWindow) -> bool:
        """Whether the windows overlap or touch (then session windows merge)."""
        return self[0] <= other[1] and self[1] >= other[0]

    def __getnewargs__(self) -> tuple[Any, Any]:
        return (self[0], self[1])

    def __repr__(self) -> str:
        return f"TimeWindow({self[0]!r}, {self[1]!r})"


class GlobalWindow:
    """The one window of :class:`GlobalWindows` (a singleton: ``GlobalWindow() is GLOBAL_WINDOW``);
    it has no start or end and never ends (``max_timestamp()`` is infinity)."""

    __slots__ = ()
    _instance: GlobalWindow | None = None
    start = None
    end = None

    def __new__(cls) -> GlobalWindow:
        if cls._instance is None:
            cls._instance = object.__new__(cls)
        return cls._instance

    def max_timestamp(self) -> float:
        return math.inf

    def __reduce__(self) -> str:
        return "GLOBAL_WINDOW"

    def __repr__(self) -> str:
        return "GlobalWindow()"


GLOBAL_WINDOW = GlobalWindow()


class WindowResult(tuple):
    """What an aggregating window emits per firing: a tuple ``(key, start, value)``, equal to and
    hashing as that plain tuple (so code comparing with 3-tuples keeps working), with the names
    ``key``, ``start``, ``end``, ``value`` (also ``result``) and ``window``. A global window's
    ``start`` and ``end`` are None. Pickles as ``WindowResult(key, window, value)``; ``repr`` and
    ``str`` are the plain tuple's."""

    window: Any

    def __new__(cls, key: Any, window: Any, value: Any) -> WindowResult:
        self = tuple.__new__(cls, (key, window.start, value))
        self.window = window
        return self

    @property
    def key(self) -> Any:
        return self[0]

    @property
    def start(self) -> Any:
        return self[1]

    @property
    def end(self) -> Any:
        return self.window.end

    @property
    def value(self) -> Any:
        return self[2]

    result = value

    def __reduce__(self) -> tuple[Any, ...]:
        return (WindowResult, (self[0], self.window, self[2]))

    def __repr__(self) -> str:  # as the plain tuple: output formatted with repr/str stays the same
        return tuple.__repr__(self)


class WindowAssigner:
    """Base of window assigners: ``assign_windows(element, timestamp)`` returns the windows of a
    record (``timestamp``: its event time for event-time assigners, the wall clock for
    processing-time ones, else the optional ``timestamp(record)`` or None)."""

    #: Event-time assigners need a ``timestamp`` function; their windows can be late.
    is_event_time = False
    #: Merging assigners (sessions): a key's overlapping windows become one.
    merging = False

    def assign_windows(self, element: Any, timestamp: Any) -> Sequence[Any]:
        raise NotImplementedError

    def default_trigger(self) -> Trigger:
        raise NotImplementedError


def _window_start(timestamp: Any, offset: Any, slide: Any) -> Any:
    return timestamp - (timestamp - offset) % slide


class _Tumbling(WindowAssigner):
    def __init__(self, size: Any, offset: Any = 0) -> None:
        check_number(size, "window size")
        check_number(offset, "window offset", minimum=None)
        if abs(offset) >= size:
            raise PlanError(f"a window offset must be smaller than the size {size} in absolute value, not {offset}")
        self.size = size
        self.offset = offset

    @classmethod
    def of(cls, size: Any, offset: Any = 0) -> Any:
        """Windows of ``size``, starting at ``offset`` modulo ``size`` (``abs(offset) < size``)."""
        return cls(size, offset)

    def assign_windows(self, element: Any, timestamp: Any) -> tuple[TimeWindow]:
        start = timestamp - (timestamp - self.offset) % self.size
        return (TimeWindow(start, start + self.size),)

    def __repr__(self) -> str:
        offset = f", offset={self.offset!r}" if self.offset else ""
        return f"{type(self).__name__}({self.size!r}{offset})"


class _Sliding(WindowAssigner):
    def __init__(self, size: Any, slide: Any, offset: Any = 0) -> None:
        check_number(size, "window size")
        check_number(slide, "window slide")
        check_number(offset, "window offset", minimum=None)
        if abs(offset) >= slide:
            raise PlanError(f"a window offset must be smaller than the slide {slide} in absolute value, "
                             f"not {offset}")
        self.size = size
        self.slide = slide
        self.offset = offset

    @classmethod
    def of(cls, size: Any, slide: Any, offset: Any = 0) -> Any:
        """Windows of ``size`` starting every ``slide`` (at ``offset`` modulo ``slide``); a record
        is in ``ceil(size / slide)`` of them (in none when ``slide > size`` leaves a gap)."""
        return cls(size, slide, offset)

    def assign_windows(self, element: Any, timestamp: Any) -> list[TimeWindow]:
        size, slide = self.size, self.slide
        start = timestamp - (timestamp - self.offset) % slide
        windows = []
        while start > timestamp - size:
            windows.append(TimeWindow(start, start + size))
            start -= slide
        windows.reverse()  # oldest first
        return windows

    def __repr__(self) -> str:
        offset = f", offset={self.offset!r}" if self.offset else ""
        return f"{type(self).__name__}({self.size!r}, {self.slide!r}{offset})"


class _Sessions(WindowAssigner):
    merging = True

    def __init__(self, gap: Any = None, extractor: Callable[[Any], Any] | None = None) -> None:
        if extractor is None:
            check_number(gap, "session gap")
        elif not callable(extractor):
            raise PlanError(f"with_dynamic_gap() takes a function record -> gap, got {type(extractor).__name__}")
        self.gap = gap
        self.extractor = extractor

    @classmethod
    def with_gap(cls, gap: Any) -> Any:
        """Sessions that end ``gap`` after their last record."""
        return cls(gap)

    @classmethod
    def with_dynamic_gap(cls, extractor: Callable[[Any], Any]) -> Any:
        """Sessions whose gap after each record is ``extractor(record)`` (positive)."""
        return cls(None, extractor)

    def assign_windows(self, element: Any, timestamp: Any) -> tuple[TimeWindow]:
        gap = self.gap
        if self.extractor is not None:
            gap = self.extractor(element)
            if not gap > 0:
                raise ValueError(f"a dynamic session gap must be positive, got {gap!r} for {element!r}")
        return (TimeWindow(timestamp, timestamp + gap),)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({'dynamic gap' if self.extractor is not None else f'gap={self.gap!r}'})"


class TumblingEventTimeWindows(_Tumbling):
    """Tumbling event-time windows: ``TumblingEventTimeWindows.of(size, offset=0)``."""

    is_event_time = True

    def default_trigger(self) -> Trigger:
        return EventTimeTrigger()


class SlidingEventTimeWindows(_Sliding):
    """Sliding event-time windows: ``SlidingEventTimeWindows.of(size, slide, offset=0)``."""

    is_event_time = True

    def default_trigger(self) -> Trigger:
        return EventTimeTrigger()


class TumblingProcessingTimeWindows(_Tumbling):
    """Tumbling wall-clock windows (seconds): ``TumblingProcessingTimeWindows.of(size, offset=0)``."""

    def default_trigger(self) -> Trigger:
        return ProcessingTimeTrigger()


class SlidingProcessingTimeWindows(_Sliding):
    """Sliding wall-clock windows (seconds): ``SlidingProcessingTimeWindows.of(size, slide, offset=0)``."""

    def default_trigger(self) -> Trigger:
        return ProcessingTimeTrigger()


class EventTimeSessionWindows(_Sessions):
    """Event-time sessions: ``EventTimeSessionWindows.with_gap(gap)`` or ``.with_dynamic_gap(fn)``."""

    is_event_time = True

    def default_trigger(self) -> Trigger:
        return EventTimeTrigger()


class ProcessingTimeSessionWindows(_Sessions):
    """Wall-clock sessions (seconds): ``ProcessingTimeSessionWindows.with_gap(gap)`` or
    ``.with_dynamic_gap(fn)``."""

    def default_trigger(self) -> Trigger:
        return ProcessingTimeTrigger()


class GlobalWindows(WindowAssigner):
    """One window per key (:data:`GLOBAL_WINDOW`) that never ends: it fires only through a
    trigger (``.trigger(CountTrigger.of(n))``); its state is never cleaned up."""

    @classmethod
    def create(cls) -> GlobalWindows:
        return cls()

    def assign_windows(self, element: Any, timestamp: Any) -> tuple[GlobalWindow]:
        return (GLOBAL_WINDOW,)

    def default_trigger(self) -> Trigger:
        return NeverTrigger()

    def __repr__(self) -> str:
        return "GlobalWindows()"


def merge_into_sessions(sessions: tuple[TimeWindow, ...], window: TimeWindow
                        ) -> tuple[TimeWindow, list[TimeWindow], tuple[TimeWindow, ...]]:
    """Add ``window`` to a key's ``sessions`` (pairwise apart, sorted by start): returns the
    session the record lands in (``window`` or the cover of it and every session it intersects),
    the sessions merged into it (in order of start; empty if none; ``[result]`` alone if the
    window lies inside a session, then ``sessions`` itself comes back) and the key's sessions after."""
    start, end = window
    members = [s for s in sessions if s[0] <= end and s[1] >= start]
    if not members:
        return window, members, tuple(sorted((*sessions, window)))
    first, last = members[0], members[-1]
    if len(members) == 1 and first[0] <= start and first[1] >= end:
        return first, members, sessions  # inside a session: nothing changes
    result = TimeWindow(first[0] if first[0] < start else start, max(end, last[1]))
    rest = [s for s in sessions if s not in members]
    return result, members, tuple(sorted((*rest, result)))
