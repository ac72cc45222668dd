"""Graphs loaded and partitioned on the executors (issue 40), on real Spark.

Validation graphs in the LDBC Graphalytics layout (a directed and an undirected graph, weighted,
with sparse 64-bit ids, isolated vertices and vertices without out-edges) are written as ``.v`` /
``.e`` files, Parquet, CSV and Spark DataFrames, loaded by Spark tasks (``GraphSource``), and every
Graphalytics algorithm (BFS, CDLP, LCC, PageRank, SSSP, WCC) must equal its reference output: the
driver-loaded graph run in one process (``run_graph_locally``, itself checked against networkx and
the Graphalytics definitions in ``tests/unit/test_graph_algorithms.py``), integers and distances
bit for bit, PageRank within 1e-12. The executor-built partitions equal the driver's
``build_partitions`` array for array. Bad input raises the very message the driver's loaders
raise, naming file and line (or table and row). A graph larger than a driver memory limit runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from epochal.graph.algorithms import BFS, CDLP, LCC, SSSP, WCC, PageRank
from epochal.graph.deployment import read_partition
from epochal.graph.executors.sources import GraphSource
from epochal.graph.executors.stages import load_on_executors
from epochal.graph.job import run_graph
from epochal.graph.loading import load_edge_list, load_graph, load_graph_parquet
from epochal.graph.local import program_layout, run_graph_locally
from epochal.graph.model import GraphInputError
from epochal.graph.partition import build_partitions
from epochal.graph.placement import partition

ALGORITHMS = ["bfs", "cdlp", "lcc", "pr", "sssp", "wcc"]
KINDS = ["directed", "undirected"]


def validation_graph(directed: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, edges)``: 200 vertices (ids above 2^33, one negative), 700 distinct edges (one
    orientation per pair when undirected), the last 10% of the vertices isolated."""
    rng = np.random.default_rng(seed)
    ids = np.concatenate([[-(1 << 35) - 1], rng.choice(1 << 40, 199, replace=False) + (1 << 33)])
    ids = rng.permutation(ids)
    src, dst = rng.integers(0, 180, 900), rng.integers(0, 180, 900)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if not directed:
        src, dst = np.minimum(src, dst), np.maximum(src, dst)
    pairs = np.unique(np.stack([src, dst], axis=1), axis=0)[:700]
    return ids, rng.permutation(pairs)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """Per kind: the file paths, the driver-loaded graph and its source vertex."""
    out = {}
    for seed, kind in enumerate(KINDS):
        directed = kind == "directed"
        root = tmp_path_factory.mktemp(kind)
        ids, pairs = validation_graph(directed, 40 + seed)
        weights = np.round(np.random.default_rng(seed).uniform(0.1, 5.0, len(pairs)), 3)
        src, dst = ids[pairs[:, 0]], ids[pairs[:, 1]]
        (root / "G.v").write_text("".join(f"{v}\n" for v in ids.tolist()))
        (root / "G.e").write_text("".join(f"{s} {d} {w}\n" for s, d, w in zip(src.tolist(), dst.tolist(),
                                                                            weights.tolist(), strict=True)))
        pq.write_table(pa.table({"id": ids}), root / "vertices.parquet")
        pq.write_table(pa.table({"src": src[:350], "dst": dst[:350], "w": weights[:350]}), root / "e1.parquet")
        (root / "edges").mkdir()
        pq.write_table(pa.table({"src": src[:350], "dst": dst[:350], "w": weights[:350]}), root / "edges" / "a.parquet")
        pq.write_table(pa.table({"src": src[350:], "dst": dst[350:], "w": weights[350:]}), root / "edges" / "b.parquet")
        pacsv.write_csv(pa.table({"id": ids}), root / "vertices.csv")
        pacsv.write_csv(pa.table({"src": src, "dst": dst, "w": weights}), root / "edges.csv")
        graph = load_graph(str(root / "G.v"), str(root / "G.e"), directed=directed, weighted=True)
        out[kind] = {"root": root, "graph": graph, "source": int(src[0]), "ids": ids, "src": src, "dst": dst,
                     "weights": weights}
    return out


