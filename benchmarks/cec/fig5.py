"""papers/002 Fig. 5: the baseline impact of CEC (G_open tuples only) on throughput.

Workloads (2 item ids, random): *fast* windows (count windows of 1 tuple: every tuple opens and
closes a window) and *slow* windows (1,000 tuples), the source as fast as it goes; and *paced*:
fast windows with the source paced at ``--paced-rate`` tuples/s (10,000), below what every mode
sustains, as in the paper, whose aggregate was not CPU-bound (its source was the limit).
Modes: ``native`` (no fault tolerance), ``gopen_net`` (G_open forwarded, not persisted: the
paper's Gopen/Net), ``gopen_disk`` (G_open persisted: Gopen/Disk; the source's output queue is
persisted too, as every stage's is); *Real* is Gopen/Disk's rate counting results and G_opens
(the operator's output into its queue: G_opens are logged, not sent on to the sink). CPU: each
worker process's CPU seconds per second of the processing phase (1.0 = one core).
Rate = committed results / the JobMaster's processing phase (first ``Processing`` -> last
``StageDone``, so Spark's task launch and shutdown are left out; a warm-up job ran first).
``rate_uptime`` divides by the window worker's own uptime instead (a cross-check). Repeats are
interleaved: each round runs every mode of a workload, in a rotating order. Medians are over the
quiet runs (other processes used < 0.25 cores meanwhile: see ``foreign_cpu_cores``) when there
are any, else over all.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.cec import anatomy
from benchmarks.cec.common import Context, by, column, exact_all, fmt, quiet
from benchmarks.cec.profile import profiled, top
from benchmarks.cec.runner import Spec
from benchmarks.common.isolation import rotate
from benchmarks.common.results import error_bars, pyplot, save_figure
from benchmarks.common.stats import median_min_max

WORKLOADS = {"fast": 1, "slow": 1000, "paced": 1}
KEYS = 2
MODES = ("native", "gopen_net", "gopen_disk")
BARS = ("native", "gopen_net", "gopen_disk", "real")
LABELS = {"native": "native", "gopen_net": "Gopen/Net", "gopen_disk": "Gopen/Disk", "real": "Real"}
GOAL = 0.9  # G_open only within 10 % of native (the paper: Gopen/Net drops by less than 10 %)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fig5")
    group.add_argument("--fast-records", type=int, default=None, help="tuples of a fast-window run (500,000)")
    group.add_argument("--slow-records", type=int, default=None, help="tuples of a slow-window run (2,000,000)")
    group.add_argument("--paced-rate", type=float, default=10_000.0,
                       help="tuples/s of the paced fast-window runs (10,000; 0: no paced runs), 10 s each")


def main(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    records = {"fast": args.fast_records or (40_000 if quick else 500_000),
               "slow": args.slow_records or (150_000 if quick else 2_000_000)}
    rate = args.paced_rate or None
    records["paced"] = int(rate * (2 if quick else 10)) if rate else 0
    workloads = {w: size for w, size in WORKLOADS.items() if records[w]}
    repeats = args.repeats or (1 if quick else 3)
    ctx = Context(args, "fig5")
    try:
        for repeat in range(0 if ctx.loaded else repeats):
            for index, (workload, size) in enumerate(workloads.items()):
                for mode in rotate(MODES, repeat + index):
                    row = ctx.run(Spec(mode, records[workload], KEYS, size, rate=rate if workload == "paced" else None),
                                  workload=workload, repeat=repeat)
                    processing = row.get("processing_s", float("nan"))
                    results = row.get("results", 0)
                    row["rate"] = results / processing if processing == processing and processing else float("nan")
                    uptime = row.get("window_uptime_s", float("nan"))
                    row["rate_uptime"] = results / uptime if uptime == uptime and uptime else float("nan")
                    if mode == "gopen_disk":
                        row["real_rate"] = (results + row.get("g_open", 0)) / processing if processing else float("nan")
        if not ctx.loaded:
            ctx.write("cec_fig5.csv")
        summary = summarise(ctx.rows, workloads)
        ctx.write("cec_fig5_summary.csv", summary)
        plot(summary, ctx, records, workloads)
        goals = report(summary, ctx.rows)
        if args.profile and not ctx.loaded and not all(goals.values()):
            profile(ctx, records)
        print(f"fig5: {ctx.elapsed():.0f} s, every run's output exact: {exact_all(ctx.rows)}")
        return goals
    finally:
        ctx.close()


def summarise(rows: list[dict[str, Any]], workloads: dict[str, int]) -> list[dict[str, Any]]:
    out = []
    for workload in workloads:
        native = quiet(by(rows, workload=workload, mode="native"))
        base, _, _ = median_min_max(column(native, "rate"))
        base_uptime, _, _ = median_min_max(column(native, "rate_uptime"))
        for bar in BARS:
            every = by(rows, workload=workload, mode="gopen_disk" if bar == "real" else bar)
            runs = quiet(every)
            key = "real_rate" if bar == "real" else "rate"
            med, lo, hi = median_min_max(column(runs, key))
            up, _, _ = median_min_max(column(runs, "rate_uptime")) if bar != "real" else (float("nan"),) * 3
            proc, _, _ = median_min_max(column(runs, "processing_s"))
            cpu, _, _ = median_min_max(column(runs, "cpu_w1_share"))
            cpu_source, _, _ = median_min_max(column(runs, "cpu_w0_share"))
            out.append({"workload": workload, "window_size": WORKLOADS[workload], "bar": LABELS[bar],
                        "runs": len(every), "quiet_runs": len(runs), "median_per_s": med, "min_per_s": lo,
                        "max_per_s": hi,
                        "vs_native": med / base if base else float("nan"),
                        "vs_native_uptime_based": up / base_uptime if bar != "real" and base_uptime else float("nan"),
                        "median_processing_s": proc, "window_worker_cpu": cpu, "source_worker_cpu": cpu_source,
                        "exact": exact_all(every)})
    return out


def report(summary: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, bool]:
    print("\nFig. 5: committed results per second (median of the runs, min-max), ratio to native")
    print(f"{'workload':>9} {'bar':>11} {'results/s':>12} {'min':>12} {'max':>12} {'x native':>9} "
          f"{'x native (uptime)':>18} {'quiet/runs':>10} {'CPU window':>10} {'CPU source':>10}")
    for s in summary:
        print(f"{s['workload']:>9} {s['bar']:>11} {fmt(s['median_per_s'], 0):>12} {fmt(s['min_per_s'], 0):>12} "
              f"{fmt(s['max_per_s'], 0):>12} {fmt(s['vs_native'], 3):>9} {fmt(s['vs_native_uptime_based'], 3):>18} "
              f"{s['quiet_runs']:>5}/{s['runs']} {fmt(s['window_worker_cpu'], 2):>10} "
              f"{fmt(s['source_worker_cpu'], 2):>10}")
    goals = {}
    for s in summary:
        if s["bar"] in ("Gopen/Net", "Gopen/Disk") and s["workload"] != "paced":
            goals[f"{s['workload']} {s['bar']} >= {GOAL:.0%} of native"] = s["vs_native"] >= GOAL
    for name, met in goals.items():
        print(f"goal {name}: {'met' if met else 'MISSED'}")
    return goals


def plot(summary: list[dict[str, Any]], ctx: Context, records: dict[str, int], workloads: dict[str, int]) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4.2), squeeze=False)
    for ax, workload in zip(axes[0], workloads, strict=True):
        bars = [s for s in summary if s["workload"] == workload]
        med, err = error_bars((s["median_per_s"], s["min_per_s"], s["max_per_s"]) for s in bars)
        ax.bar([s["bar"] for s in bars], med, yerr=err, capsize=4,
               color=["tab:grey", "tab:blue", "tab:orange", "tab:green"])
        for i, s in enumerate(bars):
            ax.annotate(f"x{s['vs_native']:.2f}", (i, s["median_per_s"]), ha="center", va="bottom", fontsize=8,
                        xytext=(0, 3), textcoords="offset points")
        paced = " paced" if workload == "paced" else ""
        ax.set_title(f"{workload} windows (size {WORKLOADS[workload]:,}, {records[workload]:,} tuples{paced})",
                     fontsize=10)
        ax.set_ylabel("tuples/s at the sink")
    fig.suptitle("CEC baseline impact (G_open only), papers/002 Fig. 5: median of runs, min-max")
    save_figure(fig, ctx.out / "cec_fig5.png")


def profile(ctx: Context, records: dict[str, int]) -> None:
    """Where the time goes when G_open costs more than 10 %: the window stage's steps replayed in
    this process (with two what-ifs), and a cProfile of the window worker of a real run."""
    n = min(records["fast"], 200_000)
    rows = []
    for gc_off, variant in ((False, "as is"), (True, "what-if: gc off")):
        for mode in ("native", "cec"):
            row = anatomy.window_path(mode, n, KEYS, 1, gc_off=gc_off)
            row["variant"] = variant
            rows.append(row)
    ctx.write("cec_fig5_anatomy.csv", rows)
    print("\nWhere the window stage's time goes (fast windows, in one process, seconds for "
          f"{n:,} tuples):")
    steps = [k for k in rows[0] if k.endswith("_s") and k != "total_s"]
    print(f"{'mode':>11} {'variant':>26} " + " ".join(f"{s[:-2]:>12}" for s in steps)
          + f" {'total':>7} {'us/tuple':>8}")
    for r in rows:
        print(f"{r['mode']:>11} {r['variant']:>26} " + " ".join(f"{r[s]:>12.3f}" for s in steps)
              + f" {r['total_s']:>7.2f} {r['us_per_tuple']:>8.1f}")
    path = str(ctx.out / "cec_fig5_profile_gopen_disk_fast.pstats")
    with profiled(1, path, seconds=6.0):
        ctx.run(Spec("gopen_disk", records["fast"], KEYS, 1), workload="fast", repeat="profiled")
    ctx.rows.pop()  # a profiled run is slower: not part of the figure
    text = top(path, 30)
    (ctx.out / "cec_fig5_profile_gopen_disk_fast.txt").write_text(text)
    print("\ncProfile of the window worker (Gopen/Disk, fast windows), by own time:\n"
          + "\n".join(text.splitlines()[:40]))
