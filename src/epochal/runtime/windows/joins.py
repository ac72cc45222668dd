"""Joins of two keyed streams on event time: the join functions and their context, and the
interval join (Flink's ``IntervalJoinOperator``); the window join is
:mod:`epochal.runtime.windows.window_join`.

Both join operators take two inputs (``process_batch`` / ``process_batch2``), each keyed by its own
selector (``key_selector`` / ``key_selector2``: records join only with records of an equal key,
which both ``key_by`` calls send to the same subtask). Records carry no timestamps, so every
join reads each side's event time with a function (``timestamp`` / ``timestamp2``). Event time
is the subtask's watermark (the minimum of both inputs'); a record with event time ``t`` is late
when ``t < watermark`` (Flink's ``isLate``). Buffers are managed keyed state, read and written
inline through ``owned_table`` (values read from RocksDB are copies, so every change is written
back); checkpoints hold them and a restore at another parallelism moves them with their keys.

Interval join: a left record at ``t`` joins every right record of its key at ``t2`` with
``lower <= t2 - t <= upper`` (either bound exclusive on request), whichever arrives first; each
pair is emitted once, as ``function.process_element(left, right, ctx)`` or ``(left, right)``.
State: ``interval-join-left`` / ``interval-join-right``, per key ``{timestamp: [records]}``
(a bucket list is replaced, never changed in place: a heap snapshot copies a key's map one
level deep and may serialise it later). Cleanup, as Flink: once the watermark reaches
``t + max(upper, 0)`` a left bucket at ``t`` can match nothing still to come (records above the
watermark), nor can a right one at ``t + max(-lower, 0)``; each new bucket registers an event-time timer of its key
at that time (a :class:`~epochal.runtime.operators.timers.TimerQueue`, so timers are managed state too),
and a watermark that reaches timers drops every due bucket of their keys.

At the end of the input nothing more can match: the interval join drops its state, the window
join fires every open window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from epochal.runtime.operators.base import Operator, keys_of
from epochal.runtime.operators.functions import ProcessContext, RuntimeContext
from epochal.runtime.operators.inband import NO_WATERMARK
from epochal.runtime.operators.timers import EVENT_TIME, TIMERS, TimerQueue

_END_OF_TIME = float("inf")


class JoinContext(ProcessContext):
    """What a :class:`ProcessJoinFunction` sees with each pair (Flink's
    ``ProcessJoinFunction.Context``): both event times, ``timestamp()`` (the later of the two),
    the key (``get_current_key()``), keyed state of that key (``get_state``) and side outputs
    (``output(tag, value)``). No timers: the join's cleanup timers are its own."""

    __slots__ = ("left_ts", "right_ts")

    def __init__(self, runtime: RuntimeContext, side: list[tuple[str, Any]]) -> None:
        super().__init__(runtime, side)
        self.left_ts: Any = None
        self.right_ts: Any = None

    def left_timestamp(self) -> Any:
        """The event time of the left record of the pair."""
        return self.left_ts

    def right_timestamp(self) -> Any:
        """The event time of the right record of the pair."""
        return self.right_ts

    def timestamp(self) -> Any:
        """The pair's event time: the later of both records' (as Flink)."""
        return self.left_ts if self.left_ts >= self.right_ts else self.right_ts

    def timer_service(self) -> Any:
        raise RuntimeError("an interval join function has no timers: use connect(...).process(CoProcessFunction) "
                           "for joins that need their own")


class ProcessJoinFunction:
    """The function of an interval join (Flink's ``ProcessJoinFunction``): called once per
    matching pair, it returns (or yields) the records to emit, or None."""

    def open(self, context: RuntimeContext) -> None:
        """Called once per subtask before the first pair."""

    def process_element(self, left: Any, right: Any, ctx: JoinContext) -> Iterable[Any] | None:
        """One pair: ``left`` from the first stream, ``right`` from the second."""
        raise NotImplementedError

    def close(self) -> None:
        """Called once when the subtask ends, also after a failure."""


