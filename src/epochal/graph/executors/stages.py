"""Loading on the executors, the driver's side: run the two stages on Spark, name the first problem.

:func:`load_on_executors` cuts a :class:`~epochal.graph.executors.sources.GraphSource` into splits,
runs stage 1 (:mod:`~epochal.graph.executors.buckets`, one task per split) and stage 2
(:mod:`~epochal.graph.executors.build`, one barrier task per worker, which writes the partitions
into the job's work directory), and returns :class:`LoadStatistics`. What comes back to the
driver are the tasks' reports: counts, sizes, timings and each kind's earliest problem by
position. A problem raises one :class:`~epochal.graph.model.GraphInputError` worded as the
driver's loaders word it, naming the file and line (text) or the table and row, in the order
they check: the first unreadable line (vertex file first), a vertex listed twice, an unknown
source, an unknown destination, a non-finite weight, a repeated edge. Then the program's own
checks (:func:`check_program`): a missing source vertex, missing or negative SSSP weights.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from epochal.filesystems import join, resolve
from epochal.graph.executors.buckets import BucketPlan, EdgeNote, SplitReport, bucket_split
from epochal.graph.executors.build import build_worker
from epochal.graph.executors.build_plan import BuildPlan, BuildReport
from epochal.graph.executors.gather import FileGather
from epochal.graph.executors.sources import GraphSource, table_splits, text_lines_of, text_splits
from epochal.graph.executors.splits import Split, row_of, split_of
from epochal.graph.loading_assembly import REPEAT_REMEDY
from epochal.graph.model import EdgeInputError, Graph, GraphInputError

_log = logging.getLogger("epochal.graph.loading")


@dataclass
class LoadStatistics:
    """What the driver keeps of a graph loaded on the executors: sizes, never the graph."""

    num_vertices: int
    num_edges: int
    num_workers: int
    directed: bool
    weighted: bool
    masters: list[int]
    replicas: list[int]
    ft_replicas: int
    #: bytes of the bucket files stage 1 wrote and of the partition files stage 2 wrote
    staged_bytes: int
    partition_bytes: int
    #: seconds: stage 1 (read + bucket), stage 2 (check, place, layout, answer, assemble)
    seconds: dict[str, float] = field(default_factory=dict)
    #: the build tasks' reports (sizes, per-step seconds, peak RSS)
    builds: list[BuildReport] = field(default_factory=list)
    found: set[int] = field(default_factory=set)
    #: the first negative weight (position named), for SSSP's check
    negative: str | None = None
    negative_note: EdgeNote | None = None
    both_ways: int = 0
    both_ways_first: int | None = None
    #: replication: the distinct ``(owner, mirror workers...)`` rows of all vertices, and how many
    #: vertices have each (for the JobMaster's recovery machine; at most ``W^(k+1)`` rows)
    patterns: np.ndarray | None = None
    pattern_counts: np.ndarray | None = None

    @property
    def replication_factor(self) -> float:
        """Copies per vertex: masters plus replicas over masters (as ``replication_of`` counts them)."""
        return (self.num_vertices + sum(self.replicas)) / self.num_vertices if self.num_vertices else 0.0


class _Where:
    """Names positions: ``"G.e, line 7"`` or ``"edges.parquet, row 4"``."""

    def __init__(self, splits: dict[int, Split], reports: dict[int, SplitReport], names: dict[str, str]) -> None:
        self.splits, self.reports, self.names = splits, reports, names

    def _before(self, split: Split, attribute: str) -> int:
        return sum(getattr(self.reports[s.index], attribute) for s in self.splits.values()
                   if s.location == split.location and s.what == split.what and s.index < split.index)

    def local_line(self, split: Split, line: int) -> str:
        return f"line {self._before(split, 'lines') + line + 1}"

    def position(self, what: str, position: int) -> str:
        """Where the row at ``position`` is, within its input (``"line 7"``, ``"row 4"``)."""
        split = self.splits[split_of(position)]
        row = row_of(position)
        if split.table_format or not split.meaning:
            return f"row {self._before(split, 'rows') + row}"
        return self.local_line(split, text_lines_of(split, [row])[0])

    def index(self, what: str, position: int) -> int:
        """The row's index among all data rows of its input (counted from 0)."""
        split = self.splits[split_of(position)]
        return self._before(split, "rows") + row_of(position)

    def where(self, what: str, position: int) -> str:
        return f"{self.names[what]}, {self.position(what, position)}"


