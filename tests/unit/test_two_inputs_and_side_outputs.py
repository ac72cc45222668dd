"""Side outputs (``ctx.output(tag, v)`` / ``stream.side_output(tag)``) and two-input operators
(``connect`` with a CoProcessFunction, ``map(fn1, fn2)``, the broadcast state pattern): the plan
(tags and input indices on edges and chained children), the operators through the harness
(state, timers, snapshots, rescaled restores), and whole jobs on the local runner."""

from __future__ import annotations

import random

import pytest

import epochal
from epochal import (
    BroadcastProcessFunction,
    CoProcessFunction,
    MapStateDescriptor,
    OutputTag,
    PlanError,
    ValueStateDescriptor,
)
from epochal.plan.jobgraph import build_job_graph
from epochal.testing import OperatorHarness, run_locally

SMALL = OutputTag("small")


def split(value, ctx):
    if value < 10:
        ctx.output(SMALL, value)
        ctx.output(OutputTag("all"), ("small", value))
    else:
        yield value


def test_side_outputs_reach_only_their_readers_chained_or_not():
    env = epochal.Environment(parallelism=2)
    main = env.from_collection(list(range(20))).process(split)
    big = main.map(lambda v: ("big", v)).collect()
    small = main.side_output(SMALL).map(lambda v: ("small", v)).collect()  # chained to the process
    other = main.side_output(OutputTag("all")).rebalance().map(lambda v: v).set_parallelism(1).collect()
    run_locally(env)
    assert sorted(big.get()) == [("big", v) for v in range(10, 20)]
    assert sorted(small.get()) == [("small", v) for v in range(10)]
    assert sorted(other.get()) == [("small", v) for v in range(10)]


def test_the_plan_puts_tags_on_edges_and_chained_children():
    env = epochal.Environment(parallelism=2)
    main = env.from_collection([1]).process(split)
    main.side_output(SMALL).map(str).collect()
    main.side_output(SMALL).key_by(str).count().collect()
    job = build_job_graph(env.graph, 2, 128)
    process = next(n for n in job.nodes.values() if n.operation == "process")
    assert list(process.child_tags.values()) == ["small"]
    tagged = [e for e in job.edges if e.side_tag is not None]
    assert [(e.side_tag, e.partitioner.strategy) for e in tagged] == [("small", "hash")]


def test_side_output_needs_a_tag_and_an_operator():
    env = epochal.Environment(1)
    stream = env.from_collection([1]).process(split)
    with pytest.raises(PlanError, match="OutputTag"):
        stream.side_output("small")
    with pytest.raises(PlanError, match="side_output\\(\\) reads an operator"):
        stream.key_by(str).side_output(SMALL)
    with pytest.raises(TypeError, match="non-empty str"):
        OutputTag("")


class Match(CoProcessFunction):
    """Keyed connect: remembers the last order per user and pairs each payment with it; a
    payment without an order waits for one until an event-time timer gives up."""

    def process_element1(self, order, ctx):
        ctx.get_state(ValueStateDescriptor("order")).update(order)
        waiting = ctx.get_state(ValueStateDescriptor("payment"))
        if waiting.value() is not None:
            yield ("paid", order, waiting.value())
            waiting.clear()

    def process_element2(self, payment, ctx):
        order = ctx.get_state(ValueStateDescriptor("order")).value()
        if order is not None:
            yield ("paid", order, payment)
        else:
            ctx.get_state(ValueStateDescriptor("payment")).update(payment)
            ctx.timer_service().register_event_time_timer(payment[2] + 5)

    def on_timer(self, timestamp, ctx):
        waiting = ctx.get_state(ValueStateDescriptor("payment"))
        if waiting.value() is not None:
            ctx.output(OutputTag("unmatched"), waiting.value())
            waiting.clear()


def matcher(env: epochal.Environment):
    orders = env.from_collection([]).key_by(lambda o: o[0])
    payments = env.from_collection([]).key_by(lambda p: p[0])
    return orders.connect(payments).process(Match())


def test_keyed_connect_shares_state_and_timers_between_the_inputs():
    h = OperatorHarness.for_stream(matcher(epochal.Environment(1)))
    assert h.process(("ann", "o1", 0)) == []
    assert h.process2(("ann", 10, 1)) == [("paid", ("ann", "o1", 0), ("ann", 10, 1))]
    assert h.process2(("bob", 20, 2)) == []
    assert h.watermark(6, input_index=0) == []  # the other input holds event time back
    assert h.watermark(7, input_index=1) == []
    assert h.side_output("unmatched") == []
    assert h.watermark(8) == [] and h.side_output(OutputTag("unmatched")) == [("bob", 20, 2)]
    assert h.keyed_state("payment") == {}


def test_keyed_connect_restores_at_another_parallelism():
    rng = random.Random(3)
    users = [f"u{i}" for i in range(20)]
    orders = [(u, f"o-{u}", 0) for u in users[:10]]
    payments = [(rng.choice(users), n, n) for n in range(40)]
    env = epochal.Environment(1)
    whole = OperatorHarness.for_stream(matcher(env))
    whole.process_batch(orders)
    expected = whole.process_batch(payments[:20], 1) + whole.process_batch(payments[20:], 1) + whole.end_input()
    out, snapshots = [], []
    for index in range(2):
        h = OperatorHarness.for_stream(matcher(env), parallelism=2, subtask_index=index)
        out += h.process_batch([o for o in orders if h.owns(o[0])])
        out += h.process_batch([p for p in payments[:20] if h.owns(p[0])], 1)
        snapshots.append(h.snapshot(1))
    for index in range(3):
        h = OperatorHarness.for_stream(matcher(env), parallelism=2).restored_from(*snapshots, parallelism=3,
                                                                                  subtask_index=index)
        out += h.process_batch([p for p in payments[20:] if h.owns(p[0])], 1)
        out += h.end_input()
    assert sorted(out) == sorted(expected) and len(expected) > 10


