"""Graph jobs survive killed workers with Imitator's replication (papers/003 §3-5), on real Spark.

A worker is SIGKILLed mid-superstep (before the global barrier) or after reporting (after it), at
seeded random supersteps; the JobMaster recovers it without restarting the others, by Rebirth (a
new Spark task takes its place, rebuilt from the survivors' replicas) or Migration (the survivors
take over its vertices). Two workers lost at once with two replicas per vertex, a replacement or
a survivor killed during the recovery, and a loss after the last barrier are recovered too. The
results equal the failure-free run: bit-identical for integer algorithms, within 1e-9 relative
for PageRank. Without FT replicas the job fails, saying how many vertices had no other copy.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

import epochal
from epochal.graph.algorithms import CDLP, SSSP, WCC, PageRank
from epochal.graph.job import run_graph
from epochal.graph.local import run_graph_locally
from epochal.graph.model import Graph
from epochal.runtime.host.hooks import Fault

sys.path.insert(0, str(Path(__file__).parent.parent / "unit"))
from test_graph_engine import random_graph  # noqa: E402

GRAPH, _ = random_graph(n=900, m=4000, seed=31)
UNDIRECTED, _ = random_graph(n=900, m=3000, seed=32, directed=False)
_rng = np.random.default_rng(33)
WEIGHTED = Graph(GRAPH.vertices, GRAPH.src, GRAPH.dst, True, _rng.uniform(0.5, 4.0, GRAPH.num_edges))

PROGRAMS = {
    "pagerank": (lambda: PageRank(iterations=10), GRAPH),
    "sssp": (lambda: SSSP(int(WEIGHTED.vertices[3])), WEIGHTED),
    "cdlp": (lambda: CDLP(iterations=8), UNDIRECTED),
    "wcc": (lambda: WCC(), GRAPH),
}
_EXPECTED: dict[str, object] = {}


def expected(name: str):
    if name not in _EXPECTED:
        make, graph = PROGRAMS[name]
        _EXPECTED[name] = run_graph_locally(graph, make(), 1)
    return _EXPECTED[name]


def run_replicated(make_env, name: str, faults: list[Fault], parallelism: int = 3, **options):
    make, graph = PROGRAMS[name]
    return run_graph(graph, make(), parallelism=parallelism, environment=make_env(parallelism),
                     fault_tolerance="replication", faults=faults, timeout=240, **options)


def assert_same(result, name: str) -> None:
    want = expected(name)
    assert np.array_equal(result.ids, want.ids)
    if name == "pagerank":
        np.testing.assert_allclose(np.asarray(result.values), np.asarray(want.values), rtol=1e-9, atol=0)
    else:
        assert np.array_equal(np.asarray(result.values), np.asarray(want.values))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("mode", ["rebirth", "migration"])
def test_a_worker_killed_at_a_random_superstep_is_recovered_without_restarting_the_others(make_env, name, mode):
    rng = random.Random(f"{name}-{mode}")
    point = rng.choice(["superstep", "barrier"])
    fault = Fault(point, worker=rng.randrange(3), superstep=rng.randrange(1, 5))
    result = run_replicated(make_env, name, [fault], recovery=mode)
    assert result.restarts == [], fault  # nobody restarted: the job recovered in place
    [recovery] = result.recoveries
    assert recovery["lost"] == [fault.worker] and recovery["mode"] == mode, fault
    assert recovery["resume_at"] == fault.superstep + (point == "barrier"), fault
    assert_same(result, name)


@pytest.mark.parametrize("mode", ["rebirth", "migration"])
def test_two_workers_killed_at_once_with_two_replicas_per_vertex(make_env, mode):
    faults = [Fault("superstep", worker=1, superstep=3), Fault("superstep", worker=2, superstep=3)]
    result = run_replicated(make_env, "sssp", faults, parallelism=4, recovery=mode, replicas=2)
    assert result.restarts == []
    assert {w for r in result.recoveries for w in r["lost"]} == {1, 2}
    assert_same(result, "sssp")


def test_the_replacement_killed_during_its_recovery_is_replaced_again(make_env):
    faults = [Fault("superstep", worker=1, superstep=3), Fault("recovery", worker=1, incarnation=1)]
    result = run_replicated(make_env, "wcc", faults, recovery="rebirth")
    assert result.restarts == [] and len(result.recoveries) == 1 and result.recoveries[0]["epoch"] == 2
    assert_same(result, "wcc")


@pytest.mark.parametrize("mode", ["rebirth", "migration"])
def test_a_survivor_killed_during_the_recovery_restarts_it(make_env, mode):
    faults = [Fault("barrier", worker=3, superstep=2), Fault("recovery", worker=0)]
    result = run_replicated(make_env, "cdlp", faults, parallelism=4, recovery=mode, replicas=2)
    assert result.restarts == []
    assert {w for r in result.recoveries for w in r["lost"]} == {0, 3}
    assert_same(result, "cdlp")


@pytest.mark.parametrize("mode", ["rebirth", "migration"])
def test_a_worker_killed_after_the_last_barrier_still_delivers_its_selfish_vertices(make_env, mode):
    result = run_replicated(make_env, "pagerank", [Fault("barrier", worker=2, superstep=10)], recovery=mode)
    assert [r["resume_at"] for r in result.recoveries] == [11]
    assert_same(result, "pagerank")


def test_without_ft_replicas_a_lost_worker_loses_vertices_and_the_job_says_so(make_env):
    sparse, _ = random_graph(n=900, m=900, seed=34)  # many vertices nobody else reads: no replica
    with pytest.raises(epochal.JobFailedError, match=r"only copy of \d+ vertices.*FT replicas disabled"):
        run_graph(sparse, WCC(), parallelism=3, environment=make_env(3), fault_tolerance="replication",
                  ft_replicas=False, faults=[Fault("superstep", worker=1, superstep=1)], timeout=120)
