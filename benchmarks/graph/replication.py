"""``python -m benchmarks.graph replication``: papers/003 §6 (Imitator) reproduced on epochal.

Owns the command's options, the order of its runs and its output files. The runs (one
SparkSession, ``local[P]``, parallelism ``--rep-parallelism`` 4; every run checked against the
failure-free answer; see :mod:`benchmarks.graph.imitator_runs`):

1. *Failure-free rounds* (``--rep-repeats``, modes in rotating order per round): for every
   algorithm no FT, REP (replication, Rebirth, k=1, selfish on) and CKPT every
   ``--rep-intervals`` supersteps (Fig. 7); for PageRank also REP without the selfish
   optimisation (Fig. 8), no FT and REP under Fennel (Fig. 10), and REP with k=2, 3 (Fig. 11(a),
   Table 3: the workers' peak RSS).
2. *Recovery rounds* (``--rep-recovery-repeats``): worker 1 killed once superstep 6's barrier
   passed (``Fault("barrier")``) under CKPT/4, Rebirth and Migration, for PageRank and SSSP (Table 2;
   PageRank's runs are also Fig. 12's timelines), and workers 1..k killed at once with k=2, 3
   replicas (Fig. 11(b)).
3. *Layouts* (driver only, no job): the partitions of each configuration, for replica counts
   and bytes (Fig. 8(a), 10(a), Table 3, Table 2's vertices held by the killed worker).
4. *Profiles* (one process, no job; ``--no-rep-profile`` skips them): every algorithm's
   supersteps on the plain and the replicated layout (REP's overhead on the computation
   alone), and PageRank's Rebirth and Migration of worker 1 step by step
   (:mod:`benchmarks.graph.replication_profile`).
5. *Large* (``--large-scale`` 20, ``--large-parallelism`` 2, 0 skips it): the driver-side
   partitioning profiled once, then PageRank (10 iterations) no FT, CKPT/4, Rebirth and
   Migration with worker 1 killed after computing superstep 6, before the barrier (after it, the
   survivor's superstep-7 send to the dead worker fails the job at this size), and the
   recovery profile again: the "one worker holding ~1M vertices and replicas recovered within
   1 s" goal.

Writes into ``--out``: ``imitator_runs.csv`` (every run), ``imitator_layouts.csv``, one CSV per
figure/table and a PNG per figure (:mod:`benchmarks.graph.replication_tables`,
:mod:`benchmarks.graph.replication_plots`), ``imitator_goals.csv``,
``imitator_recovery_profile*.{csv,txt}`` and ``imitator_profile_s<scale>.txt``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.common.isolation import rotate
from benchmarks.common.results import failure, write_csv
from benchmarks.graph import replication_plots, replication_profile, replication_tables
from benchmarks.graph.imitator_runs import ALGORITHMS, NAMES, Mode, Runner, Workloads, layout_stats

RECOVERY_ALGORITHMS = ("pr", "sssp")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``replication`` options (prefixed ``--rep-`` / ``--large-``)."""
    group = parser.add_argument_group("replication (papers/003 §6)")
    group.add_argument("--rep-scale", type=int, default=18,
                       help="R-MAT and grid scale of the replication runs (default 18)")
    group.add_argument("--als-scale", type=int, default=None, help="ALS rating graph scale (default rep-scale - 2)")
    group.add_argument("--rep-parallelism", type=int, default=4, help="workers (default 4; at least 4 for k=3)")
    group.add_argument("--rep-repeats", type=int, default=3, help="failure-free rounds (default 3)")
    group.add_argument("--rep-recovery-repeats", type=int, default=2, help="runs per failure case (default 2)")
    group.add_argument("--rep-algorithms", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS))
    group.add_argument("--rep-iterations", type=int, default=20, help="PageRank iterations (default 20)")
    group.add_argument("--rep-intervals", type=int, nargs="+", default=[4, 1],
                       help="CKPT intervals of the overhead runs (default 4 1); recovery uses 4")
    group.add_argument("--rep-max-k", type=int, default=3, help="largest k of Fig. 11 / Table 3 (default 3)")
    group.add_argument("--large-scale", type=int, default=20, help="scale of the ~1M-vertex recovery (0: skip)")
    group.add_argument("--large-parallelism", type=int, default=2, help="workers of the large runs (default 2)")
    group.add_argument("--large-iterations", type=int, default=10, help="PageRank iterations there (default 10)")
    group.add_argument("--no-rep-profile", dest="rep_profile", action="store_false",
                       help="skip the in-process profile of Rebirth and Migration (replication_profile)")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.rep_parallelism < max(2, args.rep_max_k + 1):
        parser.error("--rep-parallelism must exceed --rep-max-k (k lost workers need k+1 workers)")
    if args.rep_iterations < 7 or args.large_iterations < 7:
        parser.error("the failure comes after superstep 6: --rep-iterations/--large-iterations must be at least 7")
    if args.large_scale and args.large_parallelism < 2:
        parser.error("--large-parallelism must be at least 2")
    if args.rep_repeats < 1 or args.rep_recovery_repeats < 1:
        parser.error("--rep-repeats and --rep-recovery-repeats must be positive")


