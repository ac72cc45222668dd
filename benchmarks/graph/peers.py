"""The systems compared on each graph: epochal and its peers, one function per system and algorithm.

Every runner takes the generated graph (:class:`~benchmarks.graph.generators.BenchGraph`, in the
driver's memory) and returns an :class:`Outcome`: the result, and how much of the run was
preparation (building the system's own input structure) rather than the algorithm. The caller
times the whole call. What each system is given and does:

* ``epochal`` -- :func:`epochal.graph.job.run_graph` with the built-in ``PageRank(iterations)``,
  ``WCC()``, ``SSSP(source)`` on the shared Spark session. Everything is inside the call:
  partitioning on the driver, writing partition files, the Spark job, reading the results.
  ``prep_s`` is the call's time outside the Spark job (``wall - GraphResult.duration_s``).
* ``spark-rdd`` -- the PageRank of Spark's Python example (``examples/src/main/python/pagerank.py``,
  written here again, not copied): ``textFile`` -> parse -> ``distinct`` -> ``groupByKey`` ->
  cached links; ranks start at 1.0; each iteration joins links with ranks, ``flatMap`` s the
  contributions ``rank / len(neighbours)``, ``reduceByKey(add)`` and ``0.15 + 0.85 * sum``;
  ``collect`` at the end. That is not the Graphalytics formula (no 1/N, no dangling mass, a
  vertex no rank reaches drops out), so its ranks are checked against the same formula in numpy
  (:func:`spark_example_reference`), not against epochal's. It reads the edges as text, as the
  example does (the file is written once per graph, outside the timing); ``prep_s`` is reading,
  parsing and caching the links (a ``count`` forces it).
* ``spark-df`` -- the same formula with the DataFrame API: ``spark.read.csv`` -> ``distinct`` ->
  out-degrees and the edges joined with them, both cached (ranks start from the degrees' keys);
  each iteration joins with ranks, divides, ``groupBy``/``sum``; ``toArrow`` at the end.
  ``spark.sql.shuffle.partitions`` is the parallelism.
* ``networkx`` -- builds a ``DiGraph`` (``Graph`` for the undirected grid) from the edge arrays
  (``prep_s``), then: PageRank as a 10-iteration loop over networkx's adjacency with the
  Graphalytics formula (``nx.pagerank`` cannot be held to exactly N iterations: with ``tol=0`` it
  raises after ``max_iter`` without returning the ranks; and in networkx 3 it runs on scipy), WCC
  ``nx.weakly_connected_components``, SSSP ``nx.single_source_dijkstra_path_length``.
* ``scipy`` -- builds a CSR matrix (``prep_s``), then: 10 power iterations with the Graphalytics
  formula (sparse matrix-vector products), ``csgraph.connected_components(connection="weak")``,
  ``csgraph.dijkstra``. One process, one core: the practical limit of the problem in Python.

Results are returned in the graph's vertex order (sorted ids); WCC labels are the smallest id of
each component, as Graphalytics (and epochal) define them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from operator import add
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.graph.generators import BenchGraph

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from epochal.graph.local import GraphResult

SYSTEMS = ("epochal", "spark-rdd", "spark-df", "networkx", "scipy")
#: systems that run in this one process (no parallelism)
IN_PROCESS = ("networkx", "scipy")
ALGORITHMS = ("pr", "wcc", "sssp")
#: the graph each algorithm runs on
GRAPH_OF = {"pr": "rmat", "wcc": "rmat", "sssp": "grid"}
#: which systems implement which algorithm
SUPPORTS = {"epochal": ALGORITHMS, "spark-rdd": ("pr",), "spark-df": ("pr",), "networkx": ALGORITHMS,
            "scipy": ALGORITHMS}
DAMPING = 0.85


@dataclass
class Outcome:
    """What one run produced: ``values`` in the graph's vertex order (or ``ids`` + ``values`` for
    the Spark peers, which keep only some vertices), the preparation time, and system details."""

    values: np.ndarray
    prep_s: float = 0.0
    ids: np.ndarray | None = None
    result: GraphResult | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    """What the runners share: the Spark session, the iteration count, a scratch directory."""

    spark: SparkSession
    iterations: int
    scratch: Path
    timeout: float | None = None
    _text: dict[str, Path] = field(default_factory=dict)

    def edge_text(self, bench: BenchGraph) -> Path:
        """The graph's edges as a text file (written once per graph)."""
        from benchmarks.graph.generators import write_edge_text

        if bench.name not in self._text:
            self._text[bench.name] = write_edge_text(bench, self.scratch / f"{bench.name}-{bench.seed}.txt")
        return self._text[bench.name]


