"""The general window operator without Spark (runtime/windows/operator.py): every assigner, default
and custom triggers, session merging, allowed lateness, late side outputs, window functions,
snapshots and rescaled restores in the middle of open sessions and pending timers, processing
time, and the same output and state on the RocksDB backend; each against a hand-written oracle."""

from __future__ import annotations

import collections
import copy
import pickle
from typing import Any

import pytest

import epochal
from epochal.api.functions import RuntimeContext
from epochal.api.windowed import WindowedStream, assigner_window, keyed_window
from epochal.errors import PlanError
from epochal.runtime.operators.aggregates import CountAggregate, FoldAggregate, ReduceAggregate
from epochal.runtime.operators.functions import OutputTag
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
    WindowResult,
)
from epochal.runtime.windows.context import ProcessWindowFunction
from epochal.runtime.windows.count_windows import CountWindowOperator
from epochal.runtime.windows.operator import WindowOperator
from epochal.runtime.windows.time_windows import FunctionAggregate
from epochal.runtime.windows.triggers import (
    CONTINUE,
    FIRE,
    FIRE_AND_PURGE,
    CountTrigger,
    EventTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerResult,
)
from epochal.state.descriptors import ReducingStateDescriptor, ValueStateDescriptor
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.operator_state import OperatorStateStore
from epochal.state.rocksdb.backend import RocksDBKeyedStateBackend
from epochal.testing import OperatorHarness

MAX_P = 128
LATE = OutputTag("late")


def key_of(record):
    return record[0]


def time_of(record):
    return record[1]


def value_of(record):
    return record[2]


def operator(assigner, aggregate=None, *, function=None, trigger=None, lateness=0, late_tag=None):
    if aggregate is None and function is None:
        aggregate = CountAggregate()
    timestamp = time_of if assigner.is_event_time else None
    return WindowOperator(key_of, assigner, trigger=trigger, timestamp=timestamp, aggregate=aggregate,
                          function=function, allowed_lateness=lateness, late_tag=late_tag)


def harness(assigner, aggregate=None, **options):
    return OperatorHarness(operator(assigner, aggregate, **options))


def summing():
    return FoldAggregate(value_of, lambda a, b: a + b)


def collect():
    return FunctionAggregate(Collect())


class Collect:
    """An AggregateFunction whose accumulator is a list changed in place (copy-on-write matters)."""

    def create_accumulator(self):
        return []

    def add(self, record, accumulator):
        accumulator.append(record[2])
        return accumulator

    def merge(self, a, b):
        a.extend(b)
        return a

    def get_result(self, accumulator):
        return tuple(accumulator)


def describe(key, context, elements):
    """A full-window function: the window, the elements and the clocks it sees."""
    window = context.window()
    yield (key, window.start, window.end, [e[2] for e in elements], context.current_watermark())


# ------------------------------------------------------------------------- values
def test_window_result_is_the_plain_three_tuple_with_names_and_pickles():
    result = WindowResult("a", TimeWindow(10, 20), 7)
    assert result == ("a", 10, 7) and ("a", 10, 7) == result and hash(result) == hash(("a", 10, 7))
    assert (result.key, result.start, result.end, result.value, result.result) == ("a", 10, 20, 7, 7)
    key, start, value = result
    assert (key, start, value) == ("a", 10, 7) and len(result) == 3
    back = pickle.loads(pickle.dumps(result))
    assert type(back) is WindowResult and back == result and back.window == TimeWindow(10, 20) and back.end == 20
    assert copy.deepcopy(result).end == 20
    glob = WindowResult("k", GLOBAL_WINDOW, 3)
    assert glob == ("k", None, 3) and glob.end is None and glob.window is GLOBAL_WINDOW


def test_windows_values():
    window = TimeWindow(0, 10)
    assert window.max_timestamp() == 9 and window == (0, 10) and sorted([TimeWindow(5, 9), window])[0] == window
    assert pickle.loads(pickle.dumps(window)) == window and type(pickle.loads(pickle.dumps(window))) is TimeWindow
    assert window.intersects(TimeWindow(10, 12)) and not window.intersects(TimeWindow(11, 12))
    assert GlobalWindow() is GLOBAL_WINDOW and pickle.loads(pickle.dumps(GLOBAL_WINDOW)) is GLOBAL_WINDOW
    assert copy.deepcopy(GLOBAL_WINDOW) is GLOBAL_WINDOW
    assert TumblingEventTimeWindows.of(10, 3).assign_windows(None, 2) == (TimeWindow(-7, 3),)
    assert SlidingEventTimeWindows.of(10, 4).assign_windows(None, 9) == [(0, 10), (4, 14), (8, 18)]
    assert SlidingEventTimeWindows.of(3, 5).assign_windows(None, 4) == []  # in the gap between windows
    assert EventTimeSessionWindows.with_dynamic_gap(lambda r: r).assign_windows(4, 10) == ((10, 14),)
    with pytest.raises(PlanError, match="offset must be smaller than the size 10"):
        TumblingEventTimeWindows.of(10, 10)
    with pytest.raises(PlanError, match="session gap must be a number > 0"):
        EventTimeSessionWindows.with_gap(0)
    assert TriggerResult.FIRE_AND_PURGE.is_fire and TriggerResult.FIRE_AND_PURGE.is_purge
    assert not TriggerResult.FIRE.is_purge and not TriggerResult.CONTINUE.is_fire


