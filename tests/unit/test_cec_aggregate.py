"""CEC's window aggregate as a pure machine (papers/002 §II-III): every window shape and aggregate,
crashed at random points of its output queue, rebuilt from that output (EC, or CRB's full
checkpoint) and a replay in another interleaving, gives every window's result exactly once.

The simulation is the machine's contract with its driver: output batches (stream events) are
durable in order (a crash keeps a prefix), replay sends every channel's tuples after T in channel order, and any
interleaving of channels may happen. Mutations (no per-window dedup, no G_open) must fail."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from epochal.cec.aggregate import WindowAggregate
from epochal.cec.eventual import reconstruct, reconstruct_full
from epochal.cec.policy import CecSettings
from epochal.cec.tuples import encode_items, logged_frame, window_frame_meta
from epochal.runtime.operators.aggregates import AvgFunction, CountFunction, MaxFunction, MinFunction, SumFunction
from epochal.runtime.windows.shapes import CountWindows, TimeWindows


class Members:
    """A user AggregateFunction with a mutable accumulator: the set of record ids."""

    def create_accumulator(self):
        return set()

    def add(self, record, acc):
        acc.add(record[3])
        return acc

    def merge(self, a, b):
        return a | b

    def get_result(self, acc):
        return tuple(sorted(acc))


def stream(channels: int, per_channel: int, keys: int, seed: int, key_affine: bool):
    """Per channel its records ``(key, ts, value, id)`` in order; timestamps rise per channel."""
    rng = random.Random(seed)
    data = []
    for c in range(channels):
        ts = 0
        records = []
        for i in range(per_channel):
            ts += rng.choice((0, 1, 1, 2))
            key = rng.randrange(keys)
            if key_affine:
                key = key - key % channels + c  # every key comes from one channel only
            records.append((key, ts, rng.randrange(100), c * 10_000 + i))
        data.append(records)
    return data


def interleave(data, rng, after=None):
    """One arrival order of the channels' tuples ``(channel, seq, record)`` (``after``: per
    channel, only tuples with a higher sequence number)."""
    cursors = [(after[c] + 1) if after is not None else 0 for c in range(len(data))]
    order = []
    while True:
        live = [c for c in range(len(data)) if cursors[c] < len(data[c])]
        if not live:
            return order
        c = rng.choice(live)
        order.append((c, cursors[c], data[c][cursors[c]]))
        cursors[c] += 1


def make(shape, function, channels, mode, dedup=True):
    settings = CecSettings(q_target=4, u_target=6, interval=1.0, period=1.0, dedup=dedup)
    return WindowAggregate(shape, function, lambda r: r[0], channels, mode, settings,
                           timestamp=lambda r: r[1])


def finish(op, channels):
    for c in range(channels):
        op.end_channel(c)
    op.end_input()


def failure_free(shape, function, data):
    op = make(shape, function, len(data), "none")
    for c, seq, record in interleave(data, random.Random(0)):
        op.process(c, seq, record)
    finish(op, len(data))
    return Counter(_frozen(r) for r in op.take().records)


def newest_first(batches):
    """``batches`` (oldest first) as the output queue stores them, newest first."""
    return [logged_frame(window_frame_meta(b, len(b.records)), encode_items(b.control)) for b in reversed(batches)]


def emitted(op):
    """The operator's output since the last call as the driver emits it: nothing when empty."""
    batch = op.take()
    return [batch] if batch.records or batch.control else []


def _frozen(result):
    return tuple(tuple(x) if isinstance(x, (list, set)) else x for x in result)


def floor_by_scan(op):
    """T by definition: per channel the oldest position any open window's footprint holds."""
    footprints = [w.footprint for w in op.windows.values() if w.footprint is not None]
    return [min(column) for column in zip(*footprints, strict=True)] if footprints else list(op.consumed)


