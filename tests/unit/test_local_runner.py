"""The local runner (epochal.testing.run_locally): whole jobs in one process, without Spark or
Java, with the real operators, chains, channels and state; checked against plain-Python oracles.

The last tests port integration tests (test_wordcount.py, test_windows.py, test_partitioning.py)
to the local runner as fast equivalents; the originals still run on Spark."""

from __future__ import annotations

import os
import random
from collections import Counter

import pyarrow.parquet as pq
import pytest

import epochal
from epochal.connectors.files import ParquetFileSink, TextFileSink, read_committed_lines
from epochal.plan.keygroups import key_group_of, subtask_for_key_group
from epochal.state.descriptors import ValueStateDescriptor
from epochal.testing import LocalRunner, TestSink, TestSource, run_locally
from tests.collatz import collatz_step, collatz_steps

VOCABULARY = [f"w{i:03d}" for i in range(300)]


def line(i: int) -> str:
    rng = random.Random(i)
    return " ".join(rng.choice(VOCABULARY) for _ in range(4))


def final_values(records):
    last = {}
    for key, value in records:
        last[key] = value
    return last


def tag_subtask(value, ctx):
    yield (ctx.subtask_index, value)


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_word_count_matches_counter(parallelism):
    env = epochal.Environment(parallelism)
    counts = env.from_generator(line, count=2000).flat_map(str.split).name("split").key_by(lambda w: w).count()
    out = counts.collect()
    result = run_locally(env, "wordcount")
    expected = Counter(word for i in range(2000) for word in line(i).split())
    records = out.get()  # the collect handle works as after env.execute
    assert records == result.get(out)
    assert len(records) == sum(expected.values())  # one rolling update per word
    assert final_values(records) == dict(expected)
    assert result.operator_records()["split"] == 2000
    assert result.records_processed == 2000
    assert env.last_result is result


def test_keyed_sum_min_max_reduce():
    env = epochal.Environment(2)
    keyed = env.from_sequence(0, 3000).map(lambda i: (i % 7, i)).key_by(lambda kv: kv[0])
    sums = keyed.sum(lambda kv: kv[1]).collect()
    mins = keyed.min(lambda kv: kv[1]).collect()
    maxs = keyed.max(lambda kv: kv[1]).collect()
    reduced = keyed.reduce(lambda a, b: (a[0], a[1] + b[1])).collect()
    run_locally(env)
    groups = {k: [i for i in range(3000) if i % 7 == k] for k in range(7)}
    assert final_values(sums.get()) == {k: sum(v) for k, v in groups.items()}
    assert final_values(mins.get()) == {k: min(v) for k, v in groups.items()}
    assert final_values(maxs.get()) == {k: max(v) for k, v in groups.items()}
    assert final_values(reduced.get()) == {k: sum(v) for k, v in groups.items()}


def test_keys_are_processed_by_the_subtask_owning_their_key_group():
    env = epochal.Environment(3)
    keys = [f"key-{i}" for i in range(200)] + list(range(200))
    out = env.from_collection(keys * 2).key_by(lambda k: k).process(
        lambda k, ctx: [(repr(ctx.current_key), ctx.subtask_index)]).collect()
    run_locally(env)
    placement: dict[str, set[int]] = {}
    for key, subtask in out.get():
        placement.setdefault(key, set()).add(subtask)
    assert placement == {repr(k): {subtask_for_key_group(key_group_of(k, 128), 3, 128)} for k in keys}


def test_windows_fire_on_watermarks_during_the_run_and_drop_late_records():
    env = epochal.Environment(1)
    source = TestSource([("a", 1), ("a", 4), ("b", 2), ("a", 15), ("a", 3), ("b", 27)])
    out = (env.from_source(source).with_watermarks(lambda r: r[1])
           .key_by(lambda r: r[0]).window(10, timestamp=lambda r: r[1]).count().collect())
    result = run_locally(env, batch_size=1)  # a watermark after every record
    # ("a", 15) moves event time to 14: window [0, 10) fires, so ("a", 3) is late and dropped
    assert out.get() == [("a", 0, 2), ("b", 0, 1), ("a", 10, 1), ("b", 20, 1)]
    assert result.late_records_dropped == 1


def test_watermark_is_the_minimum_over_inputs():
    """Split 1 pauses while split 0 runs ahead: the window operator's event time waits for it."""
    env = epochal.Environment(2)
    source = TestSource([("a", 1), ("a", 25)], [TestSource.PAUSE, TestSource.PAUSE, ("b", 5)], max_batch=1)
    out = (env.from_source(source).with_watermarks(lambda r: r[1])
           .key_by(lambda r: r[0]).window(10, timestamp=lambda r: r[1]).count().collect())
    result = run_locally(env)
    assert sorted(out.get()) == [("a", 0, 1), ("a", 20, 1), ("b", 0, 1)]
    assert result.late_records_dropped == 0  # ("b", 5) was not late: the other input held event time back