def test_connect_needs_both_or_neither_keyed_and_a_co_process_function():
    env = epochal.Environment(1)
    a, b = env.from_collection([1]), env.from_collection([2])
    with pytest.raises(PlanError, match="both streams are keyed or neither"):
        a.key_by(str).connect(b)
    with pytest.raises(PlanError, match="process_element1"):
        a.connect(b).process(object())
    with pytest.raises(PlanError, match="the class Match"):
        a.connect(b).process(Match)


def test_connected_map_and_flat_map_on_the_local_runner():
    env = epochal.Environment(parallelism=2)
    numbers, words = env.from_collection([1, 2, 3]), env.from_collection(["a b", "c"])
    mapped = numbers.connect(words).map(lambda n: n * 10, str.upper).collect()
    flat = numbers.connect(words).flat_map(lambda n: [n] * n, str.split).collect()
    run_locally(env)
    assert sorted(mapped.get(), key=str) == [10, 20, 30, "A B", "C"]
    assert sorted(flat.get(), key=str) == [1, 2, 2, 3, 3, 3, "a", "b", "c"]


RULES = MapStateDescriptor("rules")


class ApplyRules(BroadcastProcessFunction):
    """Multiplies each value by its kind's factor (broadcast state); counts per key (keyed state)."""

    def process_element(self, value, ctx):
        factor = ctx.get_broadcast_state(RULES).get(value[0], 1)
        seen = ctx.get_state(ValueStateDescriptor("seen", default=0))
        seen.update(seen.value() + 1)
        yield (value, value[1] * factor, seen.value())

    def process_broadcast_element(self, rule, ctx):
        ctx.get_broadcast_state(RULES).put(rule[0], rule[1])
        ctx.apply_to_keyed_state(ValueStateDescriptor("seen", default=0), lambda key, state: state.update(0))


def rules_job(env: epochal.Environment):
    rules = env.from_collection([]).broadcast(RULES)
    return env.from_collection([]).key_by(lambda v: v[0]).connect(rules).process(ApplyRules())


def test_broadcast_state_is_written_by_the_broadcast_side_only_and_restored_everywhere():
    env = epochal.Environment(1)
    h = OperatorHarness.for_stream(rules_job(env), parallelism=2, subtask_index=0)
    key = next(k for k in "abcdefgh" if h.owns(k))
    assert h.process((key, 2)) == [((key, 2), 2, 1)]
    h.process2((key, 5))  # a new rule resets every key's counter
    assert h.process((key, 2)) == [((key, 2), 10, 1)]
    snapshot = h.snapshot(1)
    for index in range(3):  # every new subtask gets the whole broadcast state
        restored = h.restored_from(snapshot, parallelism=3, subtask_index=index)
        other = next(k for k in "abcdefgh" if restored.owns(k))
        assert restored.process((other, 1))[0][1] == (5 if other == key else 1)


class Writer(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("x", 1)

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(MapStateDescriptor("undeclared"))


def test_broadcast_state_is_read_only_for_the_main_stream_and_must_be_declared():
    env = epochal.Environment(1)
    stream = env.from_collection([]).connect(env.from_collection([]).broadcast(RULES)).process(Writer())
    h = OperatorHarness.for_stream(stream)
    with pytest.raises(RuntimeError, match="read-only in process_element"):
        h.process(1)
    with pytest.raises(KeyError, match="no broadcast state 'undeclared'"):
        h.process2(1)
    with pytest.raises(PlanError, match="MapStateDescriptors"):
        env.from_collection([]).broadcast(ValueStateDescriptor("x"))


class Collect(BroadcastProcessFunction):
    """Keeps every broadcast record in one list of the broadcast state, changed in place."""

    def process_element(self, value, ctx):
        yield list(ctx.get_broadcast_state(RULES).get("seen") or [])

    def process_broadcast_element(self, value, ctx):
        rules = ctx.get_broadcast_state(RULES)
        seen = rules.get("seen") or []
        seen.append(value)
        rules.put("seen", seen)


def test_a_snapshot_keeps_the_broadcast_state_of_its_barrier_when_the_function_changes_it_in_place():
    """A snapshot written by a thread serialises the operator state after the barrier: values the
    broadcast side changes in place later must not reach it."""
    env = epochal.Environment(1)
    h = OperatorHarness.for_stream(env.from_collection([]).connect(env.from_collection([]).broadcast(RULES))
                                   .process(Collect()))
    h.process2("a")
    h.subtask.prepare_capture(1)  # the barrier's synchronous part, as a thread snapshot takes it
    captured = h.runner.operator_state.capture()
    h.process2("b")  # after the barrier, before the thread serialises the capture
    assert h.process(0) == [["a", "b"]]
    assert captured["broadcast-state"][1] == [("rules", "seen", ["a"])]
