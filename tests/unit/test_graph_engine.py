"""The graph engine in one process: partitions and sync plans, vector and vertex programs, the
barrier's halting rules, and checkpoint deltas, against networkx on small random graphs."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from epochal.graph.engine import VectorEngine
from epochal.graph.local import run_graph_locally
from epochal.graph.model import Graph, GraphInputError
from epochal.graph.partition import build_partitions
from epochal.graph.placement import hash_partition, partition, replication_factor
from epochal.graph.program import StepResult, SuperstepContext, VectorProgram, VertexProgram
from epochal.graph.supersteps import Halt, RunSuperstep, SuperstepCoordinator

BIG = 1 << 33  # ids above 2^31


def random_graph(n: int = 200, m: int = 900, seed: int = 1, directed: bool = True) -> tuple[Graph, nx.DiGraph]:
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64) * 7919 + BIG
    edges = np.unique(rng.integers(0, n, (m, 2)), axis=0)
    graph = Graph.from_edges(ids[edges[:, 0]], ids[edges[:, 1]], vertices=ids, directed=directed)
    oracle = nx.DiGraph() if directed else nx.Graph()
    oracle.add_nodes_from(ids.tolist())
    oracle.add_edges_from(zip(ids[edges[:, 0]].tolist(), ids[edges[:, 1]].tolist(), strict=True))
    return graph, oracle


class Sum(VectorProgram):
    """Each vertex: the sum of its in-neighbours' ids, in one superstep."""

    max_supersteps = 1

    def init(self, part, ctx):
        return StepResult(part.ids.astype(np.float64))

    def compute(self, part, table, ctx):
        sums = np.zeros(part.num_masters)
        np.add.at(sums, np.repeat(np.arange(part.num_masters), np.diff(part.nbr_ptr)), table[part.nbr_slot])
        return StepResult(sums)


class MaxValue(VertexProgram):
    """Max-value propagation along out-edges, with a max combiner."""

    combiner = "max"

    def initial_value(self, vertex_id, properties):
        return vertex_id % 97

    def compute(self, vertex, messages):
        best = max(messages, default=vertex.value)
        if vertex.superstep == 0 or best > vertex.value:
            vertex.value = max(best, vertex.value)
            vertex.send_to_out_neighbours(vertex.value)
        vertex.vote_to_halt()


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("partitioner", ["hash", "fennel"])
def test_vector_program_reads_in_neighbours_through_replicas(workers, partitioner):
    graph, oracle = random_graph()
    result = run_graph_locally(graph, Sum(), workers, partitioner).as_dict()
    assert result == {v: float(sum(oracle.predecessors(v))) for v in oracle}


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_vertex_program_propagates_the_maximum(workers):
    graph, oracle = random_graph(seed=3)
    result = run_graph_locally(graph, MaxValue(), workers)
    expected = {v: max(u % 97 for u in nx.ancestors(oracle, v) | {v}) for v in oracle}
    assert result.as_dict() == expected
    assert result.halt_reason == "no active vertex and no message"


def test_the_sync_plan_lines_up_senders_and_receivers():
    graph, _ = random_graph(n=50, m=200)
    owner = hash_partition(graph, 3)
    parts = build_partitions(graph, owner, 3)
    for part in parts:
        for peer, index in part.send_index.items():
            slots = parts[peer].receive_slots[part.worker]
            assert np.array_equal(part.ids[index], parts[peer].table_ids[slots])
    assert replication_factor(graph, owner) == pytest.approx(
        (graph.num_vertices + sum(p.replica_ids.size for p in parts)) / graph.num_vertices)
    assert replication_factor(graph, partition(graph, 3, "fennel")) <= replication_factor(graph, owner)


def test_an_edge_to_an_unknown_vertex_is_refused_with_its_ids():
    with pytest.raises(GraphInputError, match=r"edge 1 \(2 -> 9\) names destination vertex 9"):
        Graph.from_edges([1, 2], [2, 9], vertices=[1, 2])