def test_union_flat_map_and_filter():
    env = epochal.Environment(2)
    a = env.from_collection(list(range(0, 500)))
    b = env.from_sequence(500, 1000)
    c = env.from_generator(lambda i: 10_000 + i, count=100).set_parallelism(1)
    out = a.union(b, c).flat_map(lambda x: [x, -x - 1]).filter(lambda x: x >= 0).map(lambda x: x * 2).collect()
    run_locally(env)
    assert sorted(out.get()) == [x * 2 for x in list(range(1000)) + list(range(10_000, 10_100))]


def test_broadcast_reaches_every_subtask_once():
    env = epochal.Environment(3)
    out = env.from_sequence(0, 300).set_parallelism(2).broadcast().process(tag_subtask).collect()
    run_locally(env)
    assert Counter(out.get()) == Counter({(s, v): 1 for s in range(3) for v in range(300)})


def test_rebalance_spreads_evenly_and_loses_nothing():
    env = epochal.Environment(3)
    out = env.from_sequence(0, 3000).set_parallelism(1).rebalance().process(tag_subtask).collect()
    run_locally(env)
    records = out.get()
    assert sorted(v for _, v in records) == list(range(3000))
    per_subtask = Counter(s for s, _ in records)
    assert set(per_subtask) == {0, 1, 2} and max(per_subtask.values()) - min(per_subtask.values()) <= 1


