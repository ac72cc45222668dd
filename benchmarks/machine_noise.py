"""How steady this machine's CPU capacity is: the noise floor every throughput ratio is read against.

Several goals are ratios of throughputs a few per cent apart (the dashboard's and the REST
server's cost "within noise (2 %)", queryable state's "at most 5 % lost"). Whether a run can
resolve such a ratio depends on how much the machine's own capacity moves, whatever epochal does.
This benchmark measures that with nothing of epochal in it: ``spinners`` processes (1, then one per
core) each repeat a fixed unit of pure-Python work (a loop of integer arithmetic, no memory
traffic beyond the interpreter's, no system calls) for ``--seconds`` and stamp every unit done.
The rate of units per second in windows of 1, 5 and 30 seconds then shows:

* ``cv``: the windows' coefficient of variation (standard deviation / mean) and their ``spread``
  ((max - min) / median), per spinner and for the machine (the spinners' sum);
* ``per_core``: a spinner's median rate when every core spins, against one spinning alone (on a
  virtual machine whose cores share physical ones, filling the last idle core slows the others);
* ``resolvable``: the smallest difference a comparison of two configurations could tell apart at
  95 % with 20 alternating windows of each (``1.96 * sqrt(2 / 20) * cv``), i.e. the noise floor of
  the paired benchmarks of ``benchmarks/``.

    python -m benchmarks.machine_noise                 # 60 s per configuration, ~2.5 min
    python -m benchmarks.machine_noise --seconds 20    # a quick look

Writes ``machine_noise.csv`` (one row per window) and ``machine_noise.png`` into ``--out`` (default
``benchmarks/results``) and prints the summary. Run it on an otherwise idle machine (``uptime``):
anything else running is measured as noise, which is the point when it runs beside a benchmark.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.noise import unit
from benchmarks.common.results import RESULTS, machine, pyplot, save_figure, write_csv

#: Window lengths (seconds) the rates are taken over.
WINDOWS = (1.0, 5.0, 30.0)
#: Alternating windows per configuration assumed by ``resolvable``.
PAIRS = 20


def spin(seconds: float, start_at: float, stamps: Any) -> None:
    """Repeat :func:`unit` from ``start_at`` for ``seconds``; put the list of completion times
    (``time.monotonic``, which every process shares) on ``stamps``."""
    while time.monotonic() < start_at:
        time.sleep(0.001)
    done: list[float] = []
    end = start_at + seconds
    while (now := time.monotonic()) < end:
        unit()
        done.append(now)
    stamps.put(done)


def run(spinners: int, seconds: float) -> list[list[float]]:
    """Every spinner's completion times, all started at the same moment."""
    context = multiprocessing.get_context("spawn")
    stamps = context.Queue()
    start_at = time.monotonic() + 1.0
    processes = [context.Process(target=spin, args=(seconds, start_at, stamps)) for _ in range(spinners)]
    for process in processes:
        process.start()
    results = [stamps.get(timeout=seconds + 60) for _ in processes]
    for process in processes:
        process.join(10)
    return results


