"""Where a recovery's worker-side time goes: Rebirth and Migration replayed in one process.

Owns the in-process profile of papers/003 §5's recovery steps on epochal, used where a recovery
goal is missed. It builds the same replicated partitions a ``run_graph`` job would (hash, ``k``),
runs ``steps`` supersteps of the program on them in this process (the loop of
:func:`epochal.graph.local.run_locally`), drops worker(s) ``lost`` after a barrier, and then calls
the functions the graph workers call, each timed (and under cProfile):

* Rebirth: every survivor's :func:`~epochal.graph.recovery.rebirth_batches` (its *reloading*),
  the batches pickled (what goes over the sockets: bytes and time), and the new worker's
  :func:`~epochal.graph.recovery.rebirth_assemble` plus ``engine.install`` (*reconstruction*);
* Migration: every survivor's :func:`~epochal.graph.recovery.migration_start`, its batches
  pickled, and :func:`~epochal.graph.recovery.migration_assemble` plus ``install``.

Compute only: no sockets, no other process on the cores (in a job the survivors run at the same
time, several per core on a small machine). Writes rows (phase, worker, seconds, bytes) and the
cProfile text; :mod:`benchmarks.graph.replication` saves them as ``imitator_recovery_profile*``.
"""

from __future__ import annotations

import cProfile
import io
import pickle
import pstats
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from benchmarks.common.stats import median
from benchmarks.graph.generators import BenchGraph


def _run_supersteps(bench: BenchGraph, program: Any, parts: list[Any],
                    steps: int | None) -> tuple[dict[int, Any], float]:
    """Engines after ``steps`` committed supersteps (all of them with None: to the halt), with the
    seconds spent computing, delivering and committing (the barrier loop of ``run_locally``)."""
    from epochal.graph.engine import make_engine
    from epochal.graph.program import SuperstepContext
    from epochal.graph.supersteps import Halt, SuperstepCoordinator

    n, workers = bench.num_vertices, len(parts)
    engines = {p.worker: make_engine(p, program, n) for p in parts}
    coordinator = SuperstepCoordinator(program, workers)
    step: Any = coordinator.start()
    done, seconds = 0, 0.0
    while not isinstance(step, Halt) and (steps is None or done < steps):
        started = time.perf_counter()
        outgoing = {}
        for w, engine in engines.items():
            ctx = SuperstepContext(step.superstep, n, w, workers, dict(step.aggregates), final=step.final)
            outgoing[w] = engine.step(ctx)
        for out, _ in outgoing.values():
            for peer, exchange in out.items():
                engines[peer].receive(exchange)
        for engine in engines.values():
            engine.commit()
        seconds += time.perf_counter() - started
        for w, (_, report) in outgoing.items():
            decision = coordinator.on_report(w, report)
        step, done = decision, done + 1
    return engines, seconds


def compute_overhead(bench: BenchGraph, program: Any, parallelism: int, k: int = 1,
                     repeats: int = 4) -> dict[str, Any]:
    """The whole job's supersteps computed in this process (every worker's engine in turn, no
    sockets, no scheduler) on the plain and on the replicated layout: REP's overhead on the
    computation alone: best of ``repeats`` each (alternating order), and the spread of
    the repeats' paired ratios."""
    from epochal.graph.local import program_layout
    from epochal.graph.partition import build_partitions
    from epochal.graph.placement import partition
    from epochal.graph.replica_plan import replicated_partitions

    directions, adjacency = program_layout(program)
    owner = partition(bench.graph, parallelism, "hash")
    plain = build_partitions(bench.graph, owner, parallelism, directions, adjacency)
    replicated, _ = replicated_partitions(bench.graph, owner, parallelism, directions, adjacency, k,
                                          getattr(program, "selfish_safe", False), True)
    times: dict[str, list[float]] = {"none": [], "rep": []}
    layouts = [("none", plain), ("rep", replicated)]
    for repeat in range(repeats):  # alternating order: neither layout always runs first
        for name, parts in layouts[::1 if repeat % 2 == 0 else -1]:
            times[name].append(_run_supersteps(bench, program, parts, None)[1])
    none, rep = min(times["none"]), min(times["rep"])
    paired = sorted(r / n - 1 for r, n in zip(times["rep"], times["none"], strict=True))
    return {"graph": bench.name, "parallelism": parallelism, "k": k, "compute_none_s": none, "compute_rep_s": rep,
            "compute_overhead": rep / none - 1, "compute_overhead_paired": median(paired),
            "compute_overhead_min": paired[0], "compute_overhead_max": paired[-1],
            "table_none": sum(p.table_size for p in plain), "table_rep": sum(p.table_size for p in replicated)}