def _table_column_checks(schema: pa.Schema, where: str, what: str, shape: GraphSource) -> list[str]:
    """The columns to read of a vertex or edge table; raises as the driver's table loaders do."""
    wanted = ["id", *shape.property_columns] if what == "vertex" else \
        ["src", "dst", *([shape.weight_column] if shape.weight_column else [])]
    names = list(schema.names)
    for name in wanted:
        if name not in names:
            meaning = "a column of vertex ids" if name in ("id", "src", "dst") else \
                "the weight column" if name == shape.weight_column else "the property column"
            raise GraphInputError(f"{where} has no column {name!r} (columns: {', '.join(names) or 'none'}); "
                                  f"name {meaning} {name!r}")
        kind = schema.field(name).type
        if name in ("id", "src", "dst") and not (pa.types.is_integer(kind) or pa.types.is_null(kind)):
            raise GraphInputError(f"{where}: column {name!r} has type {kind}; vertex ids must be integers")
        if name == shape.weight_column and not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise GraphInputError(f"{where}: weight column {name!r} has type {kind}; weights must be numbers")
    return wanted


def _dataframe_schema(df: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema)


def load_on_executors(spark: Any, source: GraphSource, num_workers: int, work_uri: str, *, partitioner: str = "hash",
                      directions: str = "in", adjacency: bool = False,
                      replication: tuple[int, bool, bool] | None = None, lookups: Sequence[int] = ()
                      ) -> LoadStatistics:
    """Read, check and partition ``source`` on the executors; the partitions land in
    ``work_uri`` (``partition-<w>``, what graph workers read) and the driver gets sizes only.
    Raises :class:`GraphInputError` for bad input (see the module docstring)."""
    if partitioner not in ("hash", "fennel"):
        raise ValueError(f"unknown partitioner {partitioner!r}; choose one of hash, fennel")
    sc = spark.sparkContext
    staging = join(work_uri, "staging")
    fs, path = resolve(staging)
    fs.create_dir(path, recursive=True)
    plan1 = BucketPlan(staging, num_workers, source.weight_column, source.property_columns)
    started = time.monotonic()
    splits, names, reports = _stage_one(spark, source, plan1, num_workers)
    stage_one = time.monotonic() - started
    by_index = {s.index: s for s in splits}
    report_of = {r.index: r for r in reports}
    where = _Where(by_index, report_of, names)
    for report in sorted(reports, key=lambda r: r.index):
        if report.problem is not None:
            split = by_index.get(report.index)
            name = names[report.what]
            if report.problem.local < 0:
                raise GraphInputError(f"{name}: {report.problem.message}")
            if split is not None and split.meaning:
                raise GraphInputError(f"{name}, {where.local_line(split, report.problem.local)}: "
                                      f"{report.problem.message}")
            rows_before = sum(r.rows for r in reports if r.what == report.what and r.index < report.index)
            raise GraphInputError(f"{name}, row {rows_before + report.problem.local}: {report.problem.message}")
    vertex_splits = tuple(sorted(r.index for r in reports if r.what == "vertex"))
    edge_splits = tuple(sorted(r.index for r in reports if r.what == "edge"))
    total_edges = sum(r.rows for r in reports if r.what == "edge")
    total_vertices = sum(r.rows for r in reports if r.what == "vertex") or total_edges
    plan2 = BuildPlan(staging, work_uri, num_workers, vertex_splits, edge_splits, source.vertices is not None,
                      source.directed, source.duplicates, directions, adjacency, partitioner,
                      source.property_columns, replication, tuple(int(v) for v in lookups), total_vertices,
                      total_edges)
    weighted = source.weights
    task = functools.partial(_build_task, plan=plan2, weighted=weighted)
    started = time.monotonic()
    builds = sorted(sc.parallelize(range(num_workers), num_workers).barrier().mapPartitions(task).collect(),
                    key=lambda b: b.worker)
    stage_two = time.monotonic() - started
    _raise_first(builds, reports, where, names, source)
    dropped = sum(b.dropped_edges for b in builds)
    if dropped:
        note = min((b.first_dropped for b in builds if b.first_dropped is not None), key=lambda n: n[0])
        _log.warning("%s: dropped %d repeated edge(s) and kept the first of each; the first dropped is edge %d -> %d "
                     "(input edge %d, counted from 0), which repeats input edge %d (%d -> %d)", names["edge"], dropped,
                     note[1], note[2], where.index("edge", note[0]), where.index("edge", note[3]), note[4], note[5])
    negative = min((r.negative for r in reports if r.negative is not None), key=lambda n: n.pos, default=None)
    stats = LoadStatistics(
        num_vertices=sum(b.masters for b in builds), num_edges=total_edges - dropped, num_workers=num_workers,
        directed=source.directed, weighted=weighted, masters=[b.masters for b in builds],
        replicas=[b.replicas for b in builds], ft_replicas=sum(b.ft_replicas for b in builds),
        staged_bytes=sum(r.bytes_written for r in reports), partition_bytes=sum(b.partition_bytes for b in builds),
        seconds={"stage1": round(stage_one, 4), "stage2": round(stage_two, 4)}, builds=builds,
        found={v for b in builds for v in b.found}, negative_note=negative,
        negative=None if negative is None else where.where("edge", negative.pos),
        both_ways=sum(b.both_ways for b in builds),
        both_ways_first=min((b.both_ways_first for b in builds if b.both_ways_first is not None), default=None),
    )
    if any(b.patterns is not None for b in builds):
        stats.patterns = np.concatenate([b.patterns[0] for b in builds if b.patterns is not None])
        stats.pattern_counts = np.concatenate([b.patterns[1] for b in builds if b.patterns is not None])
    fs.delete_dir(path)
    return stats