def failure_free_specs(args: argparse.Namespace) -> list[tuple[str, Mode, str]]:
    """``(algorithm, mode, experiment)`` of one failure-free round."""
    specs = []
    for algorithm in args.rep_algorithms:
        specs.append((algorithm, Mode(), "overhead"))
        specs.append((algorithm, Mode("replication"), "overhead"))
        specs.extend((algorithm, Mode("checkpoint", interval), "overhead") for interval in args.rep_intervals)
    if "pr" in args.rep_algorithms:
        specs.append(("pr", Mode("replication", selfish=False), "selfish"))
        specs.append(("pr", Mode(partitioner="fennel"), "partitioning"))
        specs.append(("pr", Mode("replication", partitioner="fennel"), "partitioning"))
        specs.extend(("pr", Mode("replication", k=k), "multi") for k in range(2, args.rep_max_k + 1))
    return specs


def recovery_specs(args: argparse.Namespace) -> list[tuple[str, Mode, str]]:
    """``(algorithm, mode, experiment)`` of one recovery round."""
    specs = []
    for algorithm in [a for a in RECOVERY_ALGORITHMS if a in args.rep_algorithms]:
        specs.append((algorithm, Mode("checkpoint", 4, killed=(1,)), "recovery"))
        for recovery in ("rebirth", "migration"):
            specs.append((algorithm, Mode("replication", recovery=recovery, killed=(1,)), "recovery"))
    if "pr" in args.rep_algorithms:
        for k in range(2, args.rep_max_k + 1):
            for recovery in ("rebirth", "migration"):
                specs.append(("pr", Mode("replication", recovery=recovery, k=k, killed=tuple(range(1, k + 1))),
                              "multi-recovery"))
    return specs


def _print_run(row: dict[str, Any]) -> None:
    head = f"  [{row['repeat']}] {row['algorithm']:>4} {row['mode']:<22}"
    if row["status"] not in ("ok", "wrong"):
        print(f"{head} {row['status']}", flush=True)
        return
    text = (f"{head} {row['seconds']:6.2f} s wall, job {row['job_s']:6.2f} s, supersteps {row['supersteps_s']:6.3f} s "
            f"({row['supersteps']} x {row['step_ms']:6.1f} ms), sent {row['sent']:,}")
    if "recovery_s" in row:
        text += (f"; recovery {row['recovery_s']:.3f} s (detected->started {row['detected_to_started_s']:.3f}, "
                 f"started->recovered {row['started_to_recovered_s']:.3f})")
    print(text + ("" if row["status"] == "ok" else "  WRONG ANSWER"), flush=True)


def timeline_rows(row: dict[str, Any], label: str) -> list[dict[str, Any]]:
    """Fig. 12: one row per superstep of a run (times from its first superstep's start), plus the
    recovery or restart marks (``event`` rows)."""
    result = row.get("_result")
    if result is None:
        return []
    origin = result.timings[0]["started"]
    out = []
    for t in result.timings:
        end = t.get("completed", float("nan"))
        duration = end - t["started"]
        out.append({"run": label, "superstep": t["superstep"], "start_s": t["started"] - origin,
                    "end_s": end - origin, "duration_s": duration,
                    "vertices_per_s": row["vertices"] / duration if duration == duration and duration > 0 else
                    float("nan"), "event": ""})
    for rec in result.recoveries:
        for name in ("detected", "started", "recovered"):
            out.append({"run": label, "superstep": rec["resume_at"], "start_s": rec[name] - origin, "event": name})
    for restart in result.restarts:
        detected = restart["detected"]
        out.append({"run": label, "superstep": "", "start_s": detected - origin, "event": "detected"})
        if "recovered_s" in restart:
            out.append({"run": label, "superstep": "", "start_s": detected + restart["recovered_s"] - origin,
                        "event": "recovered"})
    return out


def round_order(specs: Sequence[tuple[str, Mode, str]], repeat: int) -> list[tuple[str, Mode, str]]:
    """Round ``repeat``'s order: the algorithms' blocks rotated, and within each block the modes
    rotated by the round, so that no mode always runs first after another algorithm's jobs (a
    short job's time depends on what ran before it: the no-FT run of WCC, always first, was
    20-60 % faster than every other mode of it in a fixed order)."""
    blocks: dict[str, list[tuple[str, Mode, str]]] = {}
    for spec in specs:
        blocks.setdefault(spec[0], []).append(spec)
    return [spec for group in rotate(list(blocks.values()), repeat) for spec in rotate(group, repeat)]


