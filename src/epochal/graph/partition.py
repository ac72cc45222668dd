"""One worker's part of a graph: its masters, their edges, its replicas, and how replicas are fed.

:func:`build_partitions` cuts a :class:`~epochal.graph.model.Graph` by an owner array into one
:class:`Partition` per worker, the layout of papers/003 Fig. 4: a worker stores the *masters* it
owns with their in-edges (and out-edges), and a *replica* of every remote vertex its masters read.
Values live in one *table* per worker: slots ``0..n-1`` are the masters (in id order), slots
``n..n+r-1`` the replicas (in id order). Edges name table slots, so computing over a partition is
array arithmetic, and the *sync plan* says which master values go to which peer and into which
replica slots there (``send_index[peer]`` on the sender lines up with ``receive_slots[sender]`` on
the peer).

``directions`` chooses what a vertex reads: ``"in"`` (its in-neighbours; PageRank, BFS, SSSP) or
``"both"`` (in- and out-neighbours; WCC, CDLP, LCC). An undirected graph is both ways anyway.
With ``adjacency`` every table vertex (replicas too) also carries its out-neighbour ids, for
algorithms that read neighbours' adjacency (LCC). The driver builds all partitions, so the plan
needs no exchange between workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from epochal.graph.model import Graph


@dataclass
class Partition:
    """Worker ``worker``'s part of the graph (see the module docstring)."""

    worker: int
    num_workers: int
    #: master ids (sorted); table slots 0..n-1
    ids: np.ndarray
    #: replica ids (sorted); table slots n..n+r-1
    replica_ids: np.ndarray
    #: the neighbours each master reads (in-edges, or both ways), as CSR over table slots
    nbr_ptr: np.ndarray
    nbr_slot: np.ndarray
    nbr_weight: np.ndarray | None
    #: out-edges of each master, CSR, targets as global ids (for messages along out-edges)
    out_ptr: np.ndarray
    out_ids: np.ndarray
    out_weight: np.ndarray | None
    #: global out-degree and in-degree of each master
    out_degree: np.ndarray
    in_degree: np.ndarray
    #: global out-degree of every table vertex, replicas included (e.g. PageRank's contributions)
    table_out_degree: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: peer -> master slots whose replicas the peer holds; sender -> replica slots they fill
    send_index: dict[int, np.ndarray] = field(default_factory=dict)
    receive_slots: dict[int, np.ndarray] = field(default_factory=dict)
    #: every vertex id and its owner (sorted ids), to route messages to any vertex
    all_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    owner: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    #: replication, partitions built on the executors: every vertex's mirror workers (in
    #: ``all_ids`` order, one column per mirror id), so that workers find Migration's moves
    #: themselves and the JobMaster need not hold them (None: the JobMaster names the moves)
    all_mirrors: np.ndarray | None = None
    #: the out-edges' targets as vertex indices (positions in ``all_ids``), for recovery records
    out_index: np.ndarray | None = None
    #: with ``adjacency``: out-neighbour ids of every table vertex (CSR over table slots)
    table_out_ptr: np.ndarray | None = None
    table_out_ids: np.ndarray | None = None
    directed: bool = True
    directions: str = "in"
    #: per-vertex properties of the masters
    properties: dict[str, np.ndarray] = field(default_factory=dict)
    #: replication (papers/003 §4): the workers of each master's mirrors by mirror id (-1: none),
    #: which masters are selfish (their FT replicas are synchronised only in the last superstep),
    #: and the static full state of the vertices mirrored here (``records.VertexRecords``)
    master_mirrors: np.ndarray | None = None
    selfish: np.ndarray | None = None
    mirror: Any = None
    #: workers the job lost for good (Migration): no exchange goes to them
    gone: tuple[int, ...] = ()
    #: derived indices, built on first use in the worker (not shipped)
    _rows: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _readers: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False, compare=False)
    _asked: int = field(default=0, init=False, repr=False, compare=False)
    _table_index: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def num_masters(self) -> int:
        return int(self.ids.size)

    @property
    def table_size(self) -> int:
        return int(self.ids.size + self.replica_ids.size)

    @property
    def peers(self) -> list[int]:
        """The other workers of the job that still run."""
        return [p for p in range(self.num_workers) if p != self.worker and p not in self.gone]

    @property
    def table_ids(self) -> np.ndarray:
        """The id of every table slot (masters, then replicas)."""
        return np.concatenate([self.ids, self.replica_ids])

    def table_index(self) -> np.ndarray:
        """The vertex index (position in ``all_ids``) of every table slot (built once)."""
        if self._table_index is None:
            dtype = np.int32 if self.all_ids.size < 2**31 else np.int64
            self._table_index = np.searchsorted(self.all_ids, self.table_ids).astype(dtype)
        return self._table_index

    def nbr_rows(self) -> np.ndarray:
        """The master (row) of every ``nbr_slot`` entry."""
        if self._rows is None:
            self._rows = np.repeat(np.arange(self.num_masters), np.diff(self.nbr_ptr))
        return self._rows

    def worth_indexing(self, after: int = 8) -> bool:
        """Whether to use :meth:`entries_reading`: its index costs a sort of every entry (about
        25 full scans), so it is built only for a job that asked ``after`` times (a long run of
        small frontiers, e.g. SSSP on a road graph), not for one that ends in a few supersteps."""
        self._asked += 1
        return self._readers is not None or self._asked > after

    def entries_reading(self, slots: np.ndarray) -> np.ndarray:
        """The ``nbr_slot`` entries that read any of table ``slots`` (a reverse CSR by source
        slot, built once): a superstep touching only what changed costs O(its edges)."""
        if self._readers is None:
            order = np.argsort(self.nbr_slot, kind="stable")
            ptr = np.zeros(self.table_size + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.nbr_slot, minlength=self.table_size), out=ptr[1:])
            self._readers = (ptr, order)
        ptr, order = self._readers
        return order[take_rows(ptr, slots)[1]]

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_rows"] = state["_readers"] = state["_table_index"] = None  # derived: rebuilt where used
        state["_asked"] = 0
        return state

    def owner_of(self, ids: np.ndarray) -> np.ndarray:
        """The worker owning each of ``ids`` (all must be vertices of the graph)."""
        return self.owner[np.searchsorted(self.all_ids, ids)]

    def slot_of(self, ids: np.ndarray) -> np.ndarray:
        """Master slots of ``ids``, all of which must be masters here."""
        return np.searchsorted(self.ids, ids)


