"""Where event-time operators get their watermarks: made by a window from its ``timestamp=``
when none reach it on an unbounded input, refused when some paths have none, shown by
``describe()`` (issue "What a new user trips over": windows that never fire)."""

from __future__ import annotations

import pytest

import epochal
from epochal import PlanError, WatermarkStrategy
from epochal.connectors.base import Source
from epochal.connectors.memory import SequenceSource
from epochal.runtime.windows.time_windows import WatermarkGenerator
from epochal.testing import run_locally


def event(i):
    return (i % 3, 1, i)


def generators(env):
    """The watermark generators the job runs (chained nodes of the plan)."""
    return [n for n in env.plan().nodes.values() if isinstance(n.operator, WatermarkGenerator)]


def test_a_window_without_watermarks_on_an_unbounded_input_makes_them_from_its_timestamp():
    env = epochal.Environment(2)
    timestamp = lambda e: e[2]  # noqa: E731
    env.from_generator(event).key_by(lambda e: e[0]).window(10, timestamp=timestamp).sum(1).print()
    [made] = generators(env)
    assert made.operator.timestamp is timestamp and made.operator.max_out_of_orderness == 0
    plan = env.plan()
    assert [v.name for v in plan.vertices] == ["Source: generator -> Watermarks", "Window(10) Sum -> Sink: print"]
    assert "watermarks from 'Watermarks' (made by window(10) from its timestamp=, max_out_of_orderness=0)" \
        in plan.describe()


def test_a_watermark_strategy_as_timestamp_sets_the_out_of_orderness():
    env = epochal.Environment(2)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(5).with_timestamp_assigner(lambda e: e[2])
    env.from_generator(event).key_by(lambda e: e[0]).window(epochal.TumblingEventTimeWindows.of(10),
                                                            timestamp=strategy).count().print()
    [made] = generators(env)
    assert made.operator.max_out_of_orderness == 5
    assert "max_out_of_orderness=5" in env.plan().describe()


def test_with_watermarks_takes_a_strategy_and_the_window_reuses_its_timestamp():
    env = epochal.Environment(2)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e: e[2])
    env.from_generator(event).with_watermarks(strategy).key_by(lambda e: e[0]).window(10).sum(1).print()
    [made] = generators(env)  # the user's, and no second one
    assert made.operator.timestamp is strategy.timestamp_assigner
    assert "(with_watermarks, max_out_of_orderness=0)" in env.plan().describe()
    with pytest.raises(PlanError, match="without a timestamp assigner"):
        env.from_generator(event).with_watermarks(WatermarkStrategy.for_bounded_out_of_orderness(1))
    with pytest.raises(PlanError, match="has watermarks already .*'Watermarks'"):
        env.from_generator(event).with_watermarks(lambda e: e[2]).key_by(lambda e: e[0]).window(10, timestamp=strategy)


def test_a_bounded_input_keeps_firing_its_windows_at_the_end_and_loses_no_out_of_order_record():
    env = epochal.Environment(1)
    records = [(0, 1, t) for t in (25, 3, 14, 1, 28, 12)]  # out of order: watermarks would drop some
    handle = env.from_collection(records).key_by(lambda e: e[0]).window(10, timestamp=lambda e: e[2]).count().collect()
    assert generators(env) == []
    assert "no watermarks from 'Source: collection' (bounded" in env.plan().describe()
    run_locally(env)
    assert sorted(handle.get()) == [(0, 0, 2), (0, 10, 2), (0, 20, 2)]


def test_an_unbounded_path_without_watermarks_beside_one_with_them_is_refused_at_planning():
    env = epochal.Environment(2)
    timed = env.from_generator(event).with_watermarks(lambda e: e[2])
    bare = env.from_sequence().map(lambda i: (0, 1, i)).name("bare")
    timed.union(bare).key_by(lambda e: e[0]).window(10, timestamp=lambda e: e[2]).sum(1).print()
    with pytest.raises(PlanError, match="records of 'Source: sequence' reach it without watermarks "
                                        r"\(while those of 'Watermarks' do\).*never fire.*with_watermarks"):
        env.plan()


def test_joins_on_unbounded_inputs_without_watermarks_are_refused_and_accepted_with_them():
    env = epochal.Environment(2)
    left = env.from_generator(event)
    right = env.from_generator(event)
    (left.key_by(lambda e: e[0]).interval_join(right.key_by(lambda e: e[0]), timestamp=lambda e: e[2])
     .between(-1, 1).process(None).print())
    with pytest.raises(PlanError, match="'IntervalJoin.*acts on event time, but the records of "
                                        "'Source: generator', 'Source: generator' reach it without watermarks"):
        env.plan()
    env = epochal.Environment(2)
    left = env.from_generator(event).with_watermarks(lambda e: e[2])
    right = env.from_generator(event).with_watermarks(lambda e: e[2])
    left.join(right).where(lambda e: e[0]).equal_to(lambda e: e[0]).window(10).apply(lambda a, b: a).print()
    assert "watermarks from 'Watermarks' (with_watermarks, max_out_of_orderness=0), 'Watermarks'" \
        in env.plan().describe()


class _TimedSource(SequenceSource):
    """An unbounded source that makes its own watermarks (as a Kafka source with watermarks=True)."""

    emits_watermarks = True


def test_a_source_that_makes_its_own_watermarks_needs_none_added():
    env = epochal.Environment(2)
    env.from_source(_TimedSource(0, None), name="timed").map(lambda i: (0, 1, i)).key_by(lambda e: e[0]) \
        .window(10, timestamp=lambda e: e[2]).sum(1).print()
    assert generators(env) == []
    assert "watermarks from 'timed' (the source's own)" in env.plan().describe()
    assert Source.emits_watermarks is False


def test_a_kafka_source_with_watermarks_says_it_makes_its_own():
    from epochal.connectors.kafka import KafkaSource

    assert KafkaSource("localhost:1", ["t"], watermarks=True).emits_watermarks
    assert not KafkaSource("localhost:1", ["t"]).emits_watermarks
