"""Timers, side outputs, keyed connect and the broadcast state pattern under real crashes (SIGKILL
of Spark workers at seeded random moments, p=2 and p=3): their state (timers, keyed state of
both inputs, broadcast state) is in the checkpoints, so the committed output equals the oracle:
every timer fired once, every side output record once, the broadcast state complete on every
subtask.

One job has all of them, so that a run exercises them together:

- ``BucketSums`` (keyed process, event-time timers): per key, the sum of each bucket of event
  time, emitted by a timer at the bucket's end; records with ``i % 97 == 0`` also go to the side
  output ``marked``.
- ``CountBoth`` (keyed connect of the bucket sums and the side output): per key, how many of
  each arrived, emitted by a timer at the end of the input.
- ``CountRules`` (keyed main stream connected with a broadcast stream): every subtask counts and
  sums the broadcast records in broadcast state; every key reports its subtask's broadcast
  state at the end (a timer), so a lost or doubled broadcast record shows in every key's line.
"""

from __future__ import annotations

import collections

import pytest

from epochal import BroadcastProcessFunction, CoProcessFunction, MapStateDescriptor, OutputTag, ProcessFunction
from epochal.connectors.files import ExactlyOnceFileSink
from epochal.state.descriptors import MapStateDescriptor as _Map
from epochal.state.descriptors import ValueStateDescriptor
from epochal.testing import random_faults
from tests.chaos.harness import run_with_faults

RECORDS = 120_000
RULES = 3_000
KEYS = 17
BUCKET = 4_000  # event time of record i is i: 30 buckets per key
RATE = 30_000
END = 10**12  # a timer that only the end of the input fires
MARKED = OutputTag("marked")
RULE_STATE = MapStateDescriptor("rules")


def record(i: int) -> tuple[str, int]:
    return (f"k{(i * 5) % KEYS}", i)


def rule(i: int) -> int:
    return i + 1


class BucketSums(ProcessFunction):
    def process_element(self, value, ctx):
        bucket = value[1] // BUCKET
        sums = ctx.get_state(_Map("sums"))
        sums.put(bucket, (sums.get(bucket) or 0) + value[1])
        ctx.timer_service().register_event_time_timer(bucket * BUCKET + BUCKET - 1)
        if value[1] % 97 == 0:
            ctx.output(MARKED, value)

    def on_timer(self, timestamp, ctx):
        bucket = timestamp // BUCKET
        sums = ctx.get_state(_Map("sums"))
        yield ("bucket", ctx.get_current_key(), bucket, sums.get(bucket))
        sums.remove(bucket)


class CountBoth(CoProcessFunction):
    def _count(self, ctx, name):
        state = ctx.get_state(ValueStateDescriptor(name, default=0))
        state.update(state.value() + 1)
        ctx.timer_service().register_event_time_timer(END)

    def process_element1(self, value, ctx):
        self._count(ctx, "buckets")

    def process_element2(self, value, ctx):
        self._count(ctx, "marked")

    def on_timer(self, timestamp, ctx):
        yield ("both", ctx.get_current_key(), ctx.get_state(ValueStateDescriptor("buckets", default=0)).value(),
               ctx.get_state(ValueStateDescriptor("marked", default=0)).value())


class CountRules(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(END)

    def process_broadcast_element(self, value, ctx):
        state = ctx.get_broadcast_state(RULE_STATE)
        state.put("count", state.get("count", 0) + 1)
        state.put("sum", state.get("sum", 0) + value)

    def on_timer(self, timestamp, ctx):
        state = ctx.get_broadcast_state(RULE_STATE)
        yield ("rules", ctx.get_current_key(), state.get("count", 0), state.get("sum", 0))


def oracle() -> collections.Counter:
    sums: dict[tuple[str, int], int] = collections.Counter()
    marked: collections.Counter = collections.Counter()
    for i in range(RECORDS):
        key, ts = record(i)
        sums[(key, ts // BUCKET)] += ts
        marked[key] += ts % 97 == 0
    lines = [f"bucket {key} {bucket} {total}" for (key, bucket), total in sums.items()]
    buckets = collections.Counter(key for key, _ in sums)
    keys = sorted(buckets)
    lines += [f"both {key} {buckets[key]} {marked[key]}" for key in keys]
    lines += [f"rules {key} {RULES} {sum(rule(i) for i in range(RULES))}" for key in keys]
    return collections.Counter(lines)


def features_job(env, out_dir):
    events = env.from_generator(record, count=RECORDS, rate=RATE).with_watermarks(lambda r: r[1])
    sums = events.key_by(lambda r: r[0]).process(BucketSums(), timestamp=lambda r: r[1]).uid("bucket-sums")
    both = (sums.key_by(lambda s: s[1])
            .connect(sums.side_output(MARKED).key_by(lambda r: r[0]))
            .process(CountBoth()).uid("count-both"))
    rules = env.from_generator(rule, count=RULES, rate=RULES).broadcast(RULE_STATE)
    counted = events.key_by(lambda r: r[0]).connect(rules).process(CountRules()).uid("count-rules")
    (sums.union(both, counted)
     .sink_to(ExactlyOnceFileSink(str(out_dir), format=lambda t: " ".join(map(str, t))), name="sink"))


@pytest.mark.parametrize("parallelism,seed", [(2, 61), (3, 67)])
def test_timers_side_outputs_connect_and_broadcast_exactly_once_under_random_kills(make_env, tmp_path,
                                                                                   parallelism, seed):
    faults = random_faults(seed, parallelism, count=2, window=(0.5, 2.0))
    result, committed = run_with_faults(make_env, tmp_path, parallelism, faults, features_job, "features chaos")
    assert len(result.restarts) == 2
    expected = oracle()
    assert committed - expected == collections.Counter(), "duplicated or wrong lines"
    assert expected - committed == collections.Counter(), "lost lines"


def test_the_same_job_is_exactly_once_under_synchronous_checkpoints_too(make_env, tmp_path):
    faults = random_faults(79, 2, count=1, window=(0.5, 1.5))
    result, committed = run_with_faults(make_env, tmp_path, 2, faults, features_job, "features synchronous",
                                        mode="synchronous")
    assert len(result.restarts) == 1
    assert committed == oracle()