# ------------------------------------------------------------------------- assigners
def test_tumbling_event_time_windows_fire_when_the_watermark_reaches_their_last_timestamp():
    h = harness(TumblingEventTimeWindows.of(10), summing())
    assert h.process(("a", 1, 1), ("b", 3, 10), ("a", 9, 2), ("a", 10, 100)) == []
    assert h.watermark(8) == []
    out = h.watermark(9)
    assert out == [("a", 0, 3), ("b", 0, 10)]
    assert all(type(r) is WindowResult and r.end == 10 for r in out)
    assert h.end_input() == [("a", 10, 100)]  # the end of the input fires every event-time window
    assert h.keyed_state() == {}  # contents, timers and window timers all gone


def test_tumbling_windows_with_an_offset():
    h = harness(TumblingEventTimeWindows.of(10, offset=3), summing())
    h.process(("a", 2, 1), ("a", 3, 10), ("a", 12, 100), ("a", 13, 1000))
    assert [(r.start, r.end, r.value) for r in h.end_input()] == [(-7, 3, 1), (3, 13, 110), (13, 23, 1000)]


def test_sliding_event_time_windows_hold_each_record_in_every_window_it_falls_in():
    h = harness(SlidingEventTimeWindows.of(10, 5), collect())
    h.process(("a", 3, 1), ("a", 7, 2), ("a", 12, 3))
    assert h.watermark(9) == [("a", -5, (1,)), ("a", 0, (1, 2))]  # in order of end
    assert h.watermark(14) == [("a", 5, (2, 3))]
    assert h.end_input() == [("a", 10, (3,))]


def test_processing_time_windows_follow_the_clock_and_fire_at_their_end():
    h = harness(TumblingProcessingTimeWindows.of(10), summing())
    assert h.operator.processing_time  # the worker polls its clock
    h.set_processing_time(100.5)
    h.process(("a", 0, 1), ("b", 0, 2))
    h.set_processing_time(107.0)
    h.process(("a", 0, 3))
    assert h.set_processing_time(109.99) == []
    assert h.set_processing_time(110.0) == [("a", 100.0, 4), ("b", 100.0, 2)]
    h.process(("a", 0, 5))
    assert h.watermark(10**9) == []  # event time plays no part
    # at the end of the input, processing-time windows fire (documented: friendlier than dropping)
    assert h.end_input() == [("a", 110.0, 5)]
    assert h.keyed_state() == {}


def test_sliding_processing_time_windows():
    h = harness(SlidingProcessingTimeWindows.of(10, 5), summing())
    h.set_processing_time(12.0)
    h.process(("a", 0, 1))  # windows [5, 15) and [10, 20)
    assert h.set_processing_time(15.0) == [("a", 5.0, 1)]
    h.process(("a", 0, 2))  # windows [10, 20) and [15, 25)
    assert h.set_processing_time(20.0) == [("a", 10.0, 3)]
    assert h.set_processing_time(25.0) == [("a", 15.0, 2)]


def test_event_time_sessions_merge_and_a_record_bridges_two_sessions():
    h = harness(EventTimeSessionWindows.with_gap(5), collect())
    h.process(("a", 1, 1), ("a", 10, 2), ("b", 2, 9))  # a: [1, 6) and [10, 15); b: [2, 7)
    assert h.keyed_state("window-sessions") == {"a": ((1, 6), (10, 15)), "b": ((2, 7),)}
    h.process(("a", 4, 3))  # [4, 9) merges with [1, 6): [1, 9)
    assert h.keyed_state("window-sessions")["a"] == ((1, 9), (10, 15))
    h.process(("a", 7, 4))  # [7, 12) bridges [1, 9) and [10, 15): one session [1, 15)
    assert h.keyed_state("window-sessions")["a"] == ((1, 15),)
    assert h.keyed_state("window-contents")["a"] == {(1, 15): [1, 3, 2, 4]}  # merged in order of start
    assert h.keyed_state("__timers__")["a"] == {(0, 14): None}  # the merged sessions' timers are gone
    assert h.watermark(6) == [("b", 2, (9,))]
    assert h.watermark(13) == []
    out = h.watermark(14)
    assert out == [("a", 1, (1, 3, 2, 4))] and out[0].end == 15
    h.process(("a", 3, 5))  # its session [3, 8) ended at 7 <= watermark 14: late, dropped
    assert h.counters() == {"late_records_dropped": 1}
    assert h.keyed_state() == {}


