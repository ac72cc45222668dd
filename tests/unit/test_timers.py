"""Timers of keyed process functions (runtime/operators/timers.py, runtime/operators/process.py): the queue on its own,
then through the operator harness: event-time and processing-time firing, deletion,
re-registration in on_timer, checkpoints and rescaled restores, the RocksDB backend."""

from __future__ import annotations

import random

import pytest

import epochal
from epochal import TimeDomain
from epochal.config import StateBackendConfig
from epochal.runtime.operators.timers import EVENT_TIME, PROCESSING_TIME, TimerQueue
from epochal.state.descriptors import ValueStateDescriptor
from epochal.testing import OperatorHarness


def owned(groups: range) -> dict[int, dict]:
    return {group: {} for group in groups}


def test_queue_fires_in_order_once_and_skips_deleted_timers():
    queue = TimerQueue(owned(range(4)))
    queue.register(EVENT_TIME, 5, "a", 0)
    queue.register(EVENT_TIME, 3, "b", 1)
    queue.register(EVENT_TIME, 5, "a", 0)  # the same timer: still one
    queue.register(EVENT_TIME, 4, "c", 2)
    queue.register(PROCESSING_TIME, 1, "a", 0)
    queue.delete(EVENT_TIME, 4, "c", 2)
    assert len(queue) == 3
    assert list(queue.pop_due(EVENT_TIME, 4)) == [(3, "b", 1)]
    assert list(queue.pop_due(EVENT_TIME, 10)) == [(5, "a", 0)]
    assert list(queue.pop_due(EVENT_TIME, 10)) == []
    assert queue.timers_of("a", 0) == [(PROCESSING_TIME, 1)]
    assert list(queue.pop_due(PROCESSING_TIME, 1)) == [(1, "a", 0)]
    assert queue.groups == owned(range(4))  # fired timers leave the state, keys without timers too


def test_queue_rebuilds_from_its_state():
    state = owned(range(2))
    queue = TimerQueue(state)
    for t in (7, 2, 9):
        queue.register(EVENT_TIME, t, f"k{t}", t % 2)
    queue.delete(EVENT_TIME, 9, "k9", 1)
    rebuilt = TimerQueue({g: dict(entries) for g, entries in state.items()})
    assert [t for t, _, _ in rebuilt.pop_due(EVENT_TIME, 100)] == [2, 7]


def test_a_timer_registered_while_firing_fires_in_the_same_advance_if_due():
    queue = TimerQueue(owned(range(1)))
    queue.register(EVENT_TIME, 1, "a", 0)
    fired = []
    for timestamp, key, group in queue.pop_due(EVENT_TIME, 5):
        fired.append(timestamp)
        if timestamp < 4:
            queue.register(EVENT_TIME, timestamp + 2, key, group)
    assert fired == [1, 3, 5]


class SessionEnd(epochal.ProcessFunction):
    """Sums values per key and emits the sum ``gap`` after the key's last record (event time);
    every record moves the key's timer (delete + register)."""

    def __init__(self, gap: int = 10) -> None:
        self.gap = gap

    def process_element(self, value, ctx):
        total = ctx.get_state(ValueStateDescriptor("total", default=0))
        last = ctx.get_state(ValueStateDescriptor("timer"))
        total.update(total.value() + value[1])
        if last.value() is not None:
            ctx.timer_service().delete_event_time_timer(last.value())
        last.update(ctx.timestamp() + self.gap)
        ctx.timer_service().register_event_time_timer(last.value())

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() is TimeDomain.EVENT_TIME and ctx.timestamp() == timestamp
        total = ctx.get_state(ValueStateDescriptor("total", default=0))
        yield (ctx.get_current_key(), timestamp, total.value())
        total.clear()
        ctx.get_state(ValueStateDescriptor("timer")).clear()


def session_stream(env: epochal.Environment) -> epochal.DataStream:
    return env.from_collection([]).key_by(lambda r: r[0]).process(SessionEnd(), timestamp=lambda r: r[2])


def harness(**options) -> OperatorHarness:
    return OperatorHarness.for_stream(session_stream(epochal.Environment(1)), **options)


