"""Graph jobs survive killed workers with the checkpoint baseline (papers/003 §2.2, Imitator-CKPT).

A worker is SIGKILLed mid-superstep (computed and sent, before the barrier) or at the barrier
(after reporting), at chosen and seeded random supersteps, once or twice; the job restarts from
the latest complete checkpoint, replays the missing supersteps, and its result equals the
failure-free run: bit-identical for integer algorithms, within 1e-9 relative for PageRank.
Switching off the replica resync after a restore makes the result wrong, which shows it is needed.
"""

from __future__ import annotations

import functools
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from epochal.control.restart import FixedDelayRestart
from epochal.graph import job as graph_job
from epochal.graph.algorithms import BFS, CDLP, WCC, PageRank
from epochal.graph.deployment import GraphDeployment
from epochal.graph.job import run_graph
from epochal.graph.local import run_graph_locally
from epochal.runtime.host.hooks import Fault

sys.path.insert(0, str(Path(__file__).parent.parent / "unit"))
from test_graph_engine import MaxValue, random_graph  # noqa: E402

GRAPH, _ = random_graph(n=800, m=4000, seed=21)
UNDIRECTED, _ = random_graph(n=800, m=3000, seed=22, directed=False)


def run_killed(make_env, program, faults, parallelism=2, interval=2, graph=GRAPH, **options):
    return run_graph(graph, program, parallelism=parallelism, environment=make_env(parallelism),
                     fault_tolerance="checkpoint", checkpoint_interval=interval, faults=faults,
                     restart=FixedDelayRestart(attempts=len(faults) + 1, delay=0.0), timeout=240, **options)


def assert_same(result, expected, exact: bool) -> None:
    assert np.array_equal(result.ids, expected.ids)
    if exact:
        assert np.array_equal(np.asarray(result.values), np.asarray(expected.values))
    else:
        np.testing.assert_allclose(np.asarray(result.values), np.asarray(expected.values), rtol=1e-9, atol=0)


def test_pagerank_killed_mid_superstep_resumes_from_the_checkpoint(make_env):
    result = run_killed(make_env, PageRank(iterations=12), [Fault("superstep", worker=1, superstep=5)])
    assert len(result.restarts) == 1 and result.restored_from == [4]
    assert_same(result, run_graph_locally(GRAPH, PageRank(iterations=12), 1), exact=False)


@pytest.mark.parametrize("program", [BFS(int(GRAPH.vertices[7])), WCC()], ids=["bfs", "wcc"])
def test_integer_algorithms_killed_at_the_barrier_are_bit_identical(make_env, program):
    result = run_killed(make_env, program, [Fault("barrier", worker=0, superstep=2)], interval=1)
    assert result.restored_from == [2]
    assert_same(result, run_graph_locally(GRAPH, program, 1), exact=True)


def test_a_pregel_program_restores_its_halted_vertices_and_pending_messages(make_env):
    result = run_killed(make_env, MaxValue(), [Fault("superstep", worker=1, superstep=3)], interval=1)
    assert result.restored_from == [2]
    assert result.as_dict() == run_graph_locally(GRAPH, MaxValue(), 1).as_dict()


def test_two_failures_in_a_row_and_three_workers(make_env):
    faults = [Fault("superstep", worker=2, superstep=4), Fault("barrier", worker=0, superstep=6, attempt=1)]
    result = run_killed(make_env, CDLP(iterations=8), faults, parallelism=3, graph=UNDIRECTED)
    # superstep 4 is killed before its barrier, so its checkpoint never completes: back to 2
    assert len(result.restarts) == 2 and result.restored_from == [2, 6]
    assert_same(result, run_graph_locally(UNDIRECTED, CDLP(iterations=8), 1), exact=True)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_kills(make_env, seed):
    rng = random.Random(seed)
    parallelism = rng.choice([2, 3])
    interval = rng.choice([1, 2, 3])
    point = rng.choice(["superstep", "barrier"])
    fault = Fault(point, worker=rng.randrange(parallelism), superstep=rng.randrange(1, 10))
    result = run_killed(make_env, PageRank(iterations=10), [fault], parallelism=parallelism, interval=interval)
    assert len(result.restarts) == 1, (fault, interval)
    assert_same(result, run_graph_locally(GRAPH, PageRank(iterations=10), 1), exact=False)


def test_without_the_replica_resync_a_restored_job_is_wrong(make_env, monkeypatch):
    monkeypatch.setattr(graph_job, "GraphDeployment", functools.partial(GraphDeployment, resync_replicas=False))
    result = run_killed(make_env, PageRank(iterations=12), [Fault("superstep", worker=1, superstep=5)])
    assert result.restored_from == [4]
    expected = np.asarray(run_graph_locally(GRAPH, PageRank(iterations=12), 1).values)
    assert not np.allclose(np.asarray(result.values), expected, rtol=1e-9, atol=0)