def test_a_record_inside_a_session_does_not_move_its_timer():
    h = harness(EventTimeSessionWindows.with_gap(10), summing())
    h.process(("a", 0, 1), ("a", 5, 2), ("a", 2, 3))  # [0, 10), [0, 15), then inside [0, 15)
    assert h.keyed_state("window-timers") == {"a": {(0, 14): ((0, 15),)}}
    assert h.end_input() == [("a", 0, 6)]


def test_processing_time_sessions_and_dynamic_gaps():
    h = harness(ProcessingTimeSessionWindows.with_gap(5), summing())
    h.set_processing_time(100.0)
    h.process(("a", 0, 1))
    h.set_processing_time(103.0)
    h.process(("a", 0, 2), ("b", 0, 7))  # a: [100, 108); b: [103, 108)
    assert h.set_processing_time(107.9) == []
    assert h.set_processing_time(108.0) == [("a", 100.0, 3), ("b", 103.0, 7)]
    dynamic = harness(EventTimeSessionWindows.with_dynamic_gap(lambda r: r[2]), summing())
    dynamic.process(("a", 0, 3), ("a", 5, 10), ("a", 30, 1))  # [0, 3), [5, 15), [30, 31)
    assert dynamic.end_input() == [("a", 0, 3), ("a", 5, 10), ("a", 30, 1)]


def test_global_windows_never_fire_without_a_trigger():
    h = harness(GlobalWindows.create(), summing())
    h.process(("a", 0, 1), ("a", 0, 2))
    assert h.watermark(10**9) == [] and h.end_input() == []
    assert h.keyed_state("window-contents") == {"a": {GLOBAL_WINDOW: 3}}


def test_count_trigger_with_purging_on_global_windows_equals_tumbling_count_windows():
    records = [(f"k{i % 3}", 0, i) for i in range(20)]
    h = harness(GlobalWindows.create(), summing(), trigger=PurgingTrigger.of(CountTrigger.of(3)))
    out = h.process(*records[:7]) + h.process(*records[7:])
    assert out == [("k0", None, 9), ("k1", None, 12), ("k2", None, 15), ("k0", None, 36), ("k1", None, 39),
                   ("k2", None, 42)]
    counted = OperatorHarness(CountWindowOperator(key_of, 3, FoldAggregate(value_of, lambda a, b: a + b)))
    assert [(r.key, r.value) for r in out] == counted.process(*records)  # the dedicated operator agrees
    assert h.end_input() == []  # partial windows never fire, as count windows
    assert h.keyed_state("window-contents") == {"k0": {GLOBAL_WINDOW: 18}, "k1": {GLOBAL_WINDOW: 19}}
    assert h.keyed_state("window-state:count") == {"k0": {GLOBAL_WINDOW: 1}, "k1": {GLOBAL_WINDOW: 1}}


def test_count_trigger_without_purging_fires_the_whole_window_again():
    h = harness(GlobalWindows.create(), summing(), trigger=CountTrigger.of(2))
    assert h.process(*[("a", 0, v) for v in (1, 2, 3, 4, 5)]) == [("a", None, 3), ("a", None, 10)]


def test_count_trigger_counts_merge_with_sessions():
    h = harness(EventTimeSessionWindows.with_gap(5), summing(), trigger=CountTrigger.of(3))
    assert h.process(("a", 1, 1), ("a", 10, 2)) == []  # two sessions, one record each
    assert h.process(("a", 5, 4)) == [("a", 1, 7)]  # bridges them: counts 1 + 1 merge, + 1 fires
    assert h.keyed_state("window-state:count") == {}
    assert h.process(("a", 3, 8)) == [] and h.end_input() == []  # the cleanup at 14 fires nothing


# ------------------------------------------------------------------------- custom triggers
class EarlyAndOnTime(Trigger):
    """Fires early every ``every`` records, and fires-and-purges at the window's end."""

    seen = ReducingStateDescriptor("seen", reduce_fn=lambda a, b: a + b)

    def __init__(self, every):
        self.every = every

    def on_element(self, element, timestamp, window, ctx):
        ctx.register_event_time_timer(window.max_timestamp())
        seen = ctx.get_partitioned_state(self.seen)
        seen.add(1)
        return FIRE if seen.get() % self.every == 0 else CONTINUE

    def on_event_time(self, time, window, ctx):
        return FIRE_AND_PURGE if time == window.max_timestamp() else CONTINUE

    def clear(self, window, ctx):
        ctx.delete_event_time_timer(window.max_timestamp())
        ctx.get_partitioned_state(self.seen).clear()


def test_a_custom_trigger_with_timers_and_per_window_state():
    h = harness(TumblingEventTimeWindows.of(10), summing(), trigger=EarlyAndOnTime(2))
    assert not h.operator.fast
    assert h.process(("a", 1, 1), ("a", 2, 2), ("a", 3, 4), ("b", 4, 8)) == [("a", 0, 3)]
    assert h.keyed_state("window-state:seen") == {"a": {(0, 10): 3}, "b": {(0, 10): 1}}
    assert h.watermark(9) == [("a", 0, 7), ("b", 0, 8)]
    assert h.keyed_state() == {}  # cleaned up at 9: the trigger's clear removed its state
    assert h.process(("a", 9, 100)) == [] and h.counters() == {"late_records_dropped": 1}  # 9 + 0 <= 9


