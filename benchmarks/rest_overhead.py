"""What the driver's REST server costs a job: throughput with the server off, on and idle, and on
while a client polls it 10 times a second; and the latency of those requests while the job runs at
full speed.

The job is a keyed word count at full speed (generator source -> key_by -> count -> discard,
parallelism 2, checkpoints every second so that the checkpoint view has content) over
``--records`` records, run with ``env.execute``; the timed quantity is the wall time around it.
Three configurations:

* ``off``: ``EngineConfig(rest_enabled=False)``: no server at all;
* ``idle``: the server runs (its thread, its event loop's 0.1 s tick, the registry entry) and no
  one asks anything;
* ``polled``: a client in another process (like a dashboard or a scraper) finds the job in the
  registry and asks ``GET /jobs/{id}``, ``/vertices`` and ``/checkpoints`` every 0.1 s (30
  requests a second) over a kept-alive connection (``--new-connections``: one per request, as
  ``epochal info`` in a loop would), timing each request.

Runs are interleaved: every round runs the three configurations in a rotating order, so drift of
this shared machine hits them alike; the load average is recorded beside every run. All runs share
one SparkSession (``local[2]``) after an untimed warm-up. Latencies count only requests answered
while the job was running (the poll's ``GET /jobs/{id}`` said so).

    python -m benchmarks.rest_overhead                      # 2,000,000 records, 5 rounds
    python -m benchmarks.rest_overhead --records 300000 --rounds 1   # quick check

Writes ``rest_overhead.csv`` (one row per run), ``rest_overhead_latency.csv`` (one row per
request of the polled runs) and ``rest_overhead.png`` (throughput per configuration, and the
latency distribution per endpoint) into ``--out``, and prints the ratios to ``off`` and the
latency percentiles.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common.isolation import isolated_home, rotate, wait_unregistered
from benchmarks.common.measure import spark_cpu
from benchmarks.common.results import BLUE, GREY, ORANGE, RESULTS, error_bars, pyplot, save_figure, uptime, write_rows
from benchmarks.common.stats import percentile

CONFIGS = ("off", "idle", "polled")
#: The goals of issue 34: throughput within noise of ``off``, request latency p99 at most this.
THROUGHPUT_GOAL = 0.02
P99_GOAL_S = 0.050
#: What one poll asks, in order (``{id}``: the job).
POLL_PATHS = ("/jobs/{id}", "/jobs/{id}/vertices", "/jobs/{id}/checkpoints")


@dataclass
class Run:
    config: str
    round: int
    records: int
    seconds: float
    load_1min: float
    #: CPU seconds of the driver process itself (its Python threads: JobMaster, REST server, ...)
    driver_cpu_s: float
    #: CPU seconds of Spark under the driver: the JVM, PySpark's daemon and the job's workers
    spark_cpu_s: float
    #: CPU seconds of the polling client's process
    client_cpu_s: float = 0.0
    requests: int = 0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def word(i: int) -> str:
    """Word ``i`` of the job's input: ``w<(i * 7919) % 10,000>``, 10,000 words drawn equally often
    (benchmarks.queryable_state's job reads the same words)."""
    return f"w{(i * 7919) % 10_000}"


def run_job(spark: Any, records: int, rest: bool, checkpoints: str) -> float:
    """One word count of ``records`` records; the wall time of ``execute``."""
    import epochal

    env = epochal.Environment(2, spark=spark, rest_enabled=rest)
    env.enable_checkpointing(1.0, storage=checkpoints)
    env.from_generator(word, count=records).key_by(lambda w: w).count().discard()
    started = time.perf_counter()
    env.execute("rest-overhead", timeout=900)
    return time.perf_counter() - started


def start_poller(latencies: Path, rate: float, new_connections: bool) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "benchmarks.rest_overhead", "--poll", str(latencies),
                             "--rate", str(rate), *(["--new-connections"] if new_connections else [])],
                            env=os.environ.copy())


def poll(latencies: Path, rate: float, new_connections: bool) -> None:
    """The polling client (another process): wait for the job in the registry, then ask
    :data:`POLL_PATHS` ``rate`` times a second, over one kept-alive connection (as a dashboard or
    a scraper does) or a new one per request (as ``epochal info`` does), until the job ended or
    its driver is gone; one JSON line per request (path, seconds as the client saw them, the
    server's own time from its ``Server-Timing`` header, HTTP status, whether the job was running)."""
    import http.client

    from epochal.control.job_registry import Registry

    deadline = time.monotonic() + 300
    entries = Registry().entries()
    while not entries:
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)
        entries = Registry().entries()
    entry = entries[0]
    host, port = entry.address.rsplit(":", 1)
    headers = {"Authorization": f"Bearer {entry.token}"}
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    with latencies.open("w") as out:
        next_poll = time.monotonic()
        while True:
            running = False
            for template in POLL_PATHS:
                started = time.perf_counter()
                try:
                    if new_connections:
                        connection.close()
                    connection.request("GET", template.format(id=entry.job_id), headers=headers)
                    response = connection.getresponse()
                    body = response.read()
                except OSError:
                    return  # the driver is gone
                took = time.perf_counter() - started
                answer = json.loads(body) if response.status == 200 else None
                if template == POLL_PATHS[0]:
                    running = bool(answer) and answer["status"] == "running"
                    if answer and answer["status"] in ("finished", "failed", "cancelled"):
                        return
                timing = response.getheader("server-timing") or ""
                server_ms = float(timing.split("dur=")[1]) if "dur=" in timing else None
                out.write(json.dumps({"path": template, "seconds": took, "server_ms": server_ms,
                                      "status": response.status, "running": running}) + "\n")
            next_poll += 1.0 / rate
            time.sleep(max(0.0, next_poll - time.monotonic()))


