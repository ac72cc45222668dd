"""Joins without Spark (runtime/windows/joins.py, runtime/windows/window_join.py, api/joins.py):
the interval join and window joins against brute-force oracles on random data, through the
OperatorHarness: every order of arrival, inclusive and exclusive bounds, state cleanup as the
watermark passes, late records, snapshots
restored at other parallelisms mid-join, the RocksDB backend, and the API's plan errors."""

from __future__ import annotations

import random
from collections import Counter
from operator import itemgetter
from typing import Any

import pytest

import epochal
from epochal.api.functions import RuntimeContext
from epochal.api.joins import co_group, interval_join, join
from epochal.errors import PlanError
from epochal.runtime.operators.functions import OutputTag
from epochal.runtime.operators.timers import TIMERS
from epochal.runtime.windows.joins import IntervalJoinOperator, ProcessJoinFunction
from epochal.runtime.windows.shapes import TimeWindows
from epochal.runtime.windows.window_join import CO_GROUP, FLAT_JOIN, WindowJoinOperator
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.operator_state import OperatorStateStore
from epochal.state.rocksdb.backend import RocksDBKeyedStateBackend
from epochal.testing import OperatorHarness, run_locally

MAX_P = 128
LEFT, RIGHT = IntervalJoinOperator.LEFT, IntervalJoinOperator.RIGHT


key, ts = itemgetter(0), itemgetter(1)  # records are (key, event time, id)


def records(rng: random.Random, side: str, n: int, keys: int = 5, span: int = 120, scale: int = 1) -> list[Any]:
    """``(key, event time, id)``: ids make every record distinct."""
    return [(f"k{rng.randrange(keys)}", rng.randrange(span * scale) / scale, f"{side}{i}") for i in range(n)]


def arrival(rng: random.Random, lefts: list[Any], rights: list[Any], order: str) -> list[tuple[int, Any]]:
    """``(input, record)`` in an order of arrival."""
    events = [(0, r) for r in lefts] + [(1, r) for r in rights]
    if order == "lefts_first":
        return events
    if order == "rights_first":
        return events[len(lefts):] + events[:len(lefts)]
    if order == "shuffled":
        rng.shuffle(events)
        return events
    jitter = {id(e): ts(e[1]) + rng.uniform(0, 8) for e in events}  # "interleaved": event time, some disorder
    return sorted(events, key=lambda e: jitter[id(e)])


def batches(rng: random.Random, events: list[tuple[int, Any]]) -> list[tuple[int, list[Any], Any]]:
    """Consecutive same-input runs cut into batches, each with the watermark that may follow it:
    just below the earliest event time still to come (so no record is ever late)."""
    out: list[tuple[int, list[Any], Any]] = []
    i = 0
    while i < len(events):
        side, size = events[i][0], rng.randint(1, 6)
        j = i
        while j < len(events) and j - i < size and events[j][0] == side:
            j += 1
        rest = [ts(r) for _, r in events[j:]]
        out.append((side, [r for _, r in events[i:j]], (min(rest) - 1) if rest else None))
        i = j
    return out


def in_interval(left: Any, right: Any, lower: Any, upper: Any, lower_in: bool, upper_in: bool) -> bool:
    distance = ts(right) - ts(left)
    above = distance > lower or (lower_in and distance == lower)
    return above and (distance < upper or (upper_in and distance == upper))


def interval_oracle(lefts: list[Any], rights: list[Any], *bounds: Any) -> Counter:
    return Counter((lt, r) for lt in lefts for r in rights if key(lt) == key(r) and in_interval(lt, r, *bounds))


def interval_operator(lower: Any, upper: Any, lower_in: bool = True, upper_in: bool = True, **options: Any) -> Any:
    return IntervalJoinOperator(key, key, ts, ts, lower, upper, lower_inclusive=lower_in, upper_inclusive=upper_in,
                                **options)