def program(name: str, source: int):
    return {"bfs": lambda: BFS(source), "cdlp": lambda: CDLP(6), "lcc": LCC, "pr": lambda: PageRank(12, 0.85),
            "sssp": lambda: SSSP(source), "wcc": WCC}[name]()


def assert_reference(result, graph, prog) -> None:
    want = run_graph_locally(graph, prog, 1)
    assert np.array_equal(result.ids, want.ids)
    got, ref = np.asarray(result.values), np.asarray(want.values)
    if isinstance(prog, PageRank | LCC):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)
    else:
        assert np.array_equal(got, ref)


def source_of(case: dict, how: str, spark, directed: bool) -> GraphSource:
    root = case["root"]
    if how == "files":
        return GraphSource.graphalytics(str(root / "G.v"), str(root / "G.e"), directed=directed, weighted=True)
    vertices = spark.createDataFrame(pa.table({"id": case["ids"]})).repartition(3)
    edges = spark.createDataFrame(pa.table({"src": case["src"], "dst": case["dst"], "w": case["weights"]}))
    edges = edges.repartition(2)
    return GraphSource.dataframes(vertices, edges, directed=directed, weight_column="w")


# each (kind, algorithm) once at a parallelism from 1 to 4, from files or DataFrames by turns: the
# quick subset (-m "not slow") of the whole matrix, the slow test below, which replaces it in a run
# of both (subset_of: tests/integration/conftest.py)
QUICK = [(kind, name, 1 + (i + j) % 4, ("files", "dataframes")[(i + j) % 2])
         for i, kind in enumerate(KINDS) for j, name in enumerate(ALGORITHMS)]


@pytest.mark.subset_of("test_the_whole_matrix_of_graphs_algorithms_sources_and_parallelisms")
@pytest.mark.parametrize(("kind", "name", "parallelism", "how"), QUICK)
def test_every_algorithm_equals_its_reference_output_loaded_on_the_executors(graphs, spark, make_env, kind, name,
                                                                             parallelism, how):
    case = graphs[kind]
    prog = program(name, case["source"])
    result = run_graph(source_of(case, how, spark, kind == "directed"), prog, parallelism=parallelism,
                       environment=make_env(parallelism))
    assert_reference(result, case["graph"], prog)
    assert result.load.num_vertices == case["graph"].num_vertices
    assert result.load.num_edges == case["graph"].num_edges


