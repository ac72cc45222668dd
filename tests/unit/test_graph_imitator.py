"""Imitator's recovery (papers/003 §5) as pure functions and machines, without Spark: a job's
engines run in one process with the JobMaster's coordinator, a worker is dropped before or after
a barrier, and Rebirth or Migration must rebuild exactly what was lost (the reborn partition equals
the lost one; the results equal the failure-free run's)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from epochal.control.kinds import ReplaceWorker, RetireWorker
from epochal.graph.algorithms import CDLP, LCC, SSSP, WCC, PageRank
from epochal.graph.coordination import GraphCoordination
from epochal.graph.engine import make_engine
from epochal.graph.local import program_layout, run_graph_locally
from epochal.graph.model import Graph
from epochal.graph.placement import partition
from epochal.graph.program import SuperstepContext
from epochal.graph.recovery import (
    ReplicationSettings,
    migration_assemble,
    migration_start,
    rebirth_assemble,
    rebirth_batches,
    responsible_for,
)
from epochal.graph.replica_plan import replicated_partitions
from epochal.graph.replica_recovery import ReplicaRecovery
from epochal.graph.supersteps import FinishRecovery, Halt, Recover, Recovered, RecoveryPrepared, RunSuperstep
from epochal.messages import Failed, KindCommand, KindReport


def random_graph(n: int = 400, m: int = 1600, seed: int = 5, weighted: bool = False, directed: bool = True) -> Graph:
    rng = np.random.default_rng(seed)
    edges = np.unique(rng.integers(0, n, (m, 2)), axis=0)
    edges = edges[edges[:, 0] != edges[:, 1]]
    ids = np.arange(n + 10, dtype=np.int64) * 3 + 11  # ten isolated vertices
    weights = rng.uniform(0.5, 3.0, edges.shape[0]) if weighted else None
    return Graph.from_edges(ids[edges[:, 0]], ids[edges[:, 1]], vertices=ids, weights=weights, directed=directed)


def unwrap(outputs: list[Any]) -> list[Any]:
    """A coordinator's outputs with the commands for every worker unwrapped (as workers read them)."""
    return [o.payload if isinstance(o, KindCommand) else o for o in outputs]


def report(coordination: GraphCoordination, worker: int, payload: Any, now: float) -> list[Any]:
    """Worker ``worker`` reports ``payload`` while the job runs; the coordinator's unwrapped answer."""
    return unwrap(coordination.on_message(worker, KindReport(worker, payload), now, now, True))


