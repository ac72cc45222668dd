"""One Imitator benchmark job and what it measured: the runner the ``replication`` subcommand shares.

Owns, for papers/003 §6 on epochal (:mod:`benchmarks.graph.replication`):

* the workloads: PageRank, CDLP and WCC on an R-MAT graph, SSSP on the road-like grid, ALS on a
  synthetic bipartite rating graph (:func:`ratings`, SYN-GL-like), built once per scale;
* :class:`Mode`, a fault-tolerance configuration (none, checkpoint every *i* supersteps, or
  replication with Rebirth/Migration, *k* replicas, selfish on/off, hash/Fennel) plus the workers
  killed and when;
* :func:`run_job`, one ``run_graph`` call with the JobMaster's events recorded
  (:func:`~benchmarks.common.measure.jobmaster_events`) and the workers' peak RSS watched
  (:class:`~benchmarks.common.measure.MemoryWatch`), returned as one CSV row: wall, job and
  superstep-phase times, messages (``history`` "sent"), the answer checked against the
  failure-free run, and for a failure the recovery split into phases (:func:`replica_phases`,
  :func:`checkpoint_phases`);
* :func:`layout_stats`, the partitions the driver builds for a mode (masters, replicas, FT
  replicas, mirrors, selfish and the bytes of every numpy array, mirror store included) without
  running a job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import numpy as np

from benchmarks.common.measure import Event, MemoryWatch, event_after, jobmaster_events
from benchmarks.common.results import failure
from benchmarks.graph import checkpoint
from benchmarks.graph.generators import BenchGraph, relabelled, rmat, road_grid

ALGORITHMS = ("pr", "sssp", "cdlp", "wcc", "als")
NAMES = {"pr": "PageRank", "sssp": "SSSP", "cdlp": "CDLP", "wcc": "WCC", "als": "ALS"}
#: the graph each algorithm runs on
GRAPH_OF = {"pr": "rmat", "cdlp": "rmat", "wcc": "rmat", "sssp": "grid", "als": "ratings"}


def ratings(scale: int, seed: int = 1, per_vertex: int = 8) -> BenchGraph:
    """A bipartite rating graph of 2^scale vertices, 3/4 users and 1/4 items (SYN-GL-like): each of
    ``per_vertex * 2^scale`` samples is a uniform user rating an item drawn with a power-law
    popularity (index ``floor(items * u^3)``), duplicates dropped, integer ratings 1..5."""
    rng = np.random.default_rng([seed, scale, 2])
    n = 1 << scale
    users = n - n // 4
    samples = per_vertex * n
    user = rng.integers(0, users, size=samples, dtype=np.int64)
    item = users + np.minimum((n // 4 * rng.random(samples) ** 3).astype(np.int64), n // 4 - 1)
    pairs = np.unique(user * n + item)
    src, dst = pairs // n, pairs % n
    order = rng.permutation(src.size)
    weights = rng.integers(1, 6, size=src.size).astype(np.float64)
    return relabelled(f"ratings-{scale}", "ratings", scale, seed, n, src[order], dst[order], rng,
                       directed=True, weights=weights[order])


@dataclass
class Workloads:
    """The graphs of one scale, built on first use."""

    scale: int
    seed: int
    als_scale: int
    iterations: int
    _graphs: dict[str, BenchGraph] = field(default_factory=dict)

    def graph(self, algorithm: str) -> BenchGraph:
        kind = GRAPH_OF[algorithm]
        if kind not in self._graphs:
            build: Callable[[int, int], BenchGraph] = {"rmat": rmat, "grid": road_grid, "ratings": ratings}[kind]
            self._graphs[kind] = build(self.als_scale if kind == "ratings" else self.scale, self.seed)
        return self._graphs[kind]

    def program(self, algorithm: str, iterations: int | None = None) -> Any:
        from epochal.graph.algorithms import ALS, CDLP, SSSP, WCC, PageRank

        its = iterations or self.iterations
        if algorithm == "pr":
            return PageRank(its, 0.85)
        if algorithm == "cdlp":
            return CDLP(10)
        if algorithm == "wcc":
            return WCC()
        if algorithm == "als":
            return ALS(rank=10, regularization=0.05, iterations=5)
        source = self.graph("sssp").source
        assert source is not None
        return SSSP(source)


@dataclass(frozen=True)
class Mode:
    """A fault-tolerance configuration and the failure injected (``killed`` workers, after they
    reported superstep ``fail_at``: papers/003 Fig. 12's failure between iterations 6 and 7)."""

    ft: str = "none"  # none | checkpoint | replication
    interval: int = 4
    recovery: str = "rebirth"
    k: int = 1
    selfish: bool = True
    partitioner: str = "hash"
    killed: tuple[int, ...] = ()
    fail_at: int = 6
    #: "barrier": killed once ``fail_at``'s barrier passed (Fig. 12); "superstep": before the barrier
    point: str = "barrier"

    @property
    def label(self) -> str:
        if self.ft == "none":
            name = "none"
        elif self.ft == "checkpoint":
            name = f"ckpt-{self.interval}" + ("-fail" if self.killed else "")
        else:
            name = "rep" + ("" if self.selfish else "-noselfish") + (f"-k{self.k}" if self.k > 1 else "")
            if self.killed:
                name += "-" + self.recovery
        return name + ("-fennel" if self.partitioner != "hash" else "")

    def options(self) -> dict[str, Any]:
        from epochal.control.restart import FixedDelayRestart
        from epochal.runtime.host.hooks import Fault

        out: dict[str, Any] = {"partitioner": self.partitioner, "fault_tolerance": self.ft}
        if self.ft == "checkpoint":
            out["checkpoint_interval"] = self.interval
        if self.ft == "replication":
            out.update(recovery=self.recovery, replicas=self.k, selfish=self.selfish)
        if self.killed:
            out["faults"] = [Fault(self.point, worker=w, superstep=self.fail_at) for w in self.killed]
            if self.ft != "replication":
                out["restart"] = FixedDelayRestart(attempts=2, delay=0.0)
        return out


def _last_of(events: Sequence[Event], name: str, since: float, workers: Sequence[int],
             until: float = float("inf")) -> float:
    """When the last of ``workers`` sent ``name`` (its first after ``since``); NaN if one did not."""
    times = []
    for w in workers:
        found = [t for t, n, who in events if n == name and who == w and since <= t <= until]
        if not found:
            return float("nan")
        times.append(found[0])
    return max(times)


def replica_phases(result: Any, events: Sequence[Event],
                   parallelism: int) -> dict[str, float]:
    """A replication recovery's phases from ``result.recoveries[0]`` and the events: detected ->
    (Rebirth) new task registered -> its partition shell deployed and ready (= ``started``) ->
    every live worker sent and received its batches (*reloading*) -> every worker assembled
    (*reconstruction*, = ``recovered``); then the resumed superstep's time."""
    rec = result.recoveries[0]
    detected, started, recovered = rec["detected"], rec["started"], rec["recovered"]
    lost = list(rec["lost"])
    live = [w for w in range(parallelism) if rec["mode"] == "rebirth" or w not in lost]
    out = {"detected_to_started_s": started - detected, "started_to_recovered_s": recovered - started,
           "recovery_s": recovered - detected, "recoveries": len(result.recoveries)}
    if rec["mode"] == "rebirth":
        registered = _last_of(events, "Register", detected, lost)
        out["task_start_s"] = registered - detected
        out["deploy_s"] = _last_of(events, "Ready", registered, lost) - registered
    prepared = _last_of(events, "KindReport:RecoveryPrepared", started, live, recovered)
    out["reload_s"] = prepared - started
    out["reconstruct_s"] = recovered - prepared
    # inside the workers (their drivers' clocks): the slowest worker's rewind, recovery batches
    # built and sent, and assembly of the new part
    workers = rec.get("workers", {}).values()
    for phase in ("rewind", "build", "send", "assemble"):
        out[f"worker_{phase}_s"] = max((w.get(f"{phase}_s", 0.0) for w in workers), default=float("nan"))
    resumed = next((t for t in result.timings if t["superstep"] == rec["resume_at"] and t["started"] >= recovered
                    and "completed" in t), None)
    out["resumed_step_s"] = resumed["completed"] - resumed["started"] if resumed else float("nan")
    return out


def checkpoint_phases(result: Any, fail_at: int, events: Sequence[Event],
                      parallelism: int) -> dict[str, float]:
    """A checkpoint restart's phases (:func:`benchmarks.graph.checkpoint.timeline`); its recovery
    time is detection -> superstep ``fail_at`` completed again (reload + replay), the point the
    failed run had reached."""
    phases = checkpoint.timeline(result, fail_at, events, parallelism)
    detected = result.restarts[0]["detected"]
    phases["recovery_s"] = phases["recovery_total_s"]
    phases["detected_to_started_s"] = event_after(events, "Register", event_after(events, "SubmitSparkJob", detected),
                                                  parallelism) - detected
    phases["started_to_recovered_s"] = phases["recovery_s"] - phases["detected_to_started_s"]
    phases["restored_from"] = result.restored_from[0] if result.restored_from else -1
    return phases


def _same(algorithm: str, got: Any, expected: Any) -> tuple[bool, float]:
    """``(equal, max relative error)``: PageRank to 1e-9, ALS to 1e-6, the others exactly."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        return False, float("inf")
    if algorithm in ("pr", "als"):
        error = float(np.max(np.abs(got - expected) / np.maximum(np.abs(expected), 1e-300))) if got.size else 0.0
        return error <= (1e-9 if algorithm == "pr" else 1e-6), error
    equal = bool(np.array_equal(got, expected))
    return equal, 0.0 if equal else float("inf")


@dataclass
class Runner:
    """What the runs share: the Spark session, the workloads, parallelism, timeout, and each
    algorithm's failure-free answer (the reference every later run is checked against)."""

    spark: Any
    workloads: Workloads
    parallelism: int
    timeout: float
    references: dict[str, Any] = field(default_factory=dict)
    _small: BenchGraph | None = None

    def run(self, algorithm: str, mode: Mode, repeat: int, experiment: str,
            iterations: int | None = None, parallelism: int | None = None) -> dict[str, Any]:
        """One job; its row (see the module docstring). Never raises: a failed run has a status.
        After a replication job, or one that lost workers, :meth:`warm_up` runs (``warmup_s``)."""
        row = run_job(self, algorithm, mode, repeat, experiment, iterations, parallelism or self.parallelism)
        if mode.ft == "replication" or mode.killed:
            row["warmup_s"] = self.warm_up(parallelism or self.parallelism)
        return row

    def warm_up(self, parallelism: int) -> float:
        """An untimed tiny job (R-MAT scale 8, PageRank, no FT) that leaves Spark's pool with warm
        Python workers (epochal imported): a killed worker's process is gone, and before a09122e a
        replication job's workers were not returned to the pool either; without this the next
        measured job could pay ~2-4 s of fresh Python workers starting, whatever its mode."""
        import epochal
        from epochal.graph.algorithms import PageRank
        from epochal.graph.job import run_graph

        if self._small is None:
            self._small = rmat(8, 1)
        started = time.perf_counter()
        try:
            run_graph(self._small.graph, PageRank(1), parallelism=parallelism, timeout=self.timeout,
                      environment=epochal.Environment(parallelism, spark=self.spark), job_name="imitator warm-up")
        except Exception as error:  # a failed warm-up only costs the next run its warm pool
            print(f"  warm-up failed: {failure(error)}", flush=True)
        return time.perf_counter() - started


def superstep_phases(done: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Where the supersteps' time went (``GraphResult.timings`` with the workers' reports): over
    the completed supersteps after 0, the sums of the slowest worker's compute, send and commit
    seconds, and of the rest of each superstep (``barrier_s``: waiting for peers' exchanges, the
    reports' and commands' round trip through the JobMaster, scheduling on shared cores)."""
    totals = {"compute_s": 0.0, "send_s": 0.0, "commit_s": 0.0, "barrier_s": 0.0}
    for step in done:
        workers = step.get("workers", {}).values()
        if step["superstep"] == 0 or not workers:
            continue
        busy = {phase: max(w.get(phase, 0.0) for w in workers) for phase in ("compute", "send", "commit")}
        for phase, seconds in busy.items():
            totals[f"{phase}_s"] += seconds
        slowest = max(w.get("compute", 0.0) + w.get("send", 0.0) + w.get("commit", 0.0) for w in workers)
        totals["barrier_s"] += max(step["completed"] - step["started"] - slowest, 0.0)
    return totals


def run_job(runner: Runner, algorithm: str, mode: Mode, repeat: int, experiment: str, iterations: int | None,
            parallelism: int) -> dict[str, Any]:
    import epochal
    from epochal.graph.job import run_graph

    bench = runner.workloads.graph(algorithm)
    program = runner.workloads.program(algorithm, iterations)
    row: dict[str, Any] = {"experiment": experiment, "algorithm": algorithm, "mode": mode.label, "ft": mode.ft,
                           "recovery": mode.recovery if mode.killed else "", "k": mode.k if mode.ft == "replication"
                           else 0, "selfish": mode.selfish, "partitioner": mode.partitioner,
                           "interval": mode.interval if mode.ft == "checkpoint" else "",
                           "killed": " ".join(map(str, mode.killed)), "fail_at": mode.fail_at if mode.killed else "",
                           "fault_point": mode.point if mode.killed else "",
                           "repeat": repeat, "graph": bench.name, "vertices": bench.num_vertices,
                           "edges": bench.num_edges, "parallelism": parallelism}
    env = epochal.Environment(parallelism, spark=runner.spark, registration_timeout=60.0)
    try:
        with jobmaster_events() as events, MemoryWatch() as watch:
            started = time.perf_counter()
            result = run_graph(bench.graph, program, parallelism=parallelism, environment=env, timeout=runner.timeout,
                               job_name=f"imitator {algorithm} {mode.label}", **mode.options())
            wall = time.perf_counter() - started
        key = f"{bench.name}/{algorithm}/{iterations}"
        reference = runner.references.setdefault(key, result.values) if mode.ft == "none" and not mode.killed \
            else runner.references.get(key)
        correct, error = (True, 0.0) if reference is None else _same(algorithm, result.values, reference)
        done = [t for t in result.timings if "completed" in t]
        steps = [t["completed"] - t["started"] for t in done if t["superstep"] > 0]
        row.update(status="ok" if correct else "wrong", max_rel_error=error, seconds=wall, job_s=result.duration_s,
                   driver_s=wall - result.duration_s, supersteps_s=done[-1]["completed"] - result.timings[0]["started"],
                   step_ms=float(np.median(steps)) * 1e3 if steps else float("nan"), supersteps=result.supersteps,
                   sent=sum(int(h["sent"]) for h in result.history), replication_factor=result.replication_factor,
                   workers_peak_mb=watch.peaks.workers_mb, workers_base_mb=watch.peaks.workers_base_mb,
                   driver_peak_mb=watch.peaks.driver_mb)
        row.update(superstep_phases(done))
        if mode.killed and mode.ft == "replication":
            row.update(replica_phases(result, events, parallelism))
        elif mode.killed:
            row.update(checkpoint_phases(result, mode.fail_at, events, parallelism))
        row["_result"] = result  # for the timeline; dropped before the CSV
    except Exception as error:  # one failed run must not end the benchmark
        row["status"] = failure(error)
    return row


# -------------------------------------------------------------------------- driver-side layouts
def nbytes(value: Any) -> int:
    """Bytes of every numpy array in ``value`` (dataclass fields, dicts, lists), recursively."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return sum(nbytes(getattr(value, f.name)) for f in fields(value) if not f.name.startswith("_"))
    return 0


def layout_stats(bench: BenchGraph, program: Any, parallelism: int, partitioner: str = "hash",
                 k: int = 0, selfish: bool = True) -> dict[str, Any]:
    """The partitions ``run_graph`` would build (``k`` 0: no replication), summarised per worker:
    masters, replicas (FT ones included), mirrors held, and bytes (``mirror_bytes``: the mirror
    store alone); also the extra (FT) replicas, those of selfish vertices, and the driver's time."""
    from epochal.graph.local import program_layout
    from epochal.graph.partition import build_partitions
    from epochal.graph.placement import partition
    from epochal.graph.replica_plan import replicated_partitions

    directions, adjacency = program_layout(program)
    started = time.perf_counter()
    owner = partition(bench.graph, parallelism, partitioner)
    partition_s = time.perf_counter() - started
    plan = None
    if k == 0:
        parts = build_partitions(bench.graph, owner, parallelism, directions, adjacency)
    else:
        parts, plan = replicated_partitions(bench.graph, owner, parallelism, directions, adjacency, k,
                                            selfish and getattr(program, "selfish_safe", False), True)
    build_s = time.perf_counter() - started - partition_s
    out: dict[str, Any] = {"graph": bench.name, "partitioner": partitioner, "k": k, "parallelism": parallelism,
                           "partition_s": partition_s, "build_s": build_s,
                           "masters": [p.num_masters for p in parts],
                           "replicas": [int(p.replica_ids.size) for p in parts],
                           "mirrors": [0 if p.mirror is None else len(p.mirror) for p in parts],
                           "bytes": [nbytes(p) for p in parts],
                           "mirror_bytes": [nbytes(p.mirror) for p in parts]}
    out["held"] = [m + r for m, r in zip(out["masters"], out["replicas"], strict=True)]
    out["total_replicas"] = sum(out["replicas"])
    out["replication_factor"] = (sum(out["masters"]) + out["total_replicas"]) / max(sum(out["masters"]), 1)
    out["extra_replicas"] = plan.extra_replicas if plan is not None else 0
    if plan is not None:
        vertex_of_copy = np.repeat(np.arange(bench.num_vertices), np.diff(plan.copy_ptr))
        zero_out = _no_consumers(bench, directions)
        out["extra_selfish"] = int((plan.copy_ft & zero_out[vertex_of_copy]).sum())
    else:
        out["extra_selfish"] = 0
    del parts
    return out


def _no_consumers(bench: BenchGraph, directions: str) -> np.ndarray:
    """Vertices nobody reads (papers/003 §4.3's selfish vertices): without out-edges for programs
    that read in-neighbours, none for programs that read both ways (or on undirected graphs)."""
    n = bench.num_vertices
    if directions != "in" or not bench.graph.directed:
        return np.zeros(n, dtype=bool)
    return np.bincount(bench.src_index, minlength=n) == 0
