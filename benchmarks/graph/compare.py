"""epochal's PageRank, WCC and SSSP against PySpark (RDD, DataFrame), NetworkX and scipy.sparse.

For every scale: an R-MAT graph (PageRank, WCC) and a road-like grid (SSSP) of 2^scale vertices
are generated (:mod:`benchmarks.graph.generators`), and every system runs every algorithm it has
on the same graph (:mod:`benchmarks.graph.peers`), ``--repeats`` times, interleaved (repeat 1 of
every system, then repeat 2, in rotating order) so that drift of a shared machine hits all alike.

How it measures:

* ONE SparkSession (``local[K]``, K = max(parallelisms, 2)) serves every Spark run, epochal's and
  the PySpark peers'; before anything is timed, each Spark system runs each of its algorithms on a
  small graph at each parallelism (Python workers started, JVM code warm).
* The timed quantity is the wall time of the runner call: from the edge arrays in the driver's
  memory to every vertex's result in the driver's memory (the Spark peers start from a text file
  of the edges, as Spark's example does; the file is written before the timing). ``prep_s`` is the
  part spent building the system's input (partitions, cached links, networkx graph, CSR matrix).
* Peak memory per run: driver, Spark JVM and Spark's Python workers (:mod:`benchmarks.common.measure`).
* Every result is checked: epochal and NetworkX against scipy (PageRank to a relative 1e-9, WCC
  labels and SSSP distances exactly), the Spark peers against their own formula in numpy. A run
  with a wrong answer is marked ``wrong`` and kept out of the medians and ratios.
* epochal's runs also record where the time went, from ``GraphResult.timings`` and the
  JobMaster's events (:func:`~benchmarks.common.measure.jobmaster_events`): ``driver_before_s``
  (call -> Spark job submitted: partitioning, partition files), ``startup_s`` (-> first superstep
  started: Spark schedules the tasks, workers register, connect and load their partitions),
  ``supersteps_s`` (-> last superstep completed), ``finish_s`` (-> the Spark job ended: results
  written, workers stopped) and ``driver_after_s`` (-> call returned: results read and assembled,
  the replication factor computed). ``prep_s`` is everything outside the Spark job (the two driver
  parts). Where a PageRank goal is missed, the driver is profiled (cProfile) on one more run, and
  the same supersteps are profiled in one process (``run_locally``, the same engine without
  Spark), into ``graph_profile_s<scale>_p<p>.txt``.

Goals (the issue): epochal's PageRank at least 20x faster than the PySpark RDD version, and within
5x of scipy.sparse, on the same graph.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.isolation import rotate
from benchmarks.common.measure import Event, MemoryWatch, Timer, event_after, jobmaster_events
from benchmarks.common.results import failure, pyplot, save_figure, write_csv
from benchmarks.common.stats import median
from benchmarks.graph import peers
from benchmarks.graph.generators import BenchGraph, rmat, road_grid

#: The goals: the RDD example's time over epochal's at least this, epochal's over scipy's at most this.
RDD_GOAL, SCIPY_GOAL = 20.0, 5.0
WARM_UP_SCALE = 8


def _epochal_phases(outcome: peers.Outcome, timer: Timer, events: Sequence[Event]) -> dict[str, Any]:
    """Where an epochal run's wall time went, from its timings and the JobMaster's events (see the
    module docstring)."""
    result = outcome.result
    assert result is not None
    timings = [t for t in result.timings if "completed" in t]
    launched = event_after(events, "JobStarted", timer.started)
    ended = max((t for t, name, _ in events if name == "SparkJobEnded"), default=float("nan"))
    steps = [t["completed"] - t["started"] for t in timings]
    return {"supersteps": result.supersteps, "driver_before_s": launched - timer.started,
            "startup_s": timings[0]["started"] - launched,
            "supersteps_s": timings[-1]["completed"] - timings[0]["started"],
            "superstep_median_s": median(steps), "finish_s": ended - timings[-1]["completed"],
            "driver_after_s": timer.ended - ended, "replication_factor": result.replication_factor}


def measure_one(ctx: peers.Context, bench: BenchGraph, algorithm: str, system: str, parallelism: int,
                repeat: int, reference: Any) -> dict[str, Any]:
    """One timed run of ``system``'s ``algorithm`` on ``bench``, checked against ``reference``."""
    row: dict[str, Any] = {"scale": bench.scale, "graph": bench.kind, "vertices": bench.num_vertices,
                           "edges": bench.num_edges, "algorithm": algorithm, "system": system,
                           "parallelism": parallelism, "repeat": repeat}
    try:
        with jobmaster_events() as events, MemoryWatch() as watch, Timer() as timer:
            outcome = peers.RUNNERS[system](ctx, bench, algorithm, parallelism)
    except Exception as error:  # a failed system is a row of the table, not the end of the benchmark
        return {**row, "status": failure(error)}
    correct, relative = (True, 0.0) if system == "scipy" else peers.check(algorithm, outcome, reference)
    row.update(status="ok" if correct else "wrong", seconds=timer.seconds, prep_s=outcome.prep_s,
               compute_s=timer.seconds - outcome.prep_s, driver_base_mb=watch.peaks.driver_base_mb,
               driver_peak_mb=watch.peaks.driver_mb, jvm_base_mb=watch.peaks.jvm_base_mb,
               jvm_peak_mb=watch.peaks.jvm_mb, workers_base_mb=watch.peaks.workers_base_mb,
               workers_peak_mb=watch.peaks.workers_mb, memory_exact=watch.peaks.exact,
               verified="reference" if system == "scipy" else correct, max_rel_error=relative)
    if system == "epochal":
        row.update(_epochal_phases(outcome, timer, events))
    return row