@pytest.mark.slow
@pytest.mark.parametrize("parallelism", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_the_whole_matrix_of_graphs_algorithms_sources_and_parallelisms(graphs, spark, make_env, kind, parallelism):
    """Every graph and algorithm at every parallelism from 1 to 4; the source (files or DataFrames)
    alternates over the algorithms and the parallelisms, so each algorithm is loaded both ways and
    each parallelism loads both ways (CI time: the product of all four took twice as long)."""
    case = graphs[kind]
    for number, name in enumerate(ALGORITHMS):
        how = ("files", "dataframes")[(parallelism + number) % 2]
        prog = program(name, case["source"])
        result = run_graph(source_of(case, how, spark, kind == "directed"), prog, parallelism=parallelism,
                           environment=make_env(parallelism))
        assert_reference(result, case["graph"], prog)
        assert (result.load.num_vertices, result.load.num_edges) == (case["graph"].num_vertices,
                                                                     case["graph"].num_edges), (name, how)


@pytest.mark.parametrize("kind", KINDS)
def test_executor_built_partitions_equal_the_drivers(graphs, spark, tmp_path, kind):
    """Array for array, for a program reading both directions with adjacency (LCC) and for PageRank."""
    case = graphs[kind]
    graph = case["graph"]
    source = GraphSource.graphalytics(str(case["root"] / "G.v"), str(case["root"] / "G.e"),
                                      directed=kind == "directed", weighted=True)
    for prog in (LCC(), PageRank(3)):
        directions, adjacency = program_layout(prog)
        work = str(tmp_path / f"{type(prog).__name__}")
        stats = load_on_executors(spark, source, 3, work, directions=directions, adjacency=adjacency)
        want = build_partitions(graph, partition(graph, 3, "hash"), 3, directions, adjacency)
        assert stats.replication_factor == pytest.approx((graph.num_vertices + sum(p.replica_ids.size for p in want))
                                                         / graph.num_vertices)
        for expected in want:
            got = read_partition(work, expected.worker)
            for name in ("ids", "replica_ids", "nbr_ptr", "nbr_slot", "nbr_weight", "out_ptr", "out_ids", "out_weight",
                         "out_degree", "in_degree", "table_out_degree", "all_ids", "owner", "out_index",
                         "table_out_ptr", "table_out_ids"):
                a, b = getattr(got, name), getattr(expected, name)
                assert (a is None) == (b is None), name
                if a is not None:
                    assert np.array_equal(a, b), name
            assert sorted(got.send_index) == sorted(expected.send_index)
            for peer in expected.send_index:
                assert np.array_equal(got.send_index[peer], expected.send_index[peer])
                assert np.array_equal(got.receive_slots[peer], expected.receive_slots[peer])


def test_parquet_csv_and_edge_list_sources(graphs, make_env, tmp_path):
    case = graphs["directed"]
    root = case["root"]
    graph = case["graph"]
    env = make_env(2)
    sssp = SSSP(case["source"])
    parquet = GraphSource.parquet(str(root / "vertices.parquet"), str(root / "edges"), weight_column="w")
    assert_reference(run_graph(parquet, sssp, parallelism=2, environment=env), graph, sssp)
    csv = GraphSource.csv(str(root / "vertices.csv"), str(root / "edges.csv"), weight_column="w")
    out = tmp_path / "graphalytics-out"
    result = run_graph(csv, WCC(), parallelism=2, environment=env, output_dir=str(out))
    assert_reference(result, graph, WCC())
    lines = [ln.split() for f in sorted(out.iterdir()) for ln in f.read_text().splitlines()]
    assert {int(v): int(c) for v, c in lines} == run_graph_locally(graph, WCC(), 1).as_dict()
    snap = tmp_path / "snap.txt"
    snap.write_text("# a SNAP header\n# FromNodeId\tToNodeId\n" + "".join(
        f"{s}\t{d}\n{d}\t{s}\n" for s, d in zip(case["src"].tolist(), case["dst"].tolist(), strict=True)))
    undirected = load_edge_list(str(snap), directed=False)
    listed = run_graph(GraphSource.edge_list(str(snap), directed=False), WCC(), parallelism=3,
                       environment=make_env(3))
    assert_reference(listed, undirected, WCC())
    frame = result.to_dataframe(env.spark).orderBy("id").toArrow()
    assert frame.column("value").to_pylist() == run_graph_locally(graph, WCC(), 1).values.tolist()


def _driver_message(load) -> str:
    with pytest.raises(GraphInputError) as driver:
        load()
    return str(driver.value)


def _executor_message(spark, source, tmp_path, name: str) -> str:
    with pytest.raises(GraphInputError) as executors:
        load_on_executors(spark, source, 3, str(tmp_path / name))
    return str(executors.value)


def test_bad_input_raises_the_drivers_message_naming_file_and_line(spark, tmp_path, make_env, monkeypatch):
    from epochal.graph.executors import sources

    monkeypatch.setattr(sources, "MIN_SPLIT_BYTES", 4096)  # several splits: problems lie past the first
    monkeypatch.setattr(sources, "SPLIT_BYTES", 8192)
    v, e = tmp_path / "G.v", tmp_path / "G.e"
    v.write_text("".join(f"{i}\n" for i in range(1, 2001)))
    good = "".join(f"{i} {i % 1999 + 1} 1.5\n" for i in range(1, 1800))
    cases = {
        "unknown destination": good + "5 9999 1.0\n" + good[:200],
        "bad line": good + "5 x 1.0\n",
        "no weight": good + "5 6\n",
        "repeated edge": good + "8 7 2.0\n",
        "non-finite weight": good + "8 9 inf\n",
    }
    for name, text in cases.items():
        e.write_text(text)
        directed = name != "repeated edge"  # undirected: 1 2 and 2 1 are the same edge
        want = _driver_message(lambda d=directed: load_graph(str(v), str(e), directed=d, weighted=True))
        source = GraphSource.graphalytics(str(v), str(e), directed=directed, weighted=True)
        assert _executor_message(spark, source, tmp_path, name.replace(" ", "-")) == want, name
    v.write_text("1\n2\n3\n2\n")
    e.write_text("1 2 1.0\n")
    assert _executor_message(spark, GraphSource.graphalytics(str(v), str(e), weighted=True), tmp_path, "twice") == \
        _driver_message(lambda: load_graph(str(v), str(e), weighted=True))
    pq.write_table(pa.table({"src": [1, 2, None], "dst": [2, 3, 1]}), tmp_path / "nulls.parquet")
    assert _executor_message(spark, GraphSource.parquet(None, str(tmp_path / "nulls.parquet")), tmp_path, "nulls") \
        == _driver_message(lambda: load_graph_parquet(None, str(tmp_path / "nulls.parquet")))
    e.write_text("1 2 1.0\n2 3 -0.5\n")
    v.write_text("1\n2\n3\n")
    with pytest.raises(GraphInputError, match=r"G\.e, line 2: edge 2 -> 3 has negative weight -0\.5; SSSP needs"):
        run_graph(GraphSource.graphalytics(str(v), str(e), weighted=True), SSSP(1), parallelism=2,
                  environment=make_env(2))
    with pytest.raises(GraphInputError, match="source vertex 77 is not in the graph"):
        run_graph(GraphSource.graphalytics(str(v), str(e), weighted=True), BFS(77), parallelism=2,
                  environment=make_env(2))


_LIMITED_DRIVER = textwrap.dedent("""
    import resource, sys, threading
    import pyarrow as pa
    from epochal.api.environment import Environment
    from epochal.graph.algorithms import WCC
    from epochal.graph.executors.sources import GraphSource
    from epochal.graph.job import run_graph
    from epochal.graph.loading import load_edge_list

    path, limit_mb, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    env = Environment(parallelism=2)
    env.spark.range(1).count()  # the JVM and the Python daemon start before the limit
    threading.stack_size(1 << 20)  # the JobMaster's threads: stacks count as data
    used = int(open("/proc/self/statm").read().split()[5]) * resource.getpagesize()  # data + stack
    resource.setrlimit(resource.RLIMIT_DATA, (used + limit_mb * 2**20, resource.RLIM_INFINITY))
    try:
        if mode == "driver":
            load_edge_list(path)
            print("LOADED")
        else:
            result = run_graph(GraphSource.edge_list(path), WCC(), parallelism=2, environment=env)
            frame = result.to_dataframe(env.spark)
            print("COMPONENTS", frame.select("value").distinct().count(), frame.count())
    except (MemoryError, pa.ArrowException) as error:  # pyarrow may fail to start a thread instead
        print("MEMORY-ERROR", type(error).__name__, error)
""")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_graph_larger_than_the_driver_may_hold_runs_on_the_executors(tmp_path):
    """The driver's data segment may grow by 48 MiB after Spark started (``RLIMIT_DATA``; glibc
    keeps two malloc arenas); the edge list (2.4M random edges among 1.2M vertices, 38 MB of ids)
    does not load into it (the driver's loader runs out of memory), but loads on the executors, and
    WCC finds as many components as scipy does."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    rng = np.random.default_rng(5)
    n, m = 1_200_000, 2_400_000
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    path = tmp_path / "big.txt"
    pacsv.write_csv(pa.table({"s": a * 7 + 3, "d": b * 7 + 3}), path,
                    write_options=pacsv.WriteOptions(include_header=False, delimiter=" "))
    used = np.unique(np.concatenate([a, b]))
    dense_a, dense_b = np.searchsorted(used, a), np.searchsorted(used, b)
    components, _ = connected_components(coo_matrix((np.ones(m), (dense_a, dense_b)), shape=(used.size,) * 2),
                                         directed=True, connection="weak")
    del a, b, dense_a, dense_b
    script = tmp_path / "limited.py"
    script.write_text(_LIMITED_DRIVER)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "MALLOC_ARENA_MAX": "2"}
    runs = {}
    for mode in ("driver", "executors"):
        run = subprocess.run([sys.executable, str(script), str(path), "48", mode], capture_output=True, text=True,
                             timeout=800, env=env)
        runs[mode] = run.stdout + run.stderr[-2000:]
    assert "MEMORY-ERROR" in runs["driver"], runs["driver"]
    assert f"COMPONENTS {components} {used.size}" in runs["executors"], runs["executors"]