def crashing(shape, function, data, mode, seed, crashes=3, snapshot_every=7, mutate=None):
    """Run with ``crashes`` crashes at random output prefixes; the committed results."""
    rng = random.Random(seed)
    channels = len(data)
    log: list = []  # the durable output queue: one batch per input tuple
    op = make(shape, function, channels, mode)
    order = interleave(data, rng)
    for crash in range(crashes + 1):
        produced: list = []
        for n, (c, seq, record) in enumerate(order):
            op.process(c, seq, record)
            while op.check_next(0.0):
                pass
            if mode == "cec":
                assert op.replay_floor() == floor_by_scan(op)
            if mode == "crb" and n % snapshot_every == 0:
                op.snapshot()
            produced.extend(emitted(op))
        if crash == crashes:
            finish(op, channels)
            log.extend(produced + emitted(op))
            break
        log.extend(produced[:rng.randrange(len(produced) + 1)])  # the durable prefix survives
        op = make(shape, function, channels, mode, dedup=mutate != "no-dedup")
        if mode == "cec":
            ec = reconstruct(newest_first(log))
            op.restore(ec)
            start = ec.replay_after or ec.newest
            after = list(start.seqs) if start is not None else None
        else:
            restore = reconstruct_full(newest_first(log))
            op.restore_full(restore.checkpoint, restore.results_after)
            after = list(restore.checkpoint.position.seqs) if restore.checkpoint is not None else None
        order = interleave(data, rng, after)  # the replay, in another interleaving
    return Counter(_frozen(r) for batch in log for r in batch.records)


SHAPES = {
    "time-tumbling": TimeWindows(5),
    "time-sliding": TimeWindows(6, 2),
    "count-tumbling": CountWindows(3),
    "count-sliding": CountWindows(4, 2),
    "count-fast": CountWindows(1),  # opens and closes with one tuple: no G_open, no R
}
FUNCTIONS = {"count": CountFunction(), "sum": SumFunction(lambda r: r[2]), "min": MinFunction(lambda r: r[2]),
             "max": MaxFunction(lambda r: r[2]), "avg": AvgFunction(lambda r: r[2]), "members": Members()}