class EventTimeWithTimeout(EventTimeTrigger):
    """The EventTimeTrigger, and a processing-time timeout per window that ``clear`` deletes."""

    def on_element(self, element, timestamp, window, ctx):
        ctx.register_processing_time_timer(ctx.current_processing_time() + 100)
        return super().on_element(element, timestamp, window, ctx)

    def on_processing_time(self, time, window, ctx):
        return FIRE

    def clear(self, window, ctx):
        super().clear(window, ctx)
        ctx.delete_processing_time_timer(ctx.current_processing_time() + 100)


def test_cleanup_calls_the_trigger_clear_which_deletes_its_timers():
    h = harness(TumblingEventTimeWindows.of(10), summing(), trigger=EventTimeWithTimeout())
    assert h.operator.processing_time and not h.operator.fast
    h.process(("a", 1, 1), ("a", 2, 2))
    assert h.keyed_state("window-timers") == {"a": {(0, 9): ((0, 10),), (1, 100.0): ((0, 10),)}}
    assert h.watermark(9) == [("a", 0, 3)]
    assert h.keyed_state() == {}
    assert h.set_processing_time(100.0) == []


class ProcessingTimeout(Trigger):
    """Fires global windows 10 seconds after their first record (processing time)."""

    started = ValueStateDescriptor("started")

    def on_element(self, element, timestamp, window, ctx):
        started = ctx.get_partitioned_state(self.started)
        if started.value() is None:
            now = ctx.current_processing_time()
            started.update(now)
            ctx.register_processing_time_timer(now + 10)
        return CONTINUE

    def on_processing_time(self, time, window, ctx):
        ctx.get_partitioned_state(self.started).clear()
        return FIRE_AND_PURGE


def test_a_custom_processing_time_trigger_on_global_windows_survives_a_restore():
    h = harness(GlobalWindows.create(), summing(), trigger=ProcessingTimeout())
    h.set_processing_time(5.0)
    h.process(("a", 0, 1))
    h.set_processing_time(8.0)
    h.process(("a", 0, 2), ("b", 0, 4))
    assert h.operator.next_processing_time() == 15.0
    snapshot = h.snapshot(1)
    restored = [h.restored_from(snapshot, parallelism=2, subtask_index=i) for i in range(2)]
    assert h.set_processing_time(15.0) == [("a", None, 3)]  # timers pass the global window's trigger
    out = [r for part in restored for r in part.set_processing_time(18.0)]
    assert sorted(out) == [("a", None, 3), ("b", None, 4)]


def test_triggers_that_cannot_merge_are_refused_for_sessions():
    with pytest.raises(TypeError, match="does not support merging"):
        operator(EventTimeSessionWindows.with_gap(5), trigger=EarlyAndOnTime(2))
    with pytest.raises(TypeError, match="cannot merge accumulators"):
        operator(EventTimeSessionWindows.with_gap(5), aggregate=lambda acc, r: r)


# ------------------------------------------------------------------------- lateness
def test_allowed_lateness_refires_late_windows_then_drops_records():
    h = harness(TumblingEventTimeWindows.of(10), summing(), lateness=5)
    h.process(("a", 1, 1), ("a", 3, 2))
    assert h.watermark(9) == [("a", 0, 3)]
    assert h.process(("a", 4, 10)) == [("a", 0, 13)]  # within the lateness: a late firing per record
    assert h.watermark(13) == []
    assert h.process(("a", 2, 100), ("b", 8, 5)) == [("a", 0, 113), ("b", 0, 5)]  # even a new window
    assert h.keyed_state("window-contents") == {"a": {(0, 10): 113}, "b": {(0, 10): 5}}
    assert h.watermark(14) == []  # cleanup at 9 + 5: the state goes, nothing fires
    assert h.keyed_state() == {}
    assert h.process(("a", 5, 1000)) == []  # window [0, 10) is gone: late
    assert h.counters() == {"late_records_dropped": 1}
    assert h.end_input() == []


