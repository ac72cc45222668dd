"""The checkpoint baseline of papers/003 §2.3 (Fig. 2) on epochal: overhead and recovery time.

PageRank, ``--ckpt-iterations`` (20) iterations, on one R-MAT graph, at parallelism
``--ckpt-parallelism`` (2):

* **Overhead** (Fig. 2(a), 2(b)): failure-free runs with ``fault_tolerance="none"`` and with
  ``"checkpoint"`` at each ``checkpoint_interval`` (1, 2, 4 supersteps), interleaved over
  ``--ckpt-repeats`` rounds in rotating order. Reported: the overall overhead of each interval on
  the wall time of ``run_graph`` and on the superstep phase alone (first superstep started -> last
  completed, which leaves out the fixed partitioning and start-up), and, from
  ``GraphResult.timings``, the median time of a superstep that checkpoints against one that does
  not (superstep 0, PageRank's initialisation, is left out), with the bytes one checkpoint writes.
* **Recovery** (Fig. 2(c), Table 2): the same job with ``Fault("superstep", worker=1,
  superstep=k)`` (``--fail-at``, 15: worker 1 is SIGKILLed after computing superstep k, before the
  barrier), per interval and once without fault tolerance (a restart from superstep 0). The
  JobMaster reports ``recovered_s`` (failure detected -> every worker of the new attempt loaded,
  restored and ready) and ``resumed_s`` (-> the first superstep of the new attempt computed).
  The run is split, from the timings and the JobMaster's events (recorded by wrapping
  ``JobMasterMachine.handle``, :func:`~benchmarks.common.measure.jobmaster_events`), into: *lost*
  (the failed superstep's start -> failure detected: its computation, the kill, the detection), *stop* (-> the failed
  attempt's Spark job ended), *resubmit* (-> the next attempt's Spark job submitted), *register*
  (-> every new worker registered: Spark schedules the tasks, a fresh Python worker replaces the
  killed one and imports epochal), *load + restore* (-> every worker ready: deploy, peer mesh,
  partition file read, checkpoint chain read and applied, replicas resynced; the paper's
  reload and reconstruct), and *replay* (the new attempt's first superstep started -> superstep
  k completed again). The data part of *load + restore* is also measured on its own, in the
  driver, on the very files the restart read (the slowest worker's partition file, and its
  checkpoint chain read and applied). The job's total time is compared with the failure-free
  median.

Writes ``graph_checkpoint.csv`` (one row per run) and ``graph_checkpoint.png`` (three panels like
Fig. 2) and prints the overhead and recovery tables.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.isolation import rotate
from benchmarks.common.measure import Event, Timer, event_after, jobmaster_events
from benchmarks.common.results import failure, pyplot, save_figure, write_csv
from benchmarks.common.stats import median
from benchmarks.graph import peers
from benchmarks.graph.generators import BenchGraph, rmat

#: papers/003 Fig. 2(b): overall overhead of Imitator-CKPT, PageRank on LJournal, 20 iterations,
#: checkpoint interval (iterations) -> overhead; and Table 2, CKPT recovery time of PageRank (s).
PAPER_OVERHEAD = {1: 0.89, 2: 0.51, 4: 0.26}
PAPER_RECOVERY_S = {"GWeb": 8.17, "LJournal": 41.00, "Wiki": 55.67}


def _label(interval: int | None) -> str:
    return "none" if interval is None else f"ckpt-{interval}"


def _bytes_per_checkpoint(work: Path) -> tuple[float, int]:
    """Median bytes of one checkpoint (all workers' files) under a job's work dir, and the count."""
    sizes = []
    for directory in sorted((work / "checkpoints").glob("chk-*")):
        sizes.append(sum(f.stat().st_size for f in directory.iterdir() if f.name.startswith("worker-")))
    return (median(sizes) if sizes else 0.0), len(sizes)


def _reload_seconds(work: Path, checkpoint_id: int | None, parallelism: int) -> tuple[float, float]:
    """The slowest worker's time to read its partition file, and to read and apply its checkpoint
    chain of ``checkpoint_id`` (0 without one), measured here on the files the restart read."""
    from epochal.graph import checkpoints
    from epochal.graph.deployment import read_partition
    from epochal.state.storage import CheckpointStorage

    load, restore = 0.0, 0.0
    storage = CheckpointStorage(str(work / "checkpoints")) if checkpoint_id is not None else None
    metadata = storage.read_metadata(checkpoint_id) if storage is not None and checkpoint_id is not None else None
    for worker in range(parallelism):
        started = time.perf_counter()
        part = read_partition(str(work), worker)
        load = max(load, time.perf_counter() - started)
        if storage is not None and metadata is not None:
            started = time.perf_counter()
            files = checkpoints.read_chain(storage, metadata["workers"][str(worker)])
            checkpoints.vector_state(files, part.num_masters)
            restore = max(restore, time.perf_counter() - started)
    return load, restore


def _restart_index(timings: Sequence[dict[str, Any]]) -> int:
    """Index of the new attempt's first superstep: the one after the superstep the failure cut short
    (the only one without a completion time)."""
    return next(i for i, t in enumerate(timings) if "completed" not in t) + 1


def timeline(result: Any, fail_at: int, events: Sequence[Event], workers: int) -> dict[str, float]:
    """Where a run with one failure at ``fail_at`` spent its recovery (see the module docstring)."""
    timings, restart = result.timings, result.restarts[0]
    boundary = _restart_index(timings)
    failed = timings[boundary - 1]
    again = next(t for t in timings[boundary:] if t["superstep"] == fail_at)
    detected = restart["detected"]
    ended = event_after(events, "SparkJobEnded", detected)
    submitted = event_after(events, "SubmitSparkJob", ended)
    registered = event_after(events, "Register", submitted, workers)
    ready = event_after(events, "Ready", registered, workers)
    return {"lost_s": detected - failed["started"], "recovered_s": restart["recovered_s"],
            "resumed_s": restart["resumed_s"], "stop_s": ended - detected, "resubmit_s": submitted - ended,
            "register_s": registered - submitted, "load_restore_s": ready - registered,
            "replay_s": again["completed"] - timings[boundary]["started"],
            "recovery_total_s": again["completed"] - detected,
            "replayed_supersteps": fail_at - timings[boundary]["superstep"] + 1}


def run_once(ctx: peers.Context, bench: BenchGraph, interval: int | None, parallelism: int, repeat: int,
             reference: np.ndarray, fail_at: int | None = None) -> dict[str, Any]:
    """One PageRank job, failure-free or with one fault; its row of ``graph_checkpoint.csv``."""
    from epochal.control.restart import FixedDelayRestart
    from epochal.runtime.host.hooks import Fault

    work_dir = Path(tempfile.mkdtemp(prefix="epochal-graph-ckpt-"))
    options: dict[str, Any] = {"work_dir": str(work_dir)}
    if interval is not None:
        options.update(fault_tolerance="checkpoint", checkpoint_interval=interval)
    if fail_at is not None:
        options["faults"] = [Fault("superstep", worker=1, superstep=fail_at)]
        if interval is None:
            options["restart"] = FixedDelayRestart(attempts=1, delay=0.0)  # from superstep 0 again
    row: dict[str, Any] = {"mode": _label(interval), "interval": interval or "", "fail_at": "" if fail_at is None
                           else fail_at, "repeat": repeat, "scale": bench.scale, "vertices": bench.num_vertices,
                           "edges": bench.num_edges, "iterations": ctx.iterations, "parallelism": parallelism}
    try:
        with jobmaster_events() as events, Timer() as timer:
            outcome = peers.run_epochal(ctx, bench, "pr", parallelism, **options)
        result = outcome.result
        assert result is not None
        correct, error = peers.check("pr", outcome, reference)
        done = [t for t in result.timings if "completed" in t]
        plain = [t["completed"] - t["started"] for t in done if t["superstep"] > 0 and not t["checkpoint"]]
        ckpt = [t["completed"] - t["started"] for t in done if t["superstep"] > 0 and t["checkpoint"]]
        row.update(status="ok" if correct else "wrong", max_rel_error=error, seconds=timer.seconds,
                   job_s=result.duration_s,
                   supersteps_s=done[-1]["completed"] - done[0]["started"] if fail_at is None else float("nan"),
                   plain_step_s=median(plain), ckpt_step_s=median(ckpt), checkpoints=sum(1 for t in done
                                                                                      if t["checkpoint"]))
        work = next(p for p in work_dir.iterdir() if p.is_dir())
        row["bytes_per_checkpoint"], _ = _bytes_per_checkpoint(work)
        if fail_at is not None:
            row.update(timeline(result, fail_at, events, parallelism))
            restored = result.restored_from[0] if result.restored_from else None
            row["restored_from"] = "" if restored is None else restored
            row["load_partition_s"], row["read_checkpoint_s"] = _reload_seconds(work, restored, parallelism)
    except Exception as error:
        row["status"] = failure(error)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return row


def run(ctx: peers.Context, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Warm-up, interleaved failure-free rounds, then the recovery runs."""
    bench = rmat(args.ckpt_scale, args.seed)
    reference = peers.run_scipy(ctx, bench, "pr").values
    print(f"checkpoint baseline: PageRank {ctx.iterations} iterations on {bench.name} ({bench.num_vertices:,} "
          f"vertices, {bench.num_edges:,} edges), parallelism {args.ckpt_parallelism}", flush=True)
    small = rmat(10, args.seed)
    peers.run_epochal(ctx, small, "pr", args.ckpt_parallelism, fault_tolerance="checkpoint")  # warm-up
    modes: list[int | None] = [None, *args.intervals]
    rows = []
    for repeat in range(args.ckpt_repeats):
        for interval in rotate(modes, repeat):
            row = run_once(ctx, bench, interval, args.ckpt_parallelism, repeat, reference)
            rows.append(row)
            _print_run(row)
    for repeat in range(args.recovery_repeats):
        for interval in modes:
            row = run_once(ctx, bench, interval, args.ckpt_parallelism, repeat, reference, fail_at=args.fail_at)
            rows.append(row)
            _print_run(row)
    return rows


def _print_run(row: dict[str, Any]) -> None:
    if row["status"] not in ("ok", "wrong"):
        print(f"  {row['mode']:>7} fail_at={row['fail_at']}: {row['status']}", flush=True)
        return
    text = (f"  [{row['repeat']}] {row['mode']:>7}: {row['seconds']:6.2f} s wall, superstep plain "
            f"{row['plain_step_s'] * 1e3:7.1f} ms, checkpointing {row['ckpt_step_s'] * 1e3:7.1f} ms, "
            f"{row['checkpoints']} checkpoints of {row['bytes_per_checkpoint'] / 1e6:.2f} MB")
    if row["fail_at"] != "":
        text += (f"; failure at {row['fail_at']}: restored from {row['restored_from'] or 'nothing'}, "
                 f"recovered {row['recovered_s']:.2f} s, replay {row['replay_s']:.2f} s "
                 f"({row['replayed_supersteps']} supersteps), recovery total {row['recovery_total_s']:.2f} s")
    print(text + ("" if row["status"] == "ok" else "  WRONG ANSWER"), flush=True)


def summarize(rows: Sequence[dict[str, Any]], intervals: Sequence[int]) -> dict[str, dict[str, float]]:
    """Per mode: medians of the failure-free runs (overheads against ``none``) and of the recoveries."""
    out: dict[str, dict[str, float]] = {}
    free = [r for r in rows if r["status"] == "ok" and r["fail_at"] == ""]
    failed = [r for r in rows if r["status"] == "ok" and r["fail_at"] != ""]
    base = {k: median(r[k] for r in free if r["mode"] == "none") for k in ("seconds", "supersteps_s", "plain_step_s")}
    for interval in [None, *intervals]:
        mode = _label(interval)
        mine = [r for r in free if r["mode"] == mode]
        summary = {k: median(r[k] for r in mine) for k in ("seconds", "supersteps_s", "plain_step_s", "ckpt_step_s",
                                                           "bytes_per_checkpoint")}
        summary["overhead_wall"] = summary["seconds"] / base["seconds"] - 1
        summary["overhead_supersteps"] = summary["supersteps_s"] / base["supersteps_s"] - 1
        summary["checkpoint_cost_s"] = summary["ckpt_step_s"] - base["plain_step_s"]
        recoveries = [r for r in failed if r["mode"] == mode]
        for key in ("seconds", "lost_s", "recovered_s", "resumed_s", "stop_s", "resubmit_s", "register_s",
                    "load_restore_s", "replay_s", "recovery_total_s", "replayed_supersteps", "load_partition_s",
                    "read_checkpoint_s"):
            summary[f"failure_{key}"] = median(r[key] for r in recoveries)
        summary["failure_extra_s"] = summary["failure_seconds"] - base["seconds"]
        out[mode] = summary
    return out


def print_tables(summary: dict[str, dict[str, float]]) -> None:
    print(f"\n{'mode':>7} {'wall s':>7} {'overhead':>9} {'steps s':>8} {'overhead':>9} {'plain ms':>9} "
          f"{'ckpt ms':>8} {'ckpt cost ms':>12} {'MB/ckpt':>8}  paper (LJournal, Fig. 2b)")
    for mode, s in summary.items():
        interval = int(mode.split("-")[1]) if mode != "none" else None
        paper = f"{PAPER_OVERHEAD[interval]:.0%}" if interval in PAPER_OVERHEAD else ""
        print(f"{mode:>7} {s['seconds']:>7.2f} {s['overhead_wall']:>9.1%} {s['supersteps_s']:>8.3f} "
              f"{s['overhead_supersteps']:>9.1%} {s['plain_step_s'] * 1e3:>9.1f} {s['ckpt_step_s'] * 1e3:>8.1f} "
              f"{s['checkpoint_cost_s'] * 1e3:>12.1f} {s['bytes_per_checkpoint'] / 1e6:>8.2f}  {paper}")
    print(f"\n{'mode':>7} {'replayed':>8} {'lost':>6} {'stop':>6} {'resubmit':>8} {'register':>8} "
          f"{'load+restore':>12} {'(partition':>10} {'ckpt)':>6} {'replay':>7} | {'recovered':>9} "
          f"{'recovery':>8} {'job s':>7} {'extra s':>7}   (seconds, medians)")
    for mode, s in summary.items():
        print(f"{mode:>7} {s['failure_replayed_supersteps']:>8.0f} {s['failure_lost_s']:>6.2f} "
              f"{s['failure_stop_s']:>6.2f} {s['failure_resubmit_s']:>8.2f} {s['failure_register_s']:>8.2f} "
              f"{s['failure_load_restore_s']:>12.2f} {s['failure_load_partition_s']:>10.3f} "
              f"{s['failure_read_checkpoint_s']:>6.3f} {s['failure_replay_s']:>7.2f} | "
              f"{s['failure_recovered_s']:>9.2f} {s['failure_recovery_total_s']:>8.2f} {s['failure_seconds']:>7.2f} "
              f"{s['failure_extra_s']:>7.2f}")
    print("paper (Table 2, CKPT recovery, PageRank): " + ", ".join(f"{g} {s:.2f} s" for g, s in
                                                                  PAPER_RECOVERY_S.items()))


def plot(path: Path, summary: dict[str, dict[str, float]], title: str) -> None:
    """Fig. 2's three panels: (a) one superstep with and without a checkpoint, (b) overall overhead
    per interval (ours on the wall and on the supersteps; the paper's), (c) recovery breakdown."""
    plt = pyplot()
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(16, 5.6))
    modes = [m for m in summary if m != "none"]
    x = np.arange(len(modes))
    a.bar(x - 0.2, [summary["none"]["plain_step_s"] * 1e3] * len(modes), 0.4, label="superstep, no checkpoint")
    a.bar(x + 0.2, [summary[m]["ckpt_step_s"] * 1e3 for m in modes], 0.4, label="superstep that checkpoints")
    a.set_xticks(x, modes)
    a.set_ylim(0, max(summary[m]["ckpt_step_s"] for m in modes) * 1e3 * 1.4)
    a.set_ylabel("ms (median)")
    a.set_title("(a) cost of one checkpoint")
    a.legend()
    b.bar(x - 0.27, [summary[m]["overhead_wall"] * 100 for m in modes], 0.27, label="epochal, wall of run_graph")
    b.bar(x, [summary[m]["overhead_supersteps"] * 100 for m in modes], 0.27, label="epochal, superstep phase")
    b.bar(x + 0.27, [PAPER_OVERHEAD.get(int(m.split("-")[1]), np.nan) * 100 for m in modes], 0.27,
          label="papers/003 Fig. 2(b), LJournal")
    b.set_xticks(x, modes)
    b.set_ylabel("overhead over no fault tolerance (%)")
    b.set_title("(b) overall overhead, PageRank 20 iterations")
    b.legend()
    everything = list(summary)
    bottom = np.zeros(len(everything))
    for key, label in (("failure_lost_s", "failed superstep + detection"),
                       ("failure_stop_s", "old Spark job stopped"),
                       ("failure_resubmit_s", "next attempt submitted"),
                       ("failure_register_s", "new workers started + registered"),
                       ("failure_load_restore_s", "partition + checkpoint loaded, replicas resynced"),
                       ("failure_replay_s", "replay")):
        heights = np.nan_to_num([summary[m][key] for m in everything])
        c.bar(everything, heights, bottom=bottom, label=label)
        bottom += heights
    c.axhline(summary["none"]["plain_step_s"], color="black", linestyle=":", label="one superstep")
    c.set_ylabel("seconds (median of each part)")
    c.set_ylim(0, max(bottom.max(), 1e-3) * 1.8)
    replayed = [summary[m]["failure_replayed_supersteps"] for m in everything]
    c.set_title("(c) recovery breakdown; supersteps replayed: "
                + ", ".join("-" if r != r else str(int(r)) for r in replayed))
    c.legend(fontsize=7, ncol=2, loc="upper center")
    fig.suptitle(title)
    save_figure(fig, path)