def _build_task(indices: Iterator[int], plan: BuildPlan, weighted: bool) -> Iterator[BuildReport]:
    from pyspark import BarrierTaskContext

    context = BarrierTaskContext.get()
    # one Spark gather names this stage attempt (a retried stage must not read an earlier one's files)
    attempt = min(int(t) for t in context.allGather(str(context.taskAttemptId())))
    for worker in indices:
        gather = FileGather(plan.staging, attempt, worker, plan.num_workers)
        yield build_worker(plan, worker, gather, weighted)


def _stage_one(spark: Any, source: GraphSource, plan: BucketPlan, num_workers: int
               ) -> tuple[list[Split], dict[str, str], list[SplitReport]]:
    """Stage 1: the splits, the inputs' names for messages, and the tasks' reports."""
    sc = spark.sparkContext
    splits: list[Split] = []
    reports: list[SplitReport] = []
    names = {"vertex": str(source.vertices or ""), "edge": str(source.edges)}
    if source.kind == "dataframes":  # Spark writes them as Parquet (on the executors), read as tables below
        names = {"vertex": "the vertex DataFrame", "edge": "the edge DataFrame"}
        locations: dict[str, str | None] = {"vertex": None, "edge": None}
        for what, df in (("vertex", source.vertices), ("edge", source.edges)):
            if df is not None:
                columns = _table_column_checks(_dataframe_schema(df), names[what], what, source)
                locations[what] = join(plan.staging, f"dataframe-{what}")
                df.select(*columns).write.mode("overwrite").parquet(locations[what])
        tables = [("vertex", locations["vertex"]), ("edge", locations["edge"])]
    else:
        tables = [("vertex", source.vertices), ("edge", source.edges)]
    if source.text:
        if source.vertices is not None:
            splits += text_splits(source.vertices, "vertex file", 0, snap=False, weighted=False,
                                  parallelism=num_workers)
        splits += text_splits(source.edges, "edge list" if source.kind == "edge_list" else "edge file", len(splits),
                              snap=source.kind == "edge_list", weighted=source.weighted, parallelism=num_workers)
    else:
        for what, location in tables:
            if location is None:
                continue
            table_format = "parquet" if source.kind == "dataframes" else source.kind
            more, schema = table_splits(location, f"{what} table", len(splits), table_format, [], source.delimiter)
            wanted = tuple(_table_column_checks(schema, names[what], what, source))
            splits += [Split(s.index, s.what, s.location, s.file, row_group=s.row_group, table_format=s.table_format,
                             columns=wanted, delimiter=s.delimiter) for s in more]
    if splits:
        reports = sc.parallelize(splits, len(splits)).map(functools.partial(bucket_split, plan=plan)).collect()
    return splits, names, reports


