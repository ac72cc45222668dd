"""Union, broadcast, rebalance, custom partitioning and multi-shuffle pipelines: exact output."""

from __future__ import annotations

from collections import Counter

import epochal
from epochal.plan.keygroups import key_group_of, subtask_for_key_group


def tag_subtask(value, ctx):
    yield (ctx.subtask_index, value)


def test_union_of_three_sources(make_env):
    env = make_env(2)
    a = env.from_collection(list(range(0, 1000)))
    b = env.from_sequence(1000, 3000)
    c = env.from_generator(lambda i: 10_000 + i, count=500).set_parallelism(1)
    out = a.union(b, c).map(lambda x: x * 2).collect()
    env.execute("union", timeout=240)
    expected = [x * 2 for x in list(range(3000)) + list(range(10_000, 10_500))]
    assert sorted(out.get()) == expected


def test_broadcast_reaches_every_subtask_once(make_env):
    env = make_env(3)
    out = env.from_sequence(0, 900).set_parallelism(2).broadcast().process(tag_subtask).collect()
    env.execute("broadcast", timeout=240)
    seen = Counter(out.get())
    assert seen == Counter({(s, v): 1 for s in range(3) for v in range(900)})


def test_rebalance_spreads_evenly_and_loses_nothing(make_env):
    env = make_env(3)
    source = env.from_sequence(0, 30_000).set_parallelism(1)
    out = source.rebalance().process(tag_subtask).collect()
    env.execute("rebalance", timeout=240)
    records = out.get()
    assert sorted(v for _, v in records) == list(range(30_000))
    per_subtask = Counter(s for s, _ in records)
    assert set(per_subtask) == {0, 1, 2}
    assert max(per_subtask.values()) - min(per_subtask.values()) <= 1


def test_custom_partitioner_places_records_where_it_says(make_env):
    env = make_env(4)
    out = (env.from_sequence(0, 4000).partition_custom(lambda key, n: key % n, lambda r: r // 10)
           .process(tag_subtask).collect())
    env.execute("custom", timeout=240)
    records = out.get()
    assert sorted(v for _, v in records) == list(range(4000))
    assert all(s == (v // 10) % 4 for s, v in records)


def test_pipeline_with_two_shuffles_and_parallelism_change(make_env):
    env = make_env(4)
    events = env.from_generator(lambda i: (f"user{i % 97}", i % 13), count=50_000).set_parallelism(2)
    per_user = events.key_by(lambda e: e[0]).sum(lambda e: e[1]).name("sum-per-user")
    # second shuffle: count the rolling updates per user bucket, with another parallelism
    buckets = per_user.map(lambda kv: (int(kv[0][4:]) % 5, kv[1])).key_by(lambda kv: kv[0]).count()
    buckets.set_parallelism(3)
    totals = per_user.collect()
    bucket_counts = buckets.collect()
    env.execute("two-shuffles", timeout=240)

    expected_sum: Counter = Counter()
    for i in range(50_000):
        expected_sum[f"user{i % 97}"] += i % 13
    last = {}
    for key, value in totals.get():
        last[key] = value
    assert last == dict(expected_sum)
    updates_per_user = Counter(f"user{i % 97}" for i in range(50_000))
    expected_buckets: Counter = Counter()
    for user, n in updates_per_user.items():
        expected_buckets[int(user[4:]) % 5] += n
    last_bucket: dict[int, int] = {}
    for key, value in bucket_counts.get():  # the collect sink (parallelism 4) is not chained: use max
        last_bucket[key] = max(value, last_bucket.get(key, 0))
    assert last_bucket == dict(expected_buckets)


def test_equal_keys_land_on_the_subtask_that_owns_their_key_group(make_env):
    parallelism = 3
    env = make_env(parallelism)
    keys = [f"key-{i}" for i in range(500)] + list(range(500)) + [("t", i) for i in range(100)]
    out = (env.from_collection(keys * 3).key_by(lambda k: k)
           .process(lambda k, ctx: [(repr(ctx.current_key), ctx.subtask_index)]).collect())
    env.execute("placement", timeout=240)
    placement: dict[str, set[int]] = {}
    for key, subtask in out.get():
        placement.setdefault(key, set()).add(subtask)
    assert len(placement) == len(keys)
    for key in keys:
        owners = placement[repr(key)]
        # one owner, in the worker processes, equal to the owner the driver computes
        assert owners == {subtask_for_key_group(key_group_of(key, 128), parallelism, 128)}


def test_process_function_class_with_open_and_close(make_env):
    class Enrich(epochal.ProcessFunction):
        def open(self, context):
            self.prefix = f"{context.operator_name}/{context.subtask_index}"

        def process_element(self, value, ctx):
            if value % 2:
                yield (self.prefix, value)

    env = make_env(2)
    out = env.from_sequence(0, 100).process(Enrich()).name("enrich").collect()
    env.execute("process", timeout=240)
    records = out.get()
    assert sorted(v for _, v in records) == list(range(1, 100, 2))
    assert {p for p, _ in records} <= {"enrich/0", "enrich/1"}