@pytest.mark.parametrize("mode", ["cec", "crb"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_window_result_once_after_three_crashes(shape, function, mode):
    data = stream(channels=3, per_channel=60, keys=6, seed=1, key_affine=shape.startswith("count"))
    expected = failure_free(SHAPES[shape], FUNCTIONS[function], data)
    assert sum(expected.values()) > 10
    for seed in range(6):
        assert crashing(SHAPES[shape], FUNCTIONS[function], data, mode, seed) == expected, seed


def test_a_window_that_closes_with_its_opening_tuple_gets_no_g_open_and_no_r():
    op = make(CountWindows(1), SumFunction(lambda r: r[2]), 1, "cec")
    op.process(0, 0, ("a", 0, 5, 0))
    op.process(0, 1, ("b", 0, 7, 1))
    batch = op.take()
    assert batch.control == [] and batch.records == [("a", 5), ("b", 7)]  # as without fault tolerance
    assert batch.open_windows == 0 and batch.position.seqs == (1,)
    ec = reconstruct(newest_first([batch]))
    assert ec.windows == {} and ec.newest.seqs == (1,)  # nothing open: nothing to rebuild


def test_a_window_with_a_footprint_closes_with_an_r():
    from epochal.cec.tuples import WindowCheckpoint, WindowClosed

    op = make(CountWindows(2), SumFunction(lambda r: r[2]), 1, "cec")
    op.process(0, 0, ("a", 0, 5, 0))
    first = op.take()
    assert [type(c) for c in first.control] == [WindowCheckpoint] and first.open_windows == 1
    op.process(0, 1, ("a", 0, 7, 1))
    second = op.take()
    assert second.records == [("a", 12)] and second.control == [WindowClosed(first.control[0].window)]
    assert reconstruct(newest_first([first, second])).windows == {}


@pytest.mark.parametrize("shape", ["count-tumbling", "count-sliding"])
def test_count_windows_over_keys_from_several_channels_count_every_record_exactly_once(shape):
    """Which records share a count window depends on the arrival order when a key's records come
    from several channels; whatever the order after a crash, each record is in the windows a
    consistent run would put it in: as many as the shape says, never two results for one window."""
    windows = SHAPES[shape]
    data = stream(channels=3, per_channel=50, keys=3, seed=2, key_affine=False)
    for seed in range(8):
        results = crashing(windows, Members(), data, "cec", seed)
        assert all(n == 1 for n in results.values()), seed
        per_key: dict = {}
        for key, members in results:
            assert len(members) == windows.size
            for m in members:
                per_key.setdefault(key, Counter())[m] += 1
        total = Counter({key: sum(1 for c in data for r in c if r[0] == key) for key in per_key})
        for key, seen in per_key.items():
            # a sliding window of 4 every 2 holds each record twice, but the first and last few
            assert all(n <= windows.windows_per_record() for n in seen.values())
            assert sum(seen.values()) == (total[key] - windows.size) // windows.step * windows.size + windows.size \
                or sum(seen.values()) <= total[key] * windows.windows_per_record()


def test_without_per_window_dedup_replayed_input_is_counted_twice():
    data = stream(channels=2, per_channel=60, keys=4, seed=3, key_affine=False)
    shape, function = SHAPES["time-tumbling"], FUNCTIONS["sum"]
    expected = failure_free(shape, function, data)
    outcomes = [crashing(shape, function, data, "cec", seed, mutate="no-dedup") == expected for seed in range(6)]
    assert not all(outcomes)


def test_without_g_open_the_eventual_checkpoint_misses_windows():
    data = stream(channels=2, per_channel=40, keys=4, seed=4, key_affine=False)
    op = make(SHAPES["time-tumbling"], FUNCTIONS["sum"], 2, "cec")
    log = []
    for c, seq, record in interleave(data, random.Random(0))[:30]:
        op.process(c, seq, record)
        batch = op.take()
        log.append(batch._replace(control=[c for c in batch.control if getattr(c, "kind", None) != "open"]))
    from epochal.cec.eventual import ReconstructionError

    with pytest.raises(ReconstructionError):  # N windows are open, but their footprints are missing
        reconstruct(newest_first(log))


def test_g_checks_bound_the_extent_and_g_open_only_does_not():
    """A window that opens first and never closes (one record of a rare key) keeps the extent
    growing under G_open only; with G_check the extent stays near Q."""
    records = [("rare", 0, 1, 0)] + [(k % 10, 0, 1, k) for k in range(1, 800)]
    extents = {}
    for g_check in (True, False):
        settings = CecSettings(q_target=30, u_target=10**9, interval=1.0, period=1.0, g_check=g_check)
        op = WindowAggregate(CountWindows(4), SumFunction(lambda r: r[2]), lambda r: r[0], 1, "cec", settings)
        log = []
        for seq, record in enumerate(records):
            op.process(0, seq, record)
            while op.check_next(0.0):
                pass
            log.extend(emitted(op))
        ec = reconstruct(newest_first(log))
        extents[g_check] = ec.extent
        assert ("rare", 0, 0) in ec.windows and ec.windows[("rare", 0, 0)].state == (1, 1)
        assert op.stats["g_check"] > 0 if g_check else op.stats["g_check"] == 0
    assert extents[True] <= 30 + 11 and extents[False] > 300


def test_duplicates_are_dropped_and_late_records_counted():
    op = make(TimeWindows(5), SumFunction(lambda r: r[2]), 1, "cec")
    op.process(0, 0, ("a", 1, 10, 0))
    op.process(0, 0, ("a", 1, 10, 0))  # re-sent
    op.process(0, 1, ("a", 12, 1, 1))  # the watermark passes window [0, 5)
    op.process(0, 2, ("a", 2, 5, 2))  # late
    assert op.stats["duplicates"] == 1 and op.stats["late"] == 1
    assert op.take().records == [("a", 0, 10)]


def test_a_frame_without_records_for_the_instance_still_moves_its_position():
    from epochal.cec.open_windows import NOTHING

    op = make(CountWindows(2), SumFunction(lambda r: r[2]), 2, "cec")
    op.process(1, 99, NOTHING)  # channel 1 was read up to 99: nothing in it for this instance
    op.process(0, 0, ("a", 0, 5, 0))
    opened = op.take().control[0]
    assert opened.position.seqs == (0, 99) and op.policy.consumed == 1
    op.process(1, 99, NOTHING)
    assert op.stats["duplicates"] == 0
