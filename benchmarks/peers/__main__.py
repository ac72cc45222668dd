"""Side-by-side benchmark of epochal against PyFlink, Spark Structured Streaming and Bytewax.

Runs the four jobs of :mod:`benchmarks.peers.spec` on every system, one run at a time on this
machine, and writes ``peers.csv`` (one row per run), ``peers.md`` (the summary table) and
``peers.png`` (bar chart with ratios) into ``--out``.

How it measures, and why:

* Every run is a fresh process tree (``python -m benchmarks.peers.run_<system>``) in the
  system's own virtualenv (created under ``.venv-peers/`` on first use from
  ``benchmarks/peers/requirements/<system>.txt``), so runs share no JVM, cache or state.
* The runner times the job's execution call (``job_s``); process start-up (interpreter, JVM) is
  outside it. What remains of per-job start-up (mini-cluster, planning, worker registration) is
  measured by the same job over ``--startup-records`` (10k) records before every timed run, and
  its median is subtracted: ``records/s = (N - n0) / (job_s(N) - median job_s(n0))``. Start-up
  is reported on its own, with its share of the timed run.
* N is sized per system and job: a pilot run over 200k records (8x more until it is busy for
  2 s beyond start-up) gives a rate, and N is what that
  rate processes in ``--target-seconds`` (15 s), at least 300k and at most 40M (rounded up to
  100k). A slow system is not run for an hour, a fast one not for a second, and start-up stays
  a small share of every run; the table shows N and the start-up share. ``--records`` fixes N
  for all instead. In ``keyed_1m`` a system run over fewer than 1M records touches fewer keys.
* Peak memory: the largest sum of RSS over the run's whole process tree (driver, JVMs, Python
  workers), sampled every 0.25 s. Shared pages of forked workers count once per process.
* Latency: samples the runners compute in their sink for one record in 1,000 (creation to sink,
  see spec); Spark's built-in variant reports micro-batch durations instead (see run_spark).
* Each system-job pair is first run once over ``--verify-records`` with its output collected
  and compared with the oracle; a wrong answer is flagged in the table.
* Repeats are interleaved (repeat 1 of every system, then repeat 2, ...) so drift of the machine
  is spread over all systems; the table reports the median and the min-max spread.

Run from the repository root::

    python -m benchmarks.peers                       # everything (long: tens of minutes)
    python -m benchmarks.peers --jobs keyed --systems epochal pyflink-thread --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common.isolation import VENVS, child_env, ensure_venv, watch_tree
from benchmarks.common.results import BLUE, RED, RESULTS, ROOT, csv_lines, error_bars, number, pyplot, save_figure
from benchmarks.common.stats import percentile, rate_after_startup, startup_of
from benchmarks.peers import spec


@dataclass(frozen=True)
class System:
    """One column of the table: a system in one configuration."""

    label: str
    module: str
    variant: str
    venv: str | None  # None: epochal's own interpreter

    def python(self) -> Path:
        if self.venv is None:
            return Path(sys.executable)
        return VENVS / self.venv / "bin" / "python"


#: epochal's batch API (docs/columnar.md): the table has its ratios beside epochal's
COLUMNAR = "epochal-columnar"

SYSTEMS: dict[str, System] = {s.label: s for s in [
    System("epochal", "run_epochal", "default", None),
    System("epochal-columnar", "run_epochal_columnar", "default", None),
    System("pyflink-process", "run_pyflink", "process", "pyflink"),
    System("pyflink-thread", "run_pyflink", "thread", "pyflink"),
    System("spark-builtin", "run_spark", "builtin", "spark"),
    System("spark-python", "run_spark", "python", "spark"),
    System("bytewax", "run_bytewax", "default", "bytewax"),
]}


@dataclass
class Run:
    """One run of one job on one system."""

    system: str
    job: str
    records: int
    repeat: int
    kind: str  # "verify", "startup", "pilot" or "timed"
    wall_s: float = float("nan")
    job_s: float | None = None
    peak_rss_mb: float = float("nan")
    latency_ms: list[float] = field(default_factory=list)
    checkpoint_ms: list[float] = field(default_factory=list)
    summary: dict[str, int] | None = None
    unsupported: str | None = None
    error: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


def run_once(system: System, job: str, records: int, repeat: int, kind: str, parallelism: int,
             timeout: float) -> Run:
    """Start the runner, sample the tree's memory until it exits, and read its result."""
    run = Run(system.label, job, records, repeat, kind)
    with tempfile.TemporaryDirectory(prefix=f"peers-{system.label}-") as scratch:
        result_path = Path(scratch) / "result.json"
        command = [str(system.python()), "-m", f"benchmarks.peers.{system.module}", "--job", job,
                   "--records", str(records), "--parallelism", str(parallelism), "--variant", system.variant,
                   "--work-dir", str(Path(scratch) / "work"), "--result", str(result_path)]
        if kind == "verify":
            command.append("--verify")
        log_path = Path(scratch) / "log.txt"
        started = time.perf_counter()
        with log_path.open("wb") as log:
            child = subprocess.Popen(command, cwd=ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
            peak, killed = watch_tree(child, started, timeout)
            if killed:
                run.error = f"timed out after {timeout:.0f} s"
            child.wait()
        run.wall_s = time.perf_counter() - started
        run.peak_rss_mb = peak / 2**20
        if result_path.exists():
            result = json.loads(result_path.read_text())
            run.job_s = result["job_s"]
            run.latency_ms = result.get("latency_ms") or []
            run.checkpoint_ms = result.get("checkpoint_ms") or []
            run.summary = result.get("summary")
            run.unsupported = result.get("unsupported")
            run.config = result.get("config") or {}
            run.versions = result.get("versions") or {}
        elif run.error is None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
            run.error = f"exit {child.returncode}: " + " | ".join(tail)
        if kind == "verify" and run.summary is not None and run.summary != spec.oracle(job, records):
            run.error = f"wrong output: {run.summary} != oracle {spec.oracle(job, records)}"
    return run


@dataclass
class Cell:
    """Everything the table says about one system on one job."""

    system: str
    job: str
    throughput: list[float] = field(default_factory=list)
    startup_s: float = float("nan")
    latency_ms: list[float] = field(default_factory=list)
    checkpoint_ms: list[float] = field(default_factory=list)
    peak_rss_mb: list[float] = field(default_factory=list)
    verified: str = "not run"
    note: str = ""
    records: int = 0
    busy_s: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.throughput) if self.throughput else float("nan")