def test_allowed_lateness_with_sessions_and_sliding_windows():
    h = harness(EventTimeSessionWindows.with_gap(5), summing(), lateness=3)
    h.process(("a", 1, 1))
    assert h.watermark(5) == [("a", 1, 1)]  # [1, 6) fires at 5, kept until 8
    assert h.process(("a", 0, 2)) == [("a", 0, 3)]  # merges into [0, 6), already due: a late firing
    assert h.process(("a", 4, 4)) == []  # [4, 9) extends the session to [0, 9): due again at 8
    # the timers of [0, 6) went with it (its cleanup at 8 too); [0, 9) fires at 8, is cleaned at 11
    assert h.keyed_state("window-timers") == {"a": {(0, 8): ((0, 9),), (0, 11): ((0, 9),)}}
    assert h.watermark(8) == [("a", 0, 7)]
    assert h.watermark(11) == [] and h.keyed_state() == {}
    pending = harness(EventTimeSessionWindows.with_gap(5), summing(), lateness=3)
    pending.process(("a", 1, 1), ("a", 4, 2))  # [1, 6) merges into [1, 9) before it fired
    assert pending.keyed_state("window-timers") == {"a": {(0, 8): ((1, 9),), (0, 11): ((1, 9),)}}
    sliding = harness(SlidingEventTimeWindows.of(10, 5), summing(), lateness=2)
    sliding.process(("a", 7, 1))  # windows [0, 10) and [5, 15)
    assert sliding.watermark(11) == [("a", 0, 1)]  # [0, 10) is cleaned at 11
    assert sliding.process(("a", 8, 2)) == []  # only [5, 15) takes it; not late, not counted
    assert sliding.counters() == {"late_records_dropped": 0}
    assert sliding.end_input() == [("a", 5, 3)]


def test_late_records_go_to_the_side_output_instead_of_being_dropped():
    h = harness(TumblingEventTimeWindows.of(10), summing(), late_tag=LATE.id)
    h.process(("a", 1, 1))
    assert h.watermark(12) == [("a", 0, 1)]
    assert h.process(("a", 2, 5), ("a", 15, 6)) == []
    assert h.side_output(LATE) == [("a", 2, 5)]
    assert h.counters() == {"late_records_dropped": 0}
    sessions = harness(EventTimeSessionWindows.with_gap(3), function=describe, late_tag=LATE.id)
    sessions.watermark(10)
    sessions.process(("a", 6, 1), ("a", 9, 2))  # [6, 9) ended at 8 <= 10: late; [9, 12) is not
    assert sessions.side_output(LATE) == [("a", 6, 1)] and sessions.end_input() == [("a", 9, 12, [2], float("inf"))]


# ------------------------------------------------------------------------- functions
class Describe(ProcessWindowFunction):
    """Every element and the window's metadata, plus a side output and per-window state."""

    fired = ValueStateDescriptor("fired", default=0)

    def process(self, key, context, elements):
        fired = context.window_state().get_state(self.fired)
        fired.update(fired.value() + 1)
        total = context.global_state().get_state(ValueStateDescriptor("total", default=0))
        total.update(total.value() + len(elements))
        context.output(OutputTag("sizes"), (key, len(elements)))
        window = context.window()
        return [(key, window.start, window.end, sorted(e[2] for e in elements), fired.value(), total.value(),
                 context.current_watermark(), context.current_processing_time())]

    def clear(self, context):
        context.window_state().get_state(self.fired).clear()


def test_process_gets_every_element_with_the_window_and_its_state():
    h = harness(TumblingEventTimeWindows.of(10), function=Describe(), lateness=10)
    h.set_processing_time(42.0)
    h.process(("a", 1, 3), ("a", 5, 1), ("a", 12, 7), ("b", 2, 4))
    assert h.watermark(9) == [("a", 0, 10, [1, 3], 1, 2, 9, 42.0), ("b", 0, 10, [4], 1, 1, 9, 42.0)]
    assert h.process(("a", 4, 2)) == [("a", 0, 10, [1, 2, 3], 2, 5, 9, 42.0)]  # a late firing, all elements
    assert h.side_output("sizes") == [("a", 2), ("b", 1), ("a", 3)]
    assert h.watermark(19) == [("a", 10, 20, [7], 1, 6, 19, 42.0)]  # [0, 10) cleaned up at 19 as well
    assert h.keyed_state("window-state:fired") == {"a": {(10, 20): 1}}  # clear() ran for [0, 10)
    assert h.keyed_state("total") == {"a": 6, "b": 1}  # global state stays


def test_aggregate_and_reduce_with_a_window_function():
    def label(key, context, results):
        (result,) = results
        yield f"{key}@{context.window().start}-{context.window().end}={result}"

    h = harness(TumblingEventTimeWindows.of(10), collect(), function=label)
    h.process(("a", 1, 1), ("a", 2, 2))
    assert h.end_input() == ["a@0-10=(1, 2)"]
    r = harness(EventTimeSessionWindows.with_gap(5), ReduceAggregate(lambda x, y: (x[0], y[1], x[2] * y[2])),
                function=label)
    r.process(("a", 1, 2), ("a", 9, 5), ("a", 4, 3))  # the third bridges: partial results re-reduced
    assert r.end_input() == ["a@1-14=('a', 4, 30)"]