def _raise_first(builds: list[BuildReport], reports: list[SplitReport], where: _Where, names: dict[str, str],
                 source: GraphSource) -> None:
    """Raise the problem the driver's loaders would have raised first (see the module docstring)."""
    problems = [b.problems for b in builds]
    vertices_name = (f"the vertex file {source.vertices}" if source.text else f"the vertices ({names['vertex']})")
    repeated = [p.repeated_vertex for p in problems if p.repeated_vertex is not None]
    if repeated:
        second, first, vertex = min(repeated)
        raise GraphInputError(f"{names['vertex']}, {where.position('vertex', second)}: vertex {vertex} is listed "
                              f"twice (first on {where.position('vertex', first)}); list each vertex once")
    for end in ("unknown_source", "unknown_destination"):
        notes = [getattr(p, end) for p in problems if getattr(p, end) is not None]
        if notes:
            pos, src, dst, vertex = min(notes)
            raise GraphInputError(f"{where.where('edge', pos)}: edge {src} -> {dst} names vertex {vertex}, which is "
                                  f"not in {vertices_name}; add the vertex or remove the edge")
    bad = min((r.non_finite for r in reports if r.non_finite is not None), key=lambda n: n.pos, default=None)
    if bad is not None:
        error = EdgeInputError(0, bad.src, bad.dst, f"has weight {bad.weight}; weights must be finite numbers")
        raise GraphInputError(error.at(where.where("edge", bad.pos)))
    repeats = [p.repeated_edge for p in problems if p.repeated_edge is not None]
    if repeats:
        again, src, dst, first, first_src = min(repeats)
        same = "" if first_src == src else f" as {dst} -> {src}, the same edge in an undirected graph"
        raise GraphInputError(f"{names['edge']}, {where.position('edge', again)}: edge {src} -> {dst} is listed "
                              f"twice (first on {where.position('edge', first)}{same}); {REPEAT_REMEDY}")


def check_program(program: Any, stats: LoadStatistics) -> None:
    """The built-in programs' checks (:meth:`VectorProgram.check`) from the statistics of a graph
    loaded on the executors: they raise the same errors, with a negative weight named by its file
    and line. A user's own ``check`` needs the whole graph and is not called."""
    from epochal.graph.algorithms import ALS, BFS, SSSP
    from epochal.graph.algorithms._checks import NegativeWeightError, require_vertex, require_weights

    stand_in = Graph(np.array(sorted(stats.found), dtype=np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                     stats.directed, np.zeros(0) if stats.weighted else None)
    if isinstance(program, SSSP | ALS):
        require_weights(stand_in, "SSSP" if isinstance(program, SSSP) else "ALS",
                        "weight" if isinstance(program, SSSP) else "rating")
    if isinstance(program, SSSP) and stats.negative_note is not None and stats.negative is not None:
        note = stats.negative_note
        raise GraphInputError(NegativeWeightError(0, note.src, note.dst, note.weight, "SSSP").at(stats.negative))
    if isinstance(program, BFS | SSSP):
        require_vertex(stand_in, program.source)
    if isinstance(program, ALS):
        if not stats.directed:
            raise GraphInputError("ALS needs a directed rating graph (edges from users to items); this graph is "
                                  "undirected")
        if stats.both_ways:
            raise GraphInputError(f"vertex {stats.both_ways_first} both rates (has out-edges) and is rated (has "
                                  "in-edges); ALS needs a bipartite graph whose edges go from users to items")
