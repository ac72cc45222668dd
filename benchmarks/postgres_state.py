"""Throughput of the peers' keyed job on each keyed-state backend, the PostgreSQL one included.

The job is :mod:`benchmarks.peers`' ``keyed`` / ``keyed_1m`` (generator -> parse -> (key, 1) ->
key_by -> reduce -> discard, exactly-once checkpoints every second), built by
:func:`benchmarks.peers.run_epochal.build`, run at 10 k and 1 M keys on ``heap``, ``rocksdb``,
``postgres`` and ``postgres-mvcc``. Reported: the job's wall time (``execute``) and records per
second. The PostgreSQL server is started for the run (``tests/postgres_server.py``: the project's
test server, ``fsync=off``), unless ``--dsn`` names one.

Writes ``postgres_state_throughput.csv`` and ``postgres_state_throughput.png`` into ``--out``.

    .venv/bin/python -m benchmarks.postgres_state --records 2000000 --repeats 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import epochal
from benchmarks.common.results import RESULTS, machine, pyplot, save_figure, write_csv
from benchmarks.common.stats import median
from benchmarks.peers import spec
from benchmarks.peers.run_epochal import LatencySamplingDiscardSink, build
from epochal.control.spark import create_session

BACKENDS: dict[str, dict[str, Any]] = {
    "heap": {"kind": "heap"},
    "rocksdb": {"kind": "rocksdb"},
    "postgres": {"kind": "postgres"},
    "postgres-mvcc": {"kind": "postgres", "mvcc": True},
}


def start_server(directory: Path) -> Any:
    from tests.postgres_server import PostgresServer

    return PostgresServer(directory).start()


def run(spark: Any, backend: str, job: str, records: int, parallelism: int, dsn: str, work: Path) -> dict[str, Any]:
    env = epochal.Environment(parallelism, spark=spark)
    options = dict(BACKENDS[backend])
    if options["kind"] == "postgres":
        options["dsn"] = dsn
    if options["kind"] == "rocksdb":
        options["local_dir"] = str(work / "rocksdb")
    env.set_state_backend(**options)
    env.enable_checkpointing(spec.CHECKPOINT_INTERVAL_S, "exactly_once", storage=str(work / "checkpoints"))
    build(env, job, records, LatencySamplingDiscardSink(work))
    started = time.perf_counter()
    result = env.execute(f"pg-bench-{backend}-{job}-{int(time.time())}", timeout=3600)
    seconds = time.perf_counter() - started
    done = [c for c in result.checkpoints if c["status"] == "completed"]
    return {"backend": backend, "job": job, "keys": spec.JOBS[job].keys, "records": records,
            "parallelism": parallelism, "job_s": seconds, "records_per_s": records / seconds,
            "checkpoints": len(done), "checkpoint_s_median": median(c["duration_s"] for c in done)}


def plot(rows: list[dict[str, Any]], out: Path, title: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    jobs = sorted({r["keys"] for r in rows})
    width = 0.8 / len(BACKENDS)
    for i, backend in enumerate(BACKENDS):
        ys = [median(r["records_per_s"] for r in rows if r["backend"] == backend and r["keys"] == k) for k in jobs]
        ax.bar([j + i * width for j in range(len(jobs))], ys, width, label=backend)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(jobs))], [f"{k:,} keys" for k in jobs])
    ax.set_ylabel("records/s (median)")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8)
    save_figure(fig, out / "postgres_state_throughput.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--jobs", nargs="+", default=["keyed", "keyed_1m"], choices=["keyed", "keyed_1m"])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--dsn", default=None, help="a PostgreSQL server (default: one started for the run)")
    parser.add_argument("--out", default=str(RESULTS / "postgres-state"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="epochal-pg-bench-"))
    server = None if args.dsn else start_server(work / "pg")
    dsn = args.dsn or server.dsn
    about = f"{machine()}; Spark local[{args.parallelism}]"
    print(about, flush=True)
    spark = create_session(f"local[{args.parallelism}]", args.parallelism)
    rows: list[dict[str, Any]] = []
    try:
        for _ in range(args.repeats):
            for job in args.jobs:
                for backend in args.backends:
                    row = run(spark, backend, job, args.records, args.parallelism, dsn, work)
                    rows.append(row)
                    print(f"{backend:>14} {job:>9}: {row['job_s']:6.1f} s, {row['records_per_s']:9,.0f} records/s, "
                          f"{row['checkpoints']} checkpoints (median {row['checkpoint_s_median']:.2f} s)", flush=True)
    finally:
        if rows:
            write_csv(out / "postgres_state_throughput.csv", rows)
            plot(rows, out, f"peers keyed job, {args.records:,} records, exactly-once 1 s; {about}")
        spark.stop()
        if server is not None:
            server.destroy()


if __name__ == "__main__":
    main()
