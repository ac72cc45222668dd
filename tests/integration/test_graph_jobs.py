"""Graph jobs on Spark workers: every built-in algorithm and a user's Pregel program give the
local runner's result (itself checked against oracles in tests/unit), at 1, 2 and 4 workers;
results come back as a DataFrame; bad programs and inputs fail with one clear error."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import epochal
from epochal.graph.algorithms import BFS, CDLP, LCC, SSSP, WCC, PageRank
from epochal.graph.job import run_graph
from epochal.graph.local import run_graph_locally
from epochal.graph.model import Graph, GraphInputError
from epochal.graph.output import results_to_dataframe

sys.path.insert(0, str(Path(__file__).parent.parent / "unit"))
from test_graph_engine import MaxValue, random_graph  # noqa: E402


def weighted(graph: Graph, seed: int = 5) -> Graph:
    rng = np.random.default_rng(seed)
    return Graph(graph.vertices, graph.src, graph.dst, graph.directed, rng.lognormal(0.4, 1.2, graph.num_edges))


def same(result, expected) -> None:
    assert np.array_equal(result.ids, expected.ids)
    got, want = np.asarray(result.values), np.asarray(expected.values)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
    else:
        assert np.array_equal(got, want)


@pytest.mark.parametrize("directed", [True, False])
def test_every_builtin_algorithm_on_spark_workers_matches_the_local_run(make_env, directed):
    graph, _ = random_graph(n=600, m=3000, seed=11, directed=directed)
    source = int(graph.vertices[3])
    env = make_env(2)
    for program in (BFS(source), PageRank(iterations=10), WCC(), CDLP(iterations=5), LCC()):
        result = run_graph(graph, program, parallelism=2, environment=env, timeout=120)
        same(result, run_graph_locally(graph, program, 2))
    heavy = weighted(graph)
    same(run_graph(heavy, SSSP(source), parallelism=2, environment=env, timeout=120),
         run_graph_locally(heavy, SSSP(source), 2))


@pytest.mark.parametrize("parallelism", [1, 4])
def test_pagerank_at_other_parallelisms_and_with_fennel(make_env, parallelism):
    graph, _ = random_graph(n=500, m=2500, seed=2)
    result = run_graph(graph, PageRank(iterations=10), parallelism=parallelism, partitioner="fennel",
                       environment=make_env(parallelism), timeout=120)
    same(result, run_graph_locally(graph, PageRank(iterations=10), 1))
    assert result.supersteps == 10 and result.replication_factor >= 1.0


def test_a_users_pregel_program_with_a_combiner(make_env, spark):
    graph, _ = random_graph(n=400, m=1600, seed=3)
    result = run_graph(graph, MaxValue(), parallelism=2, environment=make_env(2), timeout=120)
    assert result.as_dict() == run_graph_locally(graph, MaxValue(), 1).as_dict()
    assert result.halt_reason == "no active vertex and no message"
    frame = results_to_dataframe(result, spark)
    assert frame.count() == graph.num_vertices


class Exploding(MaxValue):
    def compute(self, vertex, messages):
        if vertex.superstep == 2:
            raise ZeroDivisionError("boom in superstep two")
        super().compute(vertex, messages)


def test_a_failing_vertex_program_names_itself_and_the_superstep(make_env):
    graph, _ = random_graph(n=100, m=400, seed=4)
    with pytest.raises(epochal.JobFailedError) as info:
        run_graph(graph, Exploding(), parallelism=2, environment=make_env(2), timeout=120)
    first = str(info.value).splitlines()[0]
    assert "vertex program 'Exploding' in superstep 2" in first and "ZeroDivisionError: boom in superstep two" in first
    assert "in compute" in str(info.value)  # the user's frame is shown


def test_bad_input_is_refused_before_anything_runs(make_env):
    graph, _ = random_graph(n=50, m=100, seed=6)
    with pytest.raises(GraphInputError, match="source vertex 12345 is not in the graph"):
        run_graph(graph, BFS(12345), parallelism=2, environment=make_env(2))
    with pytest.raises(epochal.PlanError, match="replication fault tolerance needs a vector program"):
        run_graph(graph, MaxValue(), parallelism=2, fault_tolerance="replication", environment=make_env(2))
    with pytest.raises(epochal.PlanError, match="tolerating 2 lost worker"):
        run_graph(graph, WCC(), parallelism=2, fault_tolerance="replication", replicas=2, environment=make_env(2))
    with pytest.raises(epochal.PlanError, match="recovery must be one of rebirth, migration"):
        run_graph(graph, WCC(), parallelism=2, fault_tolerance="replication", recovery="restart",
                  environment=make_env(2))