class _CallableJoinFunction(ProcessJoinFunction):
    """Adapts ``fn(left, right, ctx) -> iterable | None``."""

    def __init__(self, fn: Callable[[Any, Any, JoinContext], Iterable[Any] | None]) -> None:
        self.fn = fn

    def process_element(self, left: Any, right: Any, ctx: JoinContext) -> Iterable[Any] | None:
        return self.fn(left, right, ctx)


def as_process_join_function(fn: ProcessJoinFunction | Callable[..., Any]) -> ProcessJoinFunction:
    """A :class:`ProcessJoinFunction`, or a plain ``fn(left, right, ctx)`` wrapped as one."""
    if isinstance(fn, ProcessJoinFunction):
        return fn
    if callable(fn) and not isinstance(fn, type):
        return _CallableJoinFunction(fn)
    raise TypeError(f"process() takes a ProcessJoinFunction object or a function (left, right, ctx), "
                    f"got {getattr(fn, '__name__', type(fn).__name__)}")


class IntervalJoinOperator(Operator):
    """Joins each record with the other side's records of its key within ``[lower, upper]`` of
    its event time (see the module docstring). ``function``: a :class:`ProcessJoinFunction` or
    ``fn(left, right, ctx)``; None emits ``(left, right)``. ``left_late_tag`` / ``right_late_tag``: the side
    output (tag id) for late records of that side; without one they are dropped and counted in
    ``late_records_dropped``.

    Contract: ``lower <= upper`` (and not both equal with a bound exclusive); event times are
    numbers. A record at exactly the watermark is not late but may miss partners already cleaned
    up (as in Flink); under the watermark contract (no record at or below it) nothing is missed.
    """

    keyed = True
    input_count = 2
    event_time = True
    LEFT = "interval-join-left"
    RIGHT = "interval-join-right"

    def __init__(self, key_selector: Callable[[Any], Any], key_selector2: Callable[[Any], Any],
                 timestamp: Callable[[Any], Any], timestamp2: Callable[[Any], Any], lower: Any, upper: Any, *,
                 lower_inclusive: bool = True, upper_inclusive: bool = True,
                 function: ProcessJoinFunction | Callable[..., Any] | None = None, left_late_tag: str | None = None,
                 right_late_tag: str | None = None) -> None:
        if lower > upper or (lower == upper and not (lower_inclusive and upper_inclusive)):
            raise ValueError(f"an interval join needs lower <= upper (an empty interval joins nothing), got "
                             f"{'[' if lower_inclusive else '('}{lower}, {upper}{']' if upper_inclusive else ')'}")
        self.key_selector = key_selector
        self.key_selector2 = key_selector2
        self.timestamp = timestamp
        self.timestamp2 = timestamp2
        self.lower, self.upper = lower, upper
        self.lower_inclusive, self.upper_inclusive = lower_inclusive, upper_inclusive
        self.function = None if function is None else as_process_join_function(function)
        self.late_tags = (left_late_tag, right_late_tag)
        #: how long after its event time a bucket may still match (left, right), as Flink
        self.retention = (max(upper, 0), max(-lower, 0))
        self.side: list[tuple[str, Any]] = []
        self.watermark: Any = NO_WATERMARK
        self.late_records = 0
        self.backend: Any = None
        self.buffers: tuple[Any, Any] = (None, None)
        self.timers: TimerQueue | None = None
        self.ctx: JoinContext | None = None

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        from epochal.state.descriptors import MapStateDescriptor

        backend = self.backend = context.keyed_state
        for name in (TIMERS, self.LEFT, self.RIGHT):
            backend.get_state(MapStateDescriptor(name))  # declares the managed state
        self.buffers = (backend.owned_table(self.LEFT), backend.owned_table(self.RIGHT))
        self.timers = TimerQueue(backend.owned_table(TIMERS))
        self.ctx = JoinContext(context, self.side)
        if self.function is not None:
            self.function.open(context)

    def process_batch(self, batch: list[Any]) -> list[Any]:
        return self._join(batch, 0, self.key_selector, self.timestamp)

    def process_batch2(self, batch: list[Any]) -> list[Any]:
        return self._join(batch, 1, self.key_selector2, self.timestamp2)

    def _join(self, batch: list[Any], side: int, key_selector: Callable[[Any], Any],
              timestamp: Callable[[Any], Any]) -> list[Any]:
        """Buffer each record of input ``side`` (0: left) and join it with the other side's."""
        keys, key_groups = keys_of(key_selector, batch, self.backend.max_parallelism, self.name)
        self.backend.prefetch(keys, key_groups)  # an external backend reads the batch's keys at once
        times = list(map(timestamp, batch))
        own, other = self.buffers[side], self.buffers[1 - side]
        retention = self.retention[side]
        watermark = self.watermark
        function, ctx, timers = self.function, self.ctx, self.timers
        assert ctx is not None and timers is not None
        register = timers.register
        lower, upper = self.lower, self.upper
        lower_open, upper_open = not self.lower_inclusive, not self.upper_inclusive
        set_key = self.backend.set_current_key
        process = function.process_element if function is not None else None
        out: list[Any] = []
        extend = out.extend
        for record, key, group, t in zip(batch, keys, key_groups, times, strict=True):
            if t < watermark:
                self._late(record, side)
                continue
            entries = own[group]
            buffer = entries.get(key)
            if buffer is None:
                buffer = {}
            bucket = buffer.get(t)
            buffer[t] = [record] if bucket is None else bucket + [record]  # a new list (see the module doc)
            entries[key] = buffer
            if bucket is None:
                register(EVENT_TIME, t + retention, key, group)
            candidates = other[group].get(key)
            if not candidates:
                continue
            if process is not None:
                ctx.current_key, ctx.group = key, group
                set_key(key, group)
            for t2, records in candidates.items():
                distance = t2 - t if side == 0 else t - t2  # the right record's time minus the left's
                if (distance < lower or distance > upper or (lower_open and distance == lower)
                        or (upper_open and distance == upper)):
                    continue
                if process is None:
                    if side == 0:
                        extend([(record, partner) for partner in records])
                    else:
                        extend([(partner, record) for partner in records])
                    continue
                if side == 0:
                    ctx.left_ts, ctx.right_ts = t, t2
                else:
                    ctx.left_ts, ctx.right_ts = t2, t
                for partner in records:
                    produced = process(record, partner, ctx) if side == 0 else process(partner, record, ctx)
                    if produced is not None:
                        extend(produced)
        return out

    def _late(self, record: Any, side: int) -> None:
        tag = self.late_tags[side]
        if tag is None:
            self.late_records += 1
        else:
            self.side.append((tag, record))

    def on_watermark(self, watermark: Any) -> list[Any]:
        if watermark <= self.watermark:
            return []
        self.watermark = watermark
        timers = self.timers
        assert timers is not None
        next_timestamp = timers.next_timestamp(EVENT_TIME)
        if next_timestamp is None or next_timestamp > watermark:
            return []
        due = dict.fromkeys((group, key) for _, key, group in timers.pop_due(EVENT_TIME, watermark))
        for side in (0, 1):
            table, retention = self.buffers[side], self.retention[side]
            for group, key in due:
                entries = table[group]
                buffer = entries.get(key)
                if not buffer:
                    continue
                kept = {t: records for t, records in buffer.items() if t + retention > watermark}
                if len(kept) == len(buffer):
                    continue
                if kept:
                    entries[key] = kept
                else:
                    del entries[key]
        return []

    def end_input(self) -> list[Any]:
        """Nothing more can match: every buffer and timer is dropped."""
        self.watermark = _END_OF_TIME
        if self.timers is not None:
            for _ in self.timers.pop_due(EVENT_TIME, _END_OF_TIME):
                pass
        for table in self.buffers:
            for entries in table.values():
                entries.clear()
        return []

    def counters(self) -> dict[str, int]:
        return {"late_records_dropped": self.late_records}

    def close(self) -> None:
        if self.function is not None:
            self.function.close()
