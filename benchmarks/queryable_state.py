"""Queryable state: how many lookups a running job answers, how fast, and what they cost the job.

The job is a keyed word count at full speed (generator source of words from a 10,000-word
vocabulary -> ``key_by`` -> ``as_queryable_state("counts")`` -> ``count`` -> discard, parallelism
2, a checkpoint every second, the heap backend), on one SparkSession ``local[2]``.

* **Lookups.** While an unbounded run of the job processes records as fast as it can (``full
  speed``), and again while one reads 20,000 records a second (the workers then have idle moments),
  1 or 4 client processes (``QueryableStateClient``, found through the job registry as any client of the
  machine would) each look up random words for ``--seconds``: one key per call and one call after
  the other (``point``: the latency of each lookup as the client sees it), for each isolation
  level; and, for comparison, 100 keys per call (``batch``). Each client counts its lookups and
  times each call.
* **Cost.** The job over ``--records`` records (``env.execute``, wall time) with no client
  (``none``) and with one client process looking up 1,000 random words a second (``1000/s``: one
  key per call while the client keeps up, the lookups that are due together when it falls behind), and
  the same job without ``as_queryable_state`` (``not queryable``: what polling for queries between
  batches costs), interleaved over ``--rounds`` rounds. Beside the wall time the script records the CPU seconds
  Spark under this process used (the JVM, PySpark's daemon, the job's workers) per million records,
  which other tenants of a shared machine do not change, and the client's own CPU. With
  ``--client-cores 1`` the client processes run on core 1 only and the job (this process, Spark's
  JVM and every Python worker) on the others: what the lookups cost the job when the client does
  not share its cores, as a client on another machine would not. The summary gives the geometric
  mean of the rounds' ratios with its 95 % confidence interval (``common.stats.ratio_interval``).

    python -m benchmarks.queryable_state                     # 10 s per lookup run, 12,000,000 records x 3 rounds
    python -m benchmarks.queryable_state --seconds 3 --records 500000 --rounds 1   # quick check
    python -m benchmarks.queryable_state --experiments cost --records 4000000   # the cost only

Writes ``queryable_state_lookups.csv`` (one row per client process and run),
``queryable_state_throughput.csv`` (one row per job run) and ``queryable_state.png`` into
``--out``, and prints lookups/s, latency percentiles, the throughput ratio and the load average.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import signal
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
from benchmarks.common.results import (
    BLUE,
    GREEN,
    GREY,
    ORANGE,
    RESULTS,
    error_bars,
    pyplot,
    save_figure,
    uptime,
    write_csv,
)
from benchmarks.common.stats import block_ratios, percentile, ratio_interval
from benchmarks.rest_overhead import word

#: The goals of issue 37: lookups a second from one client (read_uncommitted) at p99 below ...
LOOKUPS_GOAL = 10_000
P99_GOAL_S = 0.005
#: ... and at most this throughput lost at 1,000 lookups a second.
COST_GOAL = 0.05
STATE = "counts"
VOCABULARY = 10_000
#: The environment variable that tells a client process its cores (``--client-cores``).
CLIENT_CORES = "EPOCHAL_BENCH_CLIENT_CORES"
#: how the client processes reach the workers (QueryableStateClient's ``transport``; default auto:
#: the workers' local sockets, as they are on this host)
CLIENT_TRANSPORT = "EPOCHAL_BENCH_CLIENT_TRANSPORT"
#: The lookup runs: (name, clients, level, keys per call).
#: ``keys_per_call`` of a client that asks single keys with ``get_async``, ``WINDOW`` unanswered at a time
PIPELINED = 0
WINDOW = 16
LOOKUP_RUNS = (("uncommitted x1", 1, "read_uncommitted", 1), ("committed x1", 1, "read_committed", 1),
               ("uncommitted x4", 4, "read_uncommitted", 1), ("committed x4", 4, "read_committed", 1),
               ("uncommitted x1, 100 keys/call", 1, "read_uncommitted", 100),
               ("uncommitted x1, pipelined get_async", 1, "read_uncommitted", PIPELINED))


@dataclass
class ClientReport:
    run: str
    client: int
    level: str
    keys_per_call: int
    calls: int
    lookups: int
    seconds: float
    p50_s: float
    p99_s: float
    max_s: float
    cpu_s: float
    load_1min: float

    @property
    def lookups_per_s(self) -> float:
        return self.lookups / self.seconds


@dataclass
class JobRun:
    config: str
    round: int
    records: int
    seconds: float
    load_1min: float
    spark_cpu_s: float
    client_cpu_s: float = 0.0
    lookups: int = 0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def add_job(env: Any, records: int | None, rate: float | None = None, queryable: bool = True) -> None:
    keyed = env.from_generator(word, count=records, rate=rate).key_by(lambda w: w)
    (keyed.as_queryable_state(STATE) if queryable else keyed).count().discard()


# ---------------------------------------------------------------------- the client processes
def client_main(out: Path, level: str, seconds: float, keys_per_call: int, rate: float) -> None:
    """A client process: find the (one) job in the registry, wait until it serves, then look up
    random words for ``seconds`` (or, with ``rate``, that many a second until the job is gone);
    writes a JSON summary to ``out``."""
    import epochal
    from epochal.control.job_registry import Registry
    from epochal.errors import QueryableStateError

    if cores := os.environ.get(CLIENT_CORES):
        os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
    deadline = time.monotonic() + 300
    while not (entries := Registry().entries()):
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)
    client = epochal.QueryableStateClient(entries[0].job_id, level=level, timeout=60.0,
                                          transport=os.environ.get(CLIENT_TRANSPORT, "auto"))
    client.get(STATE, word(0))  # waits until the job serves
    rng = random.Random(os.getpid())
    latencies: list[float] = []
    lookups = 0
    cpu = os.times()
    started = time.perf_counter()
    next_call = time.monotonic()
    resumed: list[bool] = []  # (SIGCONT after a SIGSTOP: the pace starts again from now, no catching up)
    signal.signal(signal.SIGCONT, lambda *_: resumed.append(True))
    end = started + seconds
    if keys_per_call == PIPELINED:
        lookups = pipelined(client, rng, end, latencies)
    try:
        while keys_per_call != PIPELINED and (rate or time.perf_counter() < end):
            count = keys_per_call
            if resumed:
                resumed.clear()
                next_call = time.monotonic()
            if rate:  # every lookup that is due: one key a call while the client keeps up
                due = int((time.monotonic() - next_call) * rate) + 1
                count = max(1, min(due, 100))
                next_call += count / rate
            keys = [word(rng.randrange(VOCABULARY)) for _ in range(count)]
            before = time.perf_counter()
            if count == 1:
                client.get(STATE, keys[0], timeout=5.0)
            else:
                client.get_many(STATE, keys, timeout=5.0)
            latencies.append(time.perf_counter() - before)
            lookups += count
            if rate:
                time.sleep(max(0.0, next_call - time.monotonic()))
    except (QueryableStateError, OSError):
        pass  # the job ended (rate mode)
    elapsed = time.perf_counter() - started
    after = os.times()
    out.write_text(json.dumps({"calls": len(latencies), "lookups": lookups, "seconds": elapsed,
                               "p50_s": percentile(latencies, 0.5) if latencies else 0.0,
                               "p99_s": percentile(latencies, 0.99) if latencies else 0.0,
                               "max_s": max(latencies, default=0.0),
                               "cpu_s": after.user + after.system - cpu.user - cpu.system}))


def pipelined(client: Any, rng: random.Random, end: float, latencies: list[float]) -> int:
    """Single-key ``get_async`` lookups, ``WINDOW`` of them unanswered at a time, until ``end``;
    each one's latency from its call to its answer. Returns the number answered."""
    import collections

    window: collections.deque[tuple[float, Any]] = collections.deque()
    answered = 0
    while time.perf_counter() < end or window:
        while len(window) < WINDOW and time.perf_counter() < end:
            window.append((time.perf_counter(), client.get_async(STATE, word(rng.randrange(VOCABULARY)))))
        asked, future = window.popleft()
        future.result(timeout=5.0)
        latencies.append(time.perf_counter() - asked)
        answered += 1
    return answered