BOUNDS = [(-5, 5, True, True), (-5, 5, False, False), (0, 10, True, False), (-12, -2, False, True), (3, 3, True, True),
          (-2.5, 1.25, True, False)]


@pytest.mark.parametrize("order", ["interleaved", "lefts_first", "rights_first", "shuffled"])
@pytest.mark.parametrize("bounds", BOUNDS, ids=[f"{b[0]},{b[1]},{b[2]:d}{b[3]:d}" for b in BOUNDS])
def test_interval_join_equals_the_oracle_and_cleans_up_as_the_watermark_passes(bounds, order):
    lower, upper, lower_in, upper_in = bounds
    rng = random.Random(f"{bounds}{order}")
    scale = 4 if isinstance(lower, float) else 1
    lefts, rights = records(rng, "L", 150, scale=scale), records(rng, "R", 150, scale=scale)
    harness = OperatorHarness(interval_operator(*bounds))
    retention = (max(upper, 0), max(-lower, 0))
    most = 0
    for side, batch, watermark in batches(rng, arrival(rng, lefts, rights, order)):
        harness.process_batch(batch, side)
        if watermark is None:
            continue
        harness.watermark(watermark)
        for index, name in enumerate((LEFT, RIGHT)):  # no bucket outlives its last possible match
            buffered = harness.keyed_state(name)
            assert all(t + retention[index] > watermark for buckets in buffered.values() for t in buckets)
            most = max(most, sum(len(buckets) for buckets in buffered.values()))
    assert Counter(harness.output) == interval_oracle(lefts, rights, *bounds) and harness.output
    if order == "interleaved":
        assert most < 150, "state was not cleaned up while the join ran"
    harness.watermark(10_000)  # past every cleanup time: no state left
    assert harness.keyed_state(LEFT) == harness.keyed_state(RIGHT) == harness.keyed_state(TIMERS) == {}
    assert harness.counters() == {"late_records_dropped": 0}
    assert harness.end_input() == []


def test_end_of_input_drops_the_buffers_and_timers():
    harness = OperatorHarness(interval_operator(-3, 3))
    harness.process(("a", 10, "L"))
    harness.process2(("a", 12, "R"), ("b", 1, "R2"))
    assert harness.output == [(("a", 10, "L"), ("a", 12, "R"))]
    assert harness.keyed_state(LEFT) and harness.keyed_state(TIMERS)
    assert harness.end_input() == []
    assert not any(harness.keyed_state().values())


def test_buckets_leave_exactly_when_the_watermark_reaches_their_cleanup_time():
    harness = OperatorHarness(interval_operator(-2, 5))
    harness.process(("a", 10, "L"))  # kept until 10 + 5
    harness.process2(("a", 10, "R"))  # kept until 10 + 2
    harness.watermark(11)
    assert set(harness.keyed_state(LEFT)) == set(harness.keyed_state(RIGHT)) == {"a"}
    harness.watermark(12)
    assert harness.keyed_state(RIGHT) == {} and harness.keyed_state(LEFT) == {"a": {10: [("a", 10, "L")]}}
    assert harness.process2(("a", 14, "R2")) == [(("a", 10, "L"), ("a", 14, "R2"))]  # 14 - 10 <= 5
    harness.watermark(15)
    assert harness.keyed_state(LEFT) == {} and set(harness.keyed_state(RIGHT)) == {"a"}  # R2 stays to 16
    harness.watermark(16)
    assert not any(harness.keyed_state().values())