# ---------------------------------------------------------------------------------------- epochal
def epochal_program(algorithm: str, bench: BenchGraph, iterations: int) -> Any:
    """The built-in program for ``algorithm`` on ``bench``."""
    from epochal.graph.algorithms import SSSP, WCC, PageRank

    if algorithm == "pr":
        return PageRank(iterations, DAMPING)
    if algorithm == "wcc":
        return WCC()
    assert bench.source is not None, "SSSP needs a graph with a source (a grid)"
    return SSSP(bench.source)


def run_epochal(ctx: Context, bench: BenchGraph, algorithm: str, parallelism: int, **options: Any) -> Outcome:
    """``run_graph`` on the shared session; ``options`` go to ``run_graph`` (fault tolerance, faults)."""
    import time

    import epochal
    from epochal.graph.job import run_graph

    env = epochal.Environment(parallelism, spark=ctx.spark)
    started = time.perf_counter()
    result = run_graph(bench.graph, epochal_program(algorithm, bench, ctx.iterations), parallelism=parallelism,
                       environment=env, timeout=ctx.timeout, job_name=f"bench {algorithm} {bench.name}", **options)
    wall = time.perf_counter() - started
    if not np.array_equal(result.ids, bench.graph.vertices):
        raise AssertionError("epochal returned other vertex ids than the graph's")
    return Outcome(np.asarray(result.values), max(0.0, wall - result.duration_s), result=result,
                   details={"supersteps": result.supersteps, "replication_factor": result.replication_factor})


# ------------------------------------------------------------------------------------ Spark peers
# The pieces of Spark's PageRank example (also run end to end by benchmarks.graph.executor_loading)
def parse_edge(line: str) -> tuple[int, int]:
    """An edge file's line ``src dst`` as ``(src, dst)``."""
    source, target = line.split(" ")
    return int(source), int(target)


def compute_contribs(item: tuple[int, tuple[Any, float]]) -> list[tuple[int, float]]:
    """The example's ``computeContribs``: a vertex's rank split evenly over its out-neighbours."""
    neighbours, rank = item[1]
    targets = list(neighbours)
    share = rank / len(targets)
    return [(target, share) for target in targets]


def example_update(total: float) -> float:
    """The example's new rank from the summed contributions: ``0.15 + 0.85 * total``."""
    return (1.0 - DAMPING) + DAMPING * total


def initial_rank(pair: tuple[int, Any]) -> tuple[int, float]:
    """A vertex of the links (``(id, neighbours)``) with its starting rank, 1.0."""
    return pair[0], 1.0


def run_spark_rdd(ctx: Context, bench: BenchGraph, algorithm: str, parallelism: int) -> Outcome:
    """Spark's Python PageRank example on RDDs (see the module docstring)."""
    import time

    assert algorithm == "pr"
    sc = ctx.spark.sparkContext
    started = time.perf_counter()
    lines = sc.textFile(str(ctx.edge_text(bench)), minPartitions=parallelism)
    links = lines.map(parse_edge).distinct(parallelism).groupByKey(parallelism).cache()
    links.count()
    prep = time.perf_counter() - started
    try:
        ranks = links.map(initial_rank)
        for _ in range(ctx.iterations):
            contributions = links.join(ranks, parallelism).flatMap(compute_contribs)
            ranks = contributions.reduceByKey(add, parallelism).mapValues(example_update)
        pairs = ranks.collect()
    finally:
        links.unpersist()
    ids = np.fromiter((p[0] for p in pairs), dtype=np.int64, count=len(pairs))
    values = np.fromiter((p[1] for p in pairs), dtype=np.float64, count=len(pairs))
    order = np.argsort(ids)
    return Outcome(values[order], prep, ids=ids[order])