def start_client(out: Path, level: str, seconds: float, keys_per_call: int = 1,
                 rate: float = 0.0) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "benchmarks.queryable_state", "--client", str(out),
                             "--level", level, "--seconds", str(seconds), "--keys-per-call", str(keys_per_call),
                             "--rate", str(rate)], env=os.environ.copy())



# ---------------------------------------------------------------------- the measurements
#: The cost runs: a job without queryable state (the workers then look for queries every 0.2 s
#: only), with one and no client, and with one client looking up 1,000 words a second.
COST_CONFIGS = ("not queryable", "none", "1000/s")
#: The jobs lookups are measured against: (name, records a second; None: as fast as it can).
JOBS = (("full speed", None), ("20,000 records/s", 20_000.0))


def lookups(spark: Any, work: Path, seconds: float) -> list[ClientReport]:
    reports: list[ClientReport] = []
    for job_name, rate in JOBS:
        wait_unregistered()
        reports += lookups_of_job(spark, work, seconds, job_name, rate)
    return reports


def lookups_of_job(spark: Any, work: Path, seconds: float, job_name: str, rate: float | None) -> list[ClientReport]:
    import epochal

    env = epochal.Environment(2, spark=spark)
    env.enable_checkpointing(1.0, storage=str(work / "checkpoints"))
    add_job(env, None, rate)
    job = env.execute_async("queryable-lookups")
    reports = []
    try:
        job.wait_until_running()
        for run_name, clients, level, keys_per_call in LOOKUP_RUNS:
            name = f"{job_name}: {run_name}"
            load = os.getloadavg()[0]
            outs = [work / f"client-{len(reports)}-{i}.json" for i in range(clients)]
            processes = [start_client(out, level, seconds, keys_per_call) for out in outs]
            for process in processes:
                process.wait(seconds + 300)
            for i, out in enumerate(outs):
                summary = json.loads(out.read_text())
                reports.append(ClientReport(name, i, level, keys_per_call, load_1min=load, **summary))
            mine = [r for r in reports if r.run == name]
            print(f"{name:>44}: {line(mine)}", flush=True)
    finally:
        job.cancel()
    return reports


