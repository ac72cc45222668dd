"""Windows without Spark: watermark generation, firing, lateness, restore, and the
minimum-over-inputs rule of a subtask's event time; every window shape (time and count, tumbling
and sliding) with every aggregate against a plain-Python oracle, through the OperatorHarness,
also across a snapshot and a restore at another parallelism."""

from __future__ import annotations

import collections
import functools
import pickle

import pytest

import epochal
from epochal.api.functions import RuntimeContext
from epochal.dataflow.dataplane.chains import ChainRunner
from epochal.dataflow.dataplane.channels import InputChannel
from epochal.dataflow.dataplane.tasks import Subtask
from epochal.errors import PlanError
from epochal.plan.keygroups import key_group_range
from epochal.runtime.operators.aggregates import CountAggregate, ReduceAggregate
from epochal.runtime.operators.base import Operator
from epochal.runtime.operators.inband import END_OF_PARTITION, Watermark
from epochal.runtime.windows.time_windows import TumblingWindowOperator, WatermarkGenerator
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.testing import OperatorHarness

MAX_PARALLELISM = 16


def open_window(aggregate=None, restored=None) -> TumblingWindowOperator:
    operator = TumblingWindowOperator(lambda r: r[0], lambda r: r[1], 10, aggregate or CountAggregate())
    backend = HeapKeyedStateBackend(MAX_PARALLELISM, key_group_range(0, 1, MAX_PARALLELISM))
    for group, states in (restored or {}).items():
        backend.restore_group(group, states)
    context = RuntimeContext(operator_name="w", operator_uid="w", subtask_index=0, parallelism=1,
                             max_parallelism=MAX_PARALLELISM, key_groups=backend.key_groups, keyed_state=backend,
                             operator_state=None, attempt=0, checkpointing=True)
    operator.open(context, lambda payload: None)
    return operator


def test_watermark_generator_follows_the_largest_event_time():
    generator = WatermarkGenerator(lambda r: r, max_out_of_orderness=2, interval=0)
    assert generator.take_watermark() is None  # nothing seen yet
    assert generator.process_batch([5, 9, 7]) == [5, 9, 7]
    assert generator.take_watermark() == 9 - 2 - 1
    generator.process_batch([8])
    assert generator.take_watermark() is None  # no progress, no new watermark
    generator.process_batch([20])
    assert generator.take_watermark() == 17


def test_window_fires_on_the_watermark_and_drops_late_records():
    window = open_window()
    assert window.process_batch([("a", 1), ("a", 9), ("b", 3), ("a", 12)]) == []
    assert window.on_watermark(8) == []  # [0, 10) needs event time 9
    assert sorted(window.on_watermark(9)) == [("a", 0, 2), ("b", 0, 1)]
    window.process_batch([("a", 4), ("b", 15)])  # ("a", 4) belongs to a window that fired: late
    assert window.late_records == 1
    assert sorted(window.end_input()) == [("a", 10, 1), ("b", 10, 1)]
    assert window.backend.entry_count() == 0  # fired windows leave no state behind


def test_window_reduce_keeps_order_of_starts():
    window = open_window(ReduceAggregate(lambda acc, r: (acc[0], max(acc[1], r[1]))))
    window.process_batch([("k", 25), ("k", 3), ("k", 14), ("k", 1)])
    assert [(start, value[1]) for _, start, value in window.end_input()] == [(0, 3), (10, 14), (20, 25)]


def test_window_state_survives_a_snapshot_and_restore():
    window = open_window()
    window.process_batch([("a", 1), ("b", 2), ("a", 11)])
    captured = window.backend.capture()
    window.process_batch([("a", 2)])  # after the snapshot: not in it
    restored = open_window(restored=captured)
    assert sorted(restored.on_watermark(100)) == [("a", 0, 1), ("a", 10, 1), ("b", 0, 1)]


