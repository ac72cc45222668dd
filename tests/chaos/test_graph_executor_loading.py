"""Killed workers on graphs loaded on the executors (issue 40): checkpoints and Imitator's replication.

The graph is given as Graphalytics files (``GraphSource``): Spark tasks read and partition it,
graph workers read their partition files, and nothing of the graph passes through the driver. A
worker is SIGKILLed mid-superstep or at the barrier: with checkpoints the job restarts from the
latest one; with replication it is recovered in place by Rebirth (a new Spark task rebuilt from
the survivors) or Migration (the survivors take its vertices). Every result equals the reference
(the driver-loaded graph run in one process): integers bit for bit, PageRank within 1e-9.
"""

from __future__ import annotations

import numpy as np
import pytest

from epochal.graph.algorithms import CDLP, SSSP, WCC, PageRank
from epochal.graph.executors.sources import GraphSource
from epochal.graph.job import run_graph
from epochal.graph.loading import load_graph
from epochal.graph.local import run_graph_locally
from epochal.runtime.host.hooks import Fault


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("chaos-graph")
    rng = np.random.default_rng(71)
    ids = rng.choice(1 << 40, 800, replace=False) + (1 << 32)
    pairs = np.unique(rng.integers(0, 760, (3600, 2)), axis=0)
    pairs = rng.permutation(pairs[pairs[:, 0] != pairs[:, 1]])
    weights = np.round(rng.uniform(0.5, 4.0, len(pairs)), 4)
    (root / "G.v").write_text("".join(f"{v}\n" for v in ids.tolist()))
    (root / "G.e").write_text("".join(f"{ids[a]} {ids[b]} {w}\n" for (a, b), w in
                                      zip(pairs.tolist(), weights.tolist(), strict=True)))
    return str(root / "G.v"), str(root / "G.e"), int(ids[pairs[0, 0]])


def check(result, files, program, directed: bool = True) -> None:
    graph = load_graph(files[0], files[1], directed=directed, weighted=True, duplicates="drop")
    want = run_graph_locally(graph, program, 1)
    assert np.array_equal(result.ids, want.ids)
    if isinstance(program, PageRank):
        np.testing.assert_allclose(np.asarray(result.values), np.asarray(want.values), rtol=1e-9, atol=0)
    else:
        assert np.array_equal(np.asarray(result.values), np.asarray(want.values))


@pytest.mark.parametrize("point", ["superstep", "barrier"])
def test_checkpoints_restart_a_killed_worker_on_a_graph_loaded_on_the_executors(make_env, files, point):
    source = GraphSource.graphalytics(files[0], files[1], weighted=True)
    result = run_graph(source, PageRank(iterations=12), parallelism=3, environment=make_env(3),
                       fault_tolerance="checkpoint", checkpoint_interval=2,
                       faults=[Fault(point, worker=1, superstep=5)], timeout=240)
    assert len(result.restarts) == 1 and result.restored_from == [4]
    check(result, files, PageRank(iterations=12))


@pytest.mark.parametrize(("mode", "name"), [("rebirth", "sssp"), ("migration", "wcc"), ("rebirth", "cdlp"),
                                            ("migration", "pagerank")])
def test_replication_recovers_a_killed_worker_on_a_graph_loaded_on_the_executors(make_env, files, mode, name):
    directed = name != "cdlp"
    program = {"sssp": SSSP(files[2]), "wcc": WCC(), "cdlp": CDLP(iterations=6),
               "pagerank": PageRank(iterations=10)}[name]
    source = GraphSource.graphalytics(files[0], files[1], weighted=True, directed=directed, duplicates="drop")
    faults = [Fault("superstep", worker=2, superstep=3)]
    result = run_graph(source, program, parallelism=3, environment=make_env(3), fault_tolerance="replication",
                       recovery=mode, faults=faults, timeout=240)
    assert result.restarts == []
    [recovery] = result.recoveries
    assert recovery["lost"] == [2] and recovery["mode"] == mode
    assert result.load.ft_replicas >= 0
    check(result, files, program, directed)


def test_two_workers_killed_at_once_with_two_replicas(make_env, files):
    source = GraphSource.graphalytics(files[0], files[1], weighted=True)
    faults = [Fault("superstep", worker=1, superstep=3), Fault("superstep", worker=3, superstep=3)]
    result = run_graph(source, SSSP(files[2]), parallelism=4, environment=make_env(4), fault_tolerance="replication",
                       recovery="migration", replicas=2, faults=faults, timeout=240)
    assert {w for r in result.recoveries for w in r["lost"]} == {1, 3}
    check(result, files, SSSP(files[2]))
