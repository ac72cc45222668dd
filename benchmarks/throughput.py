"""Word-count throughput of epochal on Spark local mode, and how it scales with parallelism.

What it measures: records per second of the job

    generator source (N words) -> key_by(word) -> count() -> discard sink

for each requested parallelism, ``--repeats`` times each. The words are drawn deterministically
from a fixed vocabulary of 10,000 words, so every run processes exactly the same input and a
keyed shuffle with many distinct keys is exercised (the hot path of most stateful jobs).

Why it is measured this way:

* All runs share ONE SparkSession (``local[K]``, K = max(parallelisms, 2)), created once, so the
  JVM start-up is paid once and is not part of any measurement.
* One untimed warm-up job per parallelism starts Spark's Python workers (and lets the OS cache
  the imports) before anything is timed.
* The timed quantity is the wall time around ``env.execute``: what a user waits for. It contains
  the per-job fixed cost (planning, shipping the job, worker registration, shutdown), so it is
  also measured on its own with a tiny job (1,000 records, the "startup" column); the JobMaster's
  own ``JobResult.duration_s`` is recorded next to it.
* Medians and min/max over the repeats are reported because a laptop or CI box is noisy and a
  single number would hide that.

Run from the repository root::

    python -m benchmarks.throughput                      # 2,000,000 records, p = 1 and 2, 3 repeats
    python -m benchmarks.throughput --records 200000 --repeats 1

Results go to ``--out`` (default ``benchmarks/results``): ``throughput.csv`` and ``throughput.png``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import string
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import epochal
from benchmarks.common.results import BLUE, RESULTS, error_bars, pyplot, save_figure, write_rows
from epochal.config import EngineConfig
from epochal.control.spark import create_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

VOCABULARY_SIZE = 10_000
STARTUP_RECORDS = 1_000
#: Multiplier that walks the vocabulary in a scattered but deterministic order (a prime, coprime
#: with the vocabulary size, so every word is drawn equally often).
STRIDE = 7919


def _build_vocabulary(size: int, seed: int = 20240601) -> tuple[str, ...]:
    """``size`` distinct lowercase words of 3 to 10 letters, the same on every run and machine."""
    rng = random.Random(seed)
    words: dict[str, None] = {}
    while len(words) < size:
        length = rng.randint(3, 10)
        words["".join(rng.choice(string.ascii_lowercase) for _ in range(length))] = None
    return tuple(words)


#: The benchmark's vocabulary, built once at import time.
VOCABULARY: tuple[str, ...] = _build_vocabulary(VOCABULARY_SIZE)


def word_generator(vocabulary: Sequence[str] = VOCABULARY) -> Callable[[int], str]:
    """The source function: word ``i`` of the input, a pure function of ``i`` (replayable)."""
    words = tuple(vocabulary)
    size = len(words)

    def word(i: int) -> str:
        return words[(i * STRIDE) % size]

    return word


def _identity(word: str) -> str:
    return word


@dataclass
class Run:
    """One timed execution of the word-count job."""

    parallelism: int
    repeat: int
    records: int
    seconds: float
    job_duration_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("nan")


def run_wordcount(spark: SparkSession, parallelism: int, records: int, batch_size: int,
                  timeout: float | None, repeat: int = 0) -> Run:
    """Build and execute the word-count job once; return its wall time and the JobMaster's duration.

    Only ``env.execute`` is inside the timed region: building the (tiny) logical graph is not.
    """
    env = epochal.Environment(parallelism=parallelism, spark=spark, batch_size=batch_size)
    words = env.from_generator(word_generator(), count=records).name("words")
    words.key_by(_identity).count().name("count").discard()
    started = time.perf_counter()
    result = env.execute(f"throughput p={parallelism} n={records}", timeout=timeout)
    seconds = time.perf_counter() - started
    counted = result.operator_records().get("count")
    if counted is not None and counted != records:
        print(f"WARNING: count() saw {counted:,} records, expected {records:,}", file=sys.stderr)
    return Run(parallelism, repeat, records, seconds, result.duration_s)


def measure(spark: SparkSession, parallelisms: Sequence[int], records: int, repeats: int, batch_size: int,
            timeout: float | None) -> tuple[list[Run], dict[int, float]]:
    """Warm up, measure the per-job startup cost, then the timed runs, for every parallelism.

    Returns the timed runs and, per parallelism, the median wall time of the 1,000-record job.
    """
    runs: list[Run] = []
    startup: dict[int, float] = {}
    for p in parallelisms:
        print(f"p={p}: warm-up ...", flush=True)
        run_wordcount(spark, p, STARTUP_RECORDS, batch_size, timeout)
        small = [run_wordcount(spark, p, STARTUP_RECORDS, batch_size, timeout).seconds for _ in range(repeats)]
        startup[p] = statistics.median(small)
        print(f"p={p}: startup (n={STARTUP_RECORDS:,}) {startup[p]:.3f} s", flush=True)
        for r in range(repeats):
            run = run_wordcount(spark, p, records, batch_size, timeout, repeat=r)
            runs.append(run)
            print(f"p={p}: repeat {r}: {run.seconds:.3f} s wall ({run.job_duration_s:.3f} s in JobMaster), "
                  f"{run.records_per_s:,.0f} records/s", flush=True)
    return runs, startup


def write_runs(path: Path, runs: Sequence[Run], startup: dict[int, float]) -> None:
    """One row per timed run; ``startup_s`` is the median wall time of the tiny job at that parallelism."""
    write_rows(path, [{"parallelism": run.parallelism, "repeat": run.repeat, "records": run.records,
                       "seconds": f"{run.seconds:.6f}", "records_per_s": f"{run.records_per_s:.1f}",
                       "startup_s": f"{startup[run.parallelism]:.6f}", "job_duration_s": f"{run.job_duration_s:.6f}"}
                      for run in runs],
               ["parallelism", "repeat", "records", "seconds", "records_per_s", "startup_s", "job_duration_s"])


def summarize(runs: Sequence[Run]) -> dict[int, tuple[float, float, float]]:
    """Median, min and max records/s per parallelism."""
    by_p: dict[int, list[float]] = {}
    for run in runs:
        by_p.setdefault(run.parallelism, []).append(run.records_per_s)
    return {p: (statistics.median(v), min(v), max(v)) for p, v in sorted(by_p.items())}


def plot(path: Path, summary: dict[int, tuple[float, float, float]], records: int, batch_size: int) -> None:
    """Bar chart of the median records/s per parallelism with min-max error bars."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter

    ps = list(summary)
    medians, errors = error_bars(summary[p] for p in ps)
    fig, ax = plt.subplots(figsize=(6, 4))
    bars = ax.bar([str(p) for p in ps], medians, yerr=errors, capsize=6, color=BLUE)
    ax.bar_label(bars, labels=[f"{m:,.0f}" for m in medians], padding=3)
    ax.set_xlabel("parallelism")
    ax.set_ylabel("records / s (median, min-max)")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.set_title(f"epochal word count, {records:,} records, batch {batch_size}\n"
                 f"Spark local mode on {os.cpu_count()} CPUs")
    ax.margins(y=0.15)
    save_figure(fig, path)


