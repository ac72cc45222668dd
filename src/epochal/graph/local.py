"""Running a graph program in one process: every partition's engine, the barrier in a loop.

:func:`run_graph_locally` builds the partitions a Spark job would (same partitioner, same engines,
same coordinator) and runs the supersteps with exchanges handed over in memory. It is a testing
aid (fast unit tests of algorithms and of users' vertex programs, no Spark, no Java) and the
reference the distributed run is compared with; it has no fault tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from epochal.graph.engine import make_engine
from epochal.graph.model import Graph
from epochal.graph.partition import build_partitions, replication_of
from epochal.graph.placement import partition
from epochal.graph.program import SuperstepContext, VectorProgram, VertexProgram
from epochal.graph.supersteps import Halt, SuperstepCoordinator


@dataclass
class GraphResult:
    """Every vertex's output value, in id order, and how the run went.

    A job whose graph was loaded on the executors (a :class:`~epochal.graph.executors.sources.GraphSource`)
    leaves its results in Parquet files the workers wrote (``result_dir``, one ``part-<w>.parquet``
    per worker, columns ``id`` and ``value``): :meth:`to_dataframe` reads them with Spark, and
    ``ids``, ``values`` and :meth:`as_dict` read them into the driver on first use (small graphs
    only)."""

    _ids: np.ndarray | None
    _values: Any
    supersteps: int
    halt_reason: str
    replication_factor: float
    history: list[dict[str, Any]] = field(default_factory=list)
    #: a Spark run: wall time of the job, its restarts, per-superstep timings, restored checkpoints
    duration_s: float = 0.0
    restarts: list[dict[str, Any]] = field(default_factory=list)
    timings: list[dict[str, Any]] = field(default_factory=list)
    restored_from: list[int] = field(default_factory=list)
    #: replication: one entry per recovery (lost workers, mode, superstep resumed, times)
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    #: a graph loaded on the executors: the directory of the workers' Parquet results
    result_dir: str | None = None
    #: a graph loaded on the executors: what loading it cost and found (sizes, seconds)
    load: Any = None

    @property
    def ids(self) -> np.ndarray:
        """Every vertex id, ascending (read from ``result_dir`` on first use when there is one)."""
        if self._ids is None:
            self._read()
        assert self._ids is not None
        return self._ids

    @property
    def values(self) -> Any:
        """Each vertex's value, in the order of ``ids``."""
        if self._ids is None:
            self._read()
        return self._values

    def _read(self) -> None:
        from epochal.graph.output import read_result_dir

        assert self.result_dir is not None, "a GraphResult holds its values or names their directory"
        self._ids, self._values = read_result_dir(self.result_dir)

    def as_dict(self) -> dict[int, Any]:
        values = self.values.tolist() if isinstance(self.values, np.ndarray) else list(self.values)
        return dict(zip(self.ids.tolist(), values, strict=True))

    def to_dataframe(self, spark: Any) -> Any:
        """The result as a Spark DataFrame ``(id long, value ...)``: read by Spark from the workers'
        files when the graph was loaded on the executors (nothing passes through the driver), else
        made from the values held here."""
        if self.result_dir is not None:
            return spark.read.parquet(self.result_dir)
        from epochal.graph.output import results_to_dataframe

        return results_to_dataframe(self, spark)


def program_layout(program: VectorProgram | VertexProgram) -> tuple[str, bool]:
    """``(directions, adjacency)`` a program needs of its partitions."""
    if isinstance(program, VectorProgram):
        return program.directions, program.adjacency
    return "in", False


def run_graph_locally(graph: Graph, program: VectorProgram | VertexProgram, num_workers: int = 1,
                partitioner: str = "hash") -> GraphResult:
    """Run ``program`` on ``graph`` split over ``num_workers`` in-process partitions."""
    program.check(graph)
    owner = partition(graph, num_workers, partitioner)
    directions, adjacency = program_layout(program)
    parts = build_partitions(graph, owner, num_workers, directions, adjacency)
    engines = [make_engine(p, program, graph.num_vertices) for p in parts]
    coordinator = SuperstepCoordinator(program, num_workers)
    step: Any = coordinator.start()
    while not isinstance(step, Halt):
        outgoing = []
        for w, engine in enumerate(engines):
            ctx = SuperstepContext(step.superstep, graph.num_vertices, w, num_workers, dict(step.aggregates))
            out, report = engine.step(ctx)
            outgoing.append((out, report))
        for out, _ in outgoing:
            for peer, exchange in out.items():
                engines[peer].receive(exchange)
        for engine in engines:
            engine.commit()
        decision = None
        for w, (_, report) in enumerate(outgoing):
            decision = coordinator.on_report(w, report)
        step = decision
    ids, values = in_id_order([p.ids for p in parts], [e.output() for e in engines], program)
    return GraphResult(ids, values, step.superstep, step.reason, replication_of(parts), coordinator.history)


def in_id_order(ids: list[Any], values: list[Any], program: VectorProgram | VertexProgram) -> tuple[np.ndarray, Any]:
    """Every worker's ``(ids, values)`` merged in vertex id order (values: one array for a vector
    program, a list for a vertex program)."""
    all_ids = np.concatenate([np.asarray(i, dtype=np.int64) for i in ids])
    order = np.argsort(all_ids)
    if isinstance(program, VectorProgram):
        return all_ids[order], np.concatenate([np.asarray(v) for v in values])[order]
    flat = [v for part in values for v in part]
    return all_ids[order], [flat[i] for i in order.tolist()]


#: The former name of :func:`run_graph_locally` (``epochal.testing.run_locally`` runs dataflow jobs).
run_locally = run_graph_locally
