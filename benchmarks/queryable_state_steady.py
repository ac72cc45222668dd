"""What 1,000 lookups a second cost a running job, in steady state: one job without an end, and
phases with and without a client, alternating.

``benchmarks/queryable_state.py --experiments cost`` times whole bounded jobs of a few seconds each,
so every run carries the job's start (deployment, the first batches) and the client's own start
beside it, and its ratios spread by tens of per cent (``benchmarks/machine_noise.py``). A
long-running job's cost is its steady state. Here the job of ``benchmarks/queryable_state.py`` (a
keyed word count with ``as_queryable_state("counts")`` at full speed, parallelism 2 on
``local[2]``, a checkpoint every second) runs without an end, and blocks of two phases follow in
a random order:

* ``none``: no client;
* ``1000/s``: one client process (:func:`benchmarks.queryable_state.client_main`, started at the
  phase's beginning and killed at its end) looking up one random word per ``get`` at 1,000 a
  second, ``read_uncommitted``.

Each phase lasts ``--settle`` seconds unmeasured (the client's start-up and first lookup), then
``--window`` measured seconds: the job's records per second (the slope of
``JobClient.records_read``), the CPU of Spark's processes (the job's workers; the JVM) and of the
client. Each block gives the ratio of its ``1000/s`` phase to its ``none`` phase; the summary is
their geometric mean with its 95 % confidence interval (``common.stats.ratio_interval``).
With ``--client-cores 1`` the client runs on core 1
and the job on the others, as a client on another machine would not share the job's cores. With
``--stop-client`` one client process serves the whole run, stopped (``SIGSTOP``) outside its
phases: the phases need no client start-up, so they can be short and close together in time.
The first block starts ``--warmup`` seconds after the job.

    python -m benchmarks.queryable_state_steady                          # 12 blocks: ~9 min
    python -m benchmarks.queryable_state_steady --client-cores 1         # the client on its own core
    python -m benchmarks.queryable_state_steady --blocks 2 --window 5    # a quick look
    python -m benchmarks.queryable_state_steady --client-cores 1 --transports auto tcp  # both, alternating
    python -m benchmarks.queryable_state_steady --client-cores 1 --stop-client --settle 1 --window 6 --blocks 36

Writes ``queryable_state_steady.csv`` (one row per phase) into ``--out`` (default
``benchmarks/results``) and prints the summary. Goal (issue 37): at most 5 % lost.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.isolation import isolated_home
from benchmarks.common.measure import slope, spark_cpu, tree_cpu
from benchmarks.common.results import BLUE, RED, RESULTS, machine, pyplot, save_figure, write_csv
from benchmarks.common.stats import block_ratios, ratio_interval
from benchmarks.queryable_state import CLIENT_TRANSPORT, COST_GOAL, add_job, pin_clients, start_client

#: the phase with a client over each transport (QueryableStateClient's ``transport``)
CLIENT_CONFIGS = {"auto": "1000/s", "tcp": "1000/s tcp"}
TRANSPORT_OF = {config: transport for transport, config in CLIENT_CONFIGS.items()}


def configs_of(transports: Sequence[str]) -> tuple[str, ...]:
    """The phases of a block: ``none`` and a client phase per transport."""
    return ("none", *(CLIENT_CONFIGS[t] for t in transports))


def measure(blocks: int, settle: float, window: float, seed: int, transports: Sequence[str] = ("auto",),
            snapshot: str | None = None, stop_client: bool = False, warmup: float = 0.0) -> list[dict[str, Any]]:
    import epochal
    from epochal.control.spark import create_session

    work = isolated_home("epochal-queryable-steady-")  # the client finds the job here (and only it)
    spark = create_session("local[2]", 2, app_name="epochal-queryable-steady")
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    try:
        env = epochal.Environment(2, spark=spark)
        env.enable_checkpointing(1.0, storage=str(work / "checkpoints"))
        if snapshot is not None:
            env.set_state_backend("heap", snapshot=snapshot)
        add_job(env, None)
        job = env.execute_async("queryable-steady")
        stopped: dict[str, Any] = {}  # --stop-client: one client per transport, stopped between its phases
        try:
            job.wait_until_running(120)
            for transport in transports if stop_client else ():
                os.environ[CLIENT_TRANSPORT] = transport  # (the client process's environment)
                stopped[transport] = start_client(work / f"client-{transport}.json", "read_uncommitted", 0.0, 1,
                                                  rate=1000.0)
            time.sleep(max(settle, warmup, 5.0 if stopped else 0.0))  # (the clients' start and first lookup)
            for client in stopped.values():
                client.send_signal(signal.SIGSTOP)
            for block in range(blocks):
                order = list(configs_of(transports))
                rng.shuffle(order)
                for config in order:
                    client = None
                    transport = TRANSPORT_OF.get(config, "")
                    if transport and stopped:
                        client = stopped[transport]
                        client.send_signal(signal.SIGCONT)
                    elif transport:
                        os.environ[CLIENT_TRANSPORT] = transport  # (the client process's environment)
                        client = start_client(work / f"client-{block}.json", "read_uncommitted", 0.0, 1, rate=1000.0)
                    time.sleep(settle)
                    spark_before = spark_cpu(client.pid if client else None)
                    client_before = tree_cpu(client.pid) if client else 0.0
                    started = time.monotonic()
                    rate = slope(job, window)
                    seconds = time.monotonic() - started
                    row = {"block": block, "config": config, "records_per_s": round(rate, 1),
                           "seconds": round(seconds, 3),
                           "spark_cpu_per_s": round((spark_cpu(client.pid if client else None) - spark_before)
                                                    / seconds, 4),
                           "client_cpu_per_s": round((tree_cpu(client.pid) - client_before) / seconds, 4)
                           if client else 0.0,
                           "load_1min": round(os.getloadavg()[0], 2), "transport": transport}
                    if client is not None and stopped:
                        client.send_signal(signal.SIGSTOP)
                    elif client is not None:
                        client.kill()
                        client.wait(30)
                    rows.append(row)
                    print(f"[{block}] {config:>10}: {rate:>11,.0f} records/s, Spark {row['spark_cpu_per_s']:.2f} "
                          f"CPU-s/s, client {row['client_cpu_per_s']:.3f} CPU-s/s", flush=True)
        finally:
            for client in stopped.values():
                client.kill()
                client.wait(30)
            job.cancel(timeout=120)
    finally:
        spark.stop()
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    configs = [c for c in ("none", *CLIENT_CONFIGS.values()) if any(r["config"] == c for r in rows)]
    work = {c: statistics.median(r["spark_cpu_per_s"] / r["records_per_s"] * 1e6 for r in rows if r["config"] == c)
            for c in configs}
    cores = os.cpu_count() or 1
    for config in configs:
        speeds = [r["records_per_s"] for r in rows if r["config"] == config]
        print(f"  {config:>10}: {statistics.median(speeds):>11,.0f} records/s (median; {min(speeds):,.0f} - "
              f"{max(speeds):,.0f}), Spark CPU {work[config]:.2f} s per million records")
    for config in configs[1:]:
        ratios = block_ratios(rows, config, "none")
        ratio, low, high = ratio_interval(ratios)
        client = statistics.median(r["client_cpu_per_s"] for r in rows if r["config"] == config)
        verdict = ("met" if low >= 1 - COST_GOAL else "not met" if high < 1 - COST_GOAL else
                   "not resolved: the interval straddles the goal")
        print(f"{config} / none: x{ratio:.3f} (95 %: {low:.3f} - {high:.3f}; {len(ratios)} blocks; per block "
              f"{', '.join(f'{r:.3f}' for r in ratios)}); goal at most {COST_GOAL:.0%} lost: {verdict}")
        print(f"  Spark CPU per record x{work[config] / work['none']:.3f}; the client {client:.3f} CPU-s/s "
              f"({client / cores:.1%} of the machine's {cores} cores)")


def plot(runs: Sequence[str], out: Path) -> None:
    """``--plot LABEL=CSV ...``: each run's block ratios (``1000/s`` over ``none``) as points, its
    geometric mean and 95 % interval as a bar, and the goal's line, into ``out`` (a PNG)."""
    import csv

    plt = pyplot()
    fig, axes = plt.subplots(figsize=(1.8 + 2.2 * len(runs), 5))
    for i, run in enumerate(runs):
        label, _, path = run.partition("=")
        with open(path, newline="") as f:
            rows = [{**r, "records_per_s": float(r["records_per_s"])} for r in csv.DictReader(f)]
        ratios = block_ratios(rows, CLIENT_CONFIGS["auto"], "none")
        ratio, low, high = ratio_interval(ratios)
        jitter = random.Random(i)
        axes.scatter([i + jitter.uniform(-0.15, 0.15) for _ in ratios], ratios, s=12, alpha=0.5, color=BLUE)
        axes.errorbar([i + 0.3], [ratio], yerr=[[ratio - low], [high - ratio]], fmt="o", color="black", capsize=5)
        axes.annotate(f"x{ratio:.3f}\n({low:.3f}-{high:.3f})\n{len(ratios)} blocks", (i + 0.36, ratio), fontsize=8,
                      va="center")
    axes.axhline(1 - COST_GOAL, color=RED, linestyle="--", label=f"goal: at most {COST_GOAL:.0%} lost")
    axes.axhline(1.0, color="grey", linewidth=0.5)
    axes.set_xticks(range(len(runs)), [run.partition("=")[0] for run in runs], fontsize=8)
    axes.set_xlim(-0.5, len(runs) - 0.1)
    axes.set_ylabel("job throughput, 1,000 lookups/s over none (per block)")
    axes.set_title("What 1,000 lookups a second cost a running job (steady state)", fontsize=10)
    axes.legend(loc="lower left", fontsize=8)
    save_figure(fig, out, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.queryable_state_steady",
                                     description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--blocks", type=int, default=12, help="blocks of none / 1000/s phases (default 12)")
    parser.add_argument("--window", type=float, default=15.0, help="measured seconds per phase (default 15)")
    parser.add_argument("--settle", type=float, default=4.0,
                        help="unmeasured seconds at each phase's start (default 4)")
    parser.add_argument("--client-cores", help="cores (e.g. '1') the client runs on; the job gets the others")
    parser.add_argument("--transports", nargs="+", choices=tuple(CLIENT_CONFIGS), default=["auto"],
                        help="a client phase per transport, in each block: auto (the workers' local sockets, on "
                             "this host; the default) and/or tcp (loopback TCP, as a client of another host would "
                             "use, bar the network)")
    parser.add_argument("--snapshot", choices=("fork", "thread"),
                        help="the heap backend's snapshots (default: the platform's default, fork on Linux)")
    parser.add_argument("--stop-client", action="store_true",
                        help="one client process per transport for the whole run, stopped (SIGSTOP) outside its "
                             "phases instead of started for each: no client start-up in the phases, so they can be "
                             "short (e.g. --settle 1 --window 6) and neighbours in time, which the job's drift "
                             "spreads less")
    parser.add_argument("--warmup", type=float, default=30.0,
                        help="unmeasured seconds between the job's start and the first block (default 30: a "
                             "job's first 30-40 s run up to 40 %% slower, a bias for the first blocks' phases)")
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--plot", nargs="+", metavar="LABEL=CSV",
                        help="only plot the block ratios of these runs' CSVs into --png, then exit")
    parser.add_argument("--png", type=Path, default=RESULTS / "queryable_state_steady.png")
    args = parser.parse_args(argv)
    if args.plot:
        plot(args.plot, args.png)
        print(f"wrote {args.png}")
        return 0
    if args.client_cores:  # before Spark starts: its JVM and workers inherit the job's cores
        pin_clients(args.client_cores)
    print(f"queryable state, steady state: {args.blocks} blocks x {1 + len(args.transports)} x {args.settle:g} + "
          f"{args.window:g} s; {machine()}; the job on cores {sorted(os.sched_getaffinity(0))}, the client on "
          f"{args.client_cores or 'every core'} ({' and '.join(args.transports)}"
          f"{', stopped between phases' if args.stop_client else ''}); snapshots "
          f"{args.snapshot or 'default'}; load {os.getloadavg()[0]:.1f}",
          flush=True)
    rows = measure(args.blocks, args.settle, args.window, args.seed, args.transports, args.snapshot,
                   args.stop_client, args.warmup)
    args.out.mkdir(parents=True, exist_ok=True)
    name = ("queryable_state_steady" + ("_client_cores" if args.client_cores else "")
            + ("" if args.transports == ["auto"] else "_" + "_".join(args.transports))
            + (f"_{args.snapshot}" if args.snapshot else "") + ("_stopped" if args.stop_client else "") + ".csv")
    write_csv(args.out / name, rows)
    report(rows)
    print(f"wrote {args.out / name} (load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