def skip_reason(system: str, scale: int, args: argparse.Namespace) -> str | None:
    if system == "networkx" and scale > args.networkx_max_scale:
        return f"skipped: networkx runs up to scale {args.networkx_max_scale} (--networkx-max-scale)"
    if system in ("spark-rdd", "spark-df") and scale > args.spark_max_scale:
        return f"skipped: the PySpark peers run up to scale {args.spark_max_scale} (--spark-max-scale)"
    return None


def plan(algorithm: str, args: argparse.Namespace) -> list[tuple[str, int]]:
    """The (system, parallelism) pairs that run ``algorithm``."""
    pairs: list[tuple[str, int]] = []
    for system in args.systems:
        if algorithm in peers.SUPPORTS[system]:
            pairs.extend([(system, 1)] if system in peers.IN_PROCESS else [(system, p) for p in args.parallelism])
    return pairs


def warm_up(ctx: peers.Context, args: argparse.Namespace) -> None:
    """Run every Spark system's algorithms once on a small graph at every parallelism (untimed)."""
    graphs = {"rmat": rmat(WARM_UP_SCALE, args.seed), "grid": road_grid(WARM_UP_SCALE, args.seed)}
    for algorithm in args.algorithms:
        for system, parallelism in plan(algorithm, args):
            if system not in peers.IN_PROCESS:
                peers.RUNNERS[system](ctx, graphs[peers.GRAPH_OF[algorithm]], algorithm, parallelism)
    print("warm-up done", flush=True)


