"""Reproduces papers/000 §7 (Figure 6) on this machine: the runtime of a 6-operator job with
3 full shuffles under no fault tolerance, exactly-once ABS, at-least-once ABS and the
synchronous (stop-the-world) baseline, across snapshot intervals, for a small and a large
keyed state, and for a cyclic job (papers/000 §4.3, Algorithm 2: a Collatz loop whose heads log
the records in transit inside the loop), with the size of those back-edge logs per checkpoint.

    python -m benchmarks.abs_overhead --records 1500000 --intervals 0.25 0.5 1 2 5 --repeats 2
    python -m benchmarks.abs_overhead --states large --intervals 1 \
        --backends heap-thread heap-fork heap-incremental rocksdb --modes exactly_once synchronous

``--backends`` runs each state on several keyed-state backends (docs/state_backends.md):
``heap-thread`` (the copy at the barrier pickled by a worker thread, the default before forked
snapshots), ``heap-fork`` (the default: the barrier forks, the child writes), ``heap-incremental``
and ``rocksdb``. Besides the runtime, each run records the longest synchronous part of a snapshot
(``sync_s_max``: how long the processing thread stalled for one).

Runs are interleaved: every round runs ``none`` and each mode at each interval, in a rotating
order, so slow drift of the machine (JIT-free Python, but a JVM, page cache, thermal) hits the
baseline and the modes alike. Writes ``abs_overhead.csv`` (one row per run, with the
checkpoint statistics: count, bytes per checkpoint, longest alignment and synchronous part) and
``abs_overhead.png`` (one panel per state size: runtime vs interval, one line per mode, ``none``
as the horizontal band), and prints the overhead ratio of each mode to ``none`` per interval.
``none`` runs once per state engine (heap, heap-incremental, RocksDB): each backend's ratios are
to its own baseline, so they say what checkpointing costs, not what the backend costs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import epochal
from benchmarks.common.isolation import rotate
from benchmarks.common.results import RESULTS, pyplot, save_figure, write_rows
from epochal.control.spark import create_session

MODES = ("exactly_once", "at_least_once", "synchronous")
#: keyed-state backends by name: ``Environment.set_state_backend`` arguments
BACKENDS = {"heap-thread": {"snapshot": "thread"}, "heap-fork": {"snapshot": "fork"},
            "heap-incremental": {"snapshot": "fork", "incremental": True}, "rocksdb": {"kind": "rocksdb"}}
#: Each backend's runs are compared with ``none`` on the same state engine: how a snapshot is
#: taken does not matter without snapshots, so the heap variants share one baseline.
BASELINE = {"heap-thread": "heap-fork", "heap-fork": "heap-fork", "heap-incremental": "heap-incremental",
            "rocksdb": "rocksdb"}
#: Distinct keys of the first shuffle's per-key state: small fits in cache, large is ~100x more, huge ~1000x
#: (give it --records of at least its keys, or most keys are never written);
#: "cyclic" runs the loop job instead, over records // CYCLIC_DIVISOR origins.
STATE_KEYS = {"small": 10_007, "large": 1_000_003, "huge": 10_000_019, "cyclic": 0}
#: Each origin makes ~108 trips around the loop (Collatz steps of numbers up to 100k), and a trip
#: costs far less than a record of the 3-shuffle job: records // 10 origins give similar runtimes.
CYCLIC_DIVISOR = 10


def build(env: epochal.Environment, records: int, keys: int) -> None:
    """source -> map -> [shuffle] sum per key -> [shuffle] count per bucket -> [shuffle] max -> sink.

    Per-key aggregates and source offsets are the state, as in the paper's topology.
    """
    events = env.from_generator(lambda i: ((i * 7919) % keys, i % 97), count=records).name("source")
    parsed = events.map(lambda e: (e[0], e[1] + 1)).name("map")
    sums = parsed.key_by(lambda e: e[0]).sum(lambda e: e[1]).name("sum-per-key")
    buckets = sums.key_by(lambda kv: kv[0] % 1_009).count().name("count-per-bucket")
    buckets.key_by(lambda kv: kv[0] % 101).max(lambda kv: kv[1]).name("max-per-group").discard()


def collatz_step(state: tuple[int, int]) -> tuple[int, int]:
    origin, n = state
    return origin, (n // 2 if n % 2 == 0 else 3 * n + 1)


def build_cyclic(env: epochal.Environment, records: int) -> None:
    """source -> loop { key by origin -> Collatz step } until 1 -> discard; ~records loop trips."""
    origins = env.from_generator(lambda i: (i * 7919) % 100_000 + 2, count=max(1, records // CYCLIC_DIVISOR))
    loop = origins.map(lambda n: (n, n)).name("start").iterate()
    stepped = loop.key_by(lambda s: s[0]).map(collatz_step).name("collatz-step")
    loop.close_with(stepped.filter(lambda s: s[1] != 1), key_by=lambda s: s[0])
    stepped.filter(lambda s: s[1] == 1).discard()


def run_once(spark, parallelism: int, records: int, state: str, mode: str, interval: float | None,
             backend: str = "heap-fork") -> dict:
    env = epochal.Environment(parallelism, spark=spark)
    storage = tempfile.mkdtemp(prefix="epochal-bench-")
    env.set_state_backend(**BACKENDS[backend], **({"local_dir": storage} if backend == "rocksdb" else {}))
    if mode != "none":
        env.enable_checkpointing(interval, mode=mode, storage=storage)
    if state == "cyclic":
        build_cyclic(env, records)
    else:
        build(env, records, STATE_KEYS[state])
    started = time.monotonic()
    result = env.execute(f"abs-{mode}")
    seconds = time.monotonic() - started
    shutil.rmtree(storage, ignore_errors=True)
    done = [c for c in result.checkpoints if c["status"] == "completed"]
    return {"seconds": seconds, "checkpoints": len(done),
            "bytes_per_checkpoint": statistics.median(c["bytes"] for c in done) if done else 0,
            "alignment_s_max": max((c["alignment_s_max"] for c in done), default=0.0),
            "sync_s_max": max((c["sync_s_max"] for c in done), default=0.0),
            "duration_s_median": statistics.median(c["duration_s"] for c in done) if done else 0.0,
            "loop_log_records_median": statistics.median(c["loop_log_records"] for c in done) if done else 0,
            "loop_log_records_max": max((c["loop_log_records"] for c in done), default=0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_500_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--intervals", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0, 5.0])
    parser.add_argument("--states", nargs="+", choices=sorted(STATE_KEYS), default=["small", "large", "cyclic"])
    parser.add_argument("--backends", nargs="+", choices=sorted(BACKENDS), default=["heap-fork"])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    spark = create_session(f"local[{max(args.parallelism, 2)}]", args.parallelism)
    run_once(spark, args.parallelism, 20_000, "small", "none", None)  # warm up Spark's Python workers

    rows = []
    for repeat in range(args.repeats):
        for state in args.states:
            for position, interval in enumerate(args.intervals):
                baselines = list(dict.fromkeys(BASELINE[b] for b in args.backends))
                runs = [("none", b) for b in baselines] + [(m, b) for b in args.backends for m in args.modes]
                for mode, backend in rotate(runs, repeat + position):
                    row = {"state": state, "keys": STATE_KEYS[state], "mode": mode, "backend": backend,
                           "repeat": repeat, "interval_s": interval,
                           **run_once(spark, args.parallelism, args.records, state, mode, interval, backend)}
                    rows.append(row)
                    print(f"[{repeat}] {state:>5} {backend:>16} {mode:>14} interval {interval:>5g} s: "
                          f"{row['seconds']:6.2f} s, stall {row['sync_s_max'] * 1e3:7.1f} ms, "
                          f"{row['checkpoints']:3d} checkpoints of {row['bytes_per_checkpoint'] / 1e6:7.2f} MB"
                          + (f", back-edge log {row['loop_log_records_median']:,.0f} records (max "
                             f"{row['loop_log_records_max']:,})" if state == "cyclic" and mode != "none" else ""),
                          flush=True)
    write_rows(os.path.join(args.out, "abs_overhead.csv"), rows)
    summary = summarise(rows, args)
    plot(summary, args)
    spark.stop()


def summarise(rows: list[dict], args: argparse.Namespace) -> dict:
    """Median runtime per (state, backend, mode, interval), and the ratio tables printed for the
    notes (runtime / none's, and the median longest stall per checkpoint)."""
    summary: dict = {}
    for state in args.states:
        default = [r["seconds"] for r in rows if r["state"] == state and r["mode"] == "none"
                   and r["backend"] == BASELINE[args.backends[0]]]
        for backend in args.backends:
            # this backend's own baseline (no checkpoints, same state engine)
            spread = [r["seconds"] for r in rows if r["state"] == state and r["mode"] == "none"
                      and r["backend"] == BASELINE[backend]] or default
            none_s = statistics.median(spread)
            mine = [r for r in rows if r["state"] == state and r.get("backend") == backend and r["mode"] != "none"]
            per_mode = {mode: {i: statistics.median(r["seconds"] for r in mine
                                                    if r["mode"] == mode and r["interval_s"] == i)
                               for i in args.intervals} for mode in args.modes}
            stall = {mode: {i: statistics.median(r["sync_s_max"] for r in mine
                                                 if r["mode"] == mode and r["interval_s"] == i)
                            for i in args.intervals} for mode in args.modes}
            label = state if len(args.backends) == 1 else f"{state} [{backend}]"
            summary[label] = (none_s, per_mode)
            mb = max(r["bytes_per_checkpoint"] for r in mine) / 1e6
            what = f"{args.records // CYCLIC_DIVISOR:,} origins" if state == "cyclic" else \
                f"{STATE_KEYS[state]:,} keys"
            print(f"\n{label} ({what}, up to {mb:.1f} MB per checkpoint): none on {BASELINE[backend]} median "
                  f"{none_s:.2f} s (runs {min(spread):.2f}-{max(spread):.2f} s), "
                  f"{args.records / none_s:,.0f} records/s; ratios below are to it"
                  + (f" (x{none_s / statistics.median(default):.2f} of none on {BASELINE[args.backends[0]]})"
                     if BASELINE[backend] != BASELINE[args.backends[0]] and default else ""))
            print(f"{'interval (s)':>14} " + " ".join(f"{m:>14}" for m in args.modes)
                  + " " + " ".join(f"{'stall ' + m[:8]:>16}" for m in args.modes))
            for interval in args.intervals:
                print(f"{interval:>14g} " + " ".join(f"x{per_mode[m][interval] / none_s:>13.2f}" for m in args.modes)
                      + " " + " ".join(f"{stall[m][interval] * 1e3:>13.1f} ms" for m in args.modes))
        if state == "cyclic" and "exactly_once" in args.modes:
            print(f"{'interval (s)':>14} back-edge log records per checkpoint, median (max), exactly_once")
            for interval in args.intervals:
                runs = [r for r in rows if r["state"] == state and r["mode"] == "exactly_once"
                        and r["interval_s"] == interval]
                print(f"{interval:>14g} {statistics.median(r['loop_log_records_median'] for r in runs):>10,.0f} "
                      f"({max(r['loop_log_records_max'] for r in runs):,})")
    return summary


def plot(summary: dict, args: argparse.Namespace) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, len(summary), figsize=(6.5 * len(summary), 4.2), squeeze=False)
    for ax, (state, (none_s, per_mode)) in zip(axes[0], summary.items(), strict=True):
        for mode, marker in zip(per_mode, "os^", strict=False):
            xs = sorted(per_mode[mode])
            ax.plot(xs, [per_mode[mode][x] for x in xs], marker=marker, label=mode)
        ax.axhline(none_s, color="grey", linestyle="--", label="none (no snapshots)")
        ax.set_xscale("log")
        ax.set_xticks(args.intervals, [f"{i:g}" for i in args.intervals])
        ax.minorticks_off()
        ax.set_xlabel("snapshot interval (s)")
        ax.set_ylabel("runtime (s)")
        ax.set_ylim(bottom=0)
        base = state.split(" ")[0]
        ax.set_title(f"{state} state: {STATE_KEYS[base]:,} keys" if base != "cyclic" else
                     f"{state}: Collatz loop, {args.records // CYCLIC_DIVISOR:,} origins")
        ax.legend()
    fig.suptitle(f"ABS vs synchronous snapshots: {args.records:,} records, 3 shuffles, "
                 f"parallelism {args.parallelism}, {os.cpu_count()} CPUs")
    save_figure(fig, os.path.join(args.out, "abs_overhead.png"))


if __name__ == "__main__":
    main()
