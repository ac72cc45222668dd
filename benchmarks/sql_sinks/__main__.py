"""Throughput and commit latency into Delta Lake and PostgreSQL: epochal against its Parquet file
sink and against Spark Structured Streaming writing the same stream to the same kind of table.

Every run is a fresh process (``python -m benchmarks.sql_sinks.run``, see there for the job and
what is timed), one at a time on this machine, one run per configuration (as in
:mod:`benchmarks.peers`). Per-job start-up is measured by the same configuration over
``--startup-records`` and subtracted: ``records/s = (N - n0) / (job_s(N) - job_s(n0))``. Commit
latency is the median and 95th percentile of the per-checkpoint (per-micro-batch) commit times.

Configurations (all at-least-exactly-once as labelled):

* epochal ``parquet`` (ParquetFileSink, exactly once), ``delta`` (DeltaSink, exactly once),
  ``postgres`` (PostgresSink append, 2PC, exactly once), ``upsert`` (PostgresSink upsert by key).
* Spark Structured Streaming ``parquet`` (its file sink, exactly once), ``delta-python`` (the
  Python variant: the job's per-record map as a Python UDF, then ``foreachBatch`` appending each
  micro-batch with ``deltalake`` under ``(txnAppId, txnVersion)``, exactly once),
  ``delta-foreachbatch`` (the same with the map as SQL expressions in the JVM), ``jdbc``
  (``foreachBatch`` with Spark's JDBC writer into PostgreSQL, at-least-once). Spark's own Delta
  sink (``format("delta")``) cannot run: Delta's Spark package has no release for Spark 4.3
  (4.4.0 fails with NoSuchMethodError).

Writes ``sql_sinks.csv``, ``sql_sinks.md`` and ``sql_sinks.png`` into ``--out``::

    python -m benchmarks.sql_sinks --records 300000
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common.results import RESULTS, ROOT, pyplot, save_figure, write_rows
from benchmarks.common.stats import percentile

CONFIGS = [("epochal", "parquet"), ("epochal", "delta"), ("epochal", "postgres"), ("epochal", "upsert"),
           ("spark", "parquet"), ("spark", "delta-foreachbatch"), ("spark", "delta-python"), ("spark", "jdbc")]
LABELS = {"parquet": "Parquet files", "delta": "Delta (DeltaSink)", "postgres": "PostgreSQL append (2PC)",
          "upsert": "PostgreSQL upsert", "delta-foreachbatch": "Delta (SQL map; foreachBatch + deltalake, txn)",
          "delta-python": "Delta (Python map; foreachBatch + deltalake, txn)",
          "jdbc": "PostgreSQL (foreachBatch + JDBC)"}
GUARANTEE = {"parquet": "exactly once", "delta": "exactly once", "postgres": "exactly once",
             "upsert": "idempotent", "delta-foreachbatch": "exactly once", "delta-python": "exactly once",
             "jdbc": "at least once"}


def run_once(system: str, sink: str, records: int, args: argparse.Namespace, server) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"sqlbench-{system}-{sink}-", dir=args.work_dir))
    table = f"bench_{system}_{sink}".replace("-", "_")
    with server.connect() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        key = " PRIMARY KEY" if sink == "upsert" else ""
        conn.execute(f"CREATE TABLE {table} (id bigint, key bigint{key}, value bigint)")
    result = work / "result.json"
    command = [sys.executable, "-m", "benchmarks.sql_sinks.run", "--system", system, "--sink", sink,
               "--records", str(records), "--parallelism", str(args.parallelism), "--work-dir", str(work),
               "--dsn", server.dsn, "--table", table, "--result", str(result)]
    started = time.perf_counter()
    with open(work / "log.txt", "w") as log:
        done = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{system}/{sink} failed; see {work / 'log.txt'}")
    outcome = json.loads(result.read_text())
    if outcome.get("rows_out") is None:
        with server.connect() as conn:
            outcome["rows_out"] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    outcome["wall_s"] = time.perf_counter() - started
    shutil.rmtree(work, ignore_errors=True)
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--startup-records", type=int, default=10_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "sql_sinks"))
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--configs", nargs="*", default=[f"{s}:{k}" for s, k in CONFIGS])
    parser.add_argument("--render", action="store_true", help="only redraw the table and plot from the CSV in --out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.render:
        render(out)
        return
    args.work_dir = args.work_dir or tempfile.mkdtemp(prefix="sqlbench-")
    sys.path.insert(0, str(ROOT))
    from tests.postgres_server import PostgresServer

    server = PostgresServer(Path(args.work_dir) / "postgres").start()
    rows = []
    try:
        for config in args.configs:
            system, sink = config.split(":")
            startup = run_once(system, sink, args.startup_records, args, server)
            full = run_once(system, sink, args.records, args, server)
            rate = (args.records - args.startup_records) / max(1e-9, full["job_s"] - startup["job_s"])
            commits = full["commit_ms"]
            rows.append({"system": system, "sink": sink, "records": args.records, "job_s": round(full["job_s"], 2),
                         "startup_s": round(startup["job_s"], 2), "records_per_s": round(rate),
                         "commits": len(commits), "commit_ms_p50": round(statistics.median(commits), 1)
                         if commits else "",
                         "commit_ms_p95": round(percentile(commits, 0.95, method="above"), 1) if commits else "",
                         "rows_out": full["rows_out"], "guarantee": GUARANTEE[sink]})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        server.destroy()
    write_rows(out / "sql_sinks.csv", rows)
    render(out)


def render(out: Path) -> None:
    """``sql_sinks.md`` and ``sql_sinks.png`` from ``sql_sinks.csv``."""
    with open(out / "sql_sinks.csv", newline="") as handle:
        rows: list[dict] = list(csv.DictReader(handle))
    for r in rows:
        for column in ("records", "records_per_s", "commits", "rows_out"):
            r[column] = int(r[column])
        r["job_s"] = float(r["job_s"])
        r["whole_job_per_s"] = round(r["records"] / r["job_s"])
        for column in ("commit_ms_p50", "commit_ms_p95"):
            r[column] = float(r[column]) if r[column] else ""
    (out / "sql_sinks.md").write_text(table(rows))
    plot(out / "sql_sinks.png", rows)
    print(table(rows))


def table(rows: list[dict]) -> str:
    """The summary: both rates (start-up subtracted, and N over the whole job), the ratios to the
    system's own Parquet sink and to Spark's Python Delta variant, and commit latencies."""
    def find(system: str, sink: str) -> dict | None:
        return next((r for r in rows if r["system"] == system and r["sink"] == sink), None)

    def ratio(value: float, base: dict | None, column: str) -> str:
        return f"{value / base[column]:.2f}x" if base and base[column] else "-"

    spark_python = find("spark", "delta-python")
    lines = ["| system | sink | guarantee | records/s | records/s, whole job | vs own Parquet sink | "
             "vs Spark SS Delta, Python variant (whole job) | commit p50 ms | commit p95 ms | commits | rows out |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        own = find(r["system"], "parquet")
        lines.append(f"| {r['system']} | {LABELS[r['sink']]} | {r['guarantee']} | {r['records_per_s']:,} | "
                     f"{r['whole_job_per_s']:,} | {ratio(r['records_per_s'], own, 'records_per_s')} | "
                     f"{ratio(r['records_per_s'], spark_python, 'records_per_s')} "
                     f"({ratio(r['whole_job_per_s'], spark_python, 'whole_job_per_s')}) | {r['commit_ms_p50']} | "
                     f"{r['commit_ms_p95']} | {r['commits']} | {r['rows_out']:,} |")
    return "\n".join(lines) + "\n"


def plot(path: Path, rows: list[dict]) -> None:
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    names = [f"{r['system']}\n{r['sink']}" for r in rows]
    colors = ["tab:blue" if r["system"] == "epochal" else "tab:orange" for r in rows]
    left.bar(names, [r["records_per_s"] for r in rows], color=colors)
    left.set_ylabel("records/s (start-up subtracted)")
    left.set_title("Throughput, one run each, same machine")
    right.bar(names, [r["commit_ms_p50"] or 0 for r in rows], color=colors)
    right.set_ylabel("ms")
    right.set_title("Commit latency per checkpoint / micro-batch (median)")
    for axis in (left, right):
        axis.tick_params(axis="x", labelsize=7, labelrotation=35)
    save_figure(fig, path, dpi=110)


if __name__ == "__main__":
    main()
