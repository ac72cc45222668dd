"""Loading on the executors without Spark: both stages run in this process, stage 2's barrier
tasks as threads meeting at a ``threading.Barrier`` (what Spark's ``BarrierTaskContext`` does).

The partitions stage 2 writes equal :func:`~epochal.graph.partition.build_partitions`' array for
array (directed and undirected, reading in-edges or both ways, with adjacency and weights, text
cut into many splits); with replication every vertex gets ``k`` mirrors on distinct workers that
hold a copy, and every worker's routing table names them; the streaming Fennel places every
vertex within its balance cap.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochal.graph.deployment import read_partition
from epochal.graph.executors import sources
from epochal.graph.executors.buckets import BucketPlan, bucket_split
from epochal.graph.executors.build import build_worker
from epochal.graph.executors.build_plan import BuildPlan, BuildReport
from epochal.graph.executors.gather import TaskGather
from epochal.graph.executors.sources import text_splits
from epochal.graph.loading import load_graph
from epochal.graph.partition import build_partitions
from epochal.graph.placement import partition


class ThreadGather(TaskGather):
    """``all_gather`` for threads: every value, in task order, once all tasks gave theirs."""

    def __init__(self, shared: dict[str, Any], worker: int) -> None:
        self.shared, self.worker = shared, worker

    def all_gather(self, value: Any) -> list[Any]:
        barrier, slots = self.shared["barrier"], self.shared["slots"]
        slots[self.worker] = value
        barrier.wait()
        values = list(slots)
        barrier.wait()
        return values


def write_graph(root: Path, directed: bool, seed: int, n: int = 300, m: int = 1800) -> tuple[str, str]:
    rng = np.random.default_rng(seed)
    ids = rng.choice(1 << 41, n, replace=False) - (1 << 20)
    pairs = rng.integers(0, int(n * 0.9), (m, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    if not directed:
        pairs = np.sort(pairs, axis=1)
    pairs = rng.permutation(np.unique(pairs, axis=0))
    pairs = np.concatenate([pairs, [[5, 5]]])  # a self-loop
    weights = rng.uniform(0.1, 3.0, len(pairs)).round(3)
    (root / "G.v").write_text("".join(f"{v}\n" for v in ids.tolist()))
    (root / "G.e").write_text("".join(f"{ids[a]} {ids[b]} {w}\n" for (a, b), w in
                                      zip(pairs.tolist(), weights.tolist(), strict=True)))
    return str(root / "G.v"), str(root / "G.e")


def load(tmp_path: Path, files: tuple[str, str], workers: int, *, directed: bool, directions: str = "in",
         adjacency: bool = False, partitioner: str = "hash", replication: tuple[int, bool, bool] | None = None
         ) -> list[BuildReport]:
    staging, work = str(tmp_path / "work" / "staging"), str(tmp_path / "work")
    Path(staging).mkdir(parents=True, exist_ok=True)
    splits = text_splits(files[0], "vertex file", 0, snap=False, weighted=False, parallelism=workers)
    splits += text_splits(files[1], "edge file", len(splits), snap=False, weighted=True, parallelism=workers)
    reports = [bucket_split(s, BucketPlan(staging, workers)) for s in splits]
    assert all(r.problem is None for r in reports)
    plan = BuildPlan(staging, work, workers, tuple(r.index for r in reports if r.what == "vertex"),
                     tuple(r.index for r in reports if r.what == "edge"), True, directed, "error", directions,
                     adjacency, partitioner, (), replication, (), sum(r.rows for r in reports if r.what == "vertex"),
                     sum(r.rows for r in reports if r.what == "edge"))
    shared: dict[str, Any] = {"barrier": threading.Barrier(workers), "slots": [None] * workers}
    out: list[BuildReport | None] = [None] * workers
    errors: list[BaseException] = []

    def task(w: int) -> None:
        try:
            out[w] = build_worker(plan, w, ThreadGather(shared, w), True)
        except BaseException as error:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(error)
            shared["barrier"].abort()

    threads = [threading.Thread(target=task, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [r for r in out if r is not None]


FIELDS = ("ids", "replica_ids", "nbr_ptr", "nbr_slot", "nbr_weight", "out_ptr", "out_ids", "out_weight", "out_degree",
          "in_degree", "table_out_degree", "all_ids", "owner", "out_index", "table_out_ptr", "table_out_ids")


@pytest.mark.parametrize(("directed", "directions", "adjacency", "workers"),
                         [(True, "in", False, 3), (True, "both", True, 4), (False, "in", False, 2),
                          (False, "both", True, 3), (True, "in", False, 1)])
def test_partitions_equal_the_drivers(tmp_path, monkeypatch, directed, directions, adjacency, workers):
    monkeypatch.setattr(sources, "MIN_SPLIT_BYTES", 2048)  # many splits: positions cross them
    monkeypatch.setattr(sources, "SPLIT_BYTES", 4096)
    files = write_graph(tmp_path, directed, seed=workers + 10 * directed)
    load(tmp_path, files, workers, directed=directed, directions=directions, adjacency=adjacency)
    graph = load_graph(*files, directed=directed, weighted=True)
    for expected in build_partitions(graph, partition(graph, workers, "hash"), workers, directions, adjacency):
        got = read_partition(str(tmp_path / "work"), expected.worker)
        for name in FIELDS:
            a, b = getattr(got, name), getattr(expected, name)
            assert (a is None) == (b is None), name
            if a is not None:
                assert np.array_equal(a, b), name
        assert sorted(got.send_index) == sorted(expected.send_index)
        for peer, slots in expected.send_index.items():
            assert np.array_equal(got.send_index[peer], slots)
            assert np.array_equal(got.receive_slots[peer], expected.receive_slots[peer])


@pytest.mark.parametrize("k", [1, 2])
def test_replication_gives_every_vertex_k_mirrors_holding_copies_and_every_worker_knows_them(tmp_path, k):
    files = write_graph(tmp_path, True, seed=3, m=700)  # sparse: many internal vertices need FT replicas
    reports = load(tmp_path, files, 4, directed=True, replication=(k, True, True))
    parts = [read_partition(str(tmp_path / "work"), w) for w in range(4)]
    assert sum(r.ft_replicas for r in reports) > 0
    holders: dict[int, set[int]] = {}
    for part in parts:
        for v in part.replica_ids.tolist():
            holders.setdefault(v, set()).add(part.worker)
    mirrored_on: dict[int, set[int]] = {}
    for part in parts:
        for v in part.mirror.ids.tolist():
            mirrored_on.setdefault(v, set()).add(part.worker)
    for part in parts:
        assert part.master_mirrors is not None and part.all_mirrors is not None
        for v, mirrors in zip(part.ids.tolist(), part.master_mirrors.tolist(), strict=True):
            assert len(set(mirrors)) == k and part.worker not in mirrors
            assert set(mirrors) <= holders[v]
            assert mirrored_on[v] == set(mirrors)
        routing = part.all_mirrors[np.searchsorted(part.all_ids, part.ids)]
        assert np.array_equal(routing, part.master_mirrors)
    patterns = np.concatenate([r.patterns[0] for r in reports if r.patterns is not None])
    counts = np.concatenate([r.patterns[1] for r in reports if r.patterns is not None])
    assert counts.sum() == sum(p.num_masters for p in parts) and patterns.shape[1] == k + 1


def test_streaming_fennel_places_every_vertex_within_the_cap_and_the_layout_is_consistent(tmp_path):
    files = write_graph(tmp_path, False, seed=9, n=600, m=3000)
    reports = load(tmp_path, files, 3, directed=False, partitioner="fennel")
    parts = [read_partition(str(tmp_path / "work"), w) for w in range(3)]
    assert sorted(np.concatenate([p.ids for p in parts]).tolist()) == parts[0].all_ids.tolist()
    for part in parts:
        assert np.array_equal(part.owner[np.searchsorted(part.all_ids, part.ids)], np.full(part.num_masters,
                                                                                           part.worker))
        assert part.num_masters <= 1.1 * 600 / 3 + 3
    (tmp_path / "hash").mkdir()
    hashed = load(tmp_path / "hash", files, 3, directed=False)
    assert sum(r.replicas for r in reports) < sum(r.replicas for r in hashed)


@pytest.mark.parametrize("spread", [1, 3, 1000, 2**40])
def test_id_rows_answer_as_binary_search_does_whether_dense_or_sparse(spread):
    from epochal.graph.executors.build import IdRows, _member

    rng = np.random.default_rng(spread)
    ids = np.unique(rng.integers(-50, 5000 * spread, size=5000, dtype=np.int64))
    rows = IdRows(ids)
    assert (rows.table is not None) == (spread <= 3)  # dense only where the ids are close together
    held = rng.choice(ids, size=20_000)
    assert np.array_equal(rows.rows(held), np.searchsorted(ids, held))
    asked = np.concatenate([held, rng.integers(-2**62, 2**62, size=5000, dtype=np.int64),
                            np.array([ids[0] - 1, ids[-1] + 1, np.iinfo(np.int64).max, np.iinfo(np.int64).min])])
    assert np.array_equal(rows.member(asked), _member(ids, asked))
    looked = rows.lookup(asked)
    assert np.array_equal(looked >= 0, _member(ids, asked))
    assert np.array_equal(looked[looked >= 0], np.searchsorted(ids, asked[looked >= 0]))
    empty = IdRows(np.zeros(0, np.int64))
    assert not empty.member(asked).any()