def test_every_built_in_aggregation_merges_over_sessions():
    records = [("a", 1, 5), ("a", 10, 1), ("a", 5, 3)]  # the third bridges the first two
    keyed = epochal.Environment(1).from_collection([]).key_by(key_of)
    ws = lambda: assigner_window(keyed, EventTimeSessionWindows.with_gap(5), timestamp=time_of)  # noqa: E731
    cases = {"count": (ws().count(), 3), "sum": (ws().sum(value_of), 9), "min": (ws().min(value_of), 1),
             "max": (ws().max(value_of), 5), "avg": (ws().avg(2), 3.0), "sum-field": (ws().sum(2), ("a", 1, 9)),
             "aggregate": (ws().aggregate(Collect()), (5, 1, 3))}
    for name, (stream, expected) in cases.items():
        h = OperatorHarness.for_stream(stream)
        h.process(*records)
        assert h.end_input() == [("a", 1, expected)], name


# ------------------------------------------------------------------------- snapshots and restores
def sessions_oracle(records, gap):
    """``(key, start, count)`` of the event-time sessions of ``records``, by hand."""
    out = []
    by_key = collections.defaultdict(list)
    for key, ts, _ in records:
        by_key[key].append(ts)
    for key, times in by_key.items():
        times.sort()
        start = last = times[0]
        count = 0
        for ts in times:
            if ts > last + gap:  # touching sessions ([s, last + gap) and [ts, ...)) merge
                out.append((key, start, count))
                start, count = ts, 0
            last = max(last, ts)
            count += 1
        out.append((key, start, count))
    return sorted(out)


def feed(parts, records, watermark=None):
    out = []
    for index, part in enumerate(parts):
        mine = [r for r in records if OperatorHarness.owner_of(r[0], len(parts)) == index]
        out += part.process(*mine) if mine else []
    if watermark is not None:
        out += [r for part in parts for r in part.watermark(watermark)]
    return out


def restore(parts, parallelism, checkpoint):
    snapshots = [part.snapshot(checkpoint) for part in parts]
    return [parts[0].restored_from(*snapshots, parallelism=parallelism, subtask_index=i) for i in range(parallelism)]


RESCALES = {
    "sessions": (lambda: operator(EventTimeSessionWindows.with_gap(5)), 5),
    "sessions-lateness": (lambda: operator(EventTimeSessionWindows.with_gap(5), lateness=4), 5),
    "sessions-purging": (lambda: operator(EventTimeSessionWindows.with_gap(5),
                                                trigger=PurgingTrigger.of(EventTimeTrigger())), 5),
}


@pytest.mark.parametrize("case", sorted(RESCALES))
def test_restores_at_other_parallelisms_with_open_sessions_and_pending_timers(case):
    make, gap = RESCALES[case]
    keys = [f"k{i}" for i in range(24)]
    phase1 = [(k, t, 0) for i, k in enumerate(keys) for t in (i % 7, i % 7 + 3, 40 + i % 5)]
    phase2 = [(k, t, 0) for i, k in enumerate(keys) for t in (44 + i % 5, 60 + i % 3, 70)]
    phase3 = [(k, t, 0) for i, k in enumerate(keys) for t in (72 + i % 2, 90)]
    expected = sessions_oracle(phase1 + phase2 + phase3, gap)
    parts = [OperatorHarness(make(), parallelism=2, subtask_index=i) for i in range(2)]
    out = feed(parts, phase1, watermark=20)  # the first sessions fire, those at 40+ stay open
    assert out and all(part.keyed_state("window-sessions") for part in parts)
    parts = restore(parts, 3, 1)  # 2 -> 3
    assert all(part.keyed_state("__timers__") for part in parts), "every new subtask got pending timers"
    out += feed(parts, phase2, watermark=65)  # extends the restored sessions, fires some
    parts = restore(parts, 1, 2)  # 3 -> 1
    out += feed(parts, phase3) + parts[0].end_input()
    assert sorted(out) == expected
    assert parts[0].keyed_state() == {} and parts[0].counters() == {"late_records_dropped": 0}


def test_restore_in_the_middle_of_allowed_lateness_and_processing_time_windows():
    h = harness(TumblingEventTimeWindows.of(10), summing(), lateness=5)
    h.process(("a", 1, 1), ("b", 2, 2))
    h.watermark(9)
    parts = restore([h], 2, 1)
    assert feed(parts, [], watermark=9) == []  # a restored operator learns the event time anew
    out = feed(parts, [("a", 3, 10), ("b", 4, 20)])
    assert sorted(out) == [("a", 0, 11), ("b", 0, 22)]  # late firings after the restore
    assert feed(parts, [], watermark=14) == []
    assert all(part.keyed_state() == {} for part in parts)

    p = harness(TumblingProcessingTimeWindows.of(10), summing())
    p.set_processing_time(3.0)
    p.process(("a", 0, 1), ("b", 0, 2))
    parts = restore([p], 3, 1)
    assert sorted(r for part in parts for r in part.set_processing_time(10.0)) == [("a", 0.0, 1), ("b", 0.0, 2)]


# ------------------------------------------------------------------------- state on every backend
def _open(op, backend, clock=lambda: 0.0):
    context = RuntimeContext(operator_name="w", operator_uid="w", subtask_index=0, parallelism=1,
                             max_parallelism=MAX_P, key_groups=backend.key_groups, keyed_state=backend,
                             operator_state=OperatorStateStore(), checkpointing=True, clock=clock)
    op.name = "w"
    op.open(context, lambda payload: None)
    return op