def windows(stamps: list[float], length: float) -> list[tuple[float, float]]:
    """(window start, units per second) of each whole window of ``length`` seconds."""
    if not stamps:
        return []
    first = stamps[0]
    count = int((stamps[-1] - first) // length)
    counts = [0] * count
    for stamp in stamps:
        index = int((stamp - first) // length)
        if index < count:
            counts[index] += 1
    return [(index * length, n / length) for index, n in enumerate(counts)]


def variation(rates: Sequence[float]) -> dict[str, float]:
    mean = statistics.fmean(rates)
    cv = statistics.stdev(rates) / mean if len(rates) > 1 and mean else 0.0
    return {"median": statistics.median(rates), "cv": cv,
            "spread": (max(rates) - min(rates)) / statistics.median(rates) if rates else 0.0,
            "resolvable": 1.96 * math.sqrt(2 / PAIRS) * cv}


def measure(seconds: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    cores = os.cpu_count() or 1
    rows: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    for spinners in sorted({1, cores}):
        print(f"{spinners} spinner(s) for {seconds:.0f} s ...", flush=True)
        stamps = run(spinners, seconds)
        for length in WINDOWS:
            per = [windows(s, length) for s in stamps]
            count = min(len(p) for p in per)
            if count < 2:
                continue
            for index, series in enumerate(per):
                for start, rate in series[:count]:
                    rows.append({"spinners": spinners, "window_s": length, "spinner": index, "start_s": start,
                                 "units_per_s": round(rate, 2)})
            series_of = {f"spinner {i}": [rate for _, rate in p[:count]] for i, p in enumerate(per)}
            if spinners > 1:
                series_of["machine (sum)"] = [sum(p[w][1] for p in per) for w in range(count)]
            for name, rates in series_of.items():
                summary.append({"spinners": spinners, "window_s": length, "series": name, "windows": count,
                                **{k: round(v, 4) for k, v in variation(rates).items()}})
    alone = statistics.median(r["units_per_s"] for r in rows if r["spinners"] == 1 and r["window_s"] == WINDOWS[0])
    busy = statistics.median(r["units_per_s"] for r in rows if r["spinners"] == cores and r["window_s"] == WINDOWS[0])
    for entry in summary:
        entry["per_core"] = round(busy / alone, 4) if entry["spinners"] == cores else 1.0
    return rows, summary


def plot(out: Path, rows: list[dict[str, Any]], summary: list[dict[str, Any]]) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    for spinners in sorted({r["spinners"] for r in rows}):
        for spinner in sorted({r["spinner"] for r in rows if r["spinners"] == spinners}):
            points = [r for r in rows if r["spinners"] == spinners and r["spinner"] == spinner and r["window_s"] == 1.0]
            left.plot([p["start_s"] for p in points], [p["units_per_s"] for p in points], linewidth=0.9,
                      label=f"{spinners} spinning: spinner {spinner}")
    left.set_xlabel("seconds")
    left.set_ylabel("units of work per second (1-s windows)")
    left.set_title("one fixed pure-Python loop per process")
    left.legend(fontsize=8)
    left.set_ylim(bottom=0)
    for spinners in sorted({s["spinners"] for s in summary}):
        for series in sorted({s["series"] for s in summary if s["spinners"] == spinners}):
            points = [s for s in summary if s["spinners"] == spinners and s["series"] == series]
            right.plot([p["window_s"] for p in points], [100 * p["cv"] for p in points], marker="o",
                       label=f"{spinners} spinning: {series}")
    right.axhline(2.0, color="grey", linestyle=":", linewidth=1)
    right.text(1.0, 2.2, "2 %", color="grey", fontsize=8)
    right.set_xscale("log")
    right.set_xticks(list(WINDOWS), [f"{w:g} s" for w in WINDOWS])
    right.set_xlabel("window")
    right.set_ylabel("coefficient of variation of the rate, %")
    right.set_title("how much the machine's capacity moves")
    right.legend(fontsize=8)
    save_figure(fig, out / "machine_noise.png")


def report(summary: list[dict[str, Any]]) -> None:
    print(f"\n{'spinning':>8} {'window':>7} {'series':>14} {'windows':>7} {'median/s':>9} {'cv':>7} {'spread':>7} "
          f"{'resolvable':>10} {'per core':>8}")
    for s in summary:
        print(f"{s['spinners']:>8} {s['window_s']:>6g}s {s['series']:>14} {s['windows']:>7} {s['median']:>9.1f} "
              f"{s['cv']:>7.1%} {s['spread']:>7.1%} {s['resolvable']:>10.1%} {s['per_core']:>8.3f}")
    print(f"(resolvable: the smallest difference {PAIRS} alternating windows of each of two configurations tell "
          f"apart at 95 %; per core: a spinner's rate with every core busy / alone)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.machine_noise",
                                     description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds per configuration (default 60)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    print(f"machine noise: {machine()}; load {os.getloadavg()[0]:.1f}", flush=True)
    rows, summary = measure(args.seconds)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "machine_noise.csv", rows)
    write_csv(args.out / "machine_noise_summary.csv", summary)
    plot(args.out, rows, summary)
    report(summary)
    print(f"wrote {args.out / 'machine_noise.csv'}, machine_noise_summary.csv and machine_noise.png "
          f"(load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
