"""The Graphalytics-style command line on Spark, as a user runs it: a separate process, real
files, a worker SIGKILLed mid-run with checkpoint fault tolerance; the output equals the local
run's and the summary line says a restart happened."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from epochal.graph.algorithms import BFS, SSSP, WCC
from epochal.graph.local import run_graph_locally
from epochal.graph.model import Graph


def test_bfs_from_the_command_line_survives_a_killed_worker(tmp_path):
    rng = np.random.default_rng(8)
    ids = np.arange(300, dtype=np.int64) * 104729 + (1 << 32)
    edges = np.unique(rng.integers(0, 300, (1200, 2)), axis=0)
    edges = edges[edges[:, 0] != edges[:, 1]]
    (tmp_path / "g.v").write_text("".join(f"{v}\n" for v in ids.tolist()))
    (tmp_path / "g.e").write_text("".join(f"{ids[a]} {ids[b]}\n" for a, b in edges.tolist()))
    out = tmp_path / "out"
    source = int(ids[5])
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    run = subprocess.run(
        [sys.executable, "-m", "epochal", "graph", "run", "bfs", "--vertices", str(tmp_path / "g.v"),
         "--edges", str(tmp_path / "g.e"), "--directed", "--source-vertex", str(source), "--output", str(out),
         "--parallelism", "2", "--fault-tolerance", "checkpoint", "--checkpoint-interval", "1",
         "--kill-worker", "1", "--kill-at-superstep", "2"],
        capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "restart" in run.stdout, run.stdout
    lines = [ln.split() for f in sorted(out.iterdir()) for ln in f.read_text().splitlines()]
    got = {int(v): int(d) for v, d in lines}
    graph = Graph.from_edges(ids[edges[:, 0]], ids[edges[:, 1]], vertices=ids)
    assert got == run_graph_locally(graph, BFS(source), 1).as_dict()


def test_wcc_from_the_command_line_recovers_a_killed_worker_by_migration(tmp_path):
    rng = np.random.default_rng(9)
    ids = np.arange(400, dtype=np.int64) * 7919 + 5
    edges = np.unique(rng.integers(0, 400, (900, 2)), axis=0)
    edges = edges[edges[:, 0] != edges[:, 1]]
    (tmp_path / "g.v").write_text("".join(f"{v}\n" for v in ids.tolist()))
    (tmp_path / "g.e").write_text("".join(f"{ids[a]} {ids[b]}\n" for a, b in edges.tolist()))
    out = tmp_path / "out"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    run = subprocess.run(
        [sys.executable, "-m", "epochal", "graph", "run", "wcc", "--vertices", str(tmp_path / "g.v"),
         "--edges", str(tmp_path / "g.e"), "--directed", "--output", str(out), "--parallelism", "3",
         "--fault-tolerance", "replication", "--recovery", "migration", "--kill-worker", "1",
         "--kill-at-superstep", "2"],
        capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "0 restarts, 1 recoveries" in run.stdout, run.stdout
    lines = [ln.split() for f in sorted(out.iterdir()) for ln in f.read_text().splitlines()]
    got = {int(v): int(c) for v, c in lines}
    graph = Graph.from_edges(ids[edges[:, 0]], ids[edges[:, 1]], vertices=ids)
    assert got == run_graph_locally(graph, WCC(), 1).as_dict()


def test_sssp_on_the_executors_from_the_command_line_recovers_a_killed_worker_by_rebirth(tmp_path):
    rng = np.random.default_rng(10)
    ids = np.arange(400, dtype=np.int64) * 7919 + 5
    edges = np.unique(rng.integers(0, 400, (1500, 2)), axis=0)
    edges = edges[edges[:, 0] != edges[:, 1]]
    weights = rng.uniform(0.5, 3.0, len(edges)).round(3)
    (tmp_path / "g.v").write_text("".join(f"{v}\n" for v in ids.tolist()))
    (tmp_path / "g.e").write_text("".join(f"{ids[a]} {ids[b]} {w}\n" for (a, b), w in
                                          zip(edges.tolist(), weights.tolist(), strict=True)))
    out = tmp_path / "out"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    run = subprocess.run(
        [sys.executable, "-m", "epochal", "graph", "run", "sssp", "--vertices", str(tmp_path / "g.v"),
         "--edges", str(tmp_path / "g.e"), "--directed", "--weighted", "--source-vertex", str(int(ids[3])),
         "--output", str(out), "--parallelism", "3", "--on-executors", "--fault-tolerance", "replication",
         "--kill-worker", "2", "--kill-at-superstep", "2"],
        capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "loaded on the executors" in run.stdout and "0 restarts, 1 recoveries" in run.stdout, run.stdout
    lines = [ln.split() for f in sorted(out.iterdir()) for ln in f.read_text().splitlines()]
    got = {int(v): float(d) for v, d in lines}
    graph = Graph.from_edges(ids[edges[:, 0]], ids[edges[:, 1]], vertices=ids, weights=weights)
    assert got == run_graph_locally(graph, SSSP(int(ids[3])), 1).as_dict()
