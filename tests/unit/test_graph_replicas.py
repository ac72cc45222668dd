"""Replica and mirror placement for Imitator (papers/003 §4), the first step of replication-based
fault tolerance: every vertex has k+1 copies on distinct workers, FT replicas only where the
layout has too few, mirrors among the copies and balanced, selfish vertices flagged."""

from __future__ import annotations

import numpy as np
import pytest

from epochal.errors import PlanError
from epochal.graph.model import Graph
from epochal.graph.partition import build_partitions, computation_replicas
from epochal.graph.placement import hash_partition
from epochal.graph.replica_plan import balanced_choice, plan_replicas


def graph_with_internal_vertices(seed: int = 3) -> Graph:
    rng = np.random.default_rng(seed)
    n = 300
    edges = np.unique(rng.integers(0, n, (900, 2)), axis=0)
    ids = np.arange(n + 20, dtype=np.int64) * 7 + (1 << 31)  # 20 isolated vertices
    return Graph.from_edges(ids[edges[:, 0]], ids[edges[:, 1]], vertices=ids)


@pytest.mark.parametrize(("workers", "k"), [(2, 1), (4, 1), (4, 2), (5, 3)])
def test_every_vertex_has_k_plus_one_copies_on_distinct_workers(workers, k):
    graph = graph_with_internal_vertices()
    owner = hash_partition(graph, workers)
    parts = build_partitions(graph, owner, workers)
    replicas = computation_replicas(graph, owner, workers)
    assert all(np.array_equal(graph.vertices[r], p.replica_ids) for r, p in zip(replicas, parts, strict=True))
    plan = plan_replicas(graph, owner, replicas, k)
    for i in range(graph.num_vertices):
        copies = plan.copies(i)
        assert len(copies) >= k and len(set(copies)) == len(copies) and owner[i] not in copies
        mirrors = plan.mirrors[i].tolist()
        assert len(set(mirrors)) == k and set(mirrors) <= set(copies)
    computation = sum(p.replica_ids.size for p in parts)
    assert plan.extra_replicas == plan.copy_worker.size - computation
    # FT replicas only where the layout had fewer than k copies
    had = np.zeros(graph.num_vertices, dtype=np.int64)
    for p in parts:
        had[graph.index_of(p.replica_ids)] += 1
    assert plan.extra_replicas == int(np.maximum(k - had, 0).sum())


def test_an_ft_replica_is_always_a_mirror_and_mirrors_are_balanced():
    graph = graph_with_internal_vertices(seed=8)
    owner = hash_partition(graph, 4)
    plan = plan_replicas(graph, owner, computation_replicas(graph, owner, 4), 1)
    for i in range(graph.num_vertices):
        lo, hi = plan.copy_ptr[i], plan.copy_ptr[i + 1]
        for w, is_ft in zip(plan.copy_worker[lo:hi].tolist(), plan.copy_ft[lo:hi].tolist(), strict=True):
            if is_ft:
                assert plan.mirrors[i, 0] == w
    assert plan.mirror_counts(4).sum() == graph.num_vertices
    for w in range(4):  # each worker spreads its masters' mirrors evenly over the others
        spread = np.delete(np.bincount(plan.mirrors[owner == w, 0], minlength=4), w)
        assert spread.max() - spread.min() <= max(3, 0.25 * spread.mean()), (w, spread)


def test_selfish_vertices_are_those_without_out_edges_when_programs_read_in_neighbours():
    graph = graph_with_internal_vertices()
    owner = hash_partition(graph, 3)
    plan = plan_replicas(graph, owner, computation_replicas(graph, owner, 3), 1)
    out_degree = np.bincount(graph.dense_edges()[0], minlength=graph.num_vertices)
    assert np.array_equal(plan.selfish, out_degree == 0) and plan.selfish.sum() >= 20
    both = plan_replicas(graph, owner, computation_replicas(graph, owner, 3, "both"), 1, directions="both")
    assert not both.selfish.any()  # read by their in-neighbours too
    assert not plan_replicas(graph, owner, computation_replicas(graph, owner, 3), 1, selfish=False).selfish.any()


def test_too_few_workers_for_k_failures_is_refused():
    graph = graph_with_internal_vertices()
    owner = hash_partition(graph, 2)
    with pytest.raises(PlanError, match="tolerating 2 failed workers needs at least 3 workers; the job has 2"):
        plan_replicas(graph, owner, computation_replicas(graph, owner, 2), 2)


def test_ft_replicas_go_where_replicas_are_fewest():
    graph = graph_with_internal_vertices(seed=5)
    owner = hash_partition(graph, 4)
    replicas = computation_replicas(graph, owner, 4)
    before = np.array([r.size for r in replicas])
    plan = plan_replicas(graph, owner, replicas, 2)
    after = np.bincount(plan.copy_worker, minlength=4)
    added = after - before
    assert added.sum() == plan.extra_replicas > 0
    # the least loaded workers got the most, and the loads end closer together than they began
    assert np.ptp(after) <= max(np.ptp(before), 2)
    assert added[np.argmin(before)] >= added[np.argmax(before)]


def test_balanced_choice_respects_what_is_allowed_and_evens_the_load():
    rng = np.random.default_rng(1)
    allowed = rng.random((1000, 5)) < 0.6
    allowed[np.arange(1000), rng.integers(0, 5, 1000)] = True  # at least one per row
    allowed[:50] = False
    allowed[:50, 3] = True  # rows that can only go to worker 3
    load = np.array([100, 0, 40, 0, 10])
    choice = balanced_choice(allowed, load, rng)
    assert allowed[np.arange(1000), choice].all()
    final = load + np.bincount(choice, minlength=5)
    assert np.ptp(final) <= 3, final
    # a worker no row may use gets nothing
    only = np.zeros((10, 3), dtype=bool)
    only[:, 1:] = True
    assert set(balanced_choice(only, np.zeros(3), rng).tolist()) == {1, 2}
