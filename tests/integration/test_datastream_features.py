"""Timers, side outputs and two-input operators on Spark workers: processing-time timers fire
from the worker's clock while the input runs, side outputs cross the network to their readers,
a keyed connect and the broadcast state pattern give exact results, also through a stop with a
savepoint and a restore at another parallelism."""

from __future__ import annotations

import time

from epochal import BroadcastProcessFunction, MapStateDescriptor, OutputTag, ProcessFunction, ValueStateDescriptor

RECORDS = 3_000
KEYS = 5


class FirstSeen(ProcessFunction):
    """Per key: a processing-time timer 0.3 s after its first record; emits when it fires."""

    def process_element(self, value, ctx):
        first = ctx.get_state(ValueStateDescriptor("first"))
        if first.value() is None:
            now = ctx.timer_service().current_processing_time()
            first.update(now)
            ctx.timer_service().register_processing_time_timer(now + 0.3)
        if value[1] % 500 == 0:
            ctx.output(OutputTag("every-500"), value[1])

    def on_timer(self, timestamp, ctx):
        yield (ctx.current_key, timestamp - ctx.get_state(ValueStateDescriptor("first")).value(), time.time())


def test_processing_time_timers_fire_during_the_run_and_side_outputs_cross_workers(make_env):
    env = make_env(2)
    events = env.from_generator(lambda i: (f"k{i % KEYS}", i), count=RECORDS, rate=RECORDS / 2.0)  # a 2 s input
    last = events.filter(lambda r: r[1] == RECORDS - 1).map(lambda r: time.time()).collect()
    fired = events.key_by(lambda r: r[0]).process(FirstSeen())
    timers = fired.collect()
    marked = fired.side_output(OutputTag("every-500")).rebalance().map(lambda v: -v).collect()
    env.execute("processing-time timers")
    rows = timers.get()
    assert sorted(key for key, _, _ in rows) == [f"k{i}" for i in range(KEYS)]
    assert all(abs(delay - 0.3) < 1e-6 for _, delay, _ in rows)
    assert max(at for _, _, at in rows) < last.get()[0]  # fired while the input still ran, not at its end
    assert sorted(marked.get()) == sorted(-v for v in range(0, RECORDS, 500))


class Scale(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield (value, value * ctx.get_broadcast_state(MapStateDescriptor("factor")).get("f", 1))

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(MapStateDescriptor("factor")).put("f", value)


def test_broadcast_state_reaches_every_subtask(make_env):
    env = make_env(3)
    factor = env.from_collection([7]).broadcast(MapStateDescriptor("factor"))
    # the main input starts after the rule arrived everywhere: it waits on a paced generator
    main = env.from_generator(lambda i: i, count=600, rate=300).filter(lambda i: i >= 300)
    out = main.connect(factor).process(Scale()).collect()
    env.execute("broadcast state")
    assert sorted(out.get()) == [(i, 7 * i) for i in range(300, 600)]


def test_batch_mode_emits_final_values_on_spark(make_env, tmp_path):
    env = make_env(2).set_runtime_mode("batch")
    env.enable_checkpointing(0.2, storage=str(tmp_path / "checkpoints"))
    counts = (env.from_generator(lambda i: f"w{i % 11}", count=20_000, rate=10_000)
              .key_by(lambda w: w).count().collect())
    env.execute("final results")
    assert sorted(counts.get()) == sorted((f"w{i}", len(range(i, 20_000, 11))) for i in range(11))