def test_custom_partitioner_places_records_where_it_says():
    env = epochal.Environment(4)
    out = (env.from_sequence(0, 400).partition_custom(lambda key, n: key % n, lambda r: r // 10)
           .process(tag_subtask).collect())
    run_locally(env)
    records = out.get()
    assert sorted(v for _, v in records) == list(range(400))
    assert all(s == (v // 10) % 4 for s, v in records)


def test_process_with_value_state():
    def running_total(value, ctx):
        total = ctx.get_state(ValueStateDescriptor("total", default=0))
        total.update(total.value() + value[1])
        yield (ctx.current_key, total.value())

    env = epochal.Environment(2)
    pairs = [(f"k{i % 5}", i) for i in range(200)]
    out = env.from_collection(pairs).key_by(lambda kv: kv[0]).process(running_total).collect()
    run_locally(env)
    assert final_values(out.get()) == {f"k{k}": sum(i for i in range(200) if i % 5 == k) for k in range(5)}


def test_file_sinks_commit_when_the_input_ends(tmp_path):
    env = epochal.Environment(2)
    numbers = env.from_sequence(0, 500)
    numbers.sink_to(TextFileSink(str(tmp_path / "text")))
    numbers.map(lambda i: {"n": i}).sink_to(ParquetFileSink(str(tmp_path / "parquet")))
    run_locally(env)
    assert sorted(int(x) for x in read_committed_lines(str(tmp_path / "text"))) == list(range(500))
    files = [f for f in os.listdir(tmp_path / "parquet") if not f.startswith(("_", "."))]
    assert sorted(n for f in files for n in pq.read_table(tmp_path / "parquet" / f).column("n").to_pylist()) == \
        list(range(500))
    assert not os.listdir(tmp_path / "text" / "_pending")  # nothing left uncommitted


def test_print_sink(capsys):
    env = epochal.Environment(1)
    env.from_collection(["x", "y"]).print("> ")
    run_locally(env)
    assert capsys.readouterr().out == "> 'x'\n> 'y'\n"


def test_loops_end_when_empty():
    env = epochal.Environment(2)
    loop = env.from_collection(range(2, 300)).map(lambda n: (n, n, 0)).iterate()
    step = loop.key_by(lambda s: s[0]).map(collatz_step)
    loop.close_with(step.filter(lambda s: s[1] != 1), key_by=lambda s: s[0])
    out = step.filter(lambda s: s[1] == 1).collect()
    run_locally(env)
    assert sorted((origin, steps) for origin, _, steps in out.get()) == [(n, collatz_steps(n)) for n in range(2, 300)]


def test_test_sink_collects_per_subtask():
    into: list = []
    env = epochal.Environment(2)
    sink = TestSink(into)
    env.from_sequence(0, 100).sink_to(sink)
    run_locally(env)
    assert sink.records is into and sorted(into) == list(range(100))
    assert sorted(sink.by_subtask) == [0, 1] and sorted(sink.by_subtask[0] + sink.by_subtask[1]) == list(range(100))


def test_runs_are_deterministic():
    def job():
        env = epochal.Environment(3)
        out = env.from_generator(line, count=300).flat_map(str.split).rebalance().key_by(lambda w: w).count().collect()
        run_locally(env)
        return out.get()

    assert job() == job()


def test_a_user_error_fails_the_run_naming_the_operator():
    env = epochal.Environment(2)
    env.from_sequence(0, 10).map(lambda i: 1 // (i - 7)).name("divide").collect()
    with pytest.raises(epochal.JobFailedError, match="operator 'divide'.*ZeroDivisionError") as failure:
        run_locally(env)
    assert failure.value.category == "user" and failure.value.operator == "divide"
    assert isinstance(failure.value.__cause__, ZeroDivisionError)  # the user's own traceback


def test_abort_marker_fails_the_run_after_what_came_before():
    env = epochal.Environment(1)
    sink = TestSink()
    env.from_source(TestSource([1, 2, TestSource.ABORT, 3]), name="scripted").sink_to(sink)
    with pytest.raises(epochal.JobFailedError, match="scripted.*TestSourceAborted"):
        run_locally(env)
    assert sink.records == [1, 2]


def test_unbounded_sources_and_missing_sinks_are_refused():
    env = epochal.Environment(1)
    env.from_sequence(0).collect()
    with pytest.raises(epochal.PlanError, match="unbounded"):
        run_locally(env)
    with pytest.raises(epochal.PlanError, match="no sink"):
        run_locally(epochal.Environment(1))


def test_serialize_mirrors_spark_and_can_be_turned_off():
    seen: list[int] = []
    env = epochal.Environment(2)
    env.from_sequence(0, 10).map(lambda i: seen.append(i) or i).collect()
    run_locally(env)  # like on Spark, each worker's copy of the closure has its own list
    assert seen == []
    LocalRunner(env, serialize=False).run()
    assert sorted(seen) == list(range(10))


def test_records_crossing_workers_must_be_picklable():
    env = epochal.Environment(2)
    env.from_sequence(0, 10).map(lambda i: (x for x in [i])).name("gen").rebalance().collect()
    with pytest.raises(epochal.JobFailedError, match="must be picklable"):
        run_locally(env)


# --- ports of integration tests: the same assertions on the local runner -------------------

def test_port_wordcount_p4():
    """tests/integration/test_wordcount.py::test_word_count_matches_counter at parallelism 4."""
    env = epochal.Environment(4)
    out = env.from_generator(line, count=5000).flat_map(str.split).name("split").key_by(lambda w: w).count().collect()
    result = run_locally(env)
    expected = Counter(word for i in range(5000) for word in line(i).split())
    assert len(out.get()) == sum(expected.values())
    assert final_values(out.get()) == dict(expected)
    assert result.operator_records()["split"] == 5000


def test_port_tumbling_window_counts_are_exact():
    """tests/integration/test_windows.py::test_tumbling_window_counts_are_exact."""
    records, window = 20_000, 2_000
    env = epochal.Environment(3)
    out = (env.from_generator(lambda i: (f"k{i % 7}", i), count=records).with_watermarks(lambda r: r[1])
           .key_by(lambda r: r[0]).window(window, timestamp=lambda r: r[1]).count().collect())
    run_locally(env)
    expected = Counter((f"k{i % 7}", i - i % window) for i in range(records))
    assert {(key, start): n for key, start, n in out.get()} == dict(expected)


def test_port_window_sums_without_watermarks_fire_at_the_end():
    """tests/integration/test_windows.py::test_sum_per_window_after_a_shuffle_without_watermarks..."""
    env = epochal.Environment(2)
    out = (env.from_collection([("a", 1, 5), ("a", 2, 7), ("b", 3, 12), ("a", 4, 13)])
           .key_by(lambda r: r[0]).window(10, timestamp=lambda r: r[2]).sum(lambda r: r[1]).collect())
    run_locally(env)
    assert sorted(out.get()) == [("a", 0, 3), ("a", 10, 4), ("b", 10, 3)]


def test_port_pipeline_with_two_shuffles_and_parallelism_change():
    """tests/integration/test_partitioning.py::test_pipeline_with_two_shuffles_and_parallelism_change."""
    env = epochal.Environment(4)
    events = env.from_generator(lambda i: (f"user{i % 97}", i % 13), count=10_000).set_parallelism(2)
    per_user = events.key_by(lambda e: e[0]).sum(lambda e: e[1]).name("sum-per-user")
    buckets = per_user.map(lambda kv: (int(kv[0][4:]) % 5, kv[1])).key_by(lambda kv: kv[0]).count()
    buckets.set_parallelism(3)
    totals, bucket_counts = per_user.collect(), buckets.collect()
    run_locally(env)
    expected_sum: Counter = Counter()
    for i in range(10_000):
        expected_sum[f"user{i % 97}"] += i % 13
    assert final_values(totals.get()) == dict(expected_sum)
    updates = Counter(f"user{i % 97}" for i in range(10_000))
    expected_buckets: Counter = Counter()
    for user, n in updates.items():
        expected_buckets[int(user[4:]) % 5] += n
    last_bucket: dict[int, int] = {}
    for key, value in bucket_counts.get():
        last_bucket[key] = max(value, last_bucket.get(key, 0))
    assert last_bucket == dict(expected_buckets)
