"""Stage 2 of loading on the executors: each worker's partition, built by one barrier task per worker.

The ``W`` tasks of one Spark barrier stage run at once and exchange files in the staging
directory between gathers (:class:`~epochal.graph.executors.gather.TaskGather`;
:class:`~epochal.graph.executors.gather.FileGather` in a job). Task
``w``:

1. **Checks** what its home buckets hold, exactly as :func:`~epochal.graph.loading_assembly.assemble`
   does on the driver: a vertex listed twice, an edge naming an unknown source or destination, a
   repeated edge (refused, or dropped keeping the first by position). Every copy of a vertex id
   and of an edge's endpoint pair has the same home, so each check is local; the earliest
   problem of each kind (by position) is gathered by all tasks, and if there is one they stop
   and the driver names it.
2. **Places** its home vertices: ``hash`` keeps them (home = owner), ``fennel`` runs the
   streaming Fennel of :mod:`~epochal.graph.executors.fennel` on them and moves each vertex and
   its edges to its owner. Every task then reads every worker's owned ids: the routing table
   (``Partition.all_ids`` and ``owner``) that every graph worker holds.
3. **Lays out** its masters (papers/003 Fig. 4): in-edges (or both directions) as CSR, out-edges,
   degrees, ordered as :func:`~epochal.graph.partition.build_partitions` orders them (by
   position, forward edges before the reversed ones), and asks each owner for the replicas its
   masters read (``req-<w>-<owner>``).
4. **Answers** the requests for its masters: where their replicas are (``loc``), with replication
   the FT replicas and mirrors of its masters (papers/003 §4.1-4.3,
   :func:`~epochal.graph.replica_plan.place_copies`, each worker for its own masters, with the
   job's replica counts as the load), and to each worker the replica records it needs and the
   full-state records of the vertices it mirrors (``ans-<owner>-<w>``).
5. **Assembles** its :class:`~epochal.graph.partition.Partition` with
   :func:`~epochal.graph.records.assemble` and writes it where graph workers read it
   (:func:`~epochal.graph.deployment.write_partition`), and returns :class:`BuildReport`: sizes.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from epochal.filesystems import join, resolve
from epochal.graph.deployment import write_partition
from epochal.graph.executors.buckets import bucket_name, get, home_of, put
from epochal.graph.executors.build_plan import BuildPlan, BuildReport
from epochal.graph.executors.gather import TaskGather
from epochal.graph.model import sorted_unique
from epochal.graph.partition import Partition, csr_ptr, take_rows
from epochal.graph.records import VertexRecords, assemble, concat
from epochal.graph.replica_plan import place_copies


def _load(plan: BuildPlan, what: str, splits: tuple[int, ...], worker: int, prefix: str | None = None
          ) -> dict[str, np.ndarray]:
    """Every bucket of ``what`` for ``worker``, concatenated in split order (so by position)."""
    pieces: list[dict[str, np.ndarray]] = []
    for split in splits:
        name = bucket_name(what, split, worker) if prefix is None else f"{prefix}-{split:05d}-{worker:05d}"
        try:
            pieces.append(get(join(plan.staging, name)))
        except FileNotFoundError:
            continue
    return _concat(pieces)


def _concat(pieces: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if not pieces:
        return {}
    return {name: np.concatenate([p[name] for p in pieces]) for name in pieces[0]}


def _take(columns: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    return {name: column[rows] for name, column in columns.items()}


def _empty_edges(weighted: bool) -> dict[str, np.ndarray]:
    out = {"pos": np.zeros(0, np.int64), "src": np.zeros(0, np.int64), "dst": np.zeros(0, np.int64)}
    if weighted:
        out["weight"] = np.zeros(0, np.float64)
    return out


def _member(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    if not sorted_ids.size:
        return np.zeros(ids.shape, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_ids, ids), sorted_ids.size - 1)
    return sorted_ids[at] == ids


class IdRows:
    """The row of each id in ``sorted_ids`` (sorted, unique), as ``np.searchsorted`` gives it for
    the ids it holds: :meth:`lookup` (-1 for an id it does not hold), :meth:`rows` (ids it holds).

    Where the ids span at most :data:`DENSE` times their count (ids renumbered from 0) a dense
    table answers, one gather per query; else Arrow's hash kernel (``index_in``): one probe per
    id, where a binary search takes a cache miss per step (the profile of a build task, sparse
    ids as in real datasets: ~70 % of its time in ``searchsorted``; ``index_in`` is ~3x faster)."""

    DENSE = 4

    def __init__(self, sorted_ids: np.ndarray) -> None:
        self.ids = sorted_ids
        self.table: np.ndarray | None = None
        self.low = 0
        self._value_set: Any = None
        if sorted_ids.size:
            low, high = int(sorted_ids[0]), int(sorted_ids[-1])
            if high - low < self.DENSE * sorted_ids.size + 1024:
                table = np.full(high - low + 1, -1, dtype=np.int64)
                table[sorted_ids - low] = np.arange(sorted_ids.size, dtype=np.int64)
                self.table, self.low = table, low

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """The row of each of ``ids``, -1 for one not held (int64)."""
        if not self.ids.size or not ids.size:
            return np.full(ids.shape, -1, dtype=np.int64)
        table = self.table
        if table is not None:
            shifted = ids - self.low
            inside = (shifted >= 0) & (shifted < table.size)
            found = np.full(ids.shape, -1, dtype=np.int64)
            found[inside] = table[shifted[inside]]
            return found
        import pyarrow as pa
        import pyarrow.compute as pc

        if self._value_set is None:
            self._value_set = pa.array(self.ids)
        rows = pc.index_in(pa.array(ids), value_set=self._value_set)
        return np.asarray(pc.fill_null(rows, -1).to_numpy(zero_copy_only=False), dtype=np.int64)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids``; assumes every one of them is held (else the rows are meaningless)."""
        if self.table is None:
            return self.lookup(ids)
        return self.table[ids - self.low]

    def member(self, ids: np.ndarray) -> np.ndarray:
        """Whether each of ``ids`` is held."""
        return self.lookup(ids) >= 0


