"""Replicas for fault tolerance (papers/003 §4): FT replicas, full-state mirrors, selfish vertices.

The first step of Imitator's replication-based fault tolerance (issue 13), computed on the driver
at load time from the partitioning, before any worker runs:

- **Computation replicas** are the ones the layout already has: a replica of ``v`` on every other
  worker whose masters read ``v`` (:mod:`epochal.graph.partition`).
- **FT replicas** (§4.1): a vertex with fewer than ``K`` replicas (an *internal* vertex, read only
  where it lives, or never read) gets FT replicas on workers that hold neither its master nor a
  replica of it, each time the worker holding the fewest replicas so far (ties: lowest index),
  so the extra copies balance the load.
- **Mirrors** (§4.2, §5.3.1): ``K`` of each vertex's replicas are its full-state *mirrors*, with
  ids ``0..K-1``. Each master's worker keeps its own counter of mirrors it placed and picks,
  vertex by vertex, the candidate worker with the fewest so far. An FT replica is always a
  mirror (it exists only to be one). After a failure the surviving mirror with the lowest id
  recovers the master.
- **Selfish vertices** (§4.3): a vertex without out-edges has no consumer of its value; with
  ``selfish=True`` its FT replica is created but flagged as not synchronised every superstep
  (after a failure its value is recomputed from its in-neighbours).

The result, :class:`ReplicaPlan`, says for every vertex where its copies are and which are
mirrors; it also reports the extra replicas (papers/003 Fig. 3(b), Fig. 8(a)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epochal.errors import PlanError
from epochal.graph.model import Graph
from epochal.graph.partition import Partition, build_partitions, computation_replicas


@dataclass
class ReplicaPlan:
    """Where every vertex's copies are (dense vertex index ``i``, as in ``Graph.vertices``)."""

    #: tolerated simultaneous failures
    k: int
    #: CSR over vertices: the workers holding a replica of vertex i (sorted), and which are FT replicas
    copy_ptr: np.ndarray
    copy_worker: np.ndarray
    copy_ft: np.ndarray
    #: ``mirrors[i, j]``: the worker of vertex i's mirror with id j
    mirrors: np.ndarray
    #: vertices without out-edges whose FT replica is not synchronised every superstep
    selfish: np.ndarray

    def copies(self, vertex: int) -> list[int]:
        """The workers holding a replica of dense vertex ``vertex``."""
        return self.copy_worker[self.copy_ptr[vertex]:self.copy_ptr[vertex + 1]].tolist()

    @property
    def extra_replicas(self) -> int:
        """FT replicas added for fault tolerance."""
        return int(self.copy_ft.sum())

    def mirror_counts(self, num_workers: int) -> np.ndarray:
        """Mirrors hosted by each worker."""
        return np.bincount(self.mirrors.ravel(), minlength=num_workers)


def plan_replicas(graph: Graph, owner: np.ndarray, replicas: list[np.ndarray], k: int = 1,
                  selfish: bool = True, ft_replicas: bool = True, directions: str = "in") -> ReplicaPlan:
    """FT replicas, mirrors and selfish flags for tolerating ``k`` simultaneous worker failures,
    given each worker's computation replicas (dense indices,
    :func:`~epochal.graph.partition.computation_replicas`; the partitions' ``replica_ids`` say the
    same). ``directions`` is what the programs read (selfish vertices exist only for ``"in"``).
    ``ft_replicas=False`` skips the FT replicas (only to show they are necessary: a vertex
    without a replica then has no mirror, and its worker's loss loses it).

    Array work over a vertices x workers matrix, no per-vertex Python. Promises: every vertex has
    ``min(k, copies)`` mirrors on distinct workers holding a replica (FT replicas first), FT
    replicas go where replicas are fewest, and each worker's mirrors of its masters are spread
    over the others as evenly as the copies allow.

    Raises :class:`PlanError` when there are fewer than ``k + 1`` workers (a vertex cannot have
    ``k + 1`` copies on distinct workers)."""
    num_workers = len(replicas)
    if k < 1:
        raise PlanError(f"replication fault tolerance needs k >= 1 tolerated failures, not {k}")
    if num_workers < k + 1:
        raise PlanError(f"tolerating {k} failed workers needs at least {k + 1} workers; the job has {num_workers}")
    n = graph.num_vertices
    holds = np.zeros((n, num_workers), dtype=bool)  # holds[i, w]: w has a replica of vertex i
    for worker, dense in enumerate(replicas):
        holds[dense, worker] = True
    rng = np.random.default_rng(0)  # deterministic: the same graph gets the same plan
    holds, ft, mirrors = place_copies(holds, owner, k, ft_replicas, holds.sum(axis=0).astype(np.int64), rng)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(holds.sum(axis=1), out=ptr[1:])
    copy_vertex, copy_worker = np.nonzero(holds)  # row-major: by vertex, then worker
    out_degree = np.bincount(graph.dense_edges()[0], minlength=n)
    if not graph.directed:
        out_degree = out_degree + np.bincount(graph.dense_edges()[1], minlength=n)
    # a vertex without out-edges is read by nobody only when programs read in-neighbours
    is_selfish = (out_degree == 0) if selfish and directions == "in" else np.zeros(n, dtype=bool)
    return ReplicaPlan(k, ptr, copy_worker.astype(np.int64), ft[copy_vertex, copy_worker], mirrors, is_selfish)


