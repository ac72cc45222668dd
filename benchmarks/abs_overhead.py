"""Reproduces papers/000 §7 (Figure 6) on this machine: the runtime of a 6-operator job with
3 full shuffles under no fault tolerance, exactly-once ABS, at-least-once ABS and the
synchronous (stop-the-world) baseline, across snapshot intervals.

    python -m benchmarks.abs_overhead --records 1500000 --intervals 0.25 0.5 1 2 5

Writes ``abs_overhead.csv`` and ``abs_overhead.png`` (runtime vs interval, one line per mode,
``none`` as the horizontal baseline) and prints the overhead ratio of each mode to ``none``.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
import time

import epochal
from epochal.control.spark import create_session

MODES = ("exactly_once", "at_least_once", "synchronous")


def build(env: epochal.Environment, records: int) -> None:
    """source -> map -> [shuffle] sum per key -> [shuffle] count per bucket -> [shuffle] max -> sink.

    Per-key aggregates and source offsets are the state, as in the paper's topology.
    """
    events = env.from_generator(lambda i: (i % 10_007, i % 97), count=records).name("source")
    parsed = events.map(lambda e: (e[0], e[1] + 1)).name("map")
    sums = parsed.key_by(lambda e: e[0]).sum(lambda e: e[1]).name("sum-per-key")
    buckets = sums.key_by(lambda kv: kv[0] % 1_009).count().name("count-per-bucket")
    buckets.key_by(lambda kv: kv[0] % 101).max(lambda kv: kv[1]).name("max-per-group").discard()


def run_once(spark, parallelism: int, records: int, mode: str, interval: float | None) -> tuple[float, int]:
    env = epochal.Environment(parallelism, spark=spark)
    if mode != "none":
        env.enable_checkpointing(interval, mode=mode, storage=tempfile.mkdtemp(prefix="epochal-bench-"))
    build(env, records)
    started = time.monotonic()
    result = env.execute(f"abs-{mode}")
    return time.monotonic() - started, result.completed_checkpoints


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_500_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--intervals", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0, 5.0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    spark = create_session(f"local[{max(args.parallelism, 2)}]", args.parallelism)
    run_once(spark, args.parallelism, 20_000, "none", None)  # warm up Spark's Python workers

    rows = []
    baseline = [run_once(spark, args.parallelism, args.records, "none", None)[0] for _ in range(args.repeats)]
    none_s = statistics.median(baseline)
    for seconds in baseline:
        rows.append({"mode": "none", "interval_s": "", "seconds": seconds, "checkpoints": 0})
    print(f"none: {none_s:.2f} s for {args.records:,} records ({args.records / none_s:,.0f} records/s)")
    for interval in args.intervals:
        for mode in MODES:
            for _ in range(args.repeats):
                seconds, completed = run_once(spark, args.parallelism, args.records, mode, interval)
                rows.append({"mode": mode, "interval_s": interval, "seconds": seconds, "checkpoints": completed})
                print(f"{mode:>14} interval {interval:>5g} s: {seconds:6.2f} s, {completed:3d} checkpoints, "
                      f"overhead x{seconds / none_s:.2f}")
    with open(os.path.join(args.out, "abs_overhead.csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["mode", "interval_s", "seconds", "checkpoints"])
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, none_s, args)
    spark.stop()


def plot(rows: list[dict], none_s: float, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for mode, marker in zip(MODES, "os^", strict=True):
        points = {}
        for row in rows:
            if row["mode"] == mode:
                points.setdefault(row["interval_s"], []).append(row["seconds"])
        xs = sorted(points)
        ax.plot(xs, [statistics.median(points[x]) for x in xs], marker=marker, label=mode)
    ax.axhline(none_s, color="grey", linestyle="--", label="none (no snapshots)")
    ax.set_xscale("log")
    ax.set_xlabel("snapshot interval (s)")
    ax.set_ylabel("runtime (s)")
    ax.set_title(f"ABS vs synchronous snapshots: {args.records:,} records, 3 shuffles, "
                 f"parallelism {args.parallelism}, {os.cpu_count()} CPUs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "abs_overhead.png"), dpi=120)


if __name__ == "__main__":
    main()