def test_the_barrier_halts_on_the_bound_on_convergence_and_when_idle():
    class Bounded(Sum):
        max_supersteps = 2

    coordinator = SuperstepCoordinator(Bounded(), 2, checkpoint_interval=2)
    from epochal.graph.engine import StepReport
    assert coordinator.start() == RunSuperstep(0, {}, True)
    assert coordinator.on_report(0, StepReport(0, 5, 3)) is None
    assert coordinator.on_report(0, StepReport(0, 5, 3)) is None  # duplicate
    assert coordinator.on_report(1, StepReport(1, 5, 3)) is None  # stale superstep
    assert coordinator.on_report(1, StepReport(0, 0, 0)) == RunSuperstep(1, {}, False)
    assert coordinator.latest_checkpoint == 0
    coordinator.on_report(0, StepReport(1, 1, 0))
    assert coordinator.on_report(1, StepReport(1, 0, 0)) == RunSuperstep(2, {}, True, final=True)
    coordinator.on_report(0, StepReport(2, 1, 0))
    assert coordinator.on_report(1, StepReport(2, 0, 0)) == Halt(2, "reached the bound of 2 supersteps")
    assert coordinator.start(resume_after=2) == RunSuperstep(3, {}, False)
    idle = SuperstepCoordinator(MaxValue(), 1)
    idle.start()
    assert idle.on_report(0, StepReport(0, 0, 0)) == Halt(0, "no active vertex and no message")


def test_checkpoint_deltas_hold_only_changed_masters_and_restore_resyncs_replicas():
    graph, _ = random_graph(n=40, m=120)
    owner = hash_partition(graph, 2)
    parts = build_partitions(graph, owner, 2)
    engines = [VectorEngine(p, Sum(), graph.num_vertices) for p in parts]
    for engine in engines:
        out, _ = engine.step(SuperstepContext(0, graph.num_vertices, engine.part.worker, 2))
        for peer, exchange in out.items():
            engines[peer].receive(exchange)
    for engine in engines:
        engine.commit()
    full = engines[0].delta()
    assert full["slots"].size == parts[0].num_masters  # superstep 0 changed every master
    assert engines[0].delta()["slots"].size == 0
    table = engines[1].table.copy()
    engines[1].restore(table[:parts[1].num_masters], np.ones(parts[1].num_masters, bool))
    resync = engines[0].resync(0)
    engines[1].receive(resync[1])
    engines[1].commit()
    assert np.array_equal(engines[1].table, table)


def test_entries_reading_is_the_reverse_of_the_neighbour_lists():
    graph, _ = random_graph(n=80, m=400, seed=9)
    part = build_partitions(graph, hash_partition(graph, 2), 2, "both")[0]
    slots = np.array([0, 3, part.table_size - 1])
    assert sorted(part.entries_reading(slots).tolist()) == np.flatnonzero(np.isin(part.nbr_slot, slots)).tolist()
    assert part.entries_reading(np.zeros(0, np.int64)).size == 0


def test_a_long_chain_relaxes_through_the_reverse_index_and_matches_dijkstra():
    from epochal.graph.algorithms import SSSP

    rng = np.random.default_rng(4)
    n = 120  # a path: one vertex changes per superstep, so small frontiers for 120 supersteps
    src = np.r_[np.arange(n - 1), rng.integers(0, n, 30)]
    dst = np.r_[np.arange(1, n), rng.integers(0, n, 30)]
    keep = src != dst
    pairs = np.unique(np.stack([src[keep], dst[keep]], 1), axis=0)
    weights = rng.uniform(0.5, 2.0, len(pairs))
    ids = np.arange(n, dtype=np.int64) * 13 + BIG
    graph = Graph.from_edges(ids[pairs[:, 0]], ids[pairs[:, 1]], vertices=ids, weights=weights)
    oracle = nx.DiGraph()
    oracle.add_weighted_edges_from(zip(ids[pairs[:, 0]].tolist(), ids[pairs[:, 1]].tolist(), weights.tolist(),
                                       strict=True))
    expected = nx.single_source_dijkstra_path_length(oracle, int(ids[0]))
    result = run_graph_locally(graph, SSSP(int(ids[0])), 2).as_dict()
    assert result == {v: expected.get(v, float("inf")) for v in ids.tolist()}