class Harness:
    """A replicated job in one process: engines, the coordinator, recovery on command."""

    def __init__(self, graph: Graph, program: Any, workers: int, settings: ReplicationSettings) -> None:
        self.graph, self.program, self.workers = graph, program, workers
        owner = partition(graph, workers, "hash")
        directions, adjacency = program_layout(program)
        self.parts, self.plan = replicated_partitions(graph, owner, workers, directions, adjacency, settings.k,
                                                      settings.selfish and program.selfish_safe,
                                                      settings.ft_replicas)
        self.engines = {p.worker: make_engine(p, program, graph.num_vertices) for p in self.parts}
        recovery = ReplicaRecovery(settings, graph.vertices, owner, self.plan.mirrors, workers)
        self.coordination = GraphCoordination("test", program, workers, replication=recovery)
        self.failures: list[Failed] = []
        self.reborn: dict[int, Any] = {}
        self.rollback = True

    def compute(self, step: RunSuperstep) -> dict[int, Any]:
        reports = {}
        outs = {}
        for w, engine in self.engines.items():
            ctx = SuperstepContext(step.superstep, self.graph.num_vertices, w, self.workers, dict(step.aggregates),
                                   final=step.final)
            outs[w], reports[w] = engine.step(ctx)
        for out in outs.values():
            for peer, exchange in out.items():
                if peer in self.engines:
                    self.engines[peer].receive(exchange)
        for engine in self.engines.values():  # complete here: committed, with what it replaced kept
            engine.commit(step.superstep, undo=True)
        return reports

    def lose(self, lost: list[int]) -> list[Any]:
        commands: list[Any] = []
        for w in lost:  # (a later Recover supersedes an earlier one)
            del self.engines[w]
            for item in unwrap(self.coordination.worker_lost(w, 1.0)):
                if isinstance(item, ReplaceWorker):
                    commands += unwrap(self.coordination.worker_rejoined(item.worker, 2.0))
                elif isinstance(item, Failed):
                    self.failures.append(item)
                elif not isinstance(item, RetireWorker):
                    commands.append(item)
        return commands

    def recover(self, command: Recover) -> list[Any]:
        for engine in self.engines.values():
            if self.rollback:
                engine.rewind(command.resume_at)
            # else the mechanism is switched off: survivors keep what they committed of resume_at
        finish: list[Any] = []
        for w in sorted(set(self.engines) | (set(command.lost) if command.mode == "rebirth" else set())):
            finish += report(self.coordination, w, RecoveryPrepared(command.epoch), 2.5)
        assert finish == [FinishRecovery(command.epoch)]
        if command.mode == "rebirth":
            sent: dict[int, list[Any]] = {d: [] for d in command.lost}
            for engine in self.engines.values():
                for dead, batch in rebirth_batches(engine.part, engine.table, engine.changed_table, set(command.lost),
                                                   command.epoch, command.routing_from).items():
                    sent[dead].append(batch)
            for dead, batches in sent.items():
                shell = self.parts[dead]
                part, table, changed = rebirth_assemble(dead, shell, batches)
                self.reborn[dead] = part
                engine = make_engine(part, self.program, self.graph.num_vertices)
                engine.install(part, table, changed)
                self.engines[dead] = engine
        else:
            assert command.moved_ids is not None and command.moved_to is not None
            migrations = {w: migration_start(e.part, e.table, e.changed_table, set(command.lost), command.gone,
                                             command.moved_ids, command.moved_to, command.epoch)
                          for w, e in self.engines.items()}
            for w, migration in migrations.items():
                incoming = [m.batches[w] for s, m in migrations.items() if s != w]
                self.engines[w].install(*migration_assemble(migration, incoming))
        out: list[Any] = []
        for w in sorted(self.engines):
            out += report(self.coordination, w, Recovered(command.epoch), 3.0)
        return out

    def run(self, lose_at: int | None = None, lost: tuple[int, ...] = (1,), after_barrier: bool = False) -> Any:
        step: Any = unwrap(self.coordination.started(0.0, 0.0))[0]
        while not isinstance(step, Halt):
            if isinstance(step, Recover):
                [step] = self.recover(step)
                continue
            reports = self.compute(step)
            if step.superstep == lose_at and not after_barrier:
                lose_at = None
                step = (self.lose(list(lost)) or [None])[-1]
                if step is None:
                    return None
                continue
            decision: list[Any] = []
            for w in sorted(reports):
                from epochal.graph.supersteps import SuperstepDone
                decision += report(self.coordination, w, SuperstepDone(reports[w]), 0.5)
            [step] = decision
            at = step.superstep if isinstance(step, Halt) else step.superstep - 1
            if lose_at is not None and at == lose_at and after_barrier:
                lose_at = None
                step = (self.lose(list(lost)) or [None])[-1]
                if step is None:
                    return None
        ids = np.concatenate([e.part.ids for e in self.engines.values()])
        values = np.concatenate([np.asarray(e.output()) for e in self.engines.values()])
        order = np.argsort(ids)
        return ids[order], values[order]


PROGRAMS = {
    "lcc": lambda g: LCC(),
    "pagerank": lambda g: PageRank(iterations=8),
    "sssp": lambda g: SSSP(int(g.vertices[0])),
    "wcc": lambda g: WCC(),
    "cdlp": lambda g: CDLP(iterations=6),
}