def size_run(pilot: Run, startup: tuple[int, float] | None, args: argparse.Namespace) -> int:
    """N for the timed runs: about ``--target-seconds`` of processing at the pilot's rate."""
    rate = rate_after_startup(pilot, startup)
    if rate != rate:  # the pilot failed or was too short to tell: fall back to the floor
        return args.min_records
    wanted = int(rate * args.target_seconds)
    return max(args.min_records, min(args.max_records, -(-wanted // 100_000) * 100_000))


def measure(systems: list[System], jobs: list[str], args: argparse.Namespace, csv_path: Path) -> list[Run]:
    """Verify, pilot (to size N), then the interleaved repeats of a start-up run and a timed run
    per system and job; every run is appended to the CSV as it ends."""
    runs: list[Run] = []
    sizes: dict[tuple[str, str], int] = {}
    with csv_lines(csv_path, ["system", "job", "kind", "repeat", "records", "wall_s", "job_s", "records_per_s",
                              "latency_p50_ms", "latency_p99_ms", "checkpoint_median_ms", "checkpoints",
                              "peak_rss_mb", "unsupported", "error", "config", "versions"]) as write:

        def record(run: Run) -> Run:
            runs.append(run)
            rate = rate_after_startup(run, startup_of(runs, system=run.system, job=run.job)) \
                if run.kind in ("timed", "pilot") else float("nan")
            write([run.system, run.job, run.kind, run.repeat, run.records, f"{run.wall_s:.3f}",
                   "" if run.job_s is None else f"{run.job_s:.3f}", f"{rate:.1f}",
                   f"{percentile(run.latency_ms, 0.5):.3f}", f"{percentile(run.latency_ms, 0.99):.3f}",
                   f"{percentile(run.checkpoint_ms, 0.5):.1f}", len(run.checkpoint_ms),
                   f"{run.peak_rss_mb:.0f}", run.unsupported or "", run.error or "",
                   json.dumps(run.config), json.dumps(run.versions)])
            status = run.unsupported and f"unsupported: {run.unsupported}" or run.error or (
                f"job {run.job_s:.2f} s, wall {run.wall_s:.1f} s, peak {run.peak_rss_mb:,.0f} MB"
                + (f", {rate:,.0f} rec/s" if rate == rate else ""))
            print(f"[{run.kind} r{run.repeat}] {run.system:16} {run.job:10} n={run.records:,}: {status}", flush=True)
            return run

        def launch(system: System, job: str, records: int, repeat: int, kind: str) -> Run:
            return record(run_once(system, job, records, repeat, kind, args.parallelism, args.timeout))

        for job in jobs:
            for system in systems:
                if launch(system, job, args.verify_records, 0, "verify").unsupported:
                    continue
                if args.records:
                    sizes[(system.label, job)] = args.records
                    continue
                launch(system, job, args.startup_records, 0, "startup")
                pilot_records = args.pilot_records
                while True:  # grow the pilot until it is busy long enough to give a rate
                    pilot = launch(system, job, pilot_records, 0, "pilot")
                    startup = startup_of(runs, system=system.label, job=job)
                    busy = (pilot.job_s or 0.0) - (startup[1] if startup else 0.0)
                    if pilot.error or busy >= 2.0 or pilot_records * 8 > args.max_records:
                        break
                    pilot_records *= 8
                sizes[(system.label, job)] = size_run(pilot, startup, args)
        for repeat in range(args.repeats):
            for job in jobs:
                for system in systems:
                    if (system.label, job) in sizes:
                        launch(system, job, args.startup_records, repeat, "startup")
                        launch(system, job, sizes[(system.label, job)], repeat, "timed")
    return runs


def summarize(runs: list[Run], systems: list[System], jobs: list[str]) -> dict[tuple[str, str], Cell]:
    cells: dict[tuple[str, str], Cell] = {}
    for system in systems:
        for job in jobs:
            cell = cells[(system.label, job)] = Cell(system.label, job)
            startup = startup_of(runs, system=system.label, job=job)
            if startup is not None:
                cell.startup_s = startup[1]
            for run in runs:
                if run.system != system.label or run.job != job:
                    continue
                if run.kind == "verify":
                    if run.unsupported:
                        cell.verified, cell.note = "n/a", f"cannot: {run.unsupported}"
                    else:
                        cell.verified = "ok" if run.error is None else "FAILED"
                        if run.error:
                            cell.note = run.error[:200]
                elif run.kind == "timed":
                    if run.error:
                        cell.note = run.error[:200]
                        continue
                    cell.records = run.records
                    cell.busy_s.append(run.job_s - cell.startup_s if startup is not None else run.job_s)
                    cell.throughput.append(rate_after_startup(run, startup))
                    cell.latency_ms.extend(run.latency_ms)
                    cell.checkpoint_ms.extend(run.checkpoint_ms)
                    cell.peak_rss_mb.append(run.peak_rss_mb)
    return cells


def _ms(value: float) -> str:
    """A latency: 3 significant digits below 100 ms (PyFlink's fused path is microseconds)."""
    return number(value, 0) if value >= 100 else f"{value:.3g}"


def table(cells: dict[tuple[str, str], Cell], systems: list[System], jobs: list[str]) -> str:
    """The Markdown summary: one section per job, one row per system, ratios to epochal (and to
    epochal's batch API, ``epochal-columnar``, when it ran)."""
    lines: list[str] = []
    columnar = any(s.label == COLUMNAR for s in systems)
    for job in jobs:
        ours = cells[("epochal", job)].median if ("epochal", job) in cells else float("nan")
        batched = cells[(COLUMNAR, job)].median if (COLUMNAR, job) in cells else float("nan")
        extra = " columnar / system |" if columnar else ""
        lines += [f"### {job}: {spec.JOBS[job].description}", "",
                  f"| system | records/s (median) | min-max | epochal / system |{extra} latency p50 / p99 ms "
                  "| checkpoint ms (median) | peak RSS MB | N | start-up s (share) | output |",
                  "| --- | ---: | ---: | ---: |" + (" ---: |" if columnar else "")
                  + " ---: | ---: | ---: | ---: | ---: | --- |"]
        for system in systems:
            cell = cells[(system.label, job)]
            if not cell.throughput:
                blanks = "| " * (8 if columnar else 7)
                lines.append(f"| {system.label} | n/a {blanks}| {cell.verified} {cell.note} |")
                continue
            spread = f"{number(min(cell.throughput))}-{number(max(cell.throughput))}"
            ratio = ours / cell.median if cell.median else float("nan")
            ratios = f"{number(ratio, 2)}x |"
            if columnar:
                ratios += f" {number(batched / cell.median if cell.median else float('nan'), 2)}x |"
            latency = (f"{_ms(percentile(cell.latency_ms, 0.5))} / {_ms(percentile(cell.latency_ms, 0.99))}"
                       if cell.latency_ms else "-")
            checkpoint = number(statistics.median(cell.checkpoint_ms), 0) if cell.checkpoint_ms else "-"
            share = cell.startup_s / (cell.startup_s + statistics.median(cell.busy_s))
            lines.append(f"| {system.label} | {number(cell.median)} | {spread} | {ratios} {latency} "
                         f"| {checkpoint} | {number(statistics.median(cell.peak_rss_mb))} | {cell.records / 1e6:g}M "
                         f"| {number(cell.startup_s, 1)} ({share:.0%}) | {cell.verified} {cell.note} |")
        lines.append("")
    return "\n".join(lines)


def plot(path: Path, cells: dict[tuple[str, str], Cell], systems: list[System], jobs: list[str],
         parallelism: int) -> None:
    """One panel per job: median records/s per system (min-max error bars), labelled with the
    ratio epochal / system; systems that cannot run the job are marked n/a."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter

    fig, axes = plt.subplots(1, len(jobs), figsize=(4.2 * len(jobs), 4.6), squeeze=False)
    colors = [RED if s.label in ("epochal", COLUMNAR) else BLUE for s in systems]
    columnar = any(s.label == COLUMNAR for s in systems)
    for ax, job in zip(axes[0], jobs, strict=True):
        # bar labels: the ratio of epochal's batch API where it ran, else of epochal's row API
        ours = cells[(COLUMNAR if columnar else "epochal", job)].median if (
            (COLUMNAR if columnar else "epochal", job) in cells) else float("nan")
        triples: list[tuple[float, float, float]] = []
        labels = []
        for system in systems:
            cell = cells[(system.label, job)]
            if cell.throughput:
                m = cell.median
                triples.append((m, min(cell.throughput), max(cell.throughput)))
                mine = system.label == (COLUMNAR if columnar else "epochal")
                labels.append(system.label if mine else f"{ours / m:.1f}x" if m else "-")
            else:
                triples.append((0, 0, 0))
                labels.append("n/a")
        medians, errors = error_bars(triples)
        bars = ax.bar(range(len(systems)), medians, yerr=errors, capsize=4, color=colors)
        ax.bar_label(bars, labels=labels, padding=2, fontsize=8)
        ax.set_xticks(range(len(systems)), [s.label for s in systems], rotation=35, ha="right", fontsize=8)
        ax.set_title(f"{job}", fontsize=10)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value / 1e3:,.0f}k"))
        ax.margins(y=0.15)
    axes[0][0].set_ylabel("records / s after start-up (median, min-max)")
    fig.suptitle(f"epochal vs peers, parallelism {parallelism}, {os.cpu_count()} CPUs; "
                 f"bar labels: {COLUMNAR if columnar else 'epochal'} / system", fontsize=10)
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", choices=list(SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--jobs", nargs="+", choices=list(spec.JOBS), default=list(spec.JOBS))
    parser.add_argument("--records", type=int, default=None,
                        help="N of every timed run (default: sized per system from a pilot run, see below)")
    parser.add_argument("--target-seconds", type=float, default=15.0,
                        help="size N so that a timed run processes for about this long")
    parser.add_argument("--min-records", type=int, default=300_000,
                        help="smallest N, whatever the pilot says")
    parser.add_argument("--max-records", type=int, default=40_000_000)
    parser.add_argument("--pilot-records", type=int, default=200_000)
    parser.add_argument("--startup-records", type=int, default=10_000)
    parser.add_argument("--verify-records", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is killed")
    parser.add_argument("--out", type=Path, default=ROOT / RESULTS)
    args = parser.parse_args(argv)
    systems = [SYSTEMS[label] for label in SYSTEMS if label in args.systems]
    for venv in sorted({s.venv for s in systems if s.venv}):
        ensure_venv(venv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB; parallelism {args.parallelism}", flush=True)
    runs = measure(systems, args.jobs, args, args.out / "peers.csv")
    cells = summarize(runs, systems, args.jobs)
    versions: dict[str, dict[str, str]] = {}
    for run in runs:
        versions.setdefault(run.system, {}).update(run.versions)
    text = table(cells, systems, args.jobs)
    text += "\nVersions: " + "; ".join(f"{s}: " + ", ".join(f"{k} {v}" for k, v in sorted(vs.items()))
                                       for s, vs in versions.items()) + "\n"
    (args.out / "peers.md").write_text(text)
    plot(args.out / "peers.png", cells, systems, args.jobs, args.parallelism)
    print("\n" + text)
    print(f"wrote {args.out / 'peers.csv'}, {args.out / 'peers.md'}, {args.out / 'peers.png'}")


if __name__ == "__main__":
    main()
