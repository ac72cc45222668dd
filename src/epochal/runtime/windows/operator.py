"""The general keyed window operator (Flink's ``WindowOperator``): any window assigner, trigger,
allowed lateness, side output of late records, incremental aggregation or full-window functions.

Per record: the assigner gives its windows (:mod:`epochal.runtime.windows.assigners`); for merging
assigners the record's session absorbs every session of the key it intersects (their contents,
trigger state and timers merge); a window already cleaned up is late and skipped; otherwise the
record is added to the window's contents (an accumulator, or the list of its records for
``process``) and the trigger (:mod:`epochal.runtime.windows.triggers`) decides whether the window fires
(emits) and/or purges (drops its contents). Timers the trigger registers call it back; a
cleanup timer per window at ``max_timestamp() + allowed lateness`` (event time) or at its ``end``
(processing time; global windows have none) removes the window and everything about it.

Late records (event time): a window is late once the watermark reached its cleanup time; a
record all of whose windows are late, and whose own ``timestamp + lateness <= watermark``, is
dropped and counted (``late_records_dropped``) or, with a late tag, sent to that side output.
Within the allowed lateness a record re-fires its window (a late firing, EventTimeTrigger).

State (all managed keyed state: in checkpoints, moved by key group on a rescaled restore, on heap
and RocksDB alike; values read may be copies, so every change is written back):

- ``"window-contents"``: key -> ``{window: accumulator or list of records}``;
- ``"window-sessions"`` (merging assigners): key -> the key's session windows, sorted;
- ``"window-timers"``: key -> ``{(0 event | 1 processing, time): windows}``, with the
  :class:`~epochal.runtime.operators.timers.TimerQueue` table ``__timers__`` (one timer per key and time);
- ``"window-state:<name>"``: per-window state of triggers and window functions.

End of a bounded input: the watermark goes to infinity, so every event-time timer fires (event
windows fire and are cleaned up); then every processing-time timer pending fires too (processing
windows fire at the end instead of being lost; Flink drops them). Timers registered during that
beyond the last one pending are not fired. Global windows fire only through their trigger.

Processing-time windows read the clock once per batch: a batch's records share one time. The
EventTimeTrigger on event-time windows runs inline (no trigger calls; the same timers and state
as the trigger object would make); tumbling and sliding event-time windows have their own batch
loop. The code spans three modules: this one (records, firing output), ``window_sessions``
(merging) and ``window_timers`` (timers, cleanup, per-window state).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from itertools import repeat
from typing import Any

from epochal.runtime.operators.aggregates import MISSING
from epochal.runtime.operators.base import keys_of
from epochal.runtime.operators.functions import RuntimeContext
from epochal.runtime.operators.inband import NO_WATERMARK
from epochal.runtime.operators.timers import EVENT_TIME, PROCESSING_TIME, TIMERS, TimerQueue
from epochal.runtime.windows.assigners import (
    GlobalWindows,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    WindowAssigner,
    WindowResult,
)
from epochal.runtime.windows.context import (
    ProcessWindowFunction,
    WindowContext,
    as_window_function,
    merge_of,
)
from epochal.runtime.windows.sessions import SessionMerging
from epochal.runtime.windows.timers import WindowTimers
from epochal.runtime.windows.triggers import CONTINUE, FIRE, PURGE, EventTimeTrigger, Trigger, may_use_processing_time

_new_tuple = tuple.__new__


class WindowOperator(SessionMerging, WindowTimers):
    """Windows each key's records with ``assigner`` and fires them with ``trigger`` (default: the
    assigner's). Exactly one of ``aggregate`` (a rolling aggregate of
    :mod:`epochal.runtime.operators.aggregates` or a FunctionAggregate) and ``function`` must be the
    window's contents (``function``: a ProcessWindowFunction or ``fn(key, context, elements)``):
    with ``aggregate`` the contents are an accumulator and a firing emits
    ``WindowResult(key, window, result)``, or, with ``function`` as well, whatever
    ``function.process(key, ctx, [result])`` returns; without it the contents are the window's
    records and a firing emits ``function.process(key, ctx, records)``.

    ``timestamp(record)`` is the event time (required by event-time assigners; optional for
    global windows, where it is passed to the trigger). ``allowed_lateness`` (event time only)
    keeps windows that long past their end. ``late_tag`` (a tag id): late records go to that
    side output instead of being dropped and counted.
    """

    keyed = True
    CONTENTS = "window-contents"
    SESSIONS = "window-sessions"
    WINDOW_TIMERS = "window-timers"

    def __init__(self, key_selector: Callable[[Any], Any], assigner: WindowAssigner, *,
                 trigger: Trigger | None = None, timestamp: Callable[[Any], Any] | None = None,
                 aggregate: Callable[[Any, Any], Any] | None = None,
                 function: ProcessWindowFunction | Callable[..., Any] | None = None,
                 allowed_lateness: Any = 0, late_tag: str | None = None) -> None:
        if aggregate is None and function is None:
            raise TypeError("a window needs an aggregate or a window function")
        if assigner.is_event_time and timestamp is None:
            raise TypeError(f"{assigner!r} is an event-time assigner: it needs timestamp=fn(record)")
        trigger = assigner.default_trigger() if trigger is None else trigger
        self.merge = None if aggregate is None else merge_of(aggregate)
        if assigner.merging:
            if not trigger.can_merge():
                raise TypeError(f"{trigger!r} cannot be used with merging windows {assigner!r}: it does not "
                                "support merging (can_merge())")
            if aggregate is not None and self.merge is None:
                raise TypeError(f"{type(aggregate).__name__} cannot merge accumulators, which session windows need")
        self.key_selector = key_selector
        self.assigner = assigner
        self.trigger = trigger
        self.timestamp = timestamp
        self.aggregate = aggregate
        #: accumulator -> result; None: the accumulator is the result (rolling aggregates)
        self.finish: Callable[[Any], Any] | None = getattr(aggregate, "result", None)
        self.function = None if function is None else as_window_function(function)
        self.lateness = allowed_lateness if assigner.is_event_time else 0
        self.late_tag = late_tag
        self.event_time = assigner.is_event_time
        #: processing-time assigners: records are windowed by the clock
        self.clocked = not (assigner.is_event_time or isinstance(assigner, GlobalWindows))
        self.cleanup_domain = EVENT_TIME if assigner.is_event_time else PROCESSING_TIME
        #: inline EventTimeTrigger handling (no trigger calls per record)
        self.fast = type(trigger) is EventTimeTrigger and assigner.is_event_time
        #: the worker polls the clock for processing-time triggers and windows (their cleanup timers)
        self.processing_time = self.clocked or may_use_processing_time(trigger)
        self.side: list[tuple[str, Any]] = []
        self.watermark: Any = NO_WATERMARK
        self.late_records = 0
        self.clock: Callable[[], float] = time.time
        self.backend: Any = None
        self.contents: Any = None
        self.sessions: Any = None
        self.window_timers: Any = None
        self.timers: TimerQueue | None = None
        self.ctx = WindowContext(self)
        #: per-window state objects by descriptor name, and their tables by table name
        self.states: dict[str, Any] = {}
        self.state_tables: dict[str, Any] = {}
        #: ``(key, window)`` whose contents neither a snapshot nor an emitted record shares (the
        #: others are copied before they change); None: contents never change in place
        self.unshared: set[Any] | None = None
        self._out: list[Any] = []

    # ------------------------------------------------------------------ lifecycle
    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        from epochal.state.descriptors import MapStateDescriptor, ValueStateDescriptor

        backend = self.backend = context.keyed_state
        self.clock = context.clock
        backend.get_state(MapStateDescriptor(self.CONTENTS))
        backend.get_state(MapStateDescriptor(self.WINDOW_TIMERS))
        backend.get_state(MapStateDescriptor(TIMERS))
        self.contents = backend.owned_table(self.CONTENTS)
        self.window_timers = backend.owned_table(self.WINDOW_TIMERS)
        self.timers = TimerQueue(backend.owned_table(TIMERS))
        if self.assigner.merging:
            backend.get_state(ValueStateDescriptor(self.SESSIONS))
            self.sessions = backend.owned_table(self.SESSIONS)
        if self.aggregate is None or getattr(self.aggregate, "mutable", False):
            self.unshared = set()  # record lists and user accumulators change in place: copy-on-write
        if self.function is not None:
            self.function.open(context)
        if self.assigner.merging:
            self._loop = self._merging_batch
        elif self.fast and type(self.assigner) in (TumblingEventTimeWindows, SlidingEventTimeWindows) and \
                getattr(self.assigner, "slide", 0) <= self.assigner.size:  # type: ignore[attr-defined]
            self._loop = self._event_batch
        else:
            self._loop = self._general_batch

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        if self.unshared is not None:
            self.unshared.clear()  # every accumulator is now shared with the captured copy

    def close(self) -> None:
        if self.function is not None:
            self.function.close()

    def counters(self) -> dict[str, int]:
        return {"late_records_dropped": self.late_records}

    # ------------------------------------------------------------------ records
    def process_batch(self, batch: list[Any]) -> list[Any]:
        keys, groups = keys_of(self.key_selector, batch, self.backend.max_parallelism, self.name)
        self.backend.prefetch(keys, groups)  # an external backend reads the batch's keys at once
        out: list[Any] = []
        self._out = out
        self._loop(batch, keys, groups)
        return out

    def _times(self, batch: list[Any]) -> Any:
        """The records' timestamps: event times, the clock (processing time), or None (global)."""
        if self.timestamp is not None and not self.clocked:
            return map(self.timestamp, batch)
        return repeat(self.clock() if self.clocked else None, len(batch))

    def _late(self, record: Any) -> None:
        if self.late_tag is None:
            self.late_records += 1
        else:
            self.side.append((self.late_tag, record))

    def _private(self, key: Any, window: Any, contents: Any) -> Any:
        """``contents`` of ``window``, copied if a snapshot may still share it (copy-on-write)."""
        unshared = self.unshared
        assert unshared is not None
        pair = (key, window)
        if pair in unshared:
            return contents
        unshared.add(pair)
        return list(contents) if self.aggregate is None else copy.deepcopy(contents)

    def _event_batch(self, batch: list[Any], keys: list[Any], key_groups: list[int]) -> None:
        """Tumbling and sliding event-time windows with the EventTimeTrigger, inline (a record's
        windows oldest first, window objects shared within the batch)."""
        assigner = self.assigner
        size, offset = assigner.size, assigner.offset  # type: ignore[attr-defined]
        slide = getattr(assigner, "slide", size)
        lateness = self.lateness
        late_end = self.watermark - lateness + 1  # windows ending at or before this are late
        fire_end = self.watermark + 1  # windows ending at or before this fired: late firings
        table = self.contents
        aggregate = self.aggregate
        unshared = self.unshared
        register = self.register_timer
        windows: dict[Any, TimeWindow] = {}
        missing = MISSING
        timestamps = map(self.timestamp, batch)  # type: ignore[arg-type]  # event time: always one
        for record, key, group, timestamp in zip(batch, keys, key_groups, timestamps, strict=True):
            start = timestamp - (timestamp - offset) % slide
            if start + size <= late_end:  # its newest window is late: all are
                self._late(record)
                continue
            if slide == size:
                starts: Any = (start,)
            else:
                starts = []
                while start > timestamp - size:
                    starts.append(start)
                    start -= slide
                starts.reverse()
            entries = table[group]
            contents = entries.get(key)
            if contents is None:
                contents = {}
            for start in starts:
                end = start + size
                if end <= late_end:
                    continue
                window = windows.get(start)
                if window is None:
                    window = windows[start] = TimeWindow(start, end)
                acc = contents.get(window, missing)
                if acc is missing:
                    acc = [record] if aggregate is None else aggregate(missing, record)
                    if unshared is not None:
                        unshared.add((key, window))
                    if end > fire_end:
                        register(EVENT_TIME, end - 1, key, group, window)
                    if lateness:
                        register(EVENT_TIME, end - 1 + lateness, key, group, window)  # the cleanup timer
                else:
                    if unshared is not None:
                        acc = self._private(key, window, acc)
                    if aggregate is None:
                        acc.append(record)
                    else:
                        acc = aggregate(acc, record)
                contents[window] = acc
                if end <= fire_end:
                    self._emit(key, group, window, acc)  # a late firing within the allowed lateness
            entries[key] = contents  # written back (see KeyedStateBackend.owned_table)

    def _general_batch(self, batch: list[Any], keys: list[Any], key_groups: list[int]) -> None:
        """Any non-merging assigner and trigger."""
        assign = self.assigner.assign_windows
        event_time = self.event_time
        late_end = self.watermark - self.lateness + 1
        table = self.contents
        element = self._element
        for record, key, group, timestamp in zip(batch, keys, key_groups, self._times(batch), strict=True):
            entries = table[group]
            contents = entries.get(key)
            had = contents is not None
            if contents is None:
                contents = {}
            skipped = True
            for window in assign(record, timestamp):
                if event_time and window[1] <= late_end:
                    continue
                skipped = False
                element(record, timestamp, key, group, window, contents, False)
            if contents:
                entries[key] = contents  # written back (see KeyedStateBackend.owned_table)
            elif had:
                del entries[key]
            if skipped and event_time and timestamp + self.lateness <= self.watermark:
                self._late(record)

    def _element(self, record: Any, timestamp: Any, key: Any, group: int, window: Any, contents: dict[Any, Any],
                 fresh: bool) -> None:
        """Add ``record`` to ``window`` of ``key`` (in ``contents``, the caller writes it back), ask
        the trigger, fire and purge; a window that is new (or ``fresh`` from a merge) gets its
        cleanup timer."""
        aggregate = self.aggregate
        acc = contents.get(window, MISSING)
        if acc is MISSING:
            fresh = True
            acc = [record] if aggregate is None else aggregate(MISSING, record)
            if self.unshared is not None:
                self.unshared.add((key, window))
        else:
            if self.unshared is not None:
                acc = self._private(key, window, acc)
            if aggregate is None:
                acc.append(record)
            else:
                acc = aggregate(acc, record)
        contents[window] = acc
        if self.fast:
            fire_at = window[1] - 1
            if fire_at <= self.watermark:
                result = FIRE  # a late firing
            else:
                result = CONTINUE
                if fresh:
                    self.register_timer(EVENT_TIME, fire_at, key, group, window)
        else:
            ctx = self.ctx
            ctx.current_key, ctx.group, ctx.current_window = key, group, window
            self.backend.set_current_key(key, group)
            result = self.trigger.on_element(record, timestamp, window, ctx) or CONTINUE
        if result:
            if result & FIRE:
                self._emit(key, group, window, acc)
            if result & PURGE:
                del contents[window]
                self._forget(key, window)
        if fresh:
            cleanup = self._cleanup_time(window)
            if cleanup is not None:
                self.register_timer(self.cleanup_domain, cleanup, key, group, window)

    def _emit(self, key: Any, group: int, window: Any, acc: Any) -> None:
        """Fire ``window`` of ``key`` with contents ``acc``."""
        finish = self.finish
        function = self.function
        if self.unshared is not None:
            self.unshared.discard((key, window))  # the output may hold it: the next change copies it
        if function is None:  # WindowResult(key, window, result), without the call of its __new__
            result = _new_tuple(WindowResult, (key, window.start, acc if finish is None else finish(acc)))
            result.window = window
            self._out.append(result)
            return
        if self.aggregate is not None:
            acc = [acc if finish is None else finish(acc)]
        ctx = self.ctx
        ctx.current_key, ctx.group, ctx.current_window = key, group, window
        self.backend.set_current_key(key, group)
        produced = function.process(key, ctx, acc)
        if produced is not None:
            self._out.extend(produced)
