"""Bounded jobs with final results (``set_runtime_mode("batch")``, ``final_results()``): keyed
aggregations emit each key's final value once, at the end of the input, instead of every update;
also through a snapshot and a restore at another parallelism."""

from __future__ import annotations

from collections import Counter

import pytest

import epochal
from epochal import PlanError
from epochal.testing import OperatorHarness, run_locally

WORDS = [f"w{i % 13}" for i in range(500)]


def test_batch_mode_emits_only_final_values():
    env = epochal.Environment(parallelism=2).set_runtime_mode("batch")
    words = env.from_collection(WORDS)
    counts = words.key_by(lambda w: w).count().collect()
    longest = words.map(lambda w: (w, len(w) * WORDS.count(w))).key_by(lambda p: p[0]).max(1).collect()
    totals = words.key_by(lambda w: w).reduce(lambda a, b: a + "|" + b).map(len).collect()
    run_locally(env)
    assert sorted(counts.get()) == sorted(Counter(WORDS).items())
    assert sorted(longest.get()) == sorted({(w, len(w) * WORDS.count(w)) for w in WORDS})
    assert sorted(totals.get()) == sorted(len("|".join([w] * n)) for w, n in Counter(WORDS).items())


def test_final_results_per_operator_and_streaming_elsewhere():
    env = epochal.Environment(parallelism=2)
    keyed = env.from_collection(WORDS).key_by(lambda w: w)
    final = keyed.count().final_results().collect()
    rolling = keyed.count().collect()
    run_locally(env)
    assert sorted(final.get()) == sorted(Counter(WORDS).items())
    assert len(rolling.get()) == len(WORDS)


def test_batch_mode_needs_bounded_sources_and_final_results_a_keyed_aggregation():
    env = epochal.Environment(1).set_runtime_mode("batch")
    env.from_sequence(0).key_by(lambda i: i % 2).count().collect()
    with pytest.raises(PlanError, match="needs bounded sources"):
        env.plan()
    with pytest.raises(PlanError, match="'streaming' or 'batch'"):
        env.set_runtime_mode("BATCH!")
    with pytest.raises(PlanError, match="keyed aggregations"):
        env.from_collection([1]).map(str).final_results()


def test_final_values_survive_a_rescaled_restore():
    env = epochal.Environment(1)
    stream = env.from_collection([]).key_by(lambda w: w).count().final_results()
    snapshots = []
    for index in range(2):
        h = OperatorHarness.for_stream(stream, parallelism=2, subtask_index=index)
        h.operator.final_only = True  # what planning sets
        assert h.process_batch([w for w in WORDS[:300] if h.owns(w)]) == []
        snapshots.append(h.snapshot(1))
    out = []
    for index in range(3):
        h = OperatorHarness.for_stream(stream, parallelism=2).restored_from(*snapshots, parallelism=3,
                                                                           subtask_index=index)
        h.operator.final_only = True
        h.process_batch([w for w in WORDS[300:] if h.owns(w)])
        out += h.end_input()
    assert sorted(out) == sorted(Counter(WORDS).items())