class WorkerBuild:
    """One build task (see the module docstring); ``run`` does the five steps."""

    def __init__(self, plan: BuildPlan, worker: int, gather: TaskGather, weighted: bool) -> None:
        self.plan, self.worker, self.gather, self.weighted = plan, worker, gather, weighted
        self.report = BuildReport(worker)
        self.clock = time.monotonic()

    def _lap(self, name: str) -> None:
        now = time.monotonic()
        self.report.seconds[name] = round(now - self.clock, 4)
        self.clock = now

    def run(self) -> BuildReport:
        plan, w = self.plan, self.worker
        vertices = _load(plan, "vertex", plan.vertex_splits, w) if plan.has_vertices else {}
        edges = _load(plan, "edge", plan.edge_splits, w) or _empty_edges(self.weighted)
        self._lap("read")
        ids, props, edges = self._check(vertices, edges)
        if plan.partitioner == "hash":  # the owned ids (the routing table's part) go out with the problems
            put(join(plan.staging, f"own-{w:05d}"), {"ids": ids})
        self._lap("check")
        if any(r.problems.any() for r in self.gather.all_gather(self.report)):
            return self.report  # the driver names the earliest problem; nothing is built
        ids, props, edges, all_ids, owner = self._place(ids, props, edges)
        self._lap("place")
        layout = self._layout(ids, props, edges, all_ids, owner)
        self._lap("layout")
        self._answer(layout, all_ids, owner)
        self._lap("answer")
        self._assemble(layout, all_ids, owner)
        self._lap("assemble")
        self.report.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return self.report

    # -- 1. checks -------------------------------------------------------------------------------
    def _check(self, vertices: dict[str, np.ndarray], edges: dict[str, np.ndarray]
               ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
        plan, w, problems = self.plan, self.worker, self.report.problems
        src, dst, pos = edges["src"], edges["dst"], edges["pos"]
        home_s, home_d = home_of(src, plan.num_workers), home_of(dst, plan.num_workers)
        props: dict[str, np.ndarray] = {}
        if plan.has_vertices:
            order = np.lexsort((vertices["pos"], vertices["id"])) if vertices else np.zeros(0, np.int64)
            vid = vertices["id"][order] if vertices else np.zeros(0, np.int64)
            vpos = vertices["pos"][order] if vertices else np.zeros(0, np.int64)
            again = np.flatnonzero(vid[1:] == vid[:-1]) + 1
            if again.size:
                second = again[np.argmin(vpos[again])]
                first = int(np.flatnonzero(vid == vid[second])[0])
                problems.repeated_vertex = (int(vpos[second]), int(vpos[first]), int(vid[second]))
            ids = vid
            props = {name[len("property:"):]: column[order] for name, column in vertices.items()
                     if name.startswith("property:")}
            known = IdRows(ids)
            for name, ends, mine in (("source", src, home_s == w), ("destination", dst, home_d == w)):
                unknown = mine & ~known.member(ends)
                if unknown.any():
                    i = int(np.flatnonzero(unknown)[np.argmin(pos[unknown])])
                    note = (int(pos[i]), int(src[i]), int(dst[i]), int(ends[i]))
                    if name == "source":
                        problems.unknown_source = note
                    else:
                        problems.unknown_destination = note
        else:
            ids = sorted_unique(np.concatenate([src[home_s == w], dst[home_d == w]]))
        edges = self._without_repeats(edges, home_s, home_d)
        return ids, props, edges

    def _without_repeats(self, edges: dict[str, np.ndarray], home_s: np.ndarray, home_d: np.ndarray
                         ) -> dict[str, np.ndarray]:
        plan, w = self.plan, self.worker
        src, dst, pos = edges["src"], edges["dst"], edges["pos"]
        first_end, second_end = (src, dst) if plan.directed else (np.minimum(src, dst), np.maximum(src, dst))
        if src.size < 2:
            return edges
        order = np.lexsort((pos, second_end, first_end))
        a, b = first_end[order], second_end[order]
        same = (a[1:] == a[:-1]) & (b[1:] == b[:-1])
        if not same.any():
            return edges
        is_start = np.concatenate(([True], ~same))
        run_start = np.maximum.accumulate(np.where(is_start, np.arange(order.size), 0))
        repeats = np.flatnonzero(~is_start)  # within a run of one pair, every edge after the earliest
        repeat_rows, group_first = order[repeats], order[run_start[repeats]]
        i = int(np.argmin(pos[repeat_rows]))
        again, first = int(repeat_rows[i]), int(group_first[i])
        if plan.duplicates == "error":
            self.report.problems.repeated_edge = (int(pos[again]), int(src[again]), int(dst[again]),
                                                  int(pos[first]), int(src[first]))
            return edges
        counted = (home_d if plan.directed else home_of(second_end, plan.num_workers))[repeat_rows] == w
        self.report.dropped_edges = int(counted.sum())
        self.report.first_dropped = (int(pos[again]), int(src[again]), int(dst[again]), int(pos[first]),
                                     int(src[first]), int(dst[first]))
        keep = np.ones(src.size, dtype=bool)
        keep[repeat_rows] = False
        return _take(edges, np.flatnonzero(keep))

    # -- 2. placement ----------------------------------------------------------------------------
    def _place(self, ids: np.ndarray, props: dict[str, np.ndarray], edges: dict[str, np.ndarray]
               ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray, np.ndarray]:
        plan, w, count = self.plan, self.worker, self.plan.num_workers
        if plan.partitioner == "hash":  # own-<w> files were written before the first gather
            all_ids, owner = self._routing(lambda q, table: np.full(table["ids"].size, q, dtype=np.int32))
            return ids, props, edges, all_ids, owner
        from epochal.graph.executors.fennel import stream_fennel

        home_owner = stream_fennel(ids, edges, w, count, plan.total_vertices_hint, plan.total_edges_hint)
        put(join(plan.staging, f"own-{w:05d}"), {"ids": ids, "owner": home_owner})
        self.gather.all_gather(None)
        all_ids, owner = self._routing(lambda q, table: table["owner"])
        src, dst = edges["src"], edges["dst"]
        side_s, side_d = home_of(src, count) == w, home_of(dst, count) == w
        everywhere = IdRows(all_ids)
        own_s, own_d = owner[everywhere.rows(src)], owner[everywhere.rows(dst)]
        for q in range(count):
            vertex_rows = np.flatnonzero(home_owner == q)
            edge_rows = np.flatnonzero((side_s & (own_s == q)) | (side_d & (own_d == q)))
            put(join(plan.staging, f"mv-{w:05d}-{q:05d}"),
                {"id": ids[vertex_rows], **{f"property:{k}": v[vertex_rows] for k, v in props.items()}})
            put(join(plan.staging, f"me-{w:05d}-{q:05d}"), _take(edges, edge_rows))
        self.gather.all_gather(None)
        moved = _concat([get(join(plan.staging, f"mv-{q:05d}-{w:05d}")) for q in range(count)])
        order = np.argsort(moved["id"], kind="stable")
        mine = moved["id"][order]
        mine_props = {k[len("property:"):]: v[order] for k, v in moved.items() if k.startswith("property:")}
        arrived = _concat([get(join(plan.staging, f"me-{q:05d}-{w:05d}")) for q in range(count)])
        _, first = np.unique(arrived["pos"], return_index=True)  # an edge may come from both homes
        return mine, mine_props, _take(arrived, first), all_ids, owner

    def _routing(self, owners: Callable[[int, dict[str, np.ndarray]], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Every vertex id (sorted) and its owner, from every worker's ``own-<w>`` file."""
        tables = [get(join(self.plan.staging, f"own-{q:05d}")) for q in range(self.plan.num_workers)]
        ids = np.concatenate([t["ids"] for t in tables])
        owner = np.concatenate([owners(q, t) for q, t in enumerate(tables)]).astype(np.int32)
        order = np.argsort(ids, kind="stable")
        return ids[order], owner[order]

    # -- 3. layout ---------------------------------------------------------------------------------
    def _layout(self, ids: np.ndarray, props: dict[str, np.ndarray], edges: dict[str, np.ndarray],
                all_ids: np.ndarray, owner: np.ndarray) -> dict[str, Any]:
        plan, w = self.plan, self.worker
        src, dst, pos = edges["src"], edges["dst"], edges["pos"]
        weight = edges.get("weight")
        n = ids.size
        # the engine's directed edges: an undirected edge both ways (a self-loop once), forward first
        group = np.zeros(src.size, dtype=np.int8)
        if not plan.directed:
            back = src != dst
            src, dst = np.concatenate([src, dst[back]]), np.concatenate([dst, src[back]])
            pos = np.concatenate([pos, pos[back]])
            group = np.concatenate([group, np.ones(int(back.sum()), dtype=np.int8)])
            weight = None if weight is None else np.concatenate([weight, weight[back]])
        here, everywhere = IdRows(ids), IdRows(all_ids)
        src_row, dst_row = here.lookup(src), here.lookup(dst)  # each endpoint's master row, -1: not here
        s_here, d_here = src_row >= 0, dst_row >= 0
        # out-edges of the masters, by (master, forward/back, position)
        out_rows = np.flatnonzero(s_here)
        out_order = out_rows[np.lexsort((pos[out_rows], group[out_rows], src_row[out_rows]))]
        out_ptr = csr_ptr(np.bincount(src_row[out_order], minlength=n))
        index_dtype = np.int32 if all_ids.size < 2**31 else np.int64
        out_index = everywhere.rows(dst[out_order]).astype(index_dtype)
        in_degree = np.bincount(dst_row[d_here], minlength=n).astype(np.int64)
        # what each master reads (and whether it is a master here too)
        in_rows = np.flatnonzero(d_here)
        reader_row, read, read_group, read_pos = dst_row[in_rows], src[in_rows], group[in_rows], pos[in_rows]
        read_here = s_here[in_rows]
        read_weight = None if weight is None else weight[in_rows]
        if plan.directed and plan.directions == "both":
            reader_row = np.concatenate([reader_row, src_row[out_rows]])
            read = np.concatenate([read, dst[out_rows]])
            read_here = np.concatenate([read_here, d_here[out_rows]])
            read_group = np.concatenate([read_group, np.ones(out_rows.size, dtype=np.int8)])
            read_pos = np.concatenate([read_pos, pos[out_rows]])
            read_weight = None if read_weight is None or weight is None else \
                np.concatenate([read_weight, weight[out_rows]])
        order = np.lexsort((read_pos, read_group, reader_row))
        nbr_ptr = csr_ptr(np.bincount(reader_row, minlength=n))
        nbr_ids = read[order]
        nbr_weight = None if read_weight is None else read_weight[order]
        # the replicas to ask for, by owner
        remote = sorted_unique(nbr_ids[~read_here[order]])
        remote_owner = owner[everywhere.rows(remote)]
        for q in range(plan.num_workers):
            if q != w:
                put(join(plan.staging, f"req-{w:05d}-{q:05d}"), remote[remote_owner == q])
        self.report.masters, self.report.edges = int(n), int(out_index.size)
        self.report.read_entries = int(nbr_ids.size)
        self.report.found = tuple(v for v in plan.lookups if bool(_member(ids, np.array([v], np.int64))[0]))
        out_degree = np.diff(out_ptr).astype(np.int64)
        both = (out_degree > 0) & (in_degree > 0)
        self.report.both_ways = int(both.sum())
        self.report.both_ways_first = int(ids[both][0]) if both.any() else None
        return {"ids": ids, "props": props, "out_ptr": out_ptr, "out_index": out_index,
                "out_weight": None if weight is None else weight[out_order], "out_degree": out_degree,
                "in_degree": in_degree, "nbr_ptr": nbr_ptr,
                "nbr_index": everywhere.rows(nbr_ids).astype(index_dtype), "nbr_weight": nbr_weight,
                "replicas": int(remote.size)}

    # -- 4. answers --------------------------------------------------------------------------------
    def _answer(self, layout: dict[str, Any], all_ids: np.ndarray, owner: np.ndarray) -> None:
        plan, w, count = self.plan, self.worker, self.plan.num_workers
        load = np.array(self.gather.all_gather(layout["replicas"]), dtype=np.int64)
        ids = layout["ids"]
        n = ids.size
        holds = np.zeros((n, count), dtype=bool)
        for q in range(count):
            if q != w:
                asked = get(join(plan.staging, f"req-{q:05d}-{w:05d}"))
                holds[np.searchsorted(ids, asked), q] = True
        k = 0
        mirrors = None
        selfish = None
        ft = np.zeros_like(holds)
        if plan.replication is not None:
            k, selfish_on, ft_replicas = plan.replication
            holds, ft, mirrors = place_copies(holds, np.full(n, w, dtype=np.int64), k, ft_replicas, load,
                                              np.random.default_rng(w))
            self.report.ft_replicas = int(ft.sum())
            # a vertex without out-edges is read by nobody only when programs read in-neighbours
            selfish = (layout["out_degree"] == 0) if selfish_on and plan.directions == "in" \
                else np.zeros(n, dtype=bool)
        _, copy_workers = np.nonzero(holds)  # by vertex, then worker
        loc_ptr = csr_ptr(holds.sum(axis=1))
        adj_ptr = adj_index = None
        if plan.adjacency:
            adj_ptr, adj_index = layout["out_ptr"], layout["out_index"]
        records = VertexRecords(
            ids, None, None, layout["out_degree"], adj_ptr, adj_index, layout["nbr_ptr"], layout["nbr_index"],
            layout["nbr_weight"], layout["out_ptr"], layout["out_index"], layout["out_weight"],
            layout["in_degree"], loc_ptr, copy_workers.astype(np.int64),
            np.full((n, k), -1, dtype=np.int64) if mirrors is None else mirrors,
            np.zeros(n, dtype=bool) if selfish is None else selfish, dict(layout["props"]))
        layout["records"] = records
        for q in range(count):
            if q == w:
                continue
            rows = np.flatnonzero(holds[:, q])
            replica = VertexRecords(ids[rows], None, None, layout["out_degree"][rows])
            if plan.adjacency:
                replica.adj_ptr, entries = take_rows(layout["out_ptr"], rows)
                replica.adj_index = layout["out_index"][entries]
            mirrored = None if mirrors is None else records.take(np.flatnonzero((mirrors == q).any(axis=1)))
            put(join(plan.staging, f"ans-{w:05d}-{q:05d}"), {"replicas": replica, "mirror": mirrored})
        if mirrors is not None:  # every worker's routing table gets every vertex's mirrors
            put(join(plan.staging, f"mirrors-{w:05d}"), mirrors.astype(np.int16))
            patterns, counts = np.unique(np.column_stack([np.full(n, w, dtype=np.int64), mirrors]), axis=0,
                                         return_counts=True)
            self.report.patterns = (patterns, counts)

    # -- 5. assembly -------------------------------------------------------------------------------
    def _assemble(self, layout: dict[str, Any], all_ids: np.ndarray, owner: np.ndarray) -> None:
        plan, w = self.plan, self.worker
        self.gather.all_gather(None)
        replicas, mirrored = [], []
        for q in range(plan.num_workers):
            if q != w:
                answer = get(join(plan.staging, f"ans-{q:05d}-{w:05d}"))
                replicas.append(answer["replicas"])
                if answer["mirror"] is not None:
                    mirrored.append(answer["mirror"])
        template = Partition(w, plan.num_workers, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64),
                             np.zeros(0, np.int64), None, np.zeros(1, np.int64), np.zeros(0, np.int64), None,
                             np.zeros(0, np.int64), np.zeros(0, np.int64), all_ids=all_ids, owner=owner,
                             directed=plan.directed, directions=plan.directions)
        masters: VertexRecords = layout["records"]
        if plan.replication is None:
            masters.mirrors = masters.selfish = None
        else:  # the mirrors of every vertex, in routing-table order (masters of worker q are in id order)
            stacked = np.concatenate([get(join(plan.staging, f"mirrors-{q:05d}")) for q in range(plan.num_workers)])
            template.all_mirrors = np.empty_like(stacked)
            template.all_mirrors[np.lexsort((all_ids, owner))] = stacked  # rows by (owner, id) -> by id
        part, _, _ = assemble(w, template, masters, concat(replicas), concat(mirrored) if plan.replication else None)
        if not plan.adjacency:
            part.table_out_ptr = part.table_out_ids = None
        self.report.replicas = int(part.replica_ids.size)
        from epochal.graph.deployment import partition_uri

        write_partition(plan.work_uri, part)
        fs_path = partition_uri(plan.work_uri, w)

        fs, path = resolve(fs_path)
        self.report.partition_bytes = int(fs.get_file_info(path).size or 0)


def build_worker(plan: BuildPlan, worker: int, gather: TaskGather, weighted: bool) -> BuildReport:
    """Stage 2 for worker ``worker`` (the body of one barrier task)."""
    return WorkerBuild(plan, worker, gather, weighted).run()