PARITY = {
    # a window's cleanup (49 + 50) is the next one's firing (99): two windows wait for one timer
    "tumbling-sum-lateness": lambda: operator(TumblingEventTimeWindows.of(50), summing(), lateness=50),
    "sliding-collect": lambda: operator(SlidingEventTimeWindows.of(60, 20), collect()),
    "sliding-process": lambda: operator(SlidingEventTimeWindows.of(60, 20), function=describe),
    "sessions-reduce": lambda: operator(EventTimeSessionWindows.with_gap(15),
                                        ReduceAggregate(lambda a, b: (a[0], b[1], a[2] + b[2]))),
    "sessions-process": lambda: operator(EventTimeSessionWindows.with_gap(15), function=describe),
    "global-count": lambda: operator(GlobalWindows.create(), summing(), trigger=PurgingTrigger.of(CountTrigger.of(4))),
    "custom-trigger": lambda: operator(TumblingEventTimeWindows.of(50), summing(), trigger=EarlyAndOnTime(3)),
    "processing-time": lambda: operator(TumblingProcessingTimeWindows.of(10), collect()),
}


@pytest.mark.parametrize("name", sorted(PARITY))
def test_rocksdb_gives_the_same_output_and_state_as_the_heap(name, tmp_path):
    """Half the records, a snapshot restored into a new backend of the same kind, the other half."""
    records = [(f"k{i % 11}", (i * 37) % 400, i) for i in range(600)]
    outputs: list[Any] = []
    states: list[Any] = []
    made: list[RocksDBKeyedStateBackend] = []
    now = [0.0]

    def backend(kind):
        if kind == "heap":
            return HeapKeyedStateBackend(MAX_P, range(MAX_P))
        made.append(RocksDBKeyedStateBackend(MAX_P, range(MAX_P), str(tmp_path / f"db{len(made)}")))
        return made[-1]

    try:
        for kind in ("heap", "rocksdb"):
            state = backend(kind)
            op = _open(PARITY[name](), state, clock=lambda: now[0])
            out = []
            for step in range(6):
                now[0] = step * 7.0
                out += op.process_batch(records[step * 100:(step + 1) * 100])
                out += op.on_watermark(step * 60) + op.on_processing_time(now[0])
                if step == 2:
                    op.prepare_snapshot(1)
                    captured = state.capture()
                    states.append(captured)
                    out.append(op.counters())
                    state = backend(kind)
                    for group, tables in captured.items():
                        state.restore_group(group, copy.deepcopy(tables))
                    op = _open(PARITY[name](), state, clock=lambda: now[0])
                    out += op.on_watermark(step * 60)  # a restored operator learns the watermark anew
            out += op.end_input()
            outputs.append((out, op.counters(), op.side))
        assert outputs[0][0], "no output: the test would prove nothing"
        assert outputs[1] == outputs[0]
        assert states[1] == states[0] and states[0]
    finally:
        for rocks in made:
            rocks.dispose()


def test_a_snapshot_keeps_contents_that_later_records_change_in_place():
    for make in (lambda: operator(TumblingEventTimeWindows.of(10), function=describe),
                 lambda: operator(EventTimeSessionWindows.with_gap(5), collect())):
        h = OperatorHarness(make())
        h.process(("a", 1, 10), ("a", 2, 20))
        captured = h.subtask.capture(1)[h.uid]["keyed"]  # shares values with the live state
        frozen = pickle.dumps(captured)
        h.process(("a", 3, 30), ("a", 4, 40))
        assert pickle.dumps(captured) == frozen
        assert len(h.end_input()) == 1


def test_restored_per_window_state_is_never_shared_with_a_snapshot_before_it_is_used():
    h = harness(GlobalWindows.create(), summing(), trigger=CountTrigger.of(3))
    h.process(("a", 0, 1))
    restored = h.restored_from(h.snapshot(1))
    captured = restored.subtask.capture(2)[restored.uid]["keyed"]  # before the trigger declared its state
    frozen = pickle.dumps(captured)
    restored.process(("a", 0, 2))
    assert pickle.dumps(captured) == frozen
    assert restored.process(("a", 0, 3)) == [("a", None, 6)]


class Listing(Collect):
    def get_result(self, accumulator):
        return accumulator  # the live accumulator itself


def test_emitted_records_never_change_when_their_window_goes_on():
    h = harness(GlobalWindows.create(), function=lambda key, ctx, elements: [elements], trigger=CountTrigger.of(2))
    h.process(("a", 0, 1), ("a", 0, 2))
    h.process(("a", 0, 3), ("a", 0, 4))
    assert [[r[2] for r in out] for out in h.output] == [[1, 2], [1, 2, 3, 4]]
    late = OperatorHarness(operator(TumblingEventTimeWindows.of(10), FunctionAggregate(Listing()), lateness=5),
                           checkpointing=False)
    late.process(("a", 1, 1))
    late.watermark(9)
    late.process(("a", 2, 2))
    assert [r.value for r in late.output] == [[1], [1, 2]]


