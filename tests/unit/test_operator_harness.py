"""The operator harness (epochal.testing.OperatorHarness): one operator driven by hand with
records, watermarks, barriers and end of input; its output, its state, snapshots and restores at
another parallelism."""

from __future__ import annotations

import os

import pytest

import epochal
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from epochal.runtime.operators.aggregates import CountAggregate
from epochal.runtime.operators.base import SinkOperator
from epochal.runtime.operators.inband import CheckpointBarrier, EndOfPartition, Watermark
from epochal.runtime.windows.time_windows import TumblingWindowOperator, WatermarkGenerator
from epochal.state.descriptors import ValueStateDescriptor
from epochal.testing import OperatorHarness, OperatorSnapshot, TestSink

KEYS = [f"k{i}" for i in range(40)]


def summing():
    env = epochal.Environment(1)
    return env.from_collection([]).key_by(lambda kv: kv[0]).sum(lambda kv: kv[1])


class RunningTotal(epochal.ProcessFunction):
    """A user function with keyed state and a per-subtask operator list."""

    def open(self, context):
        self.seen = context.get_list_state("seen")

    def process_element(self, value, ctx):
        total = ctx.get_state(ValueStateDescriptor("total", default=0))
        total.update(total.value() + value[1])
        self.seen.append(value[0])
        yield (ctx.current_key, total.value())


def test_rolling_reduce_output_and_state():
    harness = OperatorHarness.for_stream(summing())
    assert harness.process(("a", 1), ("b", 2)) == [("a", 1), ("b", 2)]
    assert harness.process(("a", 3)) == [("a", 4)]
    assert harness.keyed_state("aggregate") == {"a": 4, "b": 2}
    assert harness.output == [("a", 1), ("b", 2), ("a", 4)]
    assert harness.take_output() == [("a", 1), ("b", 2), ("a", 4)]
    assert harness.take_output() == []


def test_window_fires_on_watermarks_and_drops_late_records():
    window = TumblingWindowOperator(lambda r: r[0], lambda r: r[1], 10, CountAggregate())
    harness = OperatorHarness(window, parallelism=1)
    assert harness.process(("a", 1), ("a", 9), ("b", 3), ("a", 12)) == []
    assert harness.keyed_state("window-contents") == {"a": {0: 2, 10: 1}, "b": {0: 1}}
    assert harness.watermark(8) == []
    assert sorted(harness.watermark(9)) == [("a", 0, 2), ("b", 0, 1)]
    assert harness.watermark(5) == []  # event time never goes back
    assert harness.process(("a", 4)) == [] and harness.counters() == {"late_records_dropped": 1}
    assert harness.end_input() == [("a", 10, 1)]
    assert harness.watermarks == [8, 9]  # passed downstream (after what they fired), never going back
    assert isinstance(harness.events[-1], EndOfPartition)
    with pytest.raises(RuntimeError, match="ended"):
        harness.process(("a", 30))


def test_watermark_generator_emits_after_every_batch():
    harness = OperatorHarness(WatermarkGenerator(lambda r: r, max_out_of_orderness=2))
    harness.process(5, 9)
    harness.process(7)
    harness.process(20)
    assert harness.events == [5, 9, Watermark(6), 7, 20, Watermark(17)]


def test_barrier_follows_the_records_before_it():
    harness = OperatorHarness.for_stream(summing())
    harness.process(("a", 1))
    snapshot = harness.snapshot(7)
    harness.process(("a", 1))
    assert [type(e).__name__ for e in harness.events] == ["tuple", "CheckpointBarrier", "tuple"]
    assert isinstance(harness.events[1], CheckpointBarrier) and harness.events[1].checkpoint_id == 7
    assert snapshot.checkpoint_id == 7 and snapshot.parallelism == 1


