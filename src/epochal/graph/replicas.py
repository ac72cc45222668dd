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
from epochal.graph.partition import Partition, build_partitions


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


def plan_replicas(graph: Graph, owner: np.ndarray, parts: list[Partition], k: int = 1,
                  selfish: bool = True, ft_replicas: bool = True) -> ReplicaPlan:
    """FT replicas, mirrors and selfish flags for tolerating ``k`` simultaneous worker failures.
    ``ft_replicas=False`` skips the FT replicas (only to show they are necessary: a vertex
    without a replica then has no mirror, and its worker's loss loses it).

    Raises :class:`PlanError` when there are fewer than ``k + 1`` workers (a vertex cannot have
    ``k + 1`` copies on distinct workers)."""
    num_workers = len(parts)
    if k < 1:
        raise PlanError(f"replication fault tolerance needs k >= 1 tolerated failures, not {k}")
    if num_workers < k + 1:
        raise PlanError(f"tolerating {k} failed workers needs at least {k + 1} workers; the job has {num_workers}")
    n = graph.num_vertices
    # computation replicas: worker w holds a replica of each of its replica_ids
    holders: list[list[int]] = [[] for _ in range(n)]
    load = np.zeros(num_workers, dtype=np.int64)
    for part in parts:
        for i in graph.index_of(part.replica_ids).tolist():
            holders[i].append(part.worker)
        load[part.worker] += part.replica_ids.size
    out_degree = np.bincount(graph.dense_edges()[0], minlength=n)
    if not graph.directed:
        out_degree = out_degree + np.bincount(graph.dense_edges()[1], minlength=n)
    ft: list[list[bool]] = [[False] * len(h) for h in holders]
    for i in range(n):  # FT replicas where fewer than k copies exist besides the master
        have = holders[i]
        while ft_replicas and len(have) < k:
            free = [w for w in range(num_workers) if w != owner[i] and w not in have]
            target = min(free, key=lambda w: (load[w], w))
            have.append(target)
            ft[i].append(True)
            load[target] += 1
    # mirrors: per master's worker, a counter of mirrors placed on each other worker
    placed = np.zeros((num_workers, num_workers), dtype=np.int64)
    mirrors = np.full((n, k), -1, dtype=np.int64)
    for i in range(n):
        counter = placed[owner[i]]
        candidates = list(zip(holders[i], ft[i], strict=True))
        # an FT replica exists only to be a mirror: it goes first
        chosen = [w for w, is_ft in candidates if is_ft]
        rest = sorted((w for w, is_ft in candidates if not is_ft), key=lambda w: (counter[w], w))
        for w in rest:
            if len(chosen) == k:
                break
            chosen.append(w)
        for j, w in enumerate(chosen[:k]):
            mirrors[i, j] = w
            counter[w] += 1
    counts = np.array([len(h) for h in holders], dtype=np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    order = [sorted(range(len(h)), key=h.__getitem__) for h in holders]
    workers = np.array([h[j] for h, o in zip(holders, order, strict=True) for j in o], dtype=np.int64)
    flags = np.array([f[j] for f, o in zip(ft, order, strict=True) for j in o], dtype=bool)
    # a vertex without out-edges is read by nobody only when programs read in-neighbours
    reads_in_only = all(p.directions == "in" for p in parts)
    is_selfish = (out_degree == 0) if selfish and reads_in_only else np.zeros(n, dtype=bool)
    return ReplicaPlan(k, ptr, workers, flags, mirrors, is_selfish)


def replicated_partitions(graph: Graph, owner: np.ndarray, num_workers: int, directions: str = "in",
                          adjacency: bool = False, k: int = 1, selfish: bool = True,
                          ft_replicas: bool = True) -> tuple[list[Partition], ReplicaPlan]:
    """The partitions of a job with replication fault tolerance: the layout of
    :func:`~epochal.graph.partition.build_partitions` plus the FT replicas of :func:`plan_replicas`,
    each master's mirror workers and selfish flag, and on every worker the static full state of
    the vertices it mirrors (:class:`~epochal.graph.records.VertexRecords`)."""
    from epochal.graph.records import concat, master_records

    plain = build_partitions(graph, owner, num_workers, directions, adjacency)
    plan = plan_replicas(graph, owner, plain, k, selfish, ft_replicas)
    del plain
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