def cost(spark: Any, work: Path, records: int, rounds: int, configs: Sequence[str] = COST_CONFIGS) -> list[JobRun]:
    import epochal

    runs = []
    # The first job of a session takes several times longer whatever its configuration (a cold JVM
    # and workers): an untimed one goes first, so that no configuration's first round pays for it.
    wait_unregistered()
    env = epochal.Environment(2, spark=spark)
    add_job(env, min(records, 1_000_000))
    env.execute("queryable-warm-up", timeout=900)
    for round_ in range(rounds):
        for config in rotate(configs, round_):
            wait_unregistered()
            load = os.getloadavg()[0]
            client = None
            out = work / f"cost-{round_}.json"
            if config.startswith("1000/s"):
                client = start_client(out, "read_uncommitted", 0.0, 1, rate=1000.0)
            env = epochal.Environment(2, spark=spark)
            env.enable_checkpointing(1.0, storage=str(work / "checkpoints"))
            add_job(env, records, queryable=config != "not queryable")
            before = spark_cpu(client.pid if client else None)
            started = time.perf_counter()
            env.execute("queryable-cost", timeout=900)
            seconds = time.perf_counter() - started
            run = JobRun(config, round_, records, seconds, load, spark_cpu(client.pid if client else None) - before)
            if client is not None:
                client.wait(120)
                summary = json.loads(out.read_text()) if out.exists() else {}
                run.client_cpu_s, run.lookups = summary.get("cpu_s", 0.0), summary.get("lookups", 0)
            runs.append(run)
            print(f"[{round_}] {config:>13}: {seconds:6.2f} s, {run.records_per_s:>10,.0f} records/s, Spark CPU "
                  f"{run.spark_cpu_s / records * 1e6:.2f} s per M records, client {run.client_cpu_s:.2f} CPU-s, "
                  f"{run.lookups} lookups ({run.lookups / seconds:,.0f}/s of the run; load {load:.1f})", flush=True)
    return runs