def csr_ptr(counts: np.ndarray) -> np.ndarray:
    """CSR offsets (``counts.size + 1``, from 0) of rows with ``counts`` entries."""
    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


def take_rows(ptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(new_ptr, entries)``: the CSR rows ``rows`` of ``ptr`` (entry indices, in row order; int32
    while the entries fit, so use them to index, not for arithmetic past 2**31)."""
    lo, counts = ptr[rows], ptr[rows + 1] - ptr[rows]
    new_ptr = csr_ptr(counts)
    # int32 entry indices while they fit: half the memory traffic of the one pass over every entry
    dtype = np.int32 if ptr.size and ptr[-1] < 2**31 else np.int64
    entries = np.repeat((lo - new_ptr[:-1]).astype(dtype), counts)
    entries += np.arange(int(new_ptr[-1]), dtype=dtype)
    return new_ptr, entries


def _csr(rows: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ptr, order)``: CSR pointers of ``rows`` (values in 0..n-1) and the stable sort order."""
    order = np.argsort(rows, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
    return ptr, order


def engine_edges(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(src, dst, weights)``: the directed edge list as the engine sees it, dense indices (an
    undirected edge goes both ways, a self-loop once)."""
    s, d = graph.dense_edges()
    w = graph.weights
    if not graph.directed:
        back = s != d
        s, d = np.concatenate([s, d[back]]), np.concatenate([d, s[back]])
        w = None if w is None else np.concatenate([w, w[back]])
    return s, d, w


def read_pairs(graph: Graph, directions: str, edges: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(reader, read, weights)``: who reads whom (dense indices) when vertices read their
    in-neighbours (``"in"``) or both ways (``"both"``)."""
    if directions not in ("in", "both"):
        raise ValueError(f"directions must be 'in' or 'both', not {directions!r}")
    s, d, w = engine_edges(graph) if edges is None else edges
    if directions == "in" or not graph.directed:
        return d, s, w
    return np.concatenate([d, s]), np.concatenate([s, d]), None if w is None else np.concatenate([w, w])


def _remote_reads(owner: np.ndarray, reader: np.ndarray, read: np.ndarray, worker: int, n: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(mine, replicas)``: which read pairs have a reader owned by ``worker``, and the sorted
    dense indices of the remote vertices they read (a mask, not np.unique: sorted for free)."""
    mine = owner[reader] == worker
    r_read = read[mine]
    seen = np.zeros(n, dtype=bool)
    seen[r_read[owner[r_read] != worker]] = True
    return mine, np.flatnonzero(seen)


def computation_replicas(graph: Graph, owner: np.ndarray, num_workers: int, directions: str = "in"
                         ) -> list[np.ndarray]:
    """Per worker, the dense indices of the vertices it keeps a computation replica of (every
    remote vertex one of its masters reads): the replicas :func:`build_partitions` lays out."""
    reader, read, _ = read_pairs(graph, directions)
    return [_remote_reads(owner, reader, read, worker, graph.num_vertices)[1] for worker in range(num_workers)]


def build_partitions(graph: Graph, owner: np.ndarray, num_workers: int, directions: str = "in",
                     adjacency: bool = False, extra: list[np.ndarray] | None = None) -> list[Partition]:
    """Cut ``graph`` into ``num_workers`` partitions (``owner[i]``: the worker of vertex ``i``; a
    worker may own no vertex). ``extra[w]``: dense indices of vertices worker ``w`` keeps a
    replica of although none of its masters reads them (FT replicas, :mod:`epochal.graph.replica_plan`)."""
    n = graph.num_vertices
    s, d, w = edges = engine_edges(graph)
    reader, read, rw = read_pairs(graph, directions, edges)
    out_degree = np.bincount(s, minlength=n).astype(np.int64)
    in_degree = np.bincount(d, minlength=n).astype(np.int64)
    out_ptr_all, out_order = _csr(s, n)
    out_sorted = d[out_order]
    out_w_sorted = None if w is None else w[out_order]
    parts: list[Partition] = []
    replica_sets: list[np.ndarray] = []
    for worker in range(num_workers):
        masters = np.flatnonzero(owner == worker)  # dense indices, sorted = id order
        mine, replicas = _remote_reads(owner, reader, read, worker, n)
        r_reader, r_read = reader[mine], read[mine]
        r_w = None if rw is None else rw[mine]
        if extra is not None and extra[worker].size:
            replicas = np.union1d(replicas, extra[worker])
        replica_sets.append(replicas)
        # table slot of every vertex this worker reads
        slot_of = np.full(n, -1, dtype=np.int64)
        slot_of[masters] = np.arange(masters.size)
        slot_of[replicas] = masters.size + np.arange(replicas.size)
        local_reader = slot_of[r_reader]
        ptr, order = _csr(local_reader, masters.size)
        nbr_slot = slot_of[r_read][order]
        nbr_weight = None if r_w is None else r_w[order]
        # out-edges of the masters, as global ids
        out_ptr, take = take_rows(out_ptr_all, masters)
        out_index = out_sorted[take]
        out_ids = graph.vertices[out_index]
        out_weight = None if out_w_sorted is None else out_w_sorted[take]
        part = Partition(worker, num_workers, graph.vertices[masters], graph.vertices[replicas], ptr, nbr_slot,
                         nbr_weight, out_ptr, out_ids, out_weight, out_degree[masters], in_degree[masters],
                         all_ids=graph.vertices, owner=owner, directed=graph.directed, directions=directions,
                         properties={k: v[masters] for k, v in graph.properties.items()},
                         table_out_degree=out_degree[np.concatenate([masters, replicas])],
                         out_index=out_index.astype(np.int32 if n < 2**31 else np.int64))
        if adjacency:
            tptr, take = take_rows(out_ptr_all, np.concatenate([masters, replicas]))
            part.table_out_ptr, part.table_out_ids = tptr, graph.vertices[out_sorted[take]]
        parts.append(part)
    # the sync plan: worker r holds replicas of some of w's masters
    for r, replicas in enumerate(replica_sets):
        owners = owner[replicas]
        base = parts[r].num_masters
        for w_ in np.unique(owners):
            sel = owners == w_
            masters_w = np.flatnonzero(owner == w_)
            parts[int(w_)].send_index[r] = np.searchsorted(masters_w, replicas[sel])
            parts[r].receive_slots[int(w_)] = base + np.flatnonzero(sel)
    return parts


def replication_of(parts: list[Partition]) -> float:
    """Copies per vertex these partitions hold (masters plus replicas, over masters): the
    replication factor of a job, which for a program reading both directions exceeds the
    in-edge measure of :func:`~epochal.graph.placement.replication_factor`."""
    masters = sum(p.num_masters for p in parts)
    return (masters + sum(int(p.replica_ids.size) for p in parts)) / masters if masters else 0.0