def measure(records: int, rounds: int, rate: float, new_connections: bool) -> tuple[list[Run], list[dict[str, Any]]]:
    from epochal.control.spark import create_session

    work = isolated_home("epochal-rest-bench-")  # the poller finds the job here (and only it)
    spark = create_session("local[2]", 2, app_name="epochal-rest-overhead")
    runs: list[Run] = []
    requests: list[dict[str, Any]] = []
    try:
        print("warm-up ...", flush=True)
        run_job(spark, max(records // 10, 10_000), True, str(work / "checkpoints"))
        for round_ in range(rounds):
            for config in rotate(CONFIGS, round_):
                wait_unregistered()
                load = os.getloadavg()[0]
                poller = None
                latencies = work / f"latency-{round_}.jsonl"
                if config == "polled":
                    poller = start_poller(latencies, rate, new_connections)
                cpu, workers = os.times(), spark_cpu(poller.pid if poller else None)
                seconds = run_job(spark, records, config != "off", str(work / "checkpoints"))
                after, workers_after = os.times(), spark_cpu(poller.pid if poller else None)
                run = Run(config, round_, records, seconds, load, after.user + after.system - cpu.user - cpu.system,
                          workers_after - workers)
                if poller is not None:
                    poller.wait(60)
                    reaped = os.times()
                    run.client_cpu_s = reaped.children_user + reaped.children_system - after.children_user \
                        - after.children_system
                    polled = [json.loads(line) for line in latencies.read_text().splitlines()]
                    run.requests = len(polled)
                    requests += [{"round": round_, **r} for r in polled]
                runs.append(run)
                polled = f", {run.requests} requests" if run.requests else ""
                print(f"[{round_}] {config:>6}: {seconds:7.2f} s, {run.records_per_s:>10,.0f} records/s, CPU: driver "
                      f"{run.driver_cpu_s:5.2f} s, Spark {run.spark_cpu_s:6.2f} s, client {run.client_cpu_s:4.2f} s "
                      f"(load {load:.1f}){polled}", flush=True)
    finally:
        spark.stop()
    return runs, requests


def summarise(runs: list[Run], requests: list[dict[str, Any]]) -> dict[str, Any]:
    speed = {c: [r.records_per_s for r in runs if r.config == c] for c in CONFIGS}
    median = {c: statistics.median(v) for c, v in speed.items()}
    # the noise: how far runs of one configuration spread around their median
    spread = max((max(v) - min(v)) / statistics.median(v) for v in speed.values())
    served = [r for r in requests if r["running"] and r["status"] == 200]
    latency = {path: [r["seconds"] for r in served if r["path"] == path] for path in POLL_PATHS}
    latency["all"] = [r["seconds"] for r in served]
    server = [r["server_ms"] / 1000 for r in served if r["server_ms"] is not None]
    # the driver's CPU per second of job, per configuration: what the server adds is load-independent
    cpu = {c: statistics.median(r.driver_cpu_s / r.seconds for r in runs if r.config == c) for c in CONFIGS}
    # the job's own work: Spark CPU seconds per million records, which a busy machine does not change
    work = {c: statistics.median(r.spark_cpu_s / r.records * 1e6 for r in runs if r.config == c) for c in CONFIGS}
    client = statistics.median(r.client_cpu_s / r.seconds for r in runs if r.config == "polled")
    return {"median": median, "min": {c: min(v) for c, v in speed.items()},
            "max": {c: max(v) for c, v in speed.items()}, "spread": spread, "cpu": cpu, "work": work,
            "client": client,
            "latency": {p: (percentile(v, 0.5), percentile(v, 0.99), max(v), len(v)) for p, v in latency.items() if v},
            "server": (percentile(server, 0.5), percentile(server, 0.99), max(server), len(server)) if server else None,
            "errors": sum(1 for r in requests if r["status"] != 200)}


def report(summary: dict[str, Any]) -> None:
    base = summary["median"]["off"]
    print(f"\nthroughput, median of rounds (records/s); run-to-run spread of one configuration up to "
          f"{summary['spread']:.1%}:")
    for config in CONFIGS:
        ratio = summary["median"][config] / base
        print(f"  {config:>6}: {summary['median'][config]:>10,.0f}  (min {summary['min'][config]:,.0f}, max "
              f"{summary['max'][config]:,.0f})  x{ratio:.3f} of off")
    print(f"\nrequest latency while the job ran at full speed (goal p99 <= {P99_GOAL_S * 1000:.0f} ms):")
    for path, (p50, p99, worst, count) in summary["latency"].items():
        print(f"  {path:<24} p50 {p50 * 1000:6.1f} ms  p99 {p99 * 1000:6.1f} ms  max {worst * 1000:6.1f} ms  "
              f"({count} requests)")
    if summary["server"]:
        p50, p99, worst, _ = summary["server"]
        print(f"  {'in the server':<24} p50 {p50 * 1000:6.1f} ms  p99 {p99 * 1000:6.1f} ms  max {worst * 1000:6.1f} "
              f"ms  (Server-Timing: arrival -> answer; the rest is the network and the wait for a CPU)")
    print(f"  requests that failed: {summary['errors']}")
    cores = os.cpu_count() or 1
    print("\ndriver-process CPU per second of job (median; its Python threads: JobMaster, REST server, ...):")
    for config in CONFIGS:
        extra = summary["cpu"][config] - summary["cpu"]["off"]
        print(f"  {config:>6}: {summary['cpu'][config]:.3f} CPU-s/s  (+{extra:.3f} over off = {extra / cores:.2%} of "
              f"the machine's {cores} cores)")
    print(f"  the polling client's own process: {summary['client']:.3f} CPU-s/s")
    print("\nthe job's work: Spark CPU seconds (JVM, daemon, workers) per million records (median):")
    for config in CONFIGS:
        work = summary["work"][config]
        print(f"  {config:>6}: {work:.2f} CPU-s  x{work / summary['work']['off']:.3f} of off")


def write(out: Path, runs: list[Run], requests: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_rows(out / "rest_overhead.csv", [{**asdict(run), "records_per_s": f"{run.records_per_s:.1f}"}
                                           for run in runs])
    write_rows(out / "rest_overhead_latency.csv", requests,
               ["round", "path", "seconds", "server_ms", "status", "running"])
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    medians, errors = error_bars((summary["median"][c], summary["min"][c], summary["max"][c]) for c in CONFIGS)
    bars = left.bar(CONFIGS, medians, yerr=errors, capsize=6, color=[GREY, BLUE, ORANGE])
    left.bar_label(bars, labels=[f"{m:,.0f}" for m in medians], padding=3)
    left.set_ylabel("records / s (median, min-max)")
    loads = [r.load_1min for r in runs]
    left.set_title(f"job throughput: REST server off, idle, polled 10/s\n{runs[0].records:,} records, "
                   f"{max(r.round for r in runs) + 1} interleaved rounds, load {min(loads):.0f}-{max(loads):.0f} "
                   f"on {os.cpu_count()} cores")
    left.margins(y=0.15)
    served = [r for r in requests if r["running"] and r["status"] == 200]
    lines = [(path, sorted(r["seconds"] * 1000 for r in served if r["path"] == path), "-") for path in POLL_PATHS]
    lines.append(("in the server (Server-Timing)", sorted(r["server_ms"] for r in served if r["server_ms"]), ":"))
    for label, values, style in lines:
        if values:
            right.plot(values, [(i + 1) / len(values) for i in range(len(values))], style, label=label)
    right.axvline(P99_GOAL_S * 1000, color="red", linestyle="--", label="p99 goal")
    right.set_xscale("log")
    right.set_xlabel("request latency (ms, log)")
    right.set_ylabel("fraction of requests")
    right.set_title("latency while the job runs at full speed")
    right.legend(fontsize=8)
    save_figure(fig, out / "rest_overhead.png")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rest_overhead",
                                     description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="records per run (default 2,000,000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of off/idle/polled (default 5)")
    parser.add_argument("--rate", type=float, default=10.0, help="polls a second (default 10; 3 requests each)")
    parser.add_argument("--new-connections", action="store_true",
                        help="the client opens a connection per request (as the command line does) instead of "
                             "keeping one alive (as a dashboard does)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--poll", type=Path, help=argparse.SUPPRESS)  # the polling client's own process
    args = parser.parse_args(argv)
    if args.poll is not None:
        poll(args.poll, args.rate, args.new_connections)
        return 0
    print(f"epochal REST overhead: {args.records:,} records x {args.rounds} rounds, {os.cpu_count()} CPUs; "
          f"uptime: {uptime()}", flush=True)
    print(f"the client {'opens a connection per request' if args.new_connections else 'keeps its connection'}",
          flush=True)
    runs, requests = measure(args.records, args.rounds, args.rate, args.new_connections)
    summary = summarise(runs, requests)
    write(args.out, runs, requests, summary)
    report(summary)
    print(f"\nuptime: {uptime()}")
    print(f"wrote {args.out / 'rest_overhead.csv'}, rest_overhead_latency.csv and rest_overhead.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