# ------------------------------------------------------------------------- the API
def keyed():
    return epochal.Environment(1).from_collection([]).key_by(key_of)


def test_api_builds_the_general_operator_and_keeps_the_old_one():
    old = WindowedStream(keyed(), keyed_window(keyed(), 10, time_of).windows, time_of).count()
    assert type(old.node.operator).__name__ == "TimeWindowOperator" and old.node.operation == "window"
    late = keyed_window(keyed(), 10, time_of).allowed_lateness(5).side_output_late_data(LATE).count()
    assert type(late.node.operator) is WindowOperator and late.node.operation == "window"
    h = OperatorHarness.for_stream(late)
    h.process(("a", 1, 0))
    assert h.watermark(9) == [("a", 0, 1)] and h.process(("a", 2, 0)) == [("a", 0, 2)]
    h.watermark(20)
    h.process(("a", 3, 0))
    assert h.side_output(LATE) == [("a", 3, 0)]
    stream = assigner_window(keyed(), GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(2))).sum(2)
    assert stream.node.name == "Window(GlobalWindows() PurgingTrigger(CountTrigger(2))) Sum"
    assert OperatorHarness.for_stream(stream).process(("a", 0, 1), ("a", 0, 2)) == [("a", None, ("a", 0, 3))]
    processed = keyed_window(keyed(), SlidingEventTimeWindows.of(10, 5), time_of).process(describe)
    assert OperatorHarness.for_stream(processed).process(("a", 1, 7)) == []


class Pages(ProcessWindowFunction):
    def process(self, key, context, elements):
        window = context.window()
        yield key, window.start, window.end, [page for _, _, page in elements]


def test_whole_jobs_on_the_local_runner():
    """The plan path: operators shipped through cloudpickle, chained after watermarks, 2 subtasks."""
    from epochal.testing import run_locally

    env = epochal.Environment(parallelism=2)
    clicks = env.from_collection([("ann", 1, "home"), ("bob", 3, "cart"), ("ann", 4, "cart"), ("ann", 30, "home"),
                                  ("bob", 70, "home")]).with_watermarks(time_of)
    by_user = clicks.key_by(key_of)
    counts = keyed_window(by_user, TumblingEventTimeWindows.of(60), time_of).allowed_lateness(10).count().collect()
    sessions = keyed_window(by_user, EventTimeSessionWindows.with_gap(10), time_of).process(Pages()).collect()
    threes = (keyed_window(by_user, GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(3))).count()
              .collect())
    run_locally(env)
    assert sorted(counts.get()) == [("ann", 0, 3), ("bob", 0, 1), ("bob", 60, 1)]
    assert sorted(sessions.get()) == [("ann", 1, 14, ["home", "cart"]), ("ann", 30, 40, ["home"]),
                                      ("bob", 3, 13, ["cart"]), ("bob", 70, 80, ["home"])]
    assert threes.get() == [("ann", None, 3)]


@pytest.mark.parametrize("call,message", [
    (lambda: assigner_window(keyed(), TumblingEventTimeWindows.of(10)), "pass timestamp=fn"),
    (lambda: assigner_window(keyed(), TumblingProcessingTimeWindows.of(10), time_of), "takes no timestamp"),
    (lambda: keyed_window(keyed(), 10), "is in event time: pass timestamp=fn"),
    (lambda: keyed_window(keyed(), TumblingEventTimeWindows.of(10), time_of, slide=5), "takes no slide"),
    (lambda: assigner_window(keyed(), 10), "takes a size or a WindowAssigner"),
    (lambda: WindowedStream(keyed(), keyed_window(keyed(), 3, time_of).windows).trigger("x"), "takes a Trigger"),
    (lambda: keyed().count_window(3).trigger(CountTrigger.of(2)), "not available on count_window"),
    (lambda: keyed_window(keyed(), 10, time_of).allowed_lateness(-1), "allowed lateness must be a number >= 0"),
    (lambda: keyed_window(keyed(), 10, time_of).side_output_late_data("late"), "takes an OutputTag"),
    (lambda: assigner_window(keyed(), EventTimeSessionWindows.with_gap(3), time_of).trigger(EarlyAndOnTime(2))
     .count(), "does not support merging"),
    (lambda: keyed_window(keyed(), 10, time_of).process(object()), "takes a ProcessWindowFunction"),
    (lambda: keyed_window(keyed(), 10, time_of).reduce(max, window_function=3), "takes a ProcessWindowFunction"),
    (lambda: PurgingTrigger.of(3), "takes a Trigger"),
    (lambda: CountTrigger.of(0), "count must be a whole number > 0"),
])
def test_bad_window_arguments_fail_at_plan_time(call, message):
    with pytest.raises(PlanError, match=message):
        call()