def write(out: Path, reports: list[ClientReport], runs: list[JobRun]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if reports:
        write_csv(out / "queryable_state_lookups.csv",
                  [{**asdict(r), "lookups_per_s": round(r.lookups_per_s, 1)} for r in reports])
    if runs:
        write_csv(out / "queryable_state_throughput.csv",
                  [{**asdict(r), "records_per_s": round(r.records_per_s, 1)} for r in runs])
    plt = pyplot()

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(17, 5.5), gridspec_kw={"width_ratios": [1.3, 1, 1]})
    names = list(dict.fromkeys(r.run for r in reports))
    totals = [sum(r.lookups_per_s for r in reports if r.run == n) for n in names]
    bars = left.barh(names, totals, color=BLUE)
    left.bar_label(bars, labels=[f"{t:,.0f}" for t in totals], padding=3)
    left.axvline(LOOKUPS_GOAL, color="red", linestyle="--", label="goal (x1, uncommitted)")
    left.set_xscale("log")
    left.set_xlabel("lookups / s (all clients of the run; log)")
    left.set_title("lookups while the job runs")
    left.invert_yaxis()
    left.margins(x=0.25)
    left.legend(fontsize=8)
    p50 = [statistics.median(r.p50_s for r in reports if r.run == n) * 1000 for n in names]
    p99 = [max(r.p99_s for r in reports if r.run == n) * 1000 for n in names]
    y = range(len(names))
    middle.barh([i - 0.2 for i in y], p50, height=0.4, label="p50", color=GREEN)
    middle.barh([i + 0.2 for i in y], p99, height=0.4, label="p99 (worst client)", color=ORANGE)
    middle.set_yticks(list(y), [""] * len(names))  # (the same runs as on the left)
    middle.invert_yaxis()
    middle.axvline(P99_GOAL_S * 1000, color="red", linestyle="--", label="p99 goal")
    middle.set_xlabel("latency per call (ms)")
    middle.set_title("latency per call, as the client sees it")
    middle.legend(fontsize=8)
    if not runs:
        right.set_visible(False)
        save_figure(fig, out / "queryable_state.png")
        return
    configs = list(dict.fromkeys(r.config for r in runs))
    speeds = {c: [r.records_per_s for r in runs if r.config == c] for c in configs}
    medians, errors = error_bars((statistics.median(speeds[c]), min(speeds[c]), max(speeds[c])) for c in configs)
    colours = {"not queryable": "#cccccc", "none": GREY, "1000/s": ORANGE}
    bars = right.bar([c.replace(", ", "\n") for c in configs], medians, yerr=errors, capsize=6,
                     color=[colours.get(c, BLUE) for c in configs])
    right.bar_label(bars, labels=[f"{m:,.0f}" for m in medians], padding=3)
    loads = [r.load_1min for r in runs]
    right.set_ylabel("records / s (median, min-max)")
    right.set_title(f"job throughput, {runs[0].records:,} records,\n"
                    f"{max(r.round for r in runs) + 1} rounds, load {min(loads):.1f}-{max(loads):.1f} "
                    f"on {os.cpu_count()} cores")
    right.margins(y=0.15)
    save_figure(fig, out / "queryable_state.png")


def read(out: Path) -> tuple[list[ClientReport], list[JobRun]]:
    """The rows of the CSVs ``write`` wrote into ``out``."""
    def typed(cls: Any, row: dict[str, str]) -> Any:
        fields = {name: kind for name, kind in cls.__annotations__.items()}
        return cls(**{k: (int(v) if fields[k] == "int" else float(v) if fields[k] == "float" else v)
                      for k, v in row.items() if k in fields})

    def rows(name: str, cls: Any) -> list[Any]:
        if not (out / name).exists():  # (a run of one experiment)
            return []
        with (out / name).open() as handle:
            return [typed(cls, row) for row in csv.DictReader(handle)]

    return rows("queryable_state_lookups.csv", ClientReport), rows("queryable_state_throughput.csv", JobRun)


def line(mine: list[ClientReport]) -> str:
    """One run's lookups: all its clients together."""
    p50 = statistics.median(r.p50_s for r in mine) * 1000
    p99, worst = max(r.p99_s for r in mine) * 1000, max(r.max_s for r in mine) * 1000
    calls = sum(r.calls / r.seconds for r in mine)
    return (f"{sum(r.lookups_per_s for r in mine):>9,.0f} lookups/s ({calls:,.0f} calls/s), p50 {p50:.2f} ms, "
            f"p99 {p99:.2f} ms, max {worst:.1f} ms; client CPU {sum(r.cpu_s for r in mine):.1f} s "
            f"(load {mine[0].load_1min:.1f})")


