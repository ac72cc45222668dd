"""Word count through the real Spark runtime equals a collections.Counter oracle."""

from __future__ import annotations

import random
from collections import Counter

import pytest

VOCABULARY = [f"w{i:04d}" for i in range(3000)]
LINES = 25_000  # 4 words per line: 100k words


def line(i: int) -> str:
    rng = random.Random(i)
    return " ".join(rng.choice(VOCABULARY) for _ in range(4))


def oracle() -> Counter:
    return Counter(word for i in range(LINES) for word in line(i).split())


def final_values(records):
    last = {}
    for key, value in records:
        last[key] = value
    return last


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_word_count_matches_counter(make_env, parallelism):
    env = make_env(parallelism)
    counts = (env.from_generator(line, count=LINES).flat_map(str.split).name("split")
              .key_by(lambda w: w).count())
    out = counts.collect()
    result = env.execute(f"wordcount-p{parallelism}", timeout=240)
    records = out.get()
    expected = oracle()
    assert len(records) == sum(expected.values())  # one rolling update per word
    assert final_values(records) == dict(expected)
    assert result.operator_records()["split"] == LINES


def test_keyed_sum_min_max_reduce(make_env):
    env = make_env(2)
    pairs = env.from_sequence(0, 20_000).map(lambda i: (i % 7, i))
    keyed = pairs.key_by(lambda kv: kv[0])
    sums = keyed.sum(lambda kv: kv[1]).collect()
    mins = keyed.min(lambda kv: kv[1]).collect()
    maxs = keyed.max(lambda kv: kv[1]).collect()
    reduced = keyed.reduce(lambda a, b: (a[0], a[1] + b[1])).collect()
    env.execute("aggregates", timeout=240)
    groups = {k: [i for i in range(20_000) if i % 7 == k] for k in range(7)}
    assert final_values(sums.get()) == {k: sum(v) for k, v in groups.items()}
    assert final_values(mins.get()) == {k: min(v) for k, v in groups.items()}
    assert final_values(maxs.get()) == {k: max(v) for k, v in groups.items()}
    assert final_values(reduced.get()) == {k: sum(v) for k, v in groups.items()}