def print_table(summary: dict[int, tuple[float, float, float]], startup: dict[int, float]) -> None:
    """Median and spread per parallelism, and the speedup over the lowest (ideally p=1)."""
    print(f"\n{'parallelism':>11} {'median rec/s':>14} {'min rec/s':>12} {'max rec/s':>12} {'startup s':>10}")
    for p, (median, low, high) in summary.items():
        print(f"{p:>11} {median:>14,.0f} {low:>12,.0f} {high:>12,.0f} {startup[p]:>10.3f}")
    if not summary:
        return
    base = 1 if 1 in summary else min(summary)
    for p in summary:
        if p != base:
            print(f"speedup p={p}/p={base}: {summary[p][0] / summary[base][0]:.2f}x")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.throughput",
                                     description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="words per timed run (default 2,000,000)")
    parser.add_argument("--parallelism", type=int, nargs="+", default=[1, 2],
                        help="parallelisms to measure (default: 1 2)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per parallelism (default 3)")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="directory for throughput.csv and throughput.png (default benchmarks/results)")
    parser.add_argument("--batch-size", type=int, default=EngineConfig().batch_size,
                        help=f"records per network batch (default {EngineConfig().batch_size})")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds after which one job is cancelled and the benchmark fails (default 900)")
    args = parser.parse_args(argv)
    if args.records < 1 or args.repeats < 1 or any(p < 1 for p in args.parallelism):
        parser.error("--records, --repeats and --parallelism must be positive")
    args.parallelism = sorted(set(args.parallelism))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; write the CSV and the chart; print the summary table."""
    args = parse_args(argv)
    slots = max(max(args.parallelism), 2)
    print(f"epochal throughput: {args.records:,} records, parallelism {args.parallelism}, {args.repeats} repeats, "
          f"batch {args.batch_size}, Spark local[{slots}] on {os.cpu_count()} CPUs "
          f"({platform.python_implementation()} {platform.python_version()})", flush=True)
    spark: Any = create_session(f"local[{slots}]", slots, app_name="epochal-benchmark")
    try:
        runs, startup = measure(spark, args.parallelism, args.records, args.repeats, args.batch_size, args.timeout)
    finally:
        spark.stop()

    args.out.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = args.out / "throughput.csv", args.out / "throughput.png"
    summary = summarize(runs)
    write_runs(csv_path, runs, startup)
    plot(png_path, summary, args.records, args.batch_size)
    print_table(summary, startup)
    print(f"\nwrote {csv_path} and {png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
