"""papers/002 Fig. 8 (response time) and Fig. 9 (extent) as the checkpoint period CP varies.

The Fig. 6 set-up (100,000 item ids, count windows of 10, filter chained with the source), CI =
10 ms, CP = 25, 50, 100, 250 ms, Q = the open windows (a very aggressive target: there is always
a window to checkpoint, so every CI slice is spent on G_checks) and U out of the way; plus native.

* **Response time** (Fig. 8): window open -> close, on the driver's clock as the window worker
  sees it (``window_response_s / window_results``: the mean over every window that closed), from a
  failure-free run of each setting. In a source-bound pipeline a window of 10 over 100,000 ids
  stays open for about a million tuples, so this is mostly how fast the operator goes. The paper
  plots per-second averages; it is a mean over the run here.
* **Extent** (Fig. 9) and EC-load time: from a second run of each CEC setting whose window worker
  is killed half-way (as in Fig. 6).
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.cec.common import Context, exact_all, fmt, quiet
from benchmarks.cec.fig67 import OFF, SIZE, derive, measure_open_windows
from benchmarks.cec.profile import profiled
from benchmarks.cec.runner import Spec
from benchmarks.common.results import pyplot, save_figure
from benchmarks.common.stats import cell_median

CPS = (0.025, 0.05, 0.1, 0.25)
CI = 0.01
PAPER = {"native": "16.5 s", 0.1: "18.5 s", 0.05: "21.5 s", 0.025: "32.5 s", 0.25: "close to native"}
PAPER_NOTE = ("response 16.5 s native, 18.5 s / 21.5 s / 32.5 s at CP 100 / 50 / 25 ms (the text prints "
              "'ms' for the first two; Fig. 8's scale and the 16.5 s baseline make them seconds), CP 250 ms "
              "close to native; longer CP -> longer extent, estimated EC-load 2 s (CP 25 ms) -> 5 s (250 ms)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fig8_9")
    group.add_argument("--cp-records", type=int, default=None,
                       help="tuples per run (default 1,000,000; the crash runs are killed at half)")
    group.add_argument("--cps", type=float, nargs="+", default=list(CPS), help="CP values in seconds")


def main(args: argparse.Namespace) -> None:
    keys = args.ft_keys or (10_000 if args.quick else 100_000)
    records = args.cp_records or (150_000 if args.quick else 1_000_000)
    kill = records // 2
    ctx = Context(args, "fig8_9")
    try:
        openwins = measure_open_windows(ctx, keys, records, kill)
        for repeat in range(0 if ctx.loaded else args.repeats or 1):
            row = ctx.run(Spec("native", records, keys, SIZE, filter_stage=True), cp="native", repeat=repeat)
            for cp in args.cps:
                spec = dict(q_target=max(1, openwins), u_target=OFF, ci=CI, cp=cp)
                ctx.run(Spec("cec", records, keys, SIZE, filter_stage=True, **spec), cp=cp, repeat=repeat)
                row = ctx.run(Spec("cec", records, keys, SIZE, filter_stage=True, kill_after=kill, **spec),
                              cp=cp, repeat=repeat)
                derive(row)
        if not ctx.loaded:
            ctx.write("cec_fig8_9.csv")
        summary = summarise(ctx.rows, args.cps)
        ctx.write("cec_fig8_9_summary.csv", summary)
        print(f"\nFig. 8/9: CP with CI = 10 ms, Q = openwins = {openwins:,} ({records:,} tuples, {keys:,} ids; "
              f"crash runs killed after {kill:,})")
        print(f"{'CP':>8} {'response s':>10} {'x native':>8} {'processing s':>12} {'G_checks':>9} {'extent':>9} "
              f"{'EC-load s':>9} {'replayed MB':>11} {'exact':>6} {'paper response':>16}")
        for s in summary:
            print(f"{s['cp']:>8} {fmt(s['response_s'], 2):>10} {fmt(s['response_vs_native'], 2):>8} "
                  f"{fmt(s['processing_s'], 2):>12} {fmt(s['g_checks'], 0):>9} {fmt(s['extent'], 0):>9} "
                  f"{fmt(s['ec_load_s'], 2):>9} {fmt(s['replayed_mb'], 1):>11} {str(s['exact']):>6} "
                  f"{s['paper_response']:>16}")
        print(f"paper: {PAPER_NOTE}")
        plot(summary, ctx, openwins)
        if args.profile and not ctx.loaded:
            loop_profile(ctx, keys, records)
        print(f"fig8_9: {ctx.elapsed():.0f} s, every run's output exact: {exact_all(ctx.rows)}")
    finally:
        ctx.close()


def summarise(rows: list[dict[str, Any]], cps: list[float]) -> list[dict[str, Any]]:
    out = []
    native = quiet([r for r in rows if r.get("cp") == "native"])
    base = cell_median([r.get("response_s", float("nan")) for r in native])
    points: list[Any] = ["native", *cps]
    for cp in points:
        free_all = [r for r in rows if r.get("cp") == cp and r.get("kill_after") == ""]
        crash_all = [r for r in rows if r.get("cp") == cp and r.get("kill_after") != ""]
        free, crash = quiet(free_all), quiet(crash_all)
        response = cell_median([r.get("response_s", float("nan")) for r in free])
        label = "native" if cp == "native" else f"{float(cp) * 1000:g} ms"
        out.append({"cp": label, "cp_s": "" if cp == "native" else cp,
                    "response_s": response, "response_vs_native": response / base if base == base else float("nan"),
                    "processing_s": cell_median([r.get("processing_s", float("nan")) for r in free]),
                    "g_checks": cell_median([float(r.get("g_check", 0)) for r in free]),
                    "extent": cell_median([r.get("extent", float("nan")) for r in crash]),
                    "ec_load_s": cell_median([r.get("ec_load_s", float("nan")) for r in crash]),
                    "replayed_mb": cell_median([r.get("replayed_mb", float("nan")) for r in crash]),
                    "ready_s": cell_median([r.get("ready_s", float("nan")) for r in crash]),
                    "foreign_cpu_cores_max": max([float(r.get("foreign_cpu_cores", 0) or 0) for r in free + crash],
                                                 default=float("nan")),
                    "exact": exact_all(free_all + crash_all), "paper_response": PAPER.get(cp, "")})
    return out


def plot(summary: list[dict[str, Any]], ctx: Context, openwins: int) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    cec = [s for s in summary if s["cp_s"] != ""]
    native = next(s for s in summary if s["cp_s"] == "")
    xs = [s["cp_s"] * 1000 for s in cec]
    left.plot(xs, [s["response_s"] for s in cec], "o-", label="CEC (CI 10 ms)")
    left.axhline(native["response_s"], color="grey", linestyle="--", label="native (no CEC)")
    left.set_xlabel("CP (ms)")
    left.set_ylabel("mean response time, window open -> close (s)")
    left.set_ylim(bottom=0)
    left.legend()
    left.set_title("Fig. 8: response time")
    right.plot(xs, [s["extent"] for s in cec], "o-", color="tab:orange", label="extent at the crash")
    right.set_xlabel("CP (ms)")
    right.set_ylabel("extent (tuples)")
    right.set_ylim(bottom=0)
    twin = right.twinx()
    twin.plot(xs, [s["ec_load_s"] for s in cec], "s--", color="tab:green", label="EC-load time")
    twin.set_ylabel("EC-load time (s)")
    twin.set_ylim(bottom=0)
    right.set_title("Fig. 9: extent (and EC-load)")
    right.legend(loc="upper left")
    twin.legend(loc="lower right")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
    fig.suptitle(f"Impact of the checkpoint period, papers/002 Fig. 8-9 (Q = openwins = {openwins:,})")
    save_figure(fig, ctx.out / "cec_fig8_9.png")


def loop_profile(ctx: Context, keys: int, records: int, seconds: float = 5.0) -> None:
    """How often the window worker enters its background path under load: a cProfile of its
    processing thread for ``seconds``, counting ``_work`` (where a CI slice can start) and
    ``check_next`` calls, at CI/CP 5/100 ms and 10/25 ms; written to
    ``cec_fig8_9_loop_profile.txt``."""
    import pstats

    lines = [f"window worker, {min(records, 600_000):,} tuples over {keys:,} ids, Q 1,000, {seconds:g} s profiled"]
    for ci, cp in ((0.005, 0.1), (0.01, 0.025)):
        path = str(ctx.out / f"cec_fig8_9_loop_{int(ci * 1000)}_{int(cp * 1000)}.pstats")
        with profiled(1, path, seconds):
            row = ctx.run(Spec("cec", min(records, 600_000), keys, SIZE, filter_stage=True, q_target=1_000,
                               u_target=1_000_000, ci=ci, cp=cp), cp=f"profiled {cp}")
        ctx.rows.pop()  # profiled runs are slower: not part of the figure
        counts: dict[str, list[float]] = {}
        for (_, _, name), (_, calls, _, cumulative, _) in pstats.Stats(path).stats.items():  # type: ignore[attr-defined]
            if name in ("_work", "check_next", "_on_stream_event", "_handle"):
                entry = counts.setdefault(name, [0, 0.0])
                entry[0] += calls
                entry[1] += cumulative
        window = min(seconds, float(row.get("processing_s", seconds) or seconds))
        slices = window / cp
        lines.append(f"CI {ci * 1000:g} ms / CP {cp * 1000:g} ms (CI/CP asks for {slices:.0f} slices in "
                     f"{window:.1f} s; run exact: {row.get('exact')}, G_checks {row.get('g_check')}):")
        lines += [f"  {name:>18}: {int(n):>7} calls, {ct:7.3f} s cumulative"
                  for name, (n, ct) in sorted(counts.items())]
    text = "\n".join(lines)
    (ctx.out / "cec_fig8_9_loop_profile.txt").write_text(text + "\n")
    print("\n" + text)
