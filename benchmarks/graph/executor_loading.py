"""Graphs loaded on the executors (issue 40): end to end against the peers, partitioners, memory.

``python -m benchmarks.graph.executor_loading [--scales 16 18] [--algorithms pr wcc sssp cdlp]``

For each R-MAT scale (``benchmarks/graph/generators.py``; SSSP gets uniform weights in [1, 10)) the
graph is written once, outside the timing, as Graphalytics files (``G.v``, ``G.e``). Then each
system runs each algorithm **end to end**: read the files, run, write every vertex's result to
disk:

* ``epochal`` -- ``run_graph(GraphSource.graphalytics(...), ..., output_dir=...)``: Spark tasks read
  and partition the files, graph workers run, workers write Parquet and Graphalytics text; the
  driver holds sizes only.
* ``epochal-driver`` -- the former path: ``load_graph`` on the driver, ``run_graph(graph)``,
  ``write_results``.
* ``spark-rdd`` (PageRank only) -- Spark's Python example (``benchmarks/graph/peers.py``) reading
  the edge file, ending with ``saveAsTextFile`` of the ranks.
* ``scipy`` -- ``pyarrow.csv`` reads the files, a CSR matrix, the algorithm (PageRank power
  iterations with the Graphalytics formula, ``connected_components``, ``dijkstra``, CDLP as
  numpy label counting), the result written as text: one process, one core.
* ``graphframes`` -- ``io.graphframes:graphframes-spark4_2.13`` (the build for Spark 4.x, Scala
  2.13) is not served by the Maven Central this machine reaches (the jar is refused for 0.10.0,
  0.12.0, 0.12.1, 0.12.2), so it is not run; the row says so.

Each run records its wall time, the driver's peak RSS above its start (``measure.MemoryWatch``),
and for epochal the load statistics (stage seconds, replication factor, partition bytes, the
build tasks' peak RSS). ``--partitioners`` also loads the graph with each partitioner (executor
hash, executor streaming Fennel, driver hash, driver Fennel) and records the replication factor
and load time. Outputs in ``--out`` (default ``benchmarks/results/executors``):
``executor_runs.csv``, ``executor_partitioners.csv``, ``executor_loading.png``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.measure import MemoryWatch
from benchmarks.common.results import RESULTS, machine, pyplot, save_figure, write_csv
from benchmarks.graph.generators import BenchGraph, rmat

ALGORITHMS = ("pr", "wcc", "sssp", "cdlp")
SYSTEMS = ("epochal", "epochal-driver", "spark-rdd", "scipy", "graphframes")
GRAPHFRAMES_REFUSED = ("not run: io.graphframes:graphframes-spark4_2.13 (0.10.0, 0.12.0-0.12.2) is not served by "
                       "the Maven Central this machine reaches")
ITERATIONS = 10
#: one colour per system in every panel
COLOURS = {"epochal": "tab:blue", "epochal-driver": "tab:orange", "spark-rdd": "tab:red", "scipy": "tab:green"}


def write_files(bench: BenchGraph, root: Path, weighted: bool) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    graph = bench.graph
    options = pacsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
    vertices, edges = root / f"{bench.name}.v", root / f"{bench.name}{'-w' if weighted else ''}.e"
    pacsv.write_csv(pa.table({"id": graph.vertices}), vertices, write_options=options)
    columns: dict[str, Any] = {"s": graph.src, "d": graph.dst}
    if weighted:
        columns["w"] = weights_of(bench)
    pacsv.write_csv(pa.table(columns), edges, write_options=options)
    return vertices, edges


def weights_of(bench: BenchGraph) -> np.ndarray:
    return np.floor(np.random.default_rng(bench.seed).uniform(1.0, 10.0, bench.graph.num_edges))


def program(algorithm: str, source: int) -> Any:
    from epochal.graph.algorithms import CDLP, SSSP, WCC, PageRank

    return {"pr": lambda: PageRank(ITERATIONS, 0.85), "wcc": WCC, "sssp": lambda: SSSP(source),
            "cdlp": lambda: CDLP(ITERATIONS)}[algorithm]()


def run_epochal(spark: Any, files: tuple[Path, Path], algorithm: str, source: int, parallelism: int, out: Path,
                partitioner: str = "hash") -> dict[str, Any]:
    import epochal
    from epochal.graph.executors.sources import GraphSource
    from epochal.graph.job import run_graph

    env = epochal.Environment(parallelism, spark=spark)
    graph = GraphSource.graphalytics(str(files[0]), str(files[1]), weighted=algorithm == "sssp")
    result = run_graph(graph, program(algorithm, source), parallelism=parallelism, environment=env,
                       partitioner=partitioner, result_dir=str(out / "parquet"), output_dir=str(out / "text"))
    load = result.load
    return {"supersteps": result.supersteps, "job_s": round(result.duration_s, 3),
            "load_stage1_s": load.seconds["stage1"], "load_stage2_s": load.seconds["stage2"],
            "replication_factor": round(load.replication_factor, 4),
            "partition_mb": round(load.partition_bytes / 2**20, 1),
            "build_peak_rss_mb": round(max(b.peak_rss_mb for b in load.builds), 1),
            "result_dir": str(out / "parquet")}


def run_epochal_driver(spark: Any, files: tuple[Path, Path], algorithm: str, source: int, parallelism: int,
                       out: Path) -> dict[str, Any]:
    import epochal
    from epochal.graph.job import run_graph
    from epochal.graph.loading import load_graph
    from epochal.graph.output import write_results

    env = epochal.Environment(parallelism, spark=spark)
    graph = load_graph(str(files[0]), str(files[1]), weighted=algorithm == "sssp")
    result = run_graph(graph, program(algorithm, source), parallelism=parallelism, environment=env)
    write_results(result, str(out / "text"))
    return {"supersteps": result.supersteps, "job_s": round(result.duration_s, 3),
            "replication_factor": round(result.replication_factor, 4)}


def run_spark_rdd(spark: Any, files: tuple[Path, Path], parallelism: int, out: Path) -> dict[str, Any]:
    from benchmarks.graph.peers import compute_contribs, example_update, initial_rank, parse_edge

    sc = spark.sparkContext
    lines = sc.textFile(str(files[1]), minPartitions=parallelism)
    links = lines.map(parse_edge).distinct(parallelism).groupByKey(parallelism).cache()
    ranks = links.map(initial_rank)
    for _ in range(ITERATIONS):
        ranks = links.join(ranks, parallelism).flatMap(compute_contribs).reduceByKey(lambda a, b: a + b, parallelism) \
            .mapValues(example_update)
    ranks.map(lambda pair: f"{pair[0]} {pair[1]!r}").saveAsTextFile(str(out / "text"))
    links.unpersist()
    return {}


def scipy_read(files: tuple[Path, Path], weighted: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    import pyarrow.csv as pacsv

    options = pacsv.ParseOptions(delimiter=" ")
    ids = pacsv.read_csv(files[0], read_options=pacsv.ReadOptions(column_names=["id"]),
                         parse_options=options).column("id").to_numpy()
    names = ["s", "d", "w"] if weighted else ["s", "d"]
    table = pacsv.read_csv(files[1], read_options=pacsv.ReadOptions(column_names=names), parse_options=options)
    return ids, table.column("s").to_numpy(), table.column("d").to_numpy(), \
        table.column("w").to_numpy() if weighted else None


def cdlp_numpy(n: int, rows: np.ndarray, cols: np.ndarray, ids: np.ndarray, iterations: int) -> np.ndarray:
    """Graphalytics CDLP (directed: in- and out-neighbours both count): each vertex takes the most
    frequent label among its neighbours, the smallest on ties; labels start as the ids."""
    labels = ids.copy()
    reader = np.concatenate([rows, cols])
    read = np.concatenate([cols, rows])
    for _ in range(iterations):
        seen = labels[read]
        order = np.lexsort((seen, reader))
        r, lab = reader[order], seen[order]
        start = np.concatenate(([True], (r[1:] != r[:-1]) | (lab[1:] != lab[:-1])))
        run_rows, run_labels = r[start], lab[start]
        counts = np.diff(np.concatenate((np.flatnonzero(start), [r.size])))
        best = np.lexsort((run_labels, -counts, run_rows))  # per row: most frequent, then smallest label
        first = np.concatenate(([True], run_rows[best][1:] != run_rows[best][:-1]))
        new = labels.copy()
        new[run_rows[best][first]] = run_labels[best][first]
        labels = new
    return labels


def run_scipy(files: tuple[Path, Path], algorithm: str, source: int, out: Path) -> dict[str, Any]:
    import scipy.sparse as sp
    from scipy.sparse import csgraph

    ids, src, dst, weights = scipy_read(files, algorithm == "sssp")
    n = ids.size
    s, d = np.searchsorted(ids, src), np.searchsorted(ids, dst)
    if algorithm == "pr":
        out_degree = np.bincount(s, minlength=n).astype(np.float64)
        matrix = sp.csr_matrix((np.ones(s.size), (d, s)), shape=(n, n))
        rank = np.full(n, 1.0 / n)
        share = np.divide(1.0, out_degree, out=np.zeros(n), where=out_degree > 0)
        for _ in range(ITERATIONS):
            dangling = rank[out_degree == 0].sum()
            rank = (1 - 0.85) / n + 0.85 * (matrix @ (rank * share) + dangling / n)
        values: np.ndarray = rank
    elif algorithm == "wcc":
        matrix = sp.csr_matrix((np.ones(s.size), (s, d)), shape=(n, n))
        _, component = csgraph.connected_components(matrix, directed=True, connection="weak")
        smallest = np.full(component.max() + 1, np.iinfo(np.int64).max)
        np.minimum.at(smallest, component, ids)
        values = smallest[component]
    elif algorithm == "sssp":
        assert weights is not None
        matrix = sp.csr_matrix((weights, (s, d)), shape=(n, n))
        values = csgraph.dijkstra(matrix, directed=True, indices=int(np.searchsorted(ids, source)))
    else:
        values = cdlp_numpy(n, s, d, ids, ITERATIONS)
    import pyarrow as pa
    import pyarrow.csv as pacsv

    pacsv.write_csv(pa.table({"id": ids, "value": values}), out / "result.txt",
                    write_options=pacsv.WriteOptions(include_header=False, delimiter=" "))
    return {}


def _timed(name: str, call: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"system": name}
    with MemoryWatch() as watch:
        started = time.perf_counter()
        try:
            row.update(call())
            row["status"] = "ok"
        except Exception as error:  # one failed run is a row, not the end of the benchmark
            row["status"] = f"failed: {type(error).__name__}: {str(error)[:200]}"
        row["wall_s"] = round(time.perf_counter() - started, 3)
    row["driver_peak_mb"] = round(watch.peaks.driver_mb, 1)
    row["driver_growth_mb"] = round(watch.peaks.driver_mb - watch.peaks.driver_base_mb, 1)
    row["python_workers_peak_mb"] = round(watch.peaks.workers_mb, 1)
    return row


def _verify(rows: list[dict[str, Any]], scratch: Path, algorithm: str) -> None:
    """epochal's values against scipy's (PageRank 1e-9 relative; the others exactly)."""
    from epochal.graph.output import read_result_dir

    mine = next((r for r in rows if r["system"] == "epochal" and r["status"] == "ok"), None)
    ref = scratch / "scipy" / "result.txt"
    if mine is None or not ref.exists():
        return
    import pyarrow.csv as pacsv

    table = pacsv.read_csv(ref, read_options=pacsv.ReadOptions(column_names=["id", "value"]),
                           parse_options=pacsv.ParseOptions(delimiter=" "))
    want = table.column("value").to_numpy()
    _, got = read_result_dir(mine["result_dir"])
    got = np.asarray(got, dtype=np.float64)
    ok = np.allclose(got, want, rtol=1e-9, atol=0) if algorithm == "pr" else np.array_equal(got, want)
    mine["verified"] = bool(ok)


def _call(spark: Any, system: str, files: tuple[Path, Path], algorithm: str, source: int, parallelism: int,
          out: Path) -> dict[str, Any]:
    if system == "epochal":
        return run_epochal(spark, files, algorithm, source, parallelism, out)
    if system == "epochal-driver":
        return run_epochal_driver(spark, files, algorithm, source, parallelism, out)
    if system == "spark-rdd":
        return run_spark_rdd(spark, files, parallelism, out)
    return run_scipy(files, algorithm, source, out)


def run_scale(spark: Any, scale: int, algorithms: Sequence[str], systems: Sequence[str], parallelism: int,
              root: Path) -> list[dict[str, Any]]:
    bench = rmat(scale, seed=scale)
    source = int(bench.graph.vertices[np.argmax(np.bincount(bench.src_index, minlength=bench.num_vertices))])
    rows = []
    for algorithm in algorithms:
        files = write_files(bench, root, algorithm == "sssp")
        results: list[dict[str, Any]] = []
        for system in systems:
            out = root / f"{system}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            if system == "graphframes":
                results.append({"system": system, "status": GRAPHFRAMES_REFUSED})
                continue
            if system == "spark-rdd" and algorithm != "pr":
                continue
            results.append(_timed(system, functools.partial(_call, spark, system, files, algorithm, source,
                                                            parallelism, out)))
        _verify(results, root, algorithm)
        for row in results:
            row.update(scale=scale, vertices=bench.num_vertices, edges=bench.num_edges, algorithm=algorithm,
                       parallelism=parallelism)
            print({k: v for k, v in row.items() if k != "result_dir"}, flush=True)
        rows += results
    return rows


def run_partitioners(spark: Any, scale: int, parallelism: int, root: Path) -> list[dict[str, Any]]:
    from epochal.graph.executors.sources import GraphSource
    from epochal.graph.executors.stages import load_on_executors
    from epochal.graph.loading import load_graph
    from epochal.graph.partition import build_partitions, replication_of
    from epochal.graph.placement import partition

    bench = rmat(scale, seed=scale)
    files = write_files(bench, root, False)
    rows = []
    for partitioner in ("hash", "fennel"):
        work = root / f"load-{partitioner}"
        started = time.perf_counter()
        stats = load_on_executors(spark, GraphSource.graphalytics(str(files[0]), str(files[1])), parallelism,
                                  str(work), partitioner=partitioner)
        rows.append({"scale": scale, "where": "executors", "partitioner": partitioner,
                     "seconds": round(time.perf_counter() - started, 3),
                     "replication_factor": round(stats.replication_factor, 4)})
        shutil.rmtree(work, ignore_errors=True)
        started = time.perf_counter()
        graph = load_graph(str(files[0]), str(files[1]))
        parts = build_partitions(graph, partition(graph, parallelism, partitioner), parallelism)
        rows.append({"scale": scale, "where": "driver", "partitioner": partitioner,
                     "seconds": round(time.perf_counter() - started, 3),
                     "replication_factor": round(replication_of(parts), 4)})
        del graph, parts
        print(rows[-2], rows[-1], flush=True)
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    algorithms = sorted({r["algorithm"] for r in rows})
    figure, axes = plt.subplots(1, len(algorithms), figsize=(4 * len(algorithms), 3.5), squeeze=False)
    for axis, algorithm in zip(axes[0], algorithms, strict=True):
        for system, colour in COLOURS.items():
            points = sorted((r["scale"], r["wall_s"]) for r in rows
                            if r["algorithm"] == algorithm and r["system"] == system and r.get("status") == "ok")
            if points:
                axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=system, color=colour)
        axis.set_yscale("log")
        axis.set_title(f"{algorithm}: end to end, p=2")
        axis.set_xlabel("R-MAT scale")
        axis.set_ylabel("seconds")
        axis.legend(fontsize=7)
    save_figure(figure, path, dpi=110)


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The rows of an ``executor_runs.csv``, ``scale`` as an int and ``wall_s`` as a float."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["scale"] = int(row["scale"])
        if row.get("wall_s"):
            row["wall_s"] = float(row["wall_s"])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[16, 18])
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--partitioners", type=int, nargs="*", default=[16], help="scales of the partitioner table")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--out", type=Path, default=RESULTS / "executors")
    parser.add_argument("--combine", type=Path, nargs="+", metavar="CSV",
                        help="run nothing: join the executor_runs.csv files of earlier runs into --out, and plot them")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.combine:
        combined = [row for path in args.combine for row in read_runs(path)]
        write_csv(args.out / "executor_runs.csv", combined)
        plot(combined, args.out / "executor_loading.png")
        return 0
    from epochal.control.spark import create_session

    print(f"machine: {machine()}", flush=True)
    spark = create_session(f"local[{args.parallelism}]", args.parallelism, "epochal-bench-executors",
                           conf={"spark.driver.memory": args.driver_memory})
    spark.range(10).count()
    root = Path(tempfile.mkdtemp(prefix="epochal-bench-executors-"))
    try:
        runs: list[dict[str, Any]] = []
        for scale in args.scales:
            runs += run_scale(spark, scale, args.algorithms, args.systems, args.parallelism, root)
            write_csv(args.out / "executor_runs.csv", runs)
        plot(runs, args.out / "executor_loading.png")
        partitioners: list[dict[str, Any]] = []
        for scale in args.partitioners:
            partitioners += run_partitioners(spark, scale, args.parallelism, root)
            write_csv(args.out / "executor_partitioners.csv", partitioners)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