def expected(graph: Graph, program: Any) -> tuple[np.ndarray, np.ndarray]:
    result = run_graph_locally(graph, program, 1)
    return result.ids, np.asarray(result.values)


def same(got: Any, want: tuple[np.ndarray, np.ndarray], name: str) -> None:
    assert got is not None
    assert np.array_equal(got[0], want[0])
    if name in ("pagerank", "lcc"):
        np.testing.assert_allclose(got[1], want[1], rtol=1e-9)
    else:
        assert np.array_equal(got[1], want[1])


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("mode", ["rebirth", "migration"])
@pytest.mark.parametrize(("lose_at", "after_barrier"), [(0, False), (2, False), (2, True)])
def test_a_lost_worker_is_recovered_and_results_equal_the_failure_free_run(name, mode, lose_at, after_barrier):
    graph = random_graph(weighted=name == "sssp")
    program = PROGRAMS[name](graph)
    want = expected(graph, program)
    harness = Harness(graph, program, 4, ReplicationSettings(k=1, mode=mode))
    lose_at = min(lose_at, program.max_supersteps or lose_at)  # (LCC is one superstep)
    same(harness.run(lose_at=lose_at, lost=(1,), after_barrier=after_barrier), want, name)
    assert len(harness.coordination.replication.history) == 1


def test_rebirth_rebuilds_the_lost_partition_exactly_at_the_same_positions():
    graph = random_graph()
    harness = Harness(graph, PageRank(iterations=6), 4, ReplicationSettings(k=1, mode="rebirth", selfish=False))
    harness.run(lose_at=3, lost=(2,))
    old, new = harness.parts[2], harness.reborn[2]
    for name in ("ids", "replica_ids", "nbr_ptr", "nbr_slot", "out_ptr", "out_ids", "out_degree", "in_degree",
                 "table_out_degree", "master_mirrors", "selfish"):
        assert np.array_equal(getattr(old, name), getattr(new, name)), name
    assert old.send_index.keys() == new.send_index.keys()
    assert all(np.array_equal(old.send_index[p], new.send_index[p]) for p in old.send_index)
    assert all(np.array_equal(old.receive_slots[p], new.receive_slots[p]) for p in old.receive_slots)
    assert np.array_equal(old.mirror.ids, new.mirror.ids)


@pytest.mark.parametrize("mode", ["rebirth", "migration"])
def test_two_workers_lost_at_once_with_k_2(mode):
    graph = random_graph(weighted=True)
    program = SSSP(int(graph.vertices[0]))
    want = expected(graph, program)
    harness = Harness(graph, program, 5, ReplicationSettings(k=2, mode=mode))
    same(harness.run(lose_at=2, lost=(1, 3)), want, "sssp")


def test_pagerank_with_selfish_vertices_unsynchronised_until_the_last_superstep():
    graph = random_graph(m=700)  # sparse: many vertices without out-edges
    program = PageRank(iterations=7)
    want = expected(graph, program)
    harness = Harness(graph, program, 4, ReplicationSettings(k=1, mode="rebirth", selfish=True))
    assert harness.plan.selfish.sum() > 20
    same(harness.run(lose_at=4, lost=(0,)), want, "pagerank")
    # lost after the last barrier: the selfish values come from the last superstep's synchronisation
    harness = Harness(graph, program, 4, ReplicationSettings(k=1, mode="migration", selfish=True))
    same(harness.run(lose_at=7, lost=(2,), after_barrier=True), want, "pagerank")


def test_without_ft_replicas_a_loss_loses_vertices_and_says_so():
    graph = random_graph(m=500)
    harness = Harness(graph, WCC(), 4, ReplicationSettings(k=1, mode="rebirth", ft_replicas=False))
    assert harness.run(lose_at=1, lost=(1,)) is None
    [failure] = harness.failures
    assert "only copy of" in failure.error and "FT replicas disabled" in failure.error