def main(spark: Any, args: argparse.Namespace) -> None:
    """Run the checkpoint baseline; write ``graph_checkpoint.csv`` and ``.png``; print the tables."""
    ctx = peers.Context(spark, args.ckpt_iterations, peers.scratch_dir(), args.timeout)
    started = time.perf_counter()
    rows = run(ctx, args)
    write_csv(args.out / "graph_checkpoint.csv", rows)
    summary = summarize(rows, args.intervals)
    write_csv(args.out / "graph_checkpoint_summary.csv", [{"mode": m, **s} for m, s in summary.items()])
    first = next((r for r in rows if r["status"] == "ok"), rows[0])
    plot(args.out / "graph_checkpoint.png", summary,
         f"epochal checkpoint baseline: PageRank {args.ckpt_iterations} iterations, R-MAT scale {args.ckpt_scale} "
         f"({first['vertices']:,} vertices, {first['edges']:,} edges), p={args.ckpt_parallelism}, "
         f"{os.cpu_count()} CPUs, local disk")
    print_tables(summary)
    shutil.rmtree(ctx.scratch, ignore_errors=True)
    print(f"\ncheckpoint: {time.perf_counter() - started:.0f} s; wrote graph_checkpoint.csv, "
          f"graph_checkpoint_summary.csv, graph_checkpoint.png in {args.out}", flush=True)