def test_snapshot_restores_at_another_parallelism_with_owned_key_groups_only():
    harness = OperatorHarness.for_stream(summing())
    harness.process(*[(k, i) for i, k in enumerate(KEYS)])
    snapshot = harness.snapshot(1)
    harness.process(("k0", 100))  # after the snapshot: not in it
    restored = [harness.restored_from(snapshot, parallelism=3, subtask_index=i) for i in range(3)]
    for index, part in enumerate(restored):
        state = part.keyed_state("aggregate")
        assert state and all(OperatorHarness.owner_of(k, 3) == index for k in state)
        assert all(part.owns(k) for k in state)
    merged = {k: v for part in restored for k, v in part.keyed_state("aggregate").items()}
    assert merged == {k: i for i, k in enumerate(KEYS)}
    owner = restored[OperatorHarness.owner_of("k5", 3)]
    assert owner.process(("k5", 10)) == [("k5", 15)]  # the restored aggregate goes on


def test_rescaling_down_merges_the_snapshots_of_every_old_subtask():
    parts = [OperatorHarness.for_stream(summing(), parallelism=2, subtask_index=i) for i in range(2)]
    for key in KEYS:
        parts[OperatorHarness.owner_of(key, 2)].process((key, 1))
    snapshots = [p.snapshot(3) for p in parts]
    single = parts[0].restored_from(*snapshots, parallelism=1)
    assert single.keyed_state("aggregate") == {k: 1 for k in KEYS}


def test_records_of_foreign_key_groups_are_refused():
    harness = OperatorHarness.for_stream(summing(), parallelism=2, subtask_index=0)
    foreign = next(k for k in KEYS if not harness.owns(k))
    with pytest.raises(ValueError, match="subtask 1"):
        harness.process((foreign, 1))


def test_user_process_function_state_and_restore():
    harness = OperatorHarness(RunningTotal(), key_selector=lambda kv: kv[0], parallelism=1)
    assert harness.process(("a", 1), ("b", 5), ("a", 2)) == [("a", 1), ("b", 5), ("a", 3)]
    assert harness.keyed_state() == {"total": {"a": 3, "b": 5}}
    assert harness.state_of("a") == {"total": 3}
    assert harness.operator_state("seen") == ["a", "b", "a"]
    snapshot = harness.snapshot(1)
    assert isinstance(snapshot, OperatorSnapshot)
    halves = [harness.restored_from(snapshot, parallelism=2, subtask_index=i) for i in range(2)]
    # operator lists are split between the new subtasks (split redistribution), keyed state by key group
    assert halves[0].operator_state("seen") + halves[1].operator_state("seen") == ["a", "b", "a"]
    owner = halves[OperatorHarness.owner_of("a", 2)]
    assert owner.process(("a", 10)) == [("a", 13)]


def test_plain_function_and_user_exceptions_are_raised_as_they_are():
    harness = OperatorHarness(lambda value, ctx: [1 // value])
    assert harness.process(1, 2) == [1, 0]
    with pytest.raises(ZeroDivisionError):
        harness.process(0)


def test_sink_two_phase_commit_under_the_harness(tmp_path):
    directory = str(tmp_path / "out")
    harness = OperatorHarness(SinkOperator(ExactlyOnceFileSink(directory)), name="sink")
    harness.process("a", "b")
    snapshot = harness.snapshot(1)
    assert read_committed_lines(directory) == []  # pre-committed, invisible
    assert len(snapshot.state["operator"][SinkOperator.PENDING][1]) == 1
    harness.notify_complete(1)
    assert read_committed_lines(directory) == ["a", "b"]
    harness.close()
    assert not os.listdir(os.path.join(directory, "_pending"))


def test_test_sink_under_the_harness():
    sink = TestSink()
    env = epochal.Environment(1)
    harness = OperatorHarness.for_stream(env.from_collection([]).sink_to(sink))
    harness.process(1, 2)
    assert sink.records == [1, 2] and sink.guarantee == "at_least_once"


def test_for_stream_needs_an_operator_call():
    env = epochal.Environment(1)
    with pytest.raises(TypeError, match="partitioning"):
        OperatorHarness.for_stream(env.from_collection([]).key_by(lambda x: x))