def _timed(profile: cProfile.Profile, call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    profile.enable()
    try:
        value = call()
    finally:
        profile.disable()
    return value, time.perf_counter() - started


def _pickled(value: Any) -> tuple[int, float]:
    started = time.perf_counter()
    size = len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    return size, time.perf_counter() - started


def profile_recovery(bench: BenchGraph, program: Any, parallelism: int, k: int = 1, lost: tuple[int, ...] = (1,),
                     steps: int = 7) -> tuple[list[dict[str, Any]], str]:
    """``(rows, profile text)`` of Rebirth and Migration of ``lost`` (see the module docstring)."""
    from epochal.graph.local import program_layout
    from epochal.graph.placement import partition
    from epochal.graph.recovery import responsible_for
    from epochal.graph.replica_plan import replicated_partitions

    directions, adjacency = program_layout(program)
    owner = partition(bench.graph, parallelism, "hash")
    parts, plan = replicated_partitions(bench.graph, owner, parallelism, directions, adjacency, k,
                                        getattr(program, "selfish_safe", False), True)
    rows: list[dict[str, Any]] = []
    texts = []

    def add(mode: str, phase: str, worker: int, seconds: float, size: int = 0, vertices: int = 0) -> None:
        rows.append({"graph": bench.name, "parallelism": parallelism, "k": k, "mode": mode, "phase": phase,
                     "worker": worker, "seconds": seconds, "bytes": size, "vertices": vertices})

    lost_set = set(lost)
    for mode in ("rebirth", "migration"):
        engines, _ = _run_supersteps(bench, program, parts, steps)
        profile = cProfile.Profile()
        if mode == "rebirth":
            _rebirth(engines, parts, program, bench.num_vertices, lost_set, profile, add)
        else:
            dense = np.flatnonzero(np.isin(owner, list(lost)))
            moves = (bench.graph.vertices[dense], responsible_for(owner[dense], plan.mirrors[dense], lost_set))
            _migration(engines, lost_set, moves, profile, add)
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(20)
        texts.append(f"==== {mode}: {bench.name}, p={parallelism}, k={k}, lost {list(lost)} ====\n{text.getvalue()}")
        del engines
    return rows, "\n".join(texts)


def _rebirth(engines: dict[int, Any], parts: list[Any], program: Any, num_vertices: int, lost: set[int],
             profile: cProfile.Profile, add: Callable[..., None]) -> None:
    """Every survivor's batches, then each new worker's partition assembled and installed."""
    from epochal.graph.engine import make_engine
    from epochal.graph.recovery import rebirth_assemble, rebirth_batches

    survivors = {w: e for w, e in engines.items() if w not in lost}
    sent: dict[int, list[Any]] = {dead: [] for dead in lost}
    for w, e in survivors.items():
        out, seconds = _timed(profile, partial(rebirth_batches, e.part, e.table, e.changed_table, lost, 1,
                                               min(survivors)))
        size, pickling = _pickled(out)
        add("rebirth", "reload: batches built", w, seconds, size)
        add("rebirth", "reload: batches pickled", w, pickling, size)
        for dead, batch in out.items():
            sent[dead].append(batch)

    def assemble(dead: int, batches: list[Any]) -> Any:
        part, table, changed = rebirth_assemble(dead, parts[dead], batches)
        engine = make_engine(part, program, num_vertices)
        engine.install(part, table, changed)
        return part

    for dead, batches in sent.items():
        part, seconds = _timed(profile, partial(assemble, dead, batches))
        add("rebirth", "reconstruct: assemble + install", dead, seconds,
            vertices=int(part.num_masters + part.replica_ids.size))


def _migration(engines: dict[int, Any], lost: set[int], moves: tuple[np.ndarray, np.ndarray],
               profile: cProfile.Profile, add: Callable[..., None]) -> None:
    """Every survivor's migration started, then each one's new partition assembled and installed."""
    from epochal.graph.recovery import migration_assemble, migration_start

    survivors = {w: e for w, e in engines.items() if w not in lost}
    started: dict[int, Any] = {}
    for w, e in survivors.items():
        started[w], seconds = _timed(profile, partial(migration_start, e.part, e.table, e.changed_table, lost, (),
                                                      moves[0], moves[1], 1))
        size, pickling = _pickled(started[w].batches)
        add("migration", "reload: migration_start", w, seconds, size)
        add("migration", "reload: batches pickled", w, pickling, size)

    def finish(worker: int, incoming: list[Any]) -> None:
        survivors[worker].install(*migration_assemble(started[worker], incoming))

    for w in started:
        _, seconds = _timed(profile, partial(finish, w, [m.batches[w] for s, m in started.items() if s != w]))
        part = survivors[w].part
        add("migration", "reconstruct: migration_assemble + install", w, seconds,
            vertices=int(part.num_masters + part.replica_ids.size))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per graph and mode: the slowest worker's seconds per phase, and every survivor's sum (what
    the cores must do in all), with the bytes shipped."""
    out = []
    keys = sorted({(r["graph"], r["parallelism"], r["mode"], r["phase"]) for r in rows})
    for graph, parallelism, mode, phase in keys:
        mine = [r for r in rows if (r["graph"], r["parallelism"], r["mode"], r["phase"]) == (graph, parallelism,
                                                                                             mode, phase)]
        out.append({"graph": graph, "parallelism": parallelism, "mode": mode, "phase": phase,
                    "max_worker_s": max(r["seconds"] for r in mine), "sum_workers_s": sum(r["seconds"] for r in mine),
                    "bytes": sum(r["bytes"] for r in mine), "vertices": max(r["vertices"] for r in mine),
                    "workers": len(mine)})
    return out