def test_responsible_is_the_owner_or_the_lowest_surviving_mirror():
    owners = np.array([0, 1, 1, 2])
    mirrors = np.array([[1, 2], [0, 2], [2, 3], [0, 1]])
    assert responsible_for(owners, mirrors, {1}).tolist() == [0, 0, 2, 2]
    assert responsible_for(owners, mirrors, {0, 1}).tolist() == [2, 2, 2, 2]
    assert responsible_for(owners, mirrors, {1, 2}).tolist() == [0, 0, 3, 0]
    assert responsible_for(owners, mirrors, {1, 0, 2}).tolist() == [-1, -1, 3, -1]


def test_without_the_rollback_survivors_keep_half_a_superstep_and_results_are_wrong():
    graph = random_graph()
    program = PageRank(iterations=8)
    want = expected(graph, program)
    harness = Harness(graph, program, 4, ReplicationSettings(k=1, mode="rebirth"))
    harness.rollback = False
    got = harness.run(lose_at=3, lost=(1,))
    assert not np.allclose(got[1], want[1], rtol=1e-9, atol=0)


def sync_plan_agrees(engines: dict[int, Any]) -> None:
    """Every sender's send list to a peer names exactly the replicas the peer expects from it,
    in the same order (ids), and every master read is a master or replica of its worker."""
    for s, sender in engines.items():
        for r, receiver in engines.items():
            if s == r:
                continue
            sent = sender.part.ids[sender.part.send_index.get(r, np.zeros(0, dtype=np.int64))]
            expected_ids = receiver.part.table_ids[receiver.part.receive_slots.get(s, np.zeros(0, dtype=np.int64))]
            assert np.array_equal(sent, expected_ids), (s, r)
    owned = np.concatenate([e.part.ids for e in engines.values()])
    assert np.unique(owned).size == owned.size  # every vertex has exactly one master


@pytest.mark.parametrize("mode", ["rebirth", "migration"])
def test_after_a_recovery_the_sync_plans_agree_and_promoted_mirrors_are_masters(mode):
    graph = random_graph(weighted=True)
    harness = Harness(graph, SSSP(int(graph.vertices[0])), 4, ReplicationSettings(k=1, mode=mode))
    lost_ids = harness.parts[3].ids.copy()
    harness.run(lose_at=2, lost=(3,))
    sync_plan_agrees(harness.engines)
    owner_now = {int(v): w for w, e in harness.engines.items() for v in e.part.ids.tolist()}
    if mode == "migration":
        assert 3 not in harness.engines
        mirrors = harness.plan.mirrors[graph.index_of(lost_ids), 0]
        assert [owner_now[int(v)] for v in lost_ids.tolist()] == mirrors.tolist()  # promoted where mirrored
    else:
        assert all(owner_now[int(v)] == 3 for v in lost_ids.tolist())


def test_with_locations_replaces_the_lists_of_the_given_rows_only():
    from epochal.graph.partition import csr_ptr
    from epochal.graph.records import VertexRecords

    lists = [[1, 2], [], [0, 3, 4], [2], [1]]
    records = VertexRecords(np.arange(5) * 10, loc_ptr=csr_ptr(np.array([len(x) for x in lists])),
                            loc_workers=np.array([w for x in lists for w in x]))
    new = {3: [0, 1, 5], 0: [], 4: [7]}  # rows in any order, lists may shrink, grow or empty
    rows = np.array(list(new))
    ptr = csr_ptr(np.array([len(x) for x in new.values()]))
    updated = records.with_locations(rows, ptr, np.array([w for x in new.values() for w in x]))
    expected = [new.get(i, x) for i, x in enumerate(lists)]
    got = [updated.loc_workers[updated.loc_ptr[i]:updated.loc_ptr[i + 1]].tolist() for i in range(5)]
    assert got == expected
