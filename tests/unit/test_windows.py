"""Event-time windows without Spark: watermark generation, firing, lateness, restore, and the
minimum-over-inputs rule of a subtask's event time."""

from __future__ import annotations

from epochal.api.functions import RuntimeContext
from epochal.plan.keygroups import key_group_range
from epochal.runtime.aggregates import CountAggregate, ReduceAggregate
from epochal.runtime.channels import InputChannel
from epochal.runtime.events import END_OF_PARTITION, Watermark
from epochal.runtime.operators import Operator
from epochal.runtime.tasks import ChainRunner, Subtask
from epochal.runtime.windows import TumblingWindowOperator, WatermarkGenerator
from epochal.state.keyed import HeapKeyedStateBackend

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
    a, b = (InputChannel(i, subtask, lambda n: None) for i in range(2))
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