def test_event_time_timers_fire_on_watermarks_with_their_key_and_state():
    h = harness()
    assert h.process(("a", 1, 0), ("b", 2, 3), ("a", 4, 5)) == []
    assert h.watermark(12) == []  # a's first timer (10) was deleted; b's fires at 13
    assert h.watermark(13) == [("b", 13, 2)]
    assert h.watermark(20) == [("a", 15, 5)]
    assert h.keyed_state() == {}  # fired timers and cleared state are gone
    h.process(("c", 1, 30))
    assert h.end_input() == [("c", 40, 1)]  # the end of input fires every event-time timer


class Ticker(epochal.ProcessFunction):
    """A processing-time timer per record, one second later; re-arms once."""

    def process_element(self, value, ctx):
        now = ctx.timer_service().current_processing_time()
        ctx.timer_service().register_processing_time_timer(now + 1.0)

    def on_timer(self, timestamp, ctx):
        count = ctx.get_state(ValueStateDescriptor("fired", default=0))
        count.update(count.value() + 1)
        if count.value() == 1:
            ctx.timer_service().register_processing_time_timer(timestamp + 1.0)
        yield (ctx.current_key, timestamp, ctx.time_domain())


def test_processing_time_timers_follow_the_clock_and_not_the_watermark():
    env = epochal.Environment(1)
    h = OperatorHarness.for_stream(env.from_collection([]).key_by(lambda r: r).process(Ticker()))
    h.set_processing_time(100.0)
    h.process("x")
    assert h.watermark(10**9) == []
    assert h.set_processing_time(100.5) == []
    assert h.set_processing_time(101.0) == [("x", 101.0, TimeDomain.PROCESSING_TIME)]
    assert h.set_processing_time(103.0) == [("x", 102.0, TimeDomain.PROCESSING_TIME)]
    h.process("y")
    assert h.end_input() == []  # pending processing-time timers are dropped at the end, as Flink


def test_timers_need_a_keyed_stream():
    env = epochal.Environment(1)
    h = OperatorHarness.for_stream(env.from_collection([]).process(Ticker()))
    with pytest.raises(RuntimeError, match="not keyed: timers need key_by"):
        h.process("x")


@pytest.mark.parametrize("backend", [StateBackendConfig(), StateBackendConfig(kind="rocksdb")],
                         ids=["heap", "rocksdb"])
@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1)])
def test_timers_survive_a_rescaled_restore_and_fire_once(backend, before, after, tmp_path):
    backend = StateBackendConfig(kind=backend.kind, local_dir=str(tmp_path)) if backend.kind == "rocksdb" else None
    rng = random.Random(before * 10 + after)
    keys = [f"k{i}" for i in range(30)]
    records = [(rng.choice(keys), rng.randint(1, 9), t) for t in range(200)]
    cut = 120
    # The oracle: one run without a restore.
    whole = harness(state_backend=backend) if backend else harness()
    whole.process_batch(records[:cut])
    expected = whole.watermark(60)
    whole.process_batch(records[cut:])
    expected = sorted(expected + whole.end_input())
    # Split by owner, snapshot at `cut` after a watermark that fired some timers, restore elsewhere.
    fired, snapshots = [], []
    for index in range(before):
        h = harness(parallelism=before, subtask_index=index, **({"state_backend": backend} if backend else {}))
        mine = [r for r in records[:cut] if h.owns(r[0])]
        h.process_batch(mine)
        fired += h.watermark(60)
        snapshots.append(h.snapshot(1))
        h.process_batch([r for r in records[cut:] if h.owns(r[0])])  # state lost with the failure
        assert h.watermark(10**6)  # ... and output: these timers fire again after the restore
    for index in range(after):
        first = harness(parallelism=before, **({"state_backend": backend} if backend else {}))
        h = first.restored_from(*snapshots, parallelism=after, subtask_index=index)
        h.process_batch([r for r in records[cut:] if h.owns(r[0])])
        fired += h.end_input()
    assert sorted(fired) == expected
    assert len(fired) == len(set(fired))