def test_late_records_are_dropped_and_counted_or_sent_to_a_side_output():
    harness = OperatorHarness(interval_operator(-2, 2))
    harness.process(("a", 10, "L1"))
    harness.watermark(10)
    assert harness.process2(("a", 9, "R1")) == []  # 9 < 10: late
    assert harness.process2(("a", 10, "R2")) == [(("a", 10, "L1"), ("a", 10, "R2"))]  # at the watermark: not late
    assert harness.process(("a", 5, "L2")) == []
    assert harness.counters() == {"late_records_dropped": 2}
    assert "R1" not in repr(harness.keyed_state())
    left_tag, right_tag = OutputTag("late-left"), OutputTag("late-right")
    tagged = OperatorHarness(interval_operator(-2, 2, left_late_tag=left_tag.id, right_late_tag=right_tag.id))
    tagged.watermark(10)
    tagged.process(("a", 3, "L"), ("a", 11, "L2"))
    tagged.process2(("a", 4, "R"))
    assert tagged.side_output(left_tag) == [("a", 3, "L")] and tagged.side_output(right_tag) == [("a", 4, "R")]
    assert tagged.counters() == {"late_records_dropped": 0} and tagged.output == []


class Describe(ProcessJoinFunction):
    """Emits what the context says about each pair; pairs across 10 also go to a side output."""

    opened = 0

    def open(self, context: RuntimeContext) -> None:
        Describe.opened += 1

    def process_element(self, left, right, ctx):
        if ctx.timestamp() >= 10 > min(ctx.left_timestamp(), ctx.right_timestamp()):
            ctx.output(OutputTag("across"), (left[2], right[2]))
        yield (left[2], right[2], ctx.left_timestamp(), ctx.right_timestamp(), ctx.timestamp(), ctx.get_current_key())


def test_a_process_join_function_sees_both_timestamps_the_key_and_side_outputs():
    harness = OperatorHarness(interval_operator(-5, 5, function=Describe()))
    harness.process(("a", 8, "L1"), ("b", 8, "L2"))
    harness.process2(("a", 11, "R1"), ("a", 2, "R2"), ("b", 20, "R3"))
    harness.process(("a", 6, "L3"))
    assert Describe.opened >= 1
    assert harness.output == [("L1", "R1", 8, 11, 11, "a"), ("L3", "R1", 6, 11, 11, "a"), ("L3", "R2", 6, 2, 6, "a")]
    assert harness.side_output(OutputTag("across")) == [("L1", "R1"), ("L3", "R1")]
    timed = OperatorHarness(interval_operator(0, 0, function=lambda lt, r, ctx: [ctx.timer_service()]))
    timed.process(("a", 1, "L"))
    with pytest.raises(RuntimeError, match="no timers"):
        timed.process2(("a", 1, "R"))