class _Recorder:
    """Stands in for the window chain: records the watermarks a subtask passes to its head."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def on_watermark(self, watermark: float) -> None:
        self.seen.append(watermark)


def test_subtask_event_time_is_the_minimum_over_live_inputs():
    subtask = Subtask(0, 0, 1, "windows")
    subtask.head = _Recorder()  # type: ignore[assignment]
    a, b = (InputChannel(i, subtask, lambda n, size: None) for i in range(2))
    subtask.inputs = [a, b]
    subtask.on_event(a, Watermark(50))
    assert subtask.head.seen == []  # b has said nothing yet
    subtask.on_event(b, Watermark(30))
    subtask.on_event(b, Watermark(70))
    assert subtask.head.seen == [30, 50]
    subtask.ended_inputs = 0
    subtask.on_event(a, END_OF_PARTITION)  # a ended: b alone decides now
    assert subtask.head.seen == [30, 50, 70]


def test_chain_passes_generated_watermarks_to_the_window():
    generator = ChainRunner("wm", "wm", WatermarkGenerator(lambda r: r[1], interval=0))
    window_runner = ChainRunner("w", "w", open_window())
    fired: list = []
    sink = ChainRunner("sink", "sink", _Collect(fired))
    generator.children = [window_runner]
    window_runner.children = [sink]
    generator.push([("a", 1), ("a", 5)])
    generator.push([("a", 12)])  # watermark 11 fires [0, 10)
    assert fired == [("a", 0, 2)]


class _Collect(Operator):
    """A terminal operator that keeps what reaches it."""

    def __init__(self, out: list) -> None:
        self.out = out

    def process_batch(self, batch):
        self.out.extend(batch)
        return []


# ---------------------------------------------------------------------------------------------
# Every shape x every aggregate, against an oracle, through the OperatorHarness.

KEYS = [f"k{i}" for i in range(8)]
#: (key, event time, value): event times run up with the index, out of order by up to 2
RECORDS = [(KEYS[(i * 5) % 8], i + (i * 7) % 3, (i * 13) % 17 - 5) for i in range(120)]
BATCHES = [RECORDS[i:i + 10] for i in range(0, len(RECORDS), 10)]
#: the watermark after each batch: nothing later is late (event times are out of order by 2 at most)
WATERMARKS = [max(r[1] for r in RECORDS[:i + 10]) - 3 for i in range(0, len(RECORDS), 10)]


def time_starts(ts, size, step):
    """The starts (multiples of ``step``) of the windows ``[s, s + size)`` holding ``ts``."""
    return [s for s in range((ts - size) // step * step, ts + 1, step) if s <= ts < s + size]


def time_oracle(size, step, result):
    contents = collections.defaultdict(list)
    for record in RECORDS:
        for start in time_starts(record[1], size, step):
            contents[(record[0], start)].append(record)
    return [(key, start, result(records)) for (key, start), records in contents.items()]


def count_oracle(size, step, result):
    per_key = collections.defaultdict(list)
    for record in RECORDS:
        per_key[record[0]].append(record)
    return [(key, result(records[first:first + size]))
            for key, records in per_key.items() for first in range(0, len(records) - size + 1, step)]


SHAPES = {  # name: (the window call on a keyed stream, its oracle)
    "time-tumbling": (lambda ks: ks.window(10, lambda r: r[1]), functools.partial(time_oracle, 10, 10)),
    "time-sliding": (lambda ks: ks.window(10, lambda r: r[1], slide=4), functools.partial(time_oracle, 10, 4)),
    "count-tumbling": (lambda ks: ks.count_window(3), functools.partial(count_oracle, 3, 3)),
    "count-sliding": (lambda ks: ks.count_window(5, slide=2), functools.partial(count_oracle, 5, 2)),
}


class CollectValues:
    """A user AggregateFunction whose ``add`` changes its (list) accumulator in place."""

    def create_accumulator(self):
        return []

    def add(self, record, accumulator):
        accumulator.append(record[2])
        return accumulator

    def merge(self, a, b):
        return a + b

    def get_result(self, accumulator):
        return tuple(accumulator)


def values(records):
    return [r[2] for r in records]


AGGREGATES = {  # name: (the aggregation on a WindowedStream, its result over the window's records)
    "count": (lambda ws: ws.count(), len),
    "sum": (lambda ws: ws.sum(lambda r: r[2]), lambda rs: sum(values(rs))),
    "sum-field": (lambda ws: ws.sum(2), lambda rs: (*rs[0][:2], sum(values(rs)))),
    "min": (lambda ws: ws.min(lambda r: r[2]), lambda rs: min(values(rs))),
    "min-field": (lambda ws: ws.min(2), lambda rs: (*rs[0][:2], min(values(rs)))),
    "max": (lambda ws: ws.max(lambda r: r[2]), lambda rs: max(values(rs))),
    "max-field": (lambda ws: ws.max(2), lambda rs: (*rs[0][:2], max(values(rs)))),
    "avg": (lambda ws: ws.avg(2), lambda rs: sum(values(rs)) / len(rs)),
    "avg-function": (lambda ws: ws.avg(lambda r: r[2] * 2), lambda rs: 2 * sum(values(rs)) / len(rs)),
    "reduce": (lambda ws: ws.reduce(lambda a, b: (a[0], max(a[1], b[1]), a[2] - b[2])),
               lambda rs: functools.reduce(lambda a, b: (a[0], max(a[1], b[1]), a[2] - b[2]), rs)),
    "aggregate": (lambda ws: ws.aggregate(CollectValues()), lambda rs: tuple(values(rs))),
}


def windowed(shape, aggregate):
    keyed = epochal.Environment(1).from_collection([]).key_by(lambda r: r[0])
    return AGGREGATES[aggregate][0](SHAPES[shape][0](keyed))


def feed(parts, batches, watermarks):
    """Each batch to the subtasks owning its keys, then the watermark to all; what they emitted."""
    out = []
    for batch, watermark in zip(batches, watermarks, strict=True):
        for index, part in enumerate(parts):
            mine = [r for r in batch if OperatorHarness.owner_of(r[0], len(parts)) == index]
            out += part.process_batch(mine) if mine else []
        for part in parts:
            out += part.watermark(watermark)
    return out


def finish(parts):
    return [record for part in parts for record in part.end_input()]


def ordered(records):
    return sorted(records, key=repr)


@pytest.mark.parametrize("aggregate", sorted(AGGREGATES))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_and_aggregate_matches_the_oracle_across_restore_and_rescale(shape, aggregate):
    expected = ordered(SHAPES[shape][1](AGGREGATES[aggregate][1]))
    assert expected
    whole = OperatorHarness.for_stream(windowed(shape, aggregate))
    assert ordered(feed([whole], BATCHES, WATERMARKS) + finish([whole])) == expected
    assert whole.counters().get("late_records_dropped", 0) == 0

    half = OperatorHarness.for_stream(windowed(shape, aggregate))
    before = feed([half], BATCHES[:5], WATERMARKS[:5])
    snapshot = half.snapshot(1)
    assert half.keyed_state("window-contents"), "nothing open at the snapshot: the test would prove little"
    for parallelism in (1, 2):  # the same parallelism, and rescaled to 2 subtasks
        parts = [half.restored_from(snapshot, parallelism=parallelism, subtask_index=i) for i in range(parallelism)]
        assert all(part.keyed_state() for part in parts)  # each new subtask restored some keys
        after = feed(parts, BATCHES[5:], WATERMARKS[5:]) + finish(parts)
        assert ordered(before + after) == expected


def test_time_windows_fire_in_order_of_start_and_only_when_complete():
    harness = OperatorHarness.for_stream(windowed("time-sliding", "count"))
    # size 10, slide 4: a@7 is in windows 0 and 4, b@9 in 0, 4 and 8, a@13 in 4, 8 and 12
    harness.process(("a", 7, 0), ("b", 9, 0), ("a", 13, 0))
    assert harness.watermark(8) == []
    assert harness.watermark(9) == [("a", 0, 1), ("b", 0, 1)]  # [0, 10) is complete at 9
    # in order of start; keys of one start in the order their windows opened
    assert harness.watermark(17) == [("a", 4, 2), ("b", 4, 1), ("b", 8, 1), ("a", 8, 1)]
    assert harness.end_input() == [("a", 12, 1)]  # every open window fires at the end of the input
    assert harness.keyed_state() == {}


def test_sliding_time_windows_drop_only_records_whose_windows_all_fired():
    harness = OperatorHarness.for_stream(windowed("time-sliding", "aggregate"))
    harness.process(("a", 12, 1))  # windows 4, 8, 12
    assert harness.watermark(17) == [("a", 4, (1,)), ("a", 8, (1,))]
    harness.process(("a", 13, 2))  # late for 4 and 8, still in time for 12: not dropped
    harness.process(("a", 5, 3))   # windows 0 and 4 have fired: late, dropped
    assert harness.counters() == {"late_records_dropped": 1}
    assert harness.end_input() == [("a", 12, (1, 2))]


def test_count_windows_emit_when_full_and_never_partial_at_the_end():
    harness = OperatorHarness.for_stream(windowed("count-sliding", "aggregate"))  # size 5, slide 2
    assert harness.process(*[("a", 0, v) for v in range(6)]) == [("a", (0, 1, 2, 3, 4))]
    assert harness.process(("a", 0, 6)) == [("a", (2, 3, 4, 5, 6))]
    assert harness.watermark(100) == [] and harness.watermarks == [100]  # event time plays no part
    assert harness.end_input() == []  # windows opened at 4 and 6 are not full: they never fire
    assert harness.keyed_state("window-contents") == {"a": {4: [4, 5, 6], 6: [6]}}
    assert harness.keyed_state("window-records") == {"a": 7}


def test_a_snapshot_keeps_the_accumulators_a_user_function_changes_in_place_later():
    """The snapshot's synchronous part shares accumulators with the live state and is serialised
    later, on another thread: a user ``add`` that changes its accumulator must not reach it."""
    for shape in ("time-tumbling", "count-sliding"):
        harness = OperatorHarness.for_stream(windowed(shape, "aggregate"))
        harness.process(("a", 1, 10), ("a", 2, 20))
        captured = harness.subtask.capture(1)[harness.uid]["keyed"]  # as a worker's barrier does
        frozen = pickle.dumps(captured)
        harness.process(("a", 3, 30), ("a", 4, 40))
        assert pickle.dumps(captured) == frozen, shape
        harness.process(("a", 5, 50))  # copied once per snapshot, then changed in place again
        assert finish([harness]) == ([("a", 0, (10, 20, 30, 40, 50))] if shape == "time-tumbling" else [])


class NoMerge:
    def create_accumulator(self):
        return 0

    def add(self, record, accumulator):
        return accumulator + 1

    def get_result(self, accumulator):
        return accumulator


@pytest.mark.parametrize("call,message", [
    (lambda ks: ks.window(10, lambda r: r[1], slide=20), "slide must be positive and at most the size 10"),
    (lambda ks: ks.window(0, lambda r: r[1]), "window size must be a number > 0"),
    (lambda ks: ks.window(10, lambda r: r[1], slide=0), "window slide must be a number > 0"),
    (lambda ks: ks.window(10, "ts"), "window\\(\\) takes a function"),
    (lambda ks: ks.count_window(3, slide=4), "slide must be between 1 and the size 3"),
    (lambda ks: ks.count_window(0), "count window size must be a whole number > 0"),
    (lambda ks: ks.count_window(2.5), "count window size must be a whole number"),
    (lambda ks: ks.count_window(3).aggregate(NoMerge()), "NoMerge has no merge"),
    (lambda ks: ks.count_window(3).aggregate(CollectValues), "the class CollectValues: pass CollectValues"),
    (lambda ks: ks.window(10, lambda r: r[1]).avg(1.5), "avg\\(\\) takes a field name"),
])
def test_bad_window_arguments_fail_at_once_with_one_plan_error(call, message):
    keyed = epochal.Environment(1).from_collection([]).key_by(lambda r: r[0])
    with pytest.raises(PlanError, match=message):
        call(keyed)


@pytest.mark.parametrize("method", ["window", "count_window"])
def test_windows_need_a_keyed_stream(method):
    stream = epochal.Environment(1).from_collection([])
    with pytest.raises(PlanError, match=f"call key_by\\(...\\) first, e.g. stream.key_by.*{method}"):
        getattr(stream, method)(10) if method == "count_window" else stream.window(10, lambda r: r)