def run_spark_df(ctx: Context, bench: BenchGraph, algorithm: str, parallelism: int) -> Outcome:
    """The example's formula with DataFrames (see the module docstring)."""
    import time

    from pyspark.sql import functions as F

    assert algorithm == "pr"
    spark = ctx.spark
    spark.conf.set("spark.sql.shuffle.partitions", str(parallelism))
    started = time.perf_counter()
    edges = spark.read.csv(str(ctx.edge_text(bench)), sep=" ", schema="src LONG, dst LONG").distinct()
    degrees = edges.groupBy("src").agg(F.count("*").alias("degree")).cache()
    links = edges.join(degrees, "src").cache()
    links.count()
    prep = time.perf_counter() - started
    try:
        ranks = degrees.select(F.col("src").alias("id"), F.lit(1.0).alias("rank"))
        for _ in range(ctx.iterations):
            contributions = links.join(ranks, links["src"] == ranks["id"]).select(
                "dst", (F.col("rank") / F.col("degree")).alias("share"))
            ranks = contributions.groupBy("dst").agg(F.sum("share").alias("total")).select(
                F.col("dst").alias("id"), ((1.0 - DAMPING) + DAMPING * F.col("total")).alias("rank"))
        table = ranks.toArrow()
    finally:
        links.unpersist()
        degrees.unpersist()
    ids = table.column("id").to_numpy()
    values = table.column("rank").to_numpy()
    order = np.argsort(ids)
    return Outcome(values[order], prep, ids=ids[order])


