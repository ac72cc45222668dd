"""papers/002 Fig. 6 (effect of Q) and Fig. 7 (effect of U) on epochal's CEC.

The paper's recovery set-up: 100,000 item ids (random), count windows of 10, a filter between the
source and the aggregate (here chained with the source: the source stage's persisted output is
what upstream replays), CI = 5 ms, CP = 100 ms. The window worker is killed (SIGKILL) once it
read half of the tuples ("a crash in the middle of each run"); a replacement rebuilds it from its
output queue (the eventual checkpoint) and the source replays after T.

First the open windows at the crash point are measured (``openwins``: a native run of exactly
that many tuples, its window worker's ``open_windows``; the oracle's count is printed beside it).
Fig. 6 varies Q from 1 to 8 x openwins with U out of the way (10^12); Fig. 7 varies U from
125,000 to 1,000,000 tuples with Q out of the way. Per run:

* **G_checks emitted**: before the kill (the killed worker's last heartbeat, at most 0.5 s old)
  and over the whole run (plus its replacement's);
* **extent** at the crash: the tuples EC reconstruction rolled back over (``phases.extent``);
* **EC-load time**: reconstructing the EC from the log and loading it into the operator
  (``reconstruct_s + load_s``);
* **replayed upstream**: the tuples between T and the newest position of the crashed instance,
  which the source re-sent and the replacement re-read (the window's ``caught_up`` count, exact),
  times the measured bytes per tuple in the source's log (``source_bytes_logged / records``);
  tuples the crashed instance had read but not yet made durable are re-sent too, but the
  replacement cannot tell them from new ones (at most a few frames of 1,024);
* ``exact``: the committed output equals the oracle's, multiset for multiset.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from benchmarks.cec.common import Context, bytes_per_tuple, exact_all, fmt
from benchmarks.cec.runner import Spec
from benchmarks.cec.workload import open_windows_at
from benchmarks.common.results import pyplot, save_figure

OFF = 10**12  # a Q or U target that never triggers a G_check
Q_FACTORS = (1, 2, 4, 8)
U_TARGETS = (125_000, 250_000, 500_000, 1_000_000)
CI, CP = 0.005, 0.1
SIZE = 10

PAPER_Q = ("openwins ~90,000; G_checks drop sharply for Q > 2 x openwins; extents of 120,000-180,000 "
           "tuples take 3.5-5 s of EC-load, larger ones 14-27 s; 25-50 MB replayed for low Q, >200 MB "
           "for high Q; the largest extent this configuration reaches is 500,000")
PAPER_U = ("fewer G_checks as U grows (less sharply than for Q); extent 120,000 -> 230,000 tuples; "
           "EC-load 2.5 s -> 6.7 s; 20 MB (200,000 tuples) -> 90 MB (900,000 tuples) replayed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fig6, fig7")
    group.add_argument("--ft-records", type=int, default=None,
                       help="tuples per run of fig6/fig7 (default 2,000,000; killed at half)")
    group.add_argument("--ft-keys", type=int, default=None, help="item ids (default 100,000)")
    group.add_argument("--q-factors", type=float, nargs="+", default=list(Q_FACTORS),
                       help="fig6: Q as multiples of the open windows (default 1 2 4 8)")
    group.add_argument("--u-targets", type=int, nargs="+", default=None,
                       help="fig7: U in tuples (default 125000 250000 500000 1000000, scaled by keys/100,000)")


def _setup(args: argparse.Namespace) -> tuple[int, int, int]:
    keys = args.ft_keys or (10_000 if args.quick else 100_000)
    records = args.ft_records or (200_000 if args.quick else 2_000_000)
    return keys, records, records // 2


def measure_open_windows(ctx: Context, keys: int, records: int, kill: int) -> int:
    """The open windows at the crash point, measured by a native run of that many tuples."""
    if ctx.loaded:
        return int(next(r["open_windows_end"] for r in ctx.rows if r.get("point") == "openwins"))
    row = ctx.run(Spec("native", kill, keys, SIZE, filter_stage=True), point="openwins")
    measured = int(row.get("open_windows_end", 0) or 0)
    expected = open_windows_at(kill, keys, SIZE)
    print(f"openwins after {kill:,} tuples over {keys:,} ids: {measured:,} measured (oracle {expected:,})")
    return measured or expected


def derive(row: dict[str, Any]) -> None:
    """The paper's four metrics from one crash run's row."""
    row["g_checks_whole_run"] = (row.get("g_check_before_kill", 0) or 0) + (row.get("g_check", 0) or 0)
    kill_at = row.get("kill_at_s", float("nan"))
    row["g_checks_per_s_before_kill"] = (row.get("g_check_before_kill", 0) or 0) / kill_at if kill_at else float("nan")
    row["extent"] = row.get("phase_extent", float("nan"))
    row["bytes_per_tuple"] = bytes_per_tuple(row)
    row["replayed_tuples"] = row.get("caught_up", 0)
    row["replayed_mb"] = row["replayed_tuples"] * row["bytes_per_tuple"] / 1e6
    # the first tuple replayed: everything after T reached the replacement
    records_in = row.get("window_records_in", 0) or 0
    row["t_tuple"] = row.get("records", 0) - records_in if records_in else float("nan")


def main_q(args: argparse.Namespace) -> None:
    keys, records, kill = _setup(args)
    ctx = Context(args, "fig6")
    try:
        openwins = measure_open_windows(ctx, keys, records, kill)
        for repeat in range(0 if ctx.loaded else args.repeats or 1):
            for factor in args.q_factors:
                q = max(1, int(factor * openwins))
                row = ctx.run(Spec("cec", records, keys, SIZE, filter_stage=True, q_target=q, u_target=OFF,
                                   ci=CI, cp=CP, kill_after=kill), q_factor=factor, openwins=openwins, repeat=repeat)
                derive(row)
        if not ctx.loaded:
            ctx.write("cec_fig6.csv")
        runs = [r for r in ctx.rows if r.get("q_factor") not in (None, "")]
        table(runs, "q_factor", "Q / openwins", f"Fig. 6: effect of Q (openwins = {openwins:,}, CI 5 ms, CP 100 ms, "
              f"{records:,} tuples, {keys:,} ids, killed after {kill:,})", PAPER_Q)
        plot(runs, "q_factor", "Q (x openwins)", ctx, "cec_fig6.png",
             f"Effect of Q, papers/002 Fig. 6 (openwins {openwins:,}, killed after {kill:,} of {records:,} tuples)")
        print(f"fig6: {ctx.elapsed():.0f} s, every run's output exact: {exact_all(ctx.rows)}")
    finally:
        ctx.close()


def main_u(args: argparse.Namespace) -> None:
    keys, records, kill = _setup(args)
    targets = args.u_targets or [max(1, u * keys // 100_000) for u in U_TARGETS]
    ctx = Context(args, "fig7")
    try:
        openwins = measure_open_windows(ctx, keys, records, kill)
        for repeat in range(0 if ctx.loaded else args.repeats or 1):
            for u in targets:
                row = ctx.run(Spec("cec", records, keys, SIZE, filter_stage=True, q_target=OFF, u_target=u,
                                   ci=CI, cp=CP, kill_after=kill), openwins=openwins, repeat=repeat)
                derive(row)
                row["u"] = u
        if not ctx.loaded:
            ctx.write("cec_fig7.csv")
        runs = [r for r in ctx.rows if r.get("u") not in (None, "")]
        table(runs, "u", "U (tuples)", f"Fig. 7: effect of U (openwins = {openwins:,}, CI 5 ms, CP 100 ms, "
              f"{records:,} tuples, {keys:,} ids, killed after {kill:,})", PAPER_U)
        plot(runs, "u", "U (tuples)", ctx, "cec_fig7.png",
             f"Effect of U, papers/002 Fig. 7 (openwins {openwins:,}, killed after {kill:,} of {records:,} tuples)")
        print(f"fig7: {ctx.elapsed():.0f} s, every run's output exact: {exact_all(ctx.rows)}")
    finally:
        ctx.close()


def table(runs: list[dict[str, Any]], key: str, label: str, title: str, paper: str) -> None:
    print(f"\n{title}")
    print(f"{label:>14} {'G_chk<kill':>10} {'G_chk run':>10} {'extent':>9} {'EC-load s':>9} {'(reconstr':>9} "
          f"{'load)':>6} {'T tuple':>9} {'replayed':>9} {'MB':>7} {'ready s':>7} {'resumed':>7} {'1st commit':>10} "
          f"{'exact':>6}")
    for r in runs:
        print(f"{fmt(r.get(key)):>14} {fmt(r.get('g_check_before_kill', float('nan'))):>10} "
              f"{fmt(r.get('g_checks_whole_run', float('nan'))):>10} {fmt(r.get('extent', float('nan')), 0):>9} "
              f"{fmt(r.get('ec_load_s', float('nan')), 2):>9} {fmt(r.get('phase_reconstruct_s', float('nan')), 2):>9} "
              f"{fmt(r.get('phase_load_s', float('nan')), 2):>6} {fmt(r.get('t_tuple', float('nan')), 0):>9} "
              f"{fmt(r.get('replayed_tuples', float('nan'))):>9} {fmt(r.get('replayed_mb', float('nan')), 1):>7} "
              f"{fmt(r.get('ready_s', float('nan')), 2):>7} {fmt(r.get('resumed_s', float('nan')), 2):>7} "
              f"{fmt(r.get('first_commit_s', float('nan')), 2):>10} "
              f"{str(r.get('exact')):>6}")
    print(f"paper: {paper}")


def plot(runs: list[dict[str, Any]], key: str, xlabel: str, ctx: Context, name: str, title: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    panels = (("g_checks_whole_run", "G_checks emitted (whole run)"), ("extent", "extent at the crash (tuples)"),
              ("ec_load_s", "EC-load time (s)"), ("replayed_mb", "replayed upstream (MB)"))
    ok = [r for r in runs if r.get("status") in ("ok", "wrong output")]
    xs = sorted({r[key] for r in ok})
    for ax, (metric, ylabel) in zip(axes.flat, panels, strict=True):
        for x in xs:
            ys = [r.get(metric, float("nan")) for r in ok if r[key] == x]
            ax.plot([x] * len(ys), ys, "o", color="tab:blue", alpha=0.6)
        medians = []
        for x in xs:
            ys = [r.get(metric, float("nan")) for r in ok if r[key] == x]
            medians.append(statistics.median(ys) if ys else float("nan"))
        ax.plot(xs, medians, "-", color="tab:blue")
        if metric == "g_checks_whole_run":
            before = [sorted(r.get("g_check_before_kill", 0) for r in ok if r[key] == x)[0] for x in xs]
            ax.plot(xs, before, "--", color="tab:orange", label="before the kill")
            ax.legend()
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x:g}" if key != "u" else f"{x / 1000:g}k" for x in xs])
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
    fig.suptitle(title)
    save_figure(fig, ctx.out / name)