def run(ctx: peers.Context, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every scale, repeat, algorithm, system and parallelism; one row per run (and per skip)."""
    rows: list[dict[str, Any]] = []
    warm_up(ctx, args)
    for scale in args.scales:
        started = time.perf_counter()
        kinds = {peers.GRAPH_OF[a] for a in args.algorithms}
        graphs = {kind: (rmat if kind == "rmat" else road_grid)(scale, args.seed) for kind in sorted(kinds)}
        print(f"scale {scale}: " + ", ".join(f"{g.name} {g.num_vertices:,} vertices {g.num_edges:,} edges"
                                             for g in graphs.values())
              + f" (generated in {time.perf_counter() - started:.1f} s)", flush=True)
        references: dict[tuple[str, str], Any] = {}
        for repeat in range(args.repeats):
            for algorithm in args.algorithms:
                bench = graphs[peers.GRAPH_OF[algorithm]]
                pairs = plan(algorithm, args)
                for system, parallelism in rotate(pairs, repeat):
                    reason = skip_reason(system, scale, args)
                    if reason is not None:
                        if repeat == 0:
                            rows.append({"scale": scale, "graph": bench.kind, "vertices": bench.num_vertices,
                                         "edges": bench.num_edges, "algorithm": algorithm, "system": system,
                                         "parallelism": parallelism, "repeat": repeat, "status": reason})
                        continue
                    kind = "spark" if system in ("spark-rdd", "spark-df") else "graphalytics"
                    if (algorithm, kind) not in references:
                        references[(algorithm, kind)] = peers.reference_of(ctx, bench, algorithm, system)
                    row = measure_one(ctx, bench, algorithm, system, parallelism, repeat,
                                      references[(algorithm, kind)])
                    rows.append(row)
                    _print_run(row)
    return rows


def _print_run(row: dict[str, Any]) -> None:
    if row["status"] not in ("ok", "wrong"):
        print(f"  {row['algorithm']:>4} {row['system']:>9} p={row['parallelism']}: {row['status']}", flush=True)
        return
    extra = ""
    if row["system"] == "epochal":
        extra = (f" [driver {row['driver_before_s']:.2f}, startup {row['startup_s']:.2f}, {row['supersteps']} "
                 f"supersteps {row['supersteps_s']:.2f}, finish {row['finish_s']:.2f}, "
                 f"driver {row['driver_after_s']:.2f}]")
    print(f"  [{row['repeat']}] {row['algorithm']:>4} {row['system']:>9} p={row['parallelism']}: "
          f"{row['seconds']:8.3f} s (prep {row['prep_s']:.3f}){extra} driver {row['driver_peak_mb']:,.0f} MB, "
          f"JVM {row['jvm_peak_mb']:,.0f} MB, workers {row['workers_peak_mb']:,.0f} MB"
          + ("" if row["status"] == "ok" else "  WRONG ANSWER"), flush=True)


# ------------------------------------------------------------------------------------------ summary
def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (scale, algorithm, system, parallelism): medians and spread of the correct runs."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["scale"], row["graph"], row["vertices"], row["edges"], row["algorithm"], row["system"],
               row["parallelism"])
        groups.setdefault(key, []).append(row)
    out = []
    for (scale, graph, vertices, edges, algorithm, system, p), members in groups.items():
        ok = [r for r in members if r["status"] == "ok"]
        summary: dict[str, Any] = {"scale": scale, "graph": graph, "vertices": vertices, "edges": edges,
                                   "algorithm": algorithm, "system": system, "parallelism": p, "runs": len(ok)}
        if not ok:
            summary["status"] = members[0]["status"]
            out.append(summary)
            continue
        summary["status"] = "ok"
        seconds = [r["seconds"] for r in ok]
        summary.update(median_s=median(seconds), min_s=min(seconds), max_s=max(seconds))
        for column in ("prep_s", "compute_s", "driver_base_mb", "driver_peak_mb", "jvm_base_mb", "jvm_peak_mb",
                       "workers_base_mb", "workers_peak_mb",
                       "driver_before_s", "startup_s", "supersteps_s", "superstep_median_s", "finish_s",
                       "driver_after_s"):
            if column in ok[0]:
                summary[column] = median(r[column] for r in ok)
        if system == "epochal":
            summary["supersteps"] = ok[0]["supersteps"]
        out.append(summary)
    return out


def ratios(summary: Sequence[dict[str, Any]], parallelisms: Sequence[int]) -> list[dict[str, Any]]:
    """Each peer's median time over epochal's on the same graph (Spark peers at the same parallelism,
    in-process peers against every epochal parallelism), with the PageRank goals."""
    by_key = {(s["scale"], s["algorithm"], s["system"], s["parallelism"]): s for s in summary
              if s["status"] == "ok"}
    out = []
    for (scale, algorithm, system, p), epochal in sorted(by_key.items()):
        if system != "epochal":
            continue
        for peer in peers.SYSTEMS[1:]:
            other = by_key.get((scale, algorithm, peer, 1 if peer in peers.IN_PROCESS else p))
            if other is None:
                continue
            ratio = other["median_s"] / epochal["median_s"]
            row: dict[str, Any] = {"scale": scale, "vertices": epochal["vertices"], "edges": epochal["edges"],
                                   "algorithm": algorithm, "parallelism": p, "peer": peer,
                                   "peer_s": other["median_s"], "epochal_s": epochal["median_s"],
                                   "peer_over_epochal": ratio}
            if algorithm == "pr" and peer == "spark-rdd":
                row.update(goal=f"rdd/epochal >= {RDD_GOAL:g}", goal_met=ratio >= RDD_GOAL)
            elif algorithm == "pr" and peer == "scipy":
                row.update(goal=f"epochal/scipy <= {SCIPY_GOAL:g}", goal_met=1 / ratio <= SCIPY_GOAL)
            out.append(row)
    return out


def print_tables(summary: Sequence[dict[str, Any]], ratio_rows: Sequence[dict[str, Any]]) -> None:
    print(f"\n{'scale':>5} {'alg':>4} {'system':>9} {'p':>2} {'median s':>9} {'min-max s':>15} {'prep s':>7} "
          f"{'driver MB':>9} {'JVM MB':>7} {'workers MB':>10}  status")
    for s in summary:
        if s["status"] != "ok":
            print(f"{s['scale']:>5} {s['algorithm']:>4} {s['system']:>9} {s['parallelism']:>2} {'':>9} {'':>15} "
                  f"{'':>7} {'':>9} {'':>7} {'':>10}  {s['status']}")
            continue
        print(f"{s['scale']:>5} {s['algorithm']:>4} {s['system']:>9} {s['parallelism']:>2} {s['median_s']:>9.3f} "
              f"{s['min_s']:>7.3f}-{s['max_s']:<7.3f} {s['prep_s']:>7.3f} {s['driver_peak_mb']:>9,.0f} "
              f"{s['jvm_peak_mb']:>7,.0f} {s['workers_peak_mb']:>10,.0f}  ok ({s['runs']} runs)")
    print(f"\n{'scale':>5} {'alg':>4} {'p':>2} {'peer':>9} {'peer s':>9} {'epochal s':>9} {'peer/epochal':>12}  goal")
    for r in ratio_rows:
        goal = f"{r['goal']}: {'met' if r['goal_met'] else 'NOT met'}" if "goal" in r else ""
        print(f"{r['scale']:>5} {r['algorithm']:>4} {r['parallelism']:>2} {r['peer']:>9} {r['peer_s']:>9.3f} "
              f"{r['epochal_s']:>9.3f} {r['peer_over_epochal']:>11.2f}x  {goal}")


def plot(path: Path, summary: Sequence[dict[str, Any]], ratio_rows: Sequence[dict[str, Any]],
         parallelism: int) -> None:
    """Median time vs vertices per algorithm and system (log-log), and the PageRank goal ratios."""
    from matplotlib.ticker import FuncFormatter

    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    titles = {"pr": "PageRank (10 iterations), R-MAT", "wcc": "WCC, R-MAT", "sssp": "SSSP, road-like grid"}
    for ax, algorithm in zip(axes.flat, peers.ALGORITHMS, strict=False):
        for number, (system, marker) in enumerate(zip(peers.SYSTEMS, "os^Dv", strict=True)):
            points = sorted((s["vertices"], s["median_s"]) for s in summary
                            if s["algorithm"] == algorithm and s["system"] == system and s["status"] == "ok"
                            and s["parallelism"] == (1 if system in peers.IN_PROCESS else parallelism))
            if points:
                ax.plot(*zip(*points, strict=True), marker=marker, color=f"C{number}", label=system)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("vertices")
        ax.set_ylabel("median wall time (s)")
        ax.set_title(f"{titles[algorithm]} (Spark systems at p={parallelism})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax = axes.flat[3]
    ratio_values: list[float] = []
    for peer, goal, label in (("spark-rdd", RDD_GOAL, "PySpark RDD / epochal (goal >= 20)"),
                              ("scipy", SCIPY_GOAL, "epochal / scipy (goal <= 5)")):
        points = sorted((r["vertices"], r["peer_over_epochal"] if peer == "spark-rdd" else 1 / r["peer_over_epochal"])
                        for r in ratio_rows if r["algorithm"] == "pr" and r["peer"] == peer
                        and r["parallelism"] == parallelism)
        ratio_values.extend(value for _, value in points)
        if points:
            line = ax.plot(*zip(*points, strict=True), marker="o", label=label)
            ax.axhline(goal, color=line[0].get_color(), linestyle="--", alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_yticks([m * 10**e for e in range(-1, 4) for m in (1, 2, 5)])
    ax.set_ylim(1, max([100.0, *(1.5 * value for value in ratio_values)]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    ax.set_xlabel("vertices")
    ax.set_ylabel("time ratio")
    ax.set_title(f"PageRank goals (p={parallelism}); dashed: the goal")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    save_figure(fig, path)


# ------------------------------------------------------------------------------------------ profile
def profile(ctx: peers.Context, bench: BenchGraph, parallelism: int, path: Path, phases: dict[str, Any]) -> None:
    """cProfile of the driver during one more epochal PageRank run, and of the same supersteps in
    one process (``run_locally``: the engine's compute without Spark), written to ``path``."""
    from epochal.graph.local import run_graph_locally

    report = io.StringIO()
    report.write(f"epochal PageRank ({ctx.iterations} iterations) on {bench.name}: {bench.num_vertices:,} vertices, "
                 f"{bench.num_edges:,} edges, parallelism {parallelism}\n\nphases of the timed runs (medians, s):\n")
    for key in ("median_s", "driver_before_s", "startup_s", "supersteps_s", "superstep_median_s", "finish_s",
                "driver_after_s"):
        report.write(f"  {key:<20} {phases.get(key, float('nan')):.4f}\n")
    for title, call in (("driver during run_graph (other threads, e.g. the JobMaster's, not included)",
                         lambda: peers.run_epochal(ctx, bench, "pr", parallelism)),
                        (f"run_locally: the same partitions and supersteps in one process ({parallelism} partitions, "
                         "sequentially)",
                         lambda: run_graph_locally(bench.graph, peers.epochal_program("pr", bench, ctx.iterations),
                                             parallelism))):
        profiler = cProfile.Profile()
        started = time.perf_counter()
        outcome = profiler.runcall(call)
        seconds = time.perf_counter() - started
        report.write(f"\n=== cProfile: {title}: {seconds:.3f} s ===\n")
        if isinstance(outcome, peers.Outcome) and outcome.result is not None:
            steps = [f"{t['superstep']}:{t['completed'] - t['started']:.4f}" for t in outcome.result.timings
                     if "completed" in t]
            report.write(f"per-superstep seconds (barrier to barrier): {' '.join(steps)}\n")
        stats = pstats.Stats(profiler, stream=report)
        stats.sort_stats("cumulative").print_stats(25)
        stats.sort_stats("tottime").print_stats(15)
    path.write_text(report.getvalue())


def profile_missed_goals(ctx: peers.Context, summary: Sequence[dict[str, Any]], ratio_rows: Sequence[dict[str, Any]],
                         args: argparse.Namespace) -> list[Path]:
    """Profile epochal's PageRank at every (scale, parallelism) where a goal was missed."""
    missed = sorted({(r["scale"], r["parallelism"]) for r in ratio_rows if r.get("goal_met") is False})
    written = []
    for scale, parallelism in missed:
        phases = next(s for s in summary if s["scale"] == scale and s["algorithm"] == "pr"
                      and s["system"] == "epochal" and s["parallelism"] == parallelism)
        path = args.out / f"graph_profile_s{scale}_p{parallelism}.txt"
        profile(ctx, rmat(scale, args.seed), parallelism, path, phases)
        written.append(path)
        print(f"profiled epochal PageRank at scale {scale}, p={parallelism}: {path}", flush=True)
    return written


def main(spark: Any, args: argparse.Namespace) -> None:
    """Run the comparison; write ``graph_peers.csv``, ``graph_summary.csv``, ``graph_ratios.csv``,
    ``graph_peers.png`` and the profiles; print the tables."""
    ctx = peers.Context(spark, args.iterations, peers.scratch_dir(), args.timeout)
    started = time.perf_counter()
    try:
        rows = run(ctx, args)
    finally:
        shutil.rmtree(ctx.scratch, ignore_errors=True)
    summary = summarize(rows)
    ratio_rows = ratios(summary, args.parallelism)
    write_csv(args.out / "graph_peers.csv", rows)
    write_csv(args.out / "graph_summary.csv", summary)
    write_csv(args.out / "graph_ratios.csv", ratio_rows)
    plot(args.out / "graph_peers.png", summary, ratio_rows, 2 if 2 in args.parallelism else args.parallelism[0])
    print_tables(summary, ratio_rows)
    if args.profile:
        profile_missed_goals(ctx, summary, ratio_rows, args)
    print(f"\npeers: {time.perf_counter() - started:.0f} s; wrote graph_peers.csv, graph_summary.csv, "
          f"graph_ratios.csv, graph_peers.png in {args.out}", flush=True)