def _run_rounds(runner: Runner, specs: Sequence[tuple[str, Mode, str]], repeats: int, rows: list[dict[str, Any]],
                timeline: list[dict[str, Any]], iterations: int | None = None) -> None:
    for repeat in range(repeats):
        for algorithm, mode, experiment in round_order(specs, repeat):
            row = runner.run(algorithm, mode, repeat, experiment, iterations)
            _print_run(row)
            if repeat == 0 and algorithm == "pr" and mode.partitioner == "hash" and mode.k == 1 and mode.selfish \
                    and experiment in ("overhead", "recovery") and mode.label in replication_tables.FIG12_RUNS:
                timeline.extend(timeline_rows(row, replication_tables.FIG12_RUNS[mode.label]))
            row.pop("_result", None)
            rows.append(row)


def _layouts(workloads: Workloads, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The driver-side layouts the tables need (see the module docstring)."""
    wanted: list[tuple[str, str, int]] = []
    for algorithm in args.rep_algorithms:
        wanted += [(algorithm, "hash", 0), (algorithm, "hash", 1)]
    if "pr" in args.rep_algorithms:
        wanted += [("pr", "hash", k) for k in range(2, args.rep_max_k + 1)]
        wanted += [("pr", "fennel", 0), ("pr", "fennel", 1)]
    from epochal.graph.local import program_layout

    out = []
    done: dict[tuple[Any, ...], dict[str, Any]] = {}
    for algorithm, partitioner, k in wanted:
        program = workloads.program(algorithm)
        key = (workloads.graph(algorithm).name, program_layout(program), getattr(program, "selfish_safe", False),
               partitioner, k)
        if key not in done:  # WCC and CDLP have the same layout
            done[key] = layout_stats(workloads.graph(algorithm), program, args.rep_parallelism, partitioner, k)
        stats = {**done[key], "algorithm": algorithm}
        out.append(stats)
        print(f"  layout {algorithm:>4} {partitioner:<6} k={k}: held per worker {stats['held']}, extra replicas "
              f"{stats['extra_replicas']:,}, {sum(stats['bytes']) / 2**20:.1f} MiB "
              f"({stats['partition_s'] + stats['build_s']:.1f} s on the driver)", flush=True)
    return out


def _profile(workloads: Workloads, parallelism: int, found: list[dict[str, Any]], texts: list[str]) -> None:
    """PageRank's Rebirth and Migration of worker 1, replayed in this process (replication_profile)."""
    started = time.perf_counter()
    try:
        rows, text = replication_profile.profile_recovery(workloads.graph("pr"), workloads.program("pr"), parallelism)
    except Exception as error:  # the engine's recovery functions changed: report, go on
        print(f"  recovery profile failed: {failure(error)}", flush=True)
        return
    found.extend(rows)
    texts.append(text)
    print(f"  recovery profile of {workloads.graph('pr').name}, p={parallelism}: "
          f"{time.perf_counter() - started:.0f} s", flush=True)


def _compute(workloads: Workloads, args: argparse.Namespace) -> list[dict[str, Any]]:
    """REP's overhead on the computation alone, per algorithm (replication_profile.compute_overhead)."""
    out = []
    for algorithm in args.rep_algorithms:
        try:
            row = replication_profile.compute_overhead(workloads.graph(algorithm), workloads.program(algorithm),
                                                       args.rep_parallelism)
        except Exception as error:
            print(f"  compute overhead of {algorithm} failed: {failure(error)}", flush=True)
            continue
        out.append({"algorithm": NAMES[algorithm], **row})
        print(f"  {algorithm:>4}: supersteps in one process {row['compute_none_s']:.3f} s without FT, "
              f"{row['compute_rep_s']:.3f} s with REP ({100 * row['compute_overhead']:+.1f} %)", flush=True)
    return out


def _large(spark: Any, args: argparse.Namespace, rows: list[dict[str, Any]],
           layouts: list[dict[str, Any]], profiles: list[dict[str, Any]], texts: list[str]) -> None:
    """Part 3: the driver's partitioning profiled, then the large PageRank runs."""
    workloads = Workloads(args.large_scale, args.seed, args.large_scale, args.large_iterations)
    started = time.perf_counter()
    bench = workloads.graph("pr")
    print(f"\nlarge: {bench.name} ({bench.num_vertices:,} vertices, {bench.num_edges:,} edges) generated in "
          f"{time.perf_counter() - started:.1f} s; p={args.large_parallelism}", flush=True)
    profile = cProfile.Profile()
    profile.enable()
    stats = layout_stats(bench, workloads.program("pr"), args.large_parallelism, "hash", 1)
    profile.disable()
    stats.update(algorithm="pr", large=True)
    layouts.append(stats)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(25)
    path = args.out / f"imitator_profile_s{args.large_scale}.txt"
    path.write_text(f"driver-side partitioning of {bench.name}, p={args.large_parallelism}, k=1: partition() "
                    f"{stats['partition_s']:.2f} s, replicated_partitions() {stats['build_s']:.2f} s\n\n"
                    + text.getvalue())
    print(f"  driver partitioning: partition {stats['partition_s']:.2f} s, replicated_partitions "
          f"{stats['build_s']:.2f} s; held per worker {stats['held']} (profile: {path.name})", flush=True)
    runner = Runner(spark, workloads, args.large_parallelism, args.timeout)
    # killed before the barrier: after it, a survivor already sending superstep 7 to the dead worker
    # fails the job (BrokenPipeError in the worker's exchange send; see docs/imitator_benchmarks.md)
    for mode in (Mode(), Mode("checkpoint", 4, killed=(1,), point="superstep"),
                 Mode("replication", recovery="rebirth", killed=(1,), point="superstep"),
                 Mode("replication", recovery="migration", killed=(1,), point="superstep")):
        row = runner.run("pr", mode, 0, "large")
        row.pop("_result", None)
        _print_run(row)
        rows.append(row)
    if args.rep_profile:
        _profile(workloads, args.large_parallelism, profiles, texts)


def main(spark: Any, args: argparse.Namespace) -> None:
    """Run everything (see the module docstring); write the CSVs and PNGs; print the tables."""
    started = time.perf_counter()
    workloads = Workloads(args.rep_scale, args.seed, args.als_scale or args.rep_scale - 2, args.rep_iterations)
    runner = Runner(spark, workloads, args.rep_parallelism, args.timeout)
    for algorithm in args.rep_algorithms:
        bench = workloads.graph(algorithm)
        print(f"{algorithm}: {bench.name} ({bench.num_vertices:,} vertices, {bench.num_edges:,} edges)", flush=True)
    rows: list[dict[str, Any]] = []
    timeline: list[dict[str, Any]] = []
    print("\nreference runs (no FT; also the warm-up):", flush=True)
    _run_rounds(runner, [(a, Mode(), "reference") for a in args.rep_algorithms], 1, [], [])
    print(f"\nfailure-free rounds ({time.perf_counter() - started:.0f} s):", flush=True)
    _run_rounds(runner, failure_free_specs(args), args.rep_repeats, rows, timeline)
    print(f"\nrecovery rounds ({time.perf_counter() - started:.0f} s):", flush=True)
    _run_rounds(runner, recovery_specs(args), args.rep_recovery_repeats, rows, timeline)
    print(f"\nlayouts ({time.perf_counter() - started:.0f} s):", flush=True)
    layouts = _layouts(workloads, args)
    profiles: list[dict[str, Any]] = []
    texts: list[str] = []
    compute = _compute(workloads, args) if args.rep_profile else []
    if args.rep_profile and "pr" in args.rep_algorithms:
        _profile(workloads, args.rep_parallelism, profiles, texts)
    if args.large_scale:
        _large(spark, args, rows, layouts, profiles, texts)
    write_csv(args.out / "imitator_runs.csv", rows)
    write_csv(args.out / "imitator_layouts.csv", [_flat(s) for s in layouts])
    tables = replication_tables.build(rows, layouts, timeline, args, compute)
    if profiles:
        write_csv(args.out / "imitator_recovery_profile_runs.csv", profiles)
        tables["recovery_profile"] = replication_profile.summarize(profiles)
        (args.out / "imitator_recovery_profile.txt").write_text("\n".join(texts))
    for name, table in tables.items():
        write_csv(args.out / f"imitator_{name}.csv", table)
        replication_tables.show(name, table)
    replication_plots.plot_all(args.out, tables, timeline, _title(workloads, args))
    print(f"\nreplication: {time.perf_counter() - started:.0f} s; wrote imitator_*.csv and imitator_*.png in "
          f"{args.out}", flush=True)


def _flat(stats: dict[str, Any]) -> dict[str, Any]:
    """A layout as one CSV row: per-worker lists joined with spaces."""
    return {k: " ".join(map(str, v)) if isinstance(v, list) else v for k, v in stats.items()}


def _title(workloads: Workloads, args: argparse.Namespace) -> str:
    import os

    return (f"epochal, R-MAT/grid scale {workloads.scale}, ratings scale {workloads.als_scale}, "
            f"p={args.rep_parallelism}, {os.cpu_count()} CPUs")