def spark_example_reference(bench: BenchGraph, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """What Spark's PageRank example computes, in numpy: ``(ids, ranks)`` of the vertices that
    hold a rank after ``iterations`` (those that received a contribution in the last one)."""
    n, src, dst = bench.num_vertices, bench.src_index, bench.dst_index
    degree = np.bincount(src, minlength=n)
    ranked = degree > 0  # the links' keys, each at 1.0
    rank = ranked.astype(np.float64)
    for _ in range(iterations):
        live = ranked[src]  # the join keeps sources that have links and a rank
        total = np.bincount(dst[live], weights=rank[src[live]] / degree[src[live]], minlength=n)
        ranked = np.bincount(dst[live], minlength=n) > 0
        rank = np.where(ranked, (1.0 - DAMPING) + DAMPING * total, 0.0)
    return bench.graph.vertices[ranked], rank[ranked]


# ------------------------------------------------------------------------------- in-process peers
def _graphalytics_step(incoming: Any, dangling: float, n: int) -> Any:
    """One Graphalytics PageRank update from the summed in-contributions and the dangling mass."""
    return (1.0 - DAMPING) / n + DAMPING * incoming + DAMPING / n * dangling


def run_scipy(ctx: Context, bench: BenchGraph, algorithm: str, parallelism: int = 1) -> Outcome:
    """scipy.sparse / csgraph in this process (see the module docstring)."""
    import time

    from scipy import sparse
    from scipy.sparse import csgraph

    n, src, dst = bench.num_vertices, bench.src_index, bench.dst_index
    started = time.perf_counter()
    if algorithm == "pr":
        into = sparse.csr_matrix((np.ones(src.size), (dst, src)), shape=(n, n))  # row v: v's in-edges
        degree = np.bincount(src, minlength=n).astype(np.float64)
        dangling = degree == 0
        inverse = np.divide(1.0, degree, out=np.zeros(n), where=~dangling)
        prep = time.perf_counter() - started
        rank = np.full(n, 1.0 / n)
        for _ in range(ctx.iterations):
            rank = _graphalytics_step(into @ (rank * inverse), float(rank[dangling].sum()), n)
        return Outcome(rank, prep)
    if algorithm == "wcc":
        matrix = sparse.csr_matrix((np.ones(src.size, dtype=np.int8), (src, dst)), shape=(n, n))
        prep = time.perf_counter() - started
        _, labels = csgraph.connected_components(matrix, directed=True, connection="weak")
        return Outcome(smallest_id_labels(bench.graph.vertices, labels), prep)
    assert bench.graph.weights is not None and bench.source is not None
    matrix = sparse.csr_matrix((bench.graph.weights, (src, dst)), shape=(n, n))
    prep = time.perf_counter() - started
    source = int(np.searchsorted(bench.graph.vertices, bench.source))
    distances = csgraph.dijkstra(matrix, directed=bench.graph.directed, indices=source)
    return Outcome(np.asarray(distances, dtype=np.float64), prep)


def smallest_id_labels(vertices: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each vertex's label replaced by the smallest vertex id carrying that label."""
    smallest = np.full(int(labels.max()) + 1 if labels.size else 0, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(smallest, labels, vertices)
    return smallest[labels]


def run_networkx(ctx: Context, bench: BenchGraph, algorithm: str, parallelism: int = 1) -> Outcome:
    """NetworkX in this process (see the module docstring)."""
    import time

    import networkx as nx

    g, vertices = bench.graph, bench.graph.vertices
    started = time.perf_counter()
    graph: Any = nx.DiGraph() if g.directed else nx.Graph()
    graph.add_nodes_from(vertices.tolist())
    if algorithm == "sssp":
        assert g.weights is not None
        graph.add_weighted_edges_from(zip(g.src.tolist(), g.dst.tolist(), g.weights.tolist(), strict=True))
    else:
        graph.add_edges_from(zip(g.src.tolist(), g.dst.tolist(), strict=True))
    prep = time.perf_counter() - started
    index = {v: i for i, v in enumerate(vertices.tolist())}
    out = np.empty(g.num_vertices, dtype=np.float64 if algorithm != "wcc" else np.int64)
    if algorithm == "pr":
        n = graph.number_of_nodes()
        degree = dict(graph.out_degree())
        dangling = [v for v, d in degree.items() if d == 0]
        rank = dict.fromkeys(graph, 1.0 / n)
        predecessors = graph.pred
        for _ in range(ctx.iterations):
            lost = sum(rank[v] for v in dangling)
            rank = {v: _graphalytics_step(sum(rank[u] / degree[u] for u in predecessors[v]), lost, n)
                    for v in graph}
        for v, value in rank.items():
            out[index[v]] = value
    elif algorithm == "wcc":
        for component in nx.weakly_connected_components(graph):
            label = min(component)
            for v in component:
                out[index[v]] = label
    else:
        out.fill(np.inf)
        for v, distance in nx.single_source_dijkstra_path_length(graph, bench.source, weight="weight").items():
            out[index[v]] = distance
    return Outcome(out, prep)


RUNNERS = {"epochal": run_epochal, "spark-rdd": run_spark_rdd, "spark-df": run_spark_df,
           "networkx": run_networkx, "scipy": run_scipy}


# ------------------------------------------------------------------------------------ verification
def check(algorithm: str, outcome: Outcome,
          reference: np.ndarray | tuple[np.ndarray, np.ndarray]) -> tuple[bool, float]:
    """``(correct, max relative error)`` of ``outcome`` against ``reference``: PageRank within a
    relative 1e-9 of the reference; WCC labels and SSSP distances equal to the last bit (inf = inf)."""
    if isinstance(reference, tuple):  # the Spark example's formula: ids and ranks of the ranked vertices
        ids, expected = reference
        if outcome.ids is None or not np.array_equal(outcome.ids, ids):
            return False, float("inf")
        return _relative(outcome.values, expected)
    got = np.asarray(outcome.values)
    if got.shape != reference.shape:
        return False, float("inf")
    if algorithm == "pr":
        return _relative(got, reference)
    equal = bool(np.array_equal(got, reference))
    return equal, 0.0 if equal else float("inf")


def _relative(got: np.ndarray, expected: np.ndarray) -> tuple[bool, float]:
    error = float(np.max(np.abs(got - expected) / np.abs(expected))) if expected.size else 0.0
    return error <= 1e-9, error


def reference_of(ctx: Context, bench: BenchGraph, algorithm: str, system: str) -> Any:
    """What ``system``'s output is checked against: scipy's result (Graphalytics definitions) or,
    for the Spark peers, the example's formula in numpy."""
    if system in ("spark-rdd", "spark-df"):
        return spark_example_reference(bench, ctx.iterations)
    return run_scipy(ctx, bench, algorithm).values


def scratch_dir(base: Path | None = None) -> Path:
    """A scratch directory for edge text files (under ``base`` or the system's temporary dir)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="epochal-graph-bench-", dir=os.fspath(base) if base else None))