def report(reports: list[ClientReport], runs: list[JobRun]) -> None:
    if reports:
        print("\nlookups while the job ran:")
        for name in dict.fromkeys(r.run for r in reports):
            print(f"  {name:>44}: {line([r for r in reports if r.run == name])}")
    speeds = {c: [r.records_per_s for r in runs if r.config == c] for c in dict.fromkeys(r.config for r in runs)}
    work = {c: statistics.median(r.spark_cpu_s / r.records * 1e6 for r in runs if r.config == c) for c in speeds}
    if "not queryable" in speeds:
        plain = speeds["not queryable"]
        print(f"\njob without queryable state: {statistics.median(plain):,.0f} records/s (min {min(plain):,.0f}, max "
              f"{max(plain):,.0f}); Spark CPU per million records {work['not queryable']:.2f} s")
    for none_, queried_ in (("none", "1000/s"),):
        if none_ not in speeds or queried_ not in speeds:
            continue
        none, queried = statistics.median(speeds[none_]), statistics.median(speeds[queried_])
        print(f"\njob throughput (median of rounds): {none_} {none:,.0f} records/s (min {min(speeds[none_]):,.0f}, "
              f"max {max(speeds[none_]):,.0f}); {queried_} {queried:,.0f} (min {min(speeds[queried_]):,.0f}, max "
              f"{max(speeds[queried_]):,.0f}): x{queried / none:.3f} (goal: at least x{1 - COST_GOAL:.2f})")
        print(f"Spark CPU per million records: {none_} {work[none_]:.2f} s, {queried_} {work[queried_]:.2f} s "
              f"(x{work[queried_] / work[none_]:.3f})")
        ratios = round_ratios(runs, none_, queried_)
        if len(ratios) > 1:
            ratio, low, high = ratio_interval(ratios)
            print(f"per round {queried_} / {none_}: x{ratio:.3f} (geometric mean; 95 %: {low:.3f} - {high:.3f}; "
                  f"{len(ratios)} rounds: "
                  f"{', '.join(f'{r:.3f}' for r in ratios)})")


def round_ratios(runs: list[JobRun], none: str, queried: str) -> list[float]:
    """Per round, the ``queried`` run's throughput over the ``none`` run's."""
    rows = [{"block": r.round, "config": r.config, "records_per_s": r.records_per_s}
            for r in sorted(runs, key=lambda r: r.round)]
    return block_ratios(rows, queried, none)


def pin_clients(cores: str) -> set[int]:
    """``--client-cores``: this process (and Spark, started after it: its JVM and workers inherit)
    leaves ``cores`` ("1", "1,2") to the client processes, which :func:`client_main` pins there;
    returns the client cores."""
    clients = {int(c) for c in cores.split(",")}
    os.sched_setaffinity(0, os.sched_getaffinity(0) - clients)
    os.environ[CLIENT_CORES] = cores
    return clients


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.queryable_state",
                                     description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per lookup run (default 10)")
    parser.add_argument("--records", type=int, default=12_000_000, help="records per cost run (default 12,000,000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of none / 1000/s (default 3)")
    parser.add_argument("--experiments", nargs="+", choices=("lookups", "cost"), default=["lookups", "cost"])
    parser.add_argument("--cost-configs", nargs="+", choices=COST_CONFIGS, default=list(COST_CONFIGS),
                        help="the cost runs (default: all three)")
    parser.add_argument("--client-cores", help="cores (e.g. '1') the client processes run on; the job gets the "
                                                 "others (default: every process on every core)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG and summary from the CSVs in --out")
    parser.add_argument("--client", type=Path, help=argparse.SUPPRESS)  # a client process
    parser.add_argument("--level", default="read_uncommitted", help=argparse.SUPPRESS)
    parser.add_argument("--keys-per-call", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client is not None:
        client_main(args.client, args.level, args.seconds, args.keys_per_call, args.rate)
        return 0
    if args.plot_only:
        reports, runs = read(args.out)
        write(args.out, reports, runs)
        report(reports, runs)
        return 0
    from epochal.control.spark import create_session

    now = uptime()
    import epochal

    print(f"epochal queryable state ({Path(epochal.__file__).parent}): {os.cpu_count()} CPUs; uptime: {now}",
          flush=True)
    if args.client_cores:  # before Spark starts: its JVM and workers inherit the job's cores
        clients = pin_clients(args.client_cores)
        print(f"the job on cores {sorted(os.sched_getaffinity(0))}, the clients on {sorted(clients)}", flush=True)
    work = isolated_home("epochal-queryable-bench-")  # the clients find the job here (and only it)
    spark = create_session("local[2]", 2, app_name="epochal-queryable-state")
    reports: list[ClientReport] = []
    runs: list[JobRun] = []
    try:
        if "lookups" in args.experiments:
            reports = lookups(spark, work, args.seconds)
            wait_unregistered()
        if "cost" in args.experiments:
            runs = cost(spark, work, args.records, args.rounds, args.cost_configs)
    finally:
        spark.stop()
    write(args.out, reports, runs)
    report(reports, runs)
    print(f"\nuptime: {uptime()}")
    print(f"wrote {args.out / 'queryable_state_lookups.csv'}, queryable_state_throughput.csv and queryable_state.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