def run_rescaled(make: Any, events: list[tuple[int, list[Any], Any]], parallelisms: list[int]) -> list[Any]:
    """Run ``events`` (from :func:`batches`) through one harness per subtask, snapshot every
    subtask between phases and restore at the next phase's parallelism; returns all output."""
    phases = len(parallelisms)
    cut = [len(events) * i // phases for i in range(phases + 1)]
    output: list[Any] = []
    harnesses: list[OperatorHarness] = []
    for phase, parallelism in enumerate(parallelisms):
        if phase == 0:
            harnesses = [OperatorHarness(make(), parallelism=parallelism, subtask_index=i, max_parallelism=MAX_P)
                         for i in range(parallelism)]
        else:
            snapshots = [h.snapshot(phase) for h in harnesses]
            output += [r for h in harnesses for r in h.output]
            harnesses = [harnesses[0].restored_from(*snapshots, parallelism=parallelism, subtask_index=i)
                         for i in range(parallelism)]
        for side, batch, watermark in events[cut[phase]:cut[phase + 1]]:
            for index, harness in enumerate(harnesses):
                mine = [r for r in batch if OperatorHarness.owner_of(key(r), parallelism, MAX_P) == index]
                if mine:
                    harness.process_batch(mine, side)
                if watermark is not None:
                    harness.watermark(watermark)
    for harness in harnesses:
        harness.end_input()
        output += harness.output
    return output


def test_interval_join_restored_at_other_parallelisms_mid_join_gives_the_exact_output():
    rng = random.Random(7)
    lefts, rights = records(rng, "L", 200, keys=9), records(rng, "R", 200, keys=9)
    events = batches(rng, arrival(rng, lefts, rights, "interleaved"))
    output = run_rescaled(lambda: interval_operator(-4, 6, True, False), events, [2, 3, 1])
    assert Counter(output) == interval_oracle(lefts, rights, -4, 6, True, False) and output


# ---------------------------------------------------------------------------------------- window joins
def window_pairs(lefts: list[Any], rights: list[Any], windows: TimeWindows) -> dict[Any, list[Any]]:
    """Every (left, right) pair of a key with the starts of their common windows."""
    out = {}
    for lt in lefts:
        for r in rights:
            if key(lt) == key(r):
                common = set(windows.starts(ts(lt))) & set(windows.starts(ts(r)))
                if common:
                    out[(lt, r)] = sorted(common)
    return out


def closed_pairs(pairs: dict[Any, list[Any]], windows: TimeWindows, watermark: Any = float("inf")) -> Counter:
    """Each pair once per common window closed at ``watermark``."""
    out: Counter = Counter()
    for found, starts in pairs.items():
        closed = sum(1 for s in starts if windows.closes(s, watermark))
        if closed:
            out[found] = closed
    return out


def pair(left: Any, right: Any) -> Any:
    return (left, right)


WINDOWS = [TimeWindows(10), TimeWindows(10, 5), TimeWindows(9, 3)]


@pytest.mark.parametrize("windows", WINDOWS, ids=["tumbling", "sliding-10-5", "sliding-9-3"])
def test_window_join_fires_each_window_when_the_watermark_closes_it(windows):
    rng = random.Random(str(windows))
    lefts, rights = records(rng, "L", 120), records(rng, "R", 120)
    pairs = window_pairs(lefts, rights, windows)
    harness = OperatorHarness(WindowJoinOperator(key, key, ts, ts, windows, pair))
    for side, batch, watermark in batches(rng, arrival(rng, lefts, rights, "interleaved")):
        assert harness.process_batch(batch, side) == []
        if watermark is not None:
            harness.watermark(watermark)
            assert Counter(harness.output) == closed_pairs(pairs, windows, watermark)
    harness.end_input()
    assert Counter(harness.output) == closed_pairs(pairs, windows) and harness.output
    assert harness.keyed_state(WindowJoinOperator.STATE) == {}
    assert harness.counters() == {"late_records_dropped": 0}


def test_flat_join_and_co_group_see_every_window():
    windows = TimeWindows(10, 5)
    rng = random.Random(3)
    lefts, rights = records(rng, "L", 60, span=60), records(rng, "R", 15, span=60)
    events = batches(rng, arrival(rng, lefts, rights, "shuffled"))

    def run(operator: Any) -> list[Any]:
        harness = OperatorHarness(operator)
        for side, batch, watermark in events:
            harness.process_batch(batch, side)
            if watermark is not None:
                harness.watermark(watermark)
        harness.end_input()
        return harness.output

    flat = run(WindowJoinOperator(key, key, ts, ts, windows, lambda lt, r: [lt[2], r[2]] if lt[1] < r[1] else None,
                                  FLAT_JOIN))
    expected = Counter()
    for (lt, r), n in closed_pairs(window_pairs(lefts, rights, windows), windows).items():
        if lt[1] < r[1]:
            expected.update({lt[2]: n, r[2]: n})
    assert Counter(flat) == expected and flat

    grouped = run(WindowJoinOperator(key, key, ts, ts, windows,
                                     lambda k, ls, rs: [(k, tuple(sorted(ls)), tuple(sorted(rs)))], CO_GROUP))
    oracle: dict[Any, tuple[list[Any], list[Any]]] = {}
    for side, group in ((0, lefts), (1, rights)):
        for record in group:
            for start in windows.starts(ts(record)):
                oracle.setdefault((key(record), start), ([], []))[side].append(record)
    assert Counter(grouped) == Counter((k, tuple(sorted(ls)), tuple(sorted(rs))) for (k, _), (ls, rs) in oracle.items())
    assert any(not rs for _, _, rs in grouped), "co_group fires windows with one side only"


def test_window_join_drops_and_counts_records_of_fired_windows_only():
    harness = OperatorHarness(WindowJoinOperator(key, key, ts, ts, TimeWindows(10, 5), pair))
    harness.process(("a", 12, "L1"))
    assert harness.watermark(14) == []  # [5, 15) fired: L1 in it, no right
    harness.process2(("a", 12, "R1"), ("a", 3, "R2"))  # R1 only in [10, 20); R2's windows all fired: late
    assert harness.counters() == {"late_records_dropped": 1}
    assert harness.watermark(19) == [(("a", 12, "L1"), ("a", 12, "R1"))]
    assert harness.keyed_state(WindowJoinOperator.STATE) == {}


class Uneven:
    """A window assigner that is not TimeWindows: windows [0, 10), [10, 30), [30, 60), [60, 100)..."""

    BOUNDS = [sum(range(0, 10 * i, 10)) for i in range(1, 20)]  # 0, 10, 30, 60...

    def starts(self, t):
        return [max(b for b in self.BOUNDS if b <= t)]

    def closes(self, start, watermark):
        return self.BOUNDS[self.BOUNDS.index(start) + 1] - 1 <= watermark


def test_window_join_takes_any_assigner_with_starts_and_closes():
    rng = random.Random(9)
    lefts, rights = records(rng, "L", 80), records(rng, "R", 80)
    harness = OperatorHarness(WindowJoinOperator(key, key, ts, ts, Uneven(), pair))
    for side, batch, watermark in batches(rng, arrival(rng, lefts, rights, "interleaved")):
        harness.process_batch(batch, side)
        harness.watermark(watermark) if watermark is not None else harness.end_input()
    expected = Counter((lt, r) for lt in lefts for r in rights
                       if key(lt) == key(r) and Uneven().starts(ts(lt)) == Uneven().starts(ts(r)))
    assert Counter(harness.output) == expected and expected


@pytest.mark.parametrize("parallelisms", [[2, 3], [3, 1]])
def test_window_join_restored_at_another_parallelism_mid_window_gives_the_exact_output(parallelisms):
    windows = TimeWindows(20, 10)
    rng = random.Random(11)
    lefts, rights = records(rng, "L", 150, keys=9), records(rng, "R", 150, keys=9)
    events = batches(rng, arrival(rng, lefts, rights, "interleaved"))
    output = run_rescaled(lambda: WindowJoinOperator(key, key, ts, ts, windows, pair), events, parallelisms)
    assert Counter(output) == closed_pairs(window_pairs(lefts, rights, windows), windows) and output


# ---------------------------------------------------------------------------------------- RocksDB
def _open(operator: Any, backend: Any) -> Any:
    context = RuntimeContext(operator_name="join", operator_uid="join", subtask_index=0, parallelism=1,
                             max_parallelism=MAX_P, key_groups=backend.key_groups, keyed_state=backend,
                             operator_state=OperatorStateStore(), checkpointing=True)
    operator.name = "join"
    operator.open(context, lambda payload: None)
    return operator


@pytest.mark.parametrize("make", [lambda: interval_operator(-6, 3, True, False, function=Describe()),
                                  lambda: WindowJoinOperator(key, key, ts, ts, TimeWindows(10, 5), pair)],
                         ids=["interval", "window"])
def test_rocksdb_gives_the_same_output_and_state_as_the_heap_backend(make, tmp_path):
    rng = random.Random(5)
    lefts, rights = records(rng, "L", 120), records(rng, "R", 120)
    events = batches(rng, arrival(rng, lefts, rights, "interleaved"))
    rocks = RocksDBKeyedStateBackend(MAX_P, range(MAX_P), str(tmp_path / "db"))
    outputs, states = [], []
    try:
        for backend in (HeapKeyedStateBackend(MAX_P, range(MAX_P)), rocks):
            operator = _open(make(), backend)
            out, captured = [], []
            for i, (side, batch, watermark) in enumerate(events):
                out += operator.process_batch2(batch) if side else operator.process_batch(batch)
                if watermark is not None:
                    out += operator.on_watermark(watermark)
                if i % 10 == 0:
                    operator.prepare_snapshot(i)  # as a barrier does before the capture
                    captured.append(backend.capture())
            out += operator.end_input()
            captured.append(backend.capture())
            outputs.append(out)
            states.append(captured)
    finally:
        rocks.dispose()
    assert outputs[0] and outputs[1] == outputs[0]
    assert states[1] == states[0] and any(states[0])


# ---------------------------------------------------------------------------------------- the API
def test_api_plan_errors():
    env = epochal.Environment(2)
    a, b = env.from_collection([("a", 1)]), env.from_collection([("a", 2)])
    ka, kb = a.key_by(key), b.key_by(key)
    with pytest.raises(PlanError, match="not keyed"):
        interval_join(a, kb, ts)
    with pytest.raises(PlanError, match="key_by"):
        interval_join(ka, b, ts)
    with pytest.raises(PlanError, match="timestamp="):
        interval_join(ka, kb)
    with pytest.raises(PlanError, match="lower <= upper"):
        interval_join(ka, kb, ts).between(5, 1)
    with pytest.raises(PlanError, match="empty interval"):
        interval_join(ka, kb, ts).between(3, 3).lower_bound_exclusive().process()
    with pytest.raises(PlanError, match="ProcessJoinFunction"):
        interval_join(ka, kb, ts).between(0, 1).process(Describe)
    with pytest.raises(PlanError, match="OutputTag"):
        interval_join(ka, kb, ts).between(0, 1).side_output_late_data("late")
    with pytest.raises(PlanError, match="where"):
        join(a, b).equal_to(key)
    with pytest.raises(PlanError, match="both keys"):
        join(a, b).where(key).window(10, timestamp=ts)
    with pytest.raises(PlanError, match="timestamp="):
        join(a, b).where(key).equal_to(key).window(10)
    with pytest.raises(PlanError, match="window size"):
        join(a, b).where(key).equal_to(key).window(-1, timestamp=ts)
    with pytest.raises(PlanError, match="slide"):
        join(a, b).where(key).equal_to(key).window(TimeWindows(10), timestamp=ts, slide=5)
    with pytest.raises(PlanError, match="flat_apply"):
        co_group(a, b).where(key).equal_to(key).window(10, timestamp=ts).flat_apply(pair)
    with pytest.raises(PlanError, match="same Environment"):
        join(a, epochal.Environment(1).from_collection([]))


def test_joins_run_end_to_end_on_the_local_runner():
    rng = random.Random(1)
    lefts = sorted(records(rng, "L", 200, keys=7), key=ts)
    rights = sorted(records(rng, "R", 200, keys=7), key=ts)
    env = epochal.Environment(2)
    a = env.from_collection(lefts).with_watermarks(ts)
    b = env.from_collection(rights).with_watermarks(ts)
    late = OutputTag("late")
    joined = (interval_join(a.key_by(key), b.key_by(key), ts).between(-3, 4).upper_bound_exclusive()
              .side_output_late_data(late).process(lambda lt, r, ctx: [(lt[2], r[2], ctx.timestamp())]))
    interval_out, late_out = joined.collect(), joined.side_output(late).collect()
    windowed = join(a, b).where(key).equal_to(key).window(10, timestamp=ts, slide=5).apply(pair).collect()
    result = run_locally(env)
    expected = Counter((lt[2], r[2], max(ts(lt), ts(r))) for (lt, r), n in
                       interval_oracle(lefts, rights, -3, 4, True, False).items() for _ in range(n))
    assert Counter(result.get(interval_out)) == expected and expected
    assert result.get(late_out) == [] and result.late_records_dropped == 0
    windows = TimeWindows(10, 5)
    assert Counter(result.get(windowed)) == closed_pairs(window_pairs(lefts, rights, windows), windows)
