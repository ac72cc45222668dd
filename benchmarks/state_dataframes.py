"""State as a Spark DataFrame (issue 37): reading 1 M keys' state into a DataFrame and counting it.

For each backend (``--backends``: ``heap``, ``heap-incremental``, ``rocksdb``) a keyed job
(``from_generator`` of ``--keys`` records ``(i, i)`` -> ``key_by`` -> ``sum`` -> discard, parallelism 2,
a checkpoint every ``--interval`` s) runs to its end; its final checkpoint holds one value per key
(of ``heap-incremental`` a chain of a full file and deltas, of ``rocksdb`` SST files). Then,
``--repeats`` times, ``epochal.read_state(spark, checkpoint, "sum", "aggregate").count()`` is timed
from the call (the schema inferred from a sample, the partitions planned) to the count (every
partition read by the executors' Python workers and handed to Spark as Arrow batches).
``--partitions`` sets the read's input partitions (default: the reader's, 8). Goal (the issue):
under 10 s per backend on this machine.

Writes into ``--out`` (default ``benchmarks/results/state_dataframes``): ``state_dataframes.csv``
(one row per timed read: backend, keys, repeat, seconds, rows counted, checkpoint bytes, load
average), ``state_dataframes.png`` (median seconds per backend, min-max bars, the goal as a line)
and ``machine.txt``.

    .venv/bin/python -m benchmarks.state_dataframes                          # docs/state_dataframes.md
    .venv/bin/python -m benchmarks.state_dataframes --keys 20000 --repeats 1 --out /tmp/sdf   # smoke
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import epochal
from benchmarks.common.results import BLUE, RED, RESULTS, error_bars, machine, pyplot, save_figure, write_csv
from benchmarks.common.stats import median
from epochal.control.spark import create_session
from epochal.state.inspect import savepoint_info

BACKENDS: dict[str, dict[str, Any]] = {"heap": {}, "heap-incremental": {"incremental": True},
                                       "rocksdb": {"kind": "rocksdb"}}
GOAL_S = 10.0


def pair(i: int) -> tuple[int, int]:
    return (i, i)


def checkpoint_of(spark: Any, backend: str, keys: int, interval: float, root: str) -> str:
    """Run the keyed job on ``backend`` to its end; its final checkpoint's path."""
    env = epochal.Environment(2, spark=spark)
    options = dict(BACKENDS[backend])
    if backend == "rocksdb":
        options["local_dir"] = os.path.join(root, "rocksdb")
    env.set_state_backend(**options)
    storage = os.path.join(root, "checkpoints")
    env.enable_checkpointing(interval, storage=storage, timeout=300)
    (env.from_generator(pair, count=keys).key_by(lambda r: r[0]).sum(lambda r: r[1]).uid("sum").discard())
    env.execute(f"state-df-{backend}")
    return epochal.latest_checkpoint(storage, f"state-df-{backend}")


def timed_read(spark: Any, path: str, partitions: int | None) -> tuple[float, int]:
    started = time.perf_counter()
    rows = epochal.read_state(spark, path, "sum", "aggregate", partitions=partitions).count()
    return time.perf_counter() - started, rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    seconds = [[r["seconds"] for r in rows if r["backend"] == b] for b in backends]
    middle, errors = error_bars((median(s), min(s), max(s)) for s in seconds)
    figure, axis = plt.subplots(figsize=(6, 4))
    axis.bar(backends, middle, yerr=errors, capsize=6, color=BLUE)
    axis.axhline(GOAL_S, color=RED, linestyle="--", label=f"goal: {GOAL_S:.0f} s")
    keys = rows[0]["keys"]
    axis.set_ylabel("seconds (median, min-max)")
    axis.set_title(f"read_state(...).count() of {keys:,} keys' state")
    axis.legend()
    save_figure(figure, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--interval", type=float, default=1.0, help="checkpoint interval of the job (s)")
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--out", default=str(RESULTS / "state_dataframes"))
    parser.add_argument("--tmp", default=None, help="where the checkpoints go (default: the temp directory)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    about = f"{machine()}; load average at start {os.getloadavg()}"
    (out / "machine.txt").write_text(about + "\n")
    print(about)
    spark = create_session("local[2]", 2)
    rows: list[dict[str, Any]] = []
    try:
        for backend in args.backends:
            root = tempfile.mkdtemp(prefix="epochal-state-df-", dir=args.tmp)
            try:
                path = checkpoint_of(spark, backend, args.keys, args.interval, root)
                size = savepoint_info(path)["bytes"]
                timed_read(spark, path, args.partitions)  # warm-up: the executors' Python workers start
                for repeat in range(args.repeats):
                    load = os.getloadavg()[0]
                    seconds, counted = timed_read(spark, path, args.partitions)
                    if counted != args.keys:
                        raise RuntimeError(f"{backend}: counted {counted:,} rows, expected {args.keys:,}")
                    rows.append({"backend": backend, "keys": args.keys, "repeat": repeat, "seconds": seconds,
                                 "rows": counted, "checkpoint_bytes": size, "loadavg": load})
                    print(f"{backend:>17} [{repeat}] {seconds:6.2f} s  {counted:,} rows  "
                          f"{size / 2**20:.1f} MiB  load {load:.1f}", flush=True)
                write_csv(out / "state_dataframes.csv", rows)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        spark.stop()
    plot(rows, out / "state_dataframes.png")
    for backend in args.backends:
        mine = [r["seconds"] for r in rows if r["backend"] == backend]
        print(f"{backend:>17}: median {median(mine):.2f} s (min {min(mine):.2f}, max {max(mine):.2f}); "
              f"goal {GOAL_S:.0f} s: {'met' if median(mine) < GOAL_S else 'MISSED'}")


if __name__ == "__main__":
    main()
