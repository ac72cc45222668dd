"""Checkpoints and latency behind a slow operator (issue "What a new user trips over").

A job whose operator takes ``--cost-ms`` (2 ms) per record, with a checkpoint every
``--interval`` (1 s), on an unbounded generator source read as fast as the job takes it:

* ``chained``: source -> map(slow) -> map(latency) -> collect, all chained (parallelism 1): a
  barrier waits behind the source batch being processed;
* ``shuffled``: source -> rebalance -> map(slow) -> map(latency) -> collect (parallelism 2): a
  barrier also waits behind the batches in flight on the channels into the slow map.

Each record carries the wall time at which the source read it; the map after the slow one
turns it into the record's latency (read -> through the slow operator), which ``collect()``
brings back. After ``--seconds`` of running the job is cancelled and the script reports:

* ``spacing``: seconds between consecutive completed checkpoints (trigger time + duration),
  median and max; with checkpoints on time it stays at the interval (plus their duration);
* ``duration``: trigger -> complete of each checkpoint, median and max;
* ``p50``/``p99`` latency of the collected records; ``records_per_s``: source records / run time.

Records collected are those covered by completed checkpoints (``collect()`` is exactly once).
The first ``--warmup`` seconds of checkpoints and records are left out (start-up).

    .venv/bin/python -m benchmarks.slow_operator                         # both shapes, 3 repeats
    .venv/bin/python -m benchmarks.slow_operator --shapes chained --repeats 1 --seconds 12
    .venv/bin/python -m benchmarks.slow_operator --batch-time 0          # count-only batches (as before)

Writes ``slow_operator.csv`` (one row per run) and ``slow_operator.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.results import BLUE, RESULTS, ROOT, error_bars, pyplot, save_figure, write_rows
from benchmarks.common.stats import percentile

FIELDS = ["shape", "label", "repeat", "seconds", "records", "records_per_s", "checkpoints", "spacing_median_s",
          "spacing_max_s", "duration_median_s", "duration_max_s", "latency_p50_s", "latency_p99_s",
          "latency_max_s", "load_1min"]


def _slow(cost: float):
    def slow(record: tuple[int, float]) -> tuple[int, float]:
        time.sleep(cost)
        return record
    return slow


def _latency(record: tuple[int, float]) -> float:
    return time.time() - record[1]


def _read_time(i: int) -> tuple[int, float]:
    return (i, time.time())


def run_once(shape: str, args: argparse.Namespace, spark: Any, repeat: int) -> dict[str, Any]:
    import epochal

    overrides: dict[str, Any] = {}
    if args.batch_time is not None:
        overrides["batch_time"] = args.batch_time or None
    parallelism = 1 if shape == "chained" else 2
    env = epochal.Environment(parallelism=parallelism, spark=spark, **overrides)
    storage = tempfile.mkdtemp(prefix="epochal-slow-op-")
    env.enable_checkpointing(args.interval, storage=storage)
    stream = env.from_generator(_read_time)
    if shape == "shuffled":
        stream = stream.rebalance()
    handle = stream.map(_slow(args.cost_ms / 1000)).map(_latency).collect()
    client = env.execute_async(f"slow-{shape}")
    started = time.time()
    try:
        client.wait_until_running()
        time.sleep(args.seconds)
        latencies = list(client.collected(handle))
        stats = client.checkpoint_stats()
        metrics = client.metrics()
    finally:
        client.cancel()
        shutil.rmtree(storage, ignore_errors=True)
    elapsed = time.time() - started
    done = sorted((c for c in stats if c["status"] == "completed"), key=lambda c: c["checkpoint_id"])
    ends = [c["trigger_time"] + c["duration_s"] for c in done]
    kept = [i for i, end in enumerate(ends) if end - started >= args.warmup]
    spacing = [ends[i] - ends[i - 1] for i in kept if i > 0]
    durations = [done[i]["duration_s"] for i in kept]
    skip = int(len(latencies) * args.warmup / max(elapsed, 1e-9))  # roughly the warm-up's records
    measured = latencies[skip:]
    records = sum(m.get("source_records", 0) for m in metrics.values())
    return {
        "shape": shape, "label": args.label, "repeat": repeat, "seconds": round(elapsed, 2), "records": records,
        "records_per_s": round(records / elapsed, 1), "checkpoints": len(done),
        "spacing_median_s": round(statistics.median(spacing), 3) if spacing else float("nan"),
        "spacing_max_s": round(max(spacing), 3) if spacing else float("nan"),
        "duration_median_s": round(statistics.median(durations), 3) if durations else float("nan"),
        "duration_max_s": round(max(durations), 3) if durations else float("nan"),
        "latency_p50_s": round(percentile(measured, 0.50), 3),
        "latency_p99_s": round(percentile(measured, 0.99), 3),
        "latency_max_s": round(max(measured), 3) if measured else float("nan"),
        "load_1min": round(os.getloadavg()[0], 2),
    }


def plot(rows: list[dict[str, Any]], path: Path, interval: float = 1.0) -> None:
    plt = pyplot()

    keys = sorted(dict.fromkeys((r["shape"], r["label"]) for r in rows), key=lambda key: key[0])  # labels as run
    labels = [f"{shape}\n{label}" for shape, label in keys]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (field, title) in zip(axes, [("spacing_max_s", "longest gap between completed checkpoints (s)"),
                                         ("latency_p99_s", "p99 latency (s)")], strict=True):
        values = [[r[field] for r in rows if (r["shape"], r["label"]) == key] for key in keys]
        medians, errors = error_bars((statistics.median(v), min(v), max(v)) for v in values)
        ax.bar(range(len(keys)), medians, yerr=errors, capsize=4, color=BLUE)
        ax.set_xticks(range(len(keys)), labels, fontsize=8)
        ax.set_title(title, fontsize=10)
        goal, what = (interval + 0.5, "interval + 0.5 s") if field == "spacing_max_s" else (1.0, "1 s")
        ax.axhline(goal, color="red", linestyle="--", linewidth=1, label=f"goal: {what}")
        ax.legend(fontsize=8)
    fig.suptitle(f"A slow operator, checkpoint interval {interval:g} s (median of repeats, min-max bars)", fontsize=10)
    save_figure(fig, path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", choices=["chained", "shuffled"], default=["chained", "shuffled"])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each run lasts")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds of each run left out")
    parser.add_argument("--interval", type=float, default=1.0, help="checkpoint interval (s)")
    parser.add_argument("--cost-ms", type=float, default=2.0, help="the slow operator's time per record")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-time", type=float, default=None,
                        help="EngineConfig.batch_time (0: none, count-only batches); default: epochal's default")
    parser.add_argument("--label", default="", help="a name for this configuration in the CSV")
    parser.add_argument("--out", type=Path, default=ROOT / RESULTS)
    parser.add_argument("--append", action="store_true", help="add rows to an existing CSV")
    args = parser.parse_args(argv)
    args.label = args.label or ("default" if args.batch_time is None else f"batch_time={args.batch_time:g}")

    from epochal.control.spark import create_session

    spark = create_session("local[4]", 2)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "slow_operator.csv"
    rows: list[dict[str, Any]] = []
    if args.append and path.exists():
        with open(path) as f:
            rows = [{k: (v if k in ("shape", "label") else float(v)) for k, v in row.items()}
                    for row in csv.DictReader(f)]
    for repeat in range(args.repeats):
        for shape in args.shapes:
            row = run_once(shape, args, spark, repeat)
            print(" ".join(f"{k}={row[k]}" for k in FIELDS), flush=True)
            rows.append(row)
    write_rows(path, rows, FIELDS, ignore_extra=True)
    plot(rows, args.out / "slow_operator.png", args.interval)
    print(f"wrote {path} and {args.out / 'slow_operator.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