def place_copies(holds: np.ndarray, owner: np.ndarray, k: int, ft_replicas: bool, load: np.ndarray,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FT replicas and mirrors of the vertices of ``holds`` (vertices x workers: who holds a
    computation replica) owned by ``owner``: returns ``(holds, ft, mirrors)`` with the FT replicas
    added (placed where ``load``, replicas per worker, is lowest) and ``mirrors[i, j]`` the worker
    of vertex i's mirror j (-1: none). The rows may be all vertices (the driver's plan) or one
    worker's masters (the executors' plan, each worker for its own)."""
    n, num_workers = holds.shape
    rows = np.arange(n)
    holds = holds.copy()
    ft = np.zeros_like(holds)
    taken = holds.copy()  # a copy or the master: no FT replica there
    taken[rows, owner] = True
    load = load.astype(np.int64, copy=True)
    for _ in range(k if ft_replicas else 0):  # one more FT replica for every vertex still short
        short = np.flatnonzero(holds.sum(axis=1) < k)
        if not short.size:
            break
        target = balanced_choice(~taken[short], load, rng)
        holds[short, target] = ft[short, target] = taken[short, target] = True
    # mirrors: FT replicas first (they exist only to be mirrors), then per master's worker the
    # least used of the other copies
    mirrors = np.full((n, k), -1, dtype=np.int64)
    left = holds.copy()
    for j in range(k):
        has_ft = (ft & left).any(axis=1)
        pick = np.where(has_ft, (ft & left).argmax(axis=1), -1)
        for master in np.unique(owner).tolist():
            mine = owner == master
            free = np.flatnonzero(mine & ~has_ft & left.any(axis=1))
            if free.size:
                placed = np.concatenate([mirrors[mine, :j].ravel(), pick[mine & has_ft]])
                used = np.bincount(placed + 1, minlength=num_workers + 1)[1:]
                pick[free] = balanced_choice(left[free], used, rng)
        chosen = np.flatnonzero(pick >= 0)
        mirrors[chosen, j] = pick[chosen]
        left[chosen, pick[chosen]] = False
    return holds, ft, mirrors


def balanced_choice(allowed: np.ndarray, load: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One worker per row of ``allowed`` (rows x workers, at least one True per row), so that
    ``load`` plus the choices ends as even as the rows allow: rows with a single allowed worker
    take it; the rest get the workers of a water-filled quota in random order, and rows whose
    drawn worker is not allowed draw again (a few rounds), the last ones one by one."""
    load = load.astype(np.int64, copy=True)
    choice = np.full(allowed.shape[0], -1, dtype=np.int64)
    pending = np.arange(allowed.shape[0])
    for _ in range(8):
        forced = allowed[pending].sum(axis=1) == 1
        if forced.any():
            rows = pending[forced]
            choice[rows] = allowed[rows].argmax(axis=1)
            np.add.at(load, choice[rows], 1)
            pending = pending[~forced]
        if not pending.size:
            return choice
        usable = np.asarray(allowed[pending].any(axis=0))
        draw = rng.permutation(np.repeat(np.arange(load.size), _quota(load, usable, pending.size)))
        ok = allowed[pending, draw]
        choice[pending[ok]] = draw[ok]
        np.add.at(load, draw[ok], 1)
        pending = pending[~ok]
    for row in pending.tolist():  # the rare rows still without a worker: the least loaded allowed
        target = int(np.flatnonzero(allowed[row])[np.argmin(load[allowed[row]])])
        choice[row] = target
        load[target] += 1
    return choice


def _quota(load: np.ndarray, usable: np.ndarray, count: int) -> np.ndarray:
    """How many of ``count`` new items each usable worker takes so that the loads end as even as
    possible (water filling; the remainder to the least loaded, ties: lowest index)."""
    quota = np.zeros(load.size, dtype=np.int64)
    workers = np.flatnonzero(usable)
    base = load[workers]
    order = np.argsort(base, kind="stable")
    levels = base[order]
    for m in range(workers.size, 0, -1):  # fill the m least loaded up to a common level
        level = (int(levels[:m].sum()) + count) // m
        if m == 1 or level >= levels[m - 1]:
            break
    give = np.maximum(level - levels[:m], 0)
    rest = count - int(give.sum())
    extra = np.argsort(levels[:m] + give, kind="stable")[:rest]
    give[extra] += 1
    quota[workers[order[:m]]] = give
    return quota


def replicated_partitions(graph: Graph, owner: np.ndarray, num_workers: int, directions: str = "in",
                          adjacency: bool = False, k: int = 1, selfish: bool = True,
                          ft_replicas: bool = True) -> tuple[list[Partition], ReplicaPlan]:
    """The partitions of a job with replication fault tolerance: the layout of
    :func:`~epochal.graph.partition.build_partitions` plus the FT replicas of :func:`plan_replicas`,
    each master's mirror workers and selfish flag, and on every worker the static full state of
    the vertices it mirrors (:class:`~epochal.graph.records.VertexRecords`)."""
    from epochal.graph.records import concat, master_records

    replicas = computation_replicas(graph, owner, num_workers, directions)
    plan = plan_replicas(graph, owner, replicas, k, selfish, ft_replicas, directions)
    del replicas
    copy_vertex = np.repeat(np.arange(graph.num_vertices), np.diff(plan.copy_ptr))
    extra = [copy_vertex[plan.copy_ft & (plan.copy_worker == w)] for w in range(num_workers)]
    parts = build_partitions(graph, owner, num_workers, directions, adjacency, extra)
    static = []
    for part in parts:
        dense = graph.index_of(part.ids)
        part.master_mirrors = plan.mirrors[dense]
        part.selfish = plan.selfish[dense]
        static.append(master_records(part, None, None))
    for part in parts:
        mirrored = [records.take(np.flatnonzero((records.mirrors == part.worker).any(axis=1)))
                    for records in static if records.mirrors is not None]
        part.mirror = concat(mirrored)
    return parts, plan
