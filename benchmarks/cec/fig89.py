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

from benchmarks.cec.common import Context, exact_all, fmt, pyplot
from benchmarks.cec.fig67 import OFF, SIZE, derive, measure_open_windows
from benchmarks.cec.runner import Spec

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
        for repeat in range(args.repeats or 1):
            row = ctx.run(Spec("native", records, keys, SIZE, filter_stage=True), cp="native", repeat=repeat)
            for cp in args.cps:
                spec = dict(q_target=max(1, openwins), u_target=OFF, ci=CI, cp=cp)
                ctx.run(Spec("cec", records, keys, SIZE, filter_stage=True, **spec), cp=cp, repeat=repeat)
                row = ctx.run(Spec("cec", records, keys, SIZE, filter_stage=True, kill_after=kill, **spec),
                              cp=cp, repeat=repeat)
                derive(row)
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
        print(f"fig8_9: {ctx.elapsed():.0f} s, every run's output exact: {exact_all(ctx.rows)}")
    finally:
        ctx.close()


def _median(values: list[float]) -> float:
    values = sorted(v for v in values if v == v)
    return values[len(values) // 2] if values else float("nan")


def summarise(rows: list[dict[str, Any]], cps: list[float]) -> list[dict[str, Any]]:
    out = []
    native = [r for r in rows if r.get("cp") == "native"]
    base = _median([r.get("response_s", float("nan")) for r in native])
    for cp in ["native", *cps]:
        free = [r for r in rows if r.get("cp") == cp and r.get("kill_after") == ""]
        crash = [r for r in rows if r.get("cp") == cp and r.get("kill_after") != ""]
        response = _median([r.get("response_s", float("nan")) for r in free])
        out.append({"cp": "native" if cp == "native" else f"{cp * 1000:g} ms", "cp_s": "" if cp == "native" else cp,
                    "response_s": response, "response_vs_native": response / base if base == base else float("nan"),
                    "processing_s": _median([r.get("processing_s", float("nan")) for r in free]),
                    "g_checks": _median([float(r.get("g_check", 0)) for r in free]),
                    "extent": _median([r.get("extent", float("nan")) for r in crash]),
                    "ec_load_s": _median([r.get("ec_load_s", float("nan")) for r in crash]),
                    "replayed_mb": _median([r.get("replayed_mb", float("nan")) for r in crash]),
                    "ready_s": _median([r.get("ready_s", float("nan")) for r in crash]),
                    "exact": exact_all(free + crash), "paper_response": PAPER.get(cp, "")})
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
    fig.tight_layout()
    fig.savefig(ctx.out / "cec_fig8_9.png", dpi=120)
    plt.close(fig)
