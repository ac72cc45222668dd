"""Kafka in, Kafka out: epochal side by side with Spark Structured Streaming, Bytewax and PyFlink.

Every system runs the job of :mod:`benchmarks.kafka.job` (parse -> keyed running count,
parallelism 2, checkpoints every second, the sink exactly-once where the system has one) against
one local KRaft broker (:class:`epochal.testing.kafka_broker.KafkaBroker`), one run at a time on
this machine, with the machinery of ``benchmarks/peers``: each run a fresh process tree
(``python -m benchmarks.kafka.run_<system>``) in the system's own virtualenv under
``.venv-peers/`` (created from ``benchmarks/peers/requirements/<system>.txt``).

* **Throughput.** Input topics (4 partitions, 1,000 keys) are filled before any job runs and
  shared: every system whose run needs N records reads the same topic of N records. A run reads
  its topic in the system's bounded mode and writes a fresh output topic; ``job_s`` is the
  system's execution call, timed in the runner. As in benchmarks/peers, per-job start-up is
  measured by the same job over ``--startup-records`` (10k) before every timed run and its median
  subtracted: ``records/s = (N - n0) / (job_s(N) - median job_s(n0))``; N is sized per system
  from a pilot run (200k records, 8x more until it is busy for 2 s beyond start-up) to about
  ``--target-seconds`` of processing, at least ``--min-records``, rounded to a few sizes so that
  systems share topics; or given per system with ``--sizes SYSTEM=N`` (on a loaded machine the
  start-up runs vary by seconds and a short pilot's rate is noise). Repeats are interleaved
  (repeat 1 of every system, then repeat 2 ...).
* **Output check.** After every throughput run the driver reads the output topic with
  ``isolation.level=read_committed`` and compares it with the oracle (the final count of every
  key): for exactly-once systems every update 1..n of every key exactly once, for at-least-once
  systems every final count right and duplicates counted, for Spark's SQL aggregation (one
  update per key and micro-batch) the final counts.
* **Latency** (one run per system and repeat round, after the throughput runs): the job runs
  unbounded on fresh topics. The driver writes warm-up records until the job's first output is
  visible to a read_committed consumer, then ``--rate`` records/s for ``--seconds``; a record's
  latency is from just before it was produced until the first visible output of its key with a
  count >= the record's index within its key (records of a key are in one partition, in order).
  This needs nothing from the output but ``key,count``, so it is the same for systems that emit
  one update per record and Spark's per-micro-batch aggregation. p50/p99 over all timed records.
* **Peak memory**: the largest sum of RSS over the run's process tree (driver, JVMs, Python
  workers), sampled every 0.25 s, in the timed throughput runs. The broker is not counted.
* The machine's 1-minute load average is recorded before every run (other work may run here).

Writes ``kafka.csv`` (every run), ``kafka.md`` (the table) and ``kafka.png`` into ``--out``
(default ``benchmarks/results/kafka``)::

    .venv/bin/python -m benchmarks.kafka                         # everything
    .venv/bin/python -m benchmarks.kafka --systems epochal-exactly_once bytewax --repeats 1
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common.isolation import VENVS, child_env, ensure_venv, kill_tree, watch_tree
from benchmarks.common.results import (
    BLUE,
    RED,
    RESULTS,
    ROOT,
    csv_lines,
    error_bars,
    number,
    pyplot,
    save_figure,
    uptime,
)
from benchmarks.common.stats import percentile, rate_after_startup, startup_of
from benchmarks.kafka import job
from epochal.testing.kafka_broker import KAFKA_VERSION, KafkaBroker

QUIET = {"log_level": 0}


@dataclass(frozen=True)
class System:
    """One column of the table: a system in one configuration."""

    label: str
    module: str
    variant: str
    venv: str | None  # None: epochal's own interpreter
    guarantee: str  # what its Kafka output promises
    check: str  # job.OutputCheck.verdict's check

    def python(self) -> Path:
        return Path(sys.executable) if self.venv is None else VENVS / self.venv / "bin" / "python"


SYSTEMS: dict[str, System] = {s.label: s for s in [
    System("epochal-exactly_once", "run_epochal", "exactly_once", None, "exactly-once", "exactly_once"),
    System("epochal-at_least_once", "run_epochal", "at_least_once", None, "at-least-once", "at_least_once"),
    # the batch API: running counts in update mode (one row per key and batch), checked as Spark SQL's
    System("epochal-columnar", "run_epochal_columnar", "exactly_once", None, "exactly-once", "final"),
    System("spark-builtin", "run_spark", "builtin", "spark", "at-least-once", "final"),
    System("spark-python", "run_spark", "python", "spark", "at-least-once", "at_least_once"),
    System("bytewax", "run_bytewax", "at_least_once", "bytewax", "at-least-once", "at_least_once"),
    System("pyflink-thread", "run_pyflink", "thread", "pyflink", "exactly-once", "exactly_once"),
    System("pyflink-process", "run_pyflink", "process", "pyflink", "exactly-once", "exactly_once"),
]}
OURS = "epochal-exactly_once"
#: The sizes N is rounded to (times powers of ten), so that systems share input topics.
SIZES = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)


def round_size(n: float) -> int:
    """``n`` rounded to the nearest of ``SIZES`` x 10^k."""
    best = 0
    power = 10 ** max(0, len(str(int(max(n, 1)))) - 1)
    for scale in (power // 10 or 1, power, power * 10):
        for size in SIZES:
            candidate = int(size * scale)
            if best == 0 or abs(candidate - n) < abs(best - n):
                best = candidate
    return best


# ------------------------------------------------------------------ topics
class Topics:
    """The broker's input topics, filled on first use and shared by every system."""

    def __init__(self, broker: KafkaBroker) -> None:
        self.broker = broker
        self.inputs: dict[int, str] = {}

    def input(self, records: int) -> str:
        if records not in self.inputs:
            name = f"in-{records}"
            self.broker.create_topic(name, job.PARTITIONS)
            started = time.perf_counter()
            fill(self.broker.bootstrap, name, records)
            print(f"  filled {name} in {time.perf_counter() - started:.1f} s", flush=True)
            self.inputs[records] = name
        return self.inputs[records]

    def output(self) -> str:
        name = f"out-{uuid.uuid4().hex[:8]}"
        self.broker.create_topic(name, job.PARTITIONS)
        return name

    def delete(self, *names: str) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap, **QUIET})
        for future in admin.delete_topics(list(names), operation_timeout=30).values():
            try:
                future.result(60)
            except Exception:
                pass


def fill(bootstrap: str, topic: str, records: int, keys: int = job.KEYS) -> None:
    """``records`` input records, record i of key ``k<i % keys>``, value ``k<j>,<now ms>``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000,
                         "enable.idempotence": True, **QUIET})
    names = [b"k%d" % k for k in range(keys)]
    produce = producer.produce
    for i in range(records):
        key = names[i % keys]
        if i % 100_000 == 0:
            now = b"%d" % int(time.time() * 1000)
        while True:
            try:
                produce(topic, key + b"," + now, key)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) > 0:
        raise RuntimeError(f"filling {topic}: records not delivered")


def read_output(bootstrap: str, topic: str, timeout: float = 600.0) -> job.OutputCheck:
    """Read the whole output topic as a read_committed consumer into an OutputCheck."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from confluent_kafka import KafkaError as Codes

    check = job.OutputCheck()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True, **QUIET})
    try:
        partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(job.PARTITIONS)]
        high = {p.partition: consumer.get_watermark_offsets(p, timeout=30)[1] for p in partitions}
        pending = {p for p, h in high.items() if h > 0}
        consumer.assign(partitions)
        deadline = time.monotonic() + timeout
        add = check.add
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic}: partitions {sorted(pending)} not read to their end "
                                   f"(an open transaction?) within {timeout:.0f} s")
            for message in consumer.consume(100_000, 1.0):
                error = message.error()
                if error is None:
                    key, count = message.value().split(b",", 2)[:2]
                    add(key, int(count))
                elif error.code() == Codes._PARTITION_EOF and message.offset() >= high[message.partition()]:
                    pending.discard(message.partition())
    finally:
        consumer.close()
    return check


# ------------------------------------------------------------------ runs
@dataclass
class Run:
    system: str
    kind: str  # "startup", "pilot", "timed" or "latency"
    repeat: int
    records: int
    load: float = float("nan")
    wall_s: float = float("nan")
    job_s: float | None = None
    peak_rss_mb: float = float("nan")
    ok: bool | None = None
    check: dict[str, Any] = field(default_factory=dict)
    latency_ms: list[float] = field(default_factory=list)
    latency: dict[str, Any] = field(default_factory=dict)
    unsupported: str | None = None
    error: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


def start_runner(system: System, bootstrap: str, source: str, sink: str, records: int, scratch: Path,
                 parallelism: int, latency: bool) -> tuple[subprocess.Popen, Path]:
    command = [str(system.python()), "-m", f"benchmarks.kafka.{system.module}", "--bootstrap", bootstrap,
               "--source", source, "--sink", sink, "--variant", system.variant, "--parallelism", str(parallelism),
               "--records", str(records), "--work-dir", str(scratch / "work"), "--result", str(scratch / "result.json")]
    if latency:
        command.append("--latency")
    log = (scratch / "log.txt").open("wb")
    child = subprocess.Popen(command, cwd=ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.PIPE if latency else subprocess.DEVNULL, start_new_session=True)
    log.close()
    return child, scratch / "result.json"


def watch(child: subprocess.Popen, run: Run, timeout: float, until: threading.Event | None = None) -> None:
    """Sample the tree's memory until the child exits (or ``until`` is set); kill it past ``timeout``."""
    peak, killed = watch_tree(child, time.perf_counter(), timeout, until)
    if killed:
        run.error = f"timed out after {timeout:.0f} s"
    run.peak_rss_mb = max(run.peak_rss_mb if run.peak_rss_mb == run.peak_rss_mb else 0, peak / 2**20)


def finish(child: subprocess.Popen, run: Run, result_path: Path, scratch: Path) -> None:
    child.wait()
    if result_path.exists():
        result = json.loads(result_path.read_text())
        run.job_s = result.get("job_s")
        run.unsupported = result.get("unsupported")
        run.config = result.get("config") or {}
        run.versions = result.get("versions") or {}
    elif run.error is None:
        tail = (scratch / "log.txt").read_text(errors="replace").strip().splitlines()[-15:]
        run.error = f"exit {child.returncode}: " + " | ".join(tail)


def throughput_run(system: System, topics: Topics, records: int, repeat: int, kind: str,
                   args: argparse.Namespace) -> Run:
    run = Run(system.label, kind, repeat, records, load=os.getloadavg()[0])
    source = topics.input(records)
    sink = topics.output()
    with tempfile.TemporaryDirectory(prefix=f"kafka-{system.label}-") as directory:
        scratch = Path(directory)
        started = time.perf_counter()
        child, result_path = start_runner(system, topics.broker.bootstrap, source, sink, records, scratch,
                                          args.parallelism, latency=False)
        watch(child, run, args.timeout)
        finish(child, run, result_path, scratch)
        run.wall_s = time.perf_counter() - started
    if run.error is None and run.unsupported is None:
        try:
            run.ok, run.check = read_output(topics.broker.bootstrap, sink).verdict(job.oracle(records), system.check)
        except RuntimeError as error:
            run.ok, run.error = False, str(error)
    topics.delete(sink)
    return run


def latency_run(system: System, topics: Topics, repeat: int, args: argparse.Namespace) -> Run:
    """The job unbounded on fresh topics while the driver produces ``--rate`` records/s."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    run = Run(system.label, "latency", repeat, 0, load=os.getloadavg()[0])
    bootstrap = topics.broker.bootstrap
    source, sink = f"lin-{uuid.uuid4().hex[:8]}", topics.output()
    topics.broker.create_topic(source, job.PARTITIONS)
    names = [b"k%d" % k for k in range(args.keys)]
    produced: dict[bytes, list[float]] = {name: [] for name in names}
    visible: dict[bytes, int] = dict.fromkeys(names, 0)
    samples: list[float] = []
    ready, stop, exited = threading.Event(), threading.Event(), threading.Event()
    counters = {"sent": 0}

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{sink}", "enable.auto.commit": False,
                             "isolation.level": "read_committed", **QUIET})
        consumer.assign([TopicPartition(sink, p, OFFSET_BEGINNING) for p in range(job.PARTITIONS)])
        while not stop.is_set():
            for message in consumer.consume(10_000, 0.05):
                if message.error() is not None:
                    continue
                now = time.time() * 1000
                key, count = message.value().split(b",", 2)[:2]
                if key == job.WARMUP_KEY:
                    ready.set()
                    continue
                times = produced.get(key)
                if times is None:
                    continue
                upto = min(int(count), len(times))
                seen = visible[key]
                while seen < upto:
                    samples.append(now - times[seen])
                    seen += 1
                visible[key] = seen
        consumer.close()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "enable.idempotence": True, **QUIET})
        deadline = time.monotonic() + args.ready_timeout
        while not ready.is_set() and not exited.is_set() and time.monotonic() < deadline:
            producer.produce(source, job.WARMUP_KEY + b",%d" % int(time.time() * 1000), job.WARMUP_KEY)
            producer.poll(0)
            ready.wait(0.5)
        if not ready.is_set():
            producer.flush(10)
            return
        run.latency["ready_after_s"] = round(time.monotonic() - (deadline - args.ready_timeout), 1)
        started, sent = time.monotonic(), 0
        while not exited.is_set() and time.monotonic() - started < args.seconds:
            due = int((time.monotonic() - started) * args.rate)
            while sent < due:
                key = names[sent % args.keys]
                now = time.time() * 1000
                produced[key].append(now)
                producer.produce(source, key + b",%d" % now, key)
                sent += 1
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(30)
        counters["sent"] = sent

    consumer_thread = threading.Thread(target=consume, daemon=True)
    producer_thread = threading.Thread(target=produce, daemon=True)
    with tempfile.TemporaryDirectory(prefix=f"kafka-lat-{system.label}-") as directory:
        scratch = Path(directory)
        started = time.perf_counter()
        child, result_path = start_runner(system, bootstrap, source, sink, 0, scratch, args.parallelism,
                                          latency=True)
        consumer_thread.start()
        producer_thread.start()
        done = threading.Event()

        def drive() -> None:  # wait for the producer, then for the last records to be visible
            producer_thread.join()
            if ready.is_set():
                deadline = time.monotonic() + args.drain_s
                while time.monotonic() < deadline and sum(visible.values()) < counters["sent"] \
                        and child.poll() is None:
                    time.sleep(0.1)
            done.set()

        threading.Thread(target=drive, daemon=True).start()
        watch(child, run, args.timeout, until=done)
        exited.set()
        done.wait()
        stop.set()
        consumer_thread.join()
        if child.poll() is None:
            assert child.stdin is not None
            child.stdin.close()  # the runner stops its job
            try:
                child.wait(120)
            except subprocess.TimeoutExpired:
                kill_tree(psutil.Process(child.pid))
        finish(child, run, result_path, scratch)
        run.wall_s = time.perf_counter() - started
    if not ready.is_set() and run.error is None:
        run.error = f"no output visible within {args.ready_timeout:.0f} s"
    sent = counters["sent"]
    run.records = sent
    run.latency_ms = samples
    run.latency.update(sent=sent, visible=len(samples), rate=args.rate, seconds=args.seconds)
    if sent and len(samples) < sent and run.error is None:
        run.error = f"only {len(samples)} of {sent} records became visible within {args.drain_s:.0f} s of the end"
    topics.delete(source, sink)
    return run


# ------------------------------------------------------------------ the benchmark
def measure(systems: list[System], topics: Topics, args: argparse.Namespace, csv_path: Path) -> list[Run]:
    runs: list[Run] = []
    sizes: dict[str, int] = {}
    with csv_lines(csv_path, ["system", "kind", "repeat", "records", "load_1min", "wall_s", "job_s", "records_per_s",
                              "peak_rss_mb", "output_ok", "output_check", "latency_p50_ms", "latency_p99_ms",
                              "latency_max_ms", "latency", "unsupported", "error", "config", "versions"]) as write:
        def record(run: Run) -> Run:
            runs.append(run)
            timed = run.kind in ("pilot", "timed")
            rate = rate_after_startup(run, startup_of(runs, system=run.system)) if timed else float("nan")
            lat = [percentile(run.latency_ms, q) for q in (0.5, 0.99, 1.0)]
            write([run.system, run.kind, run.repeat, run.records, f"{run.load:.2f}", f"{run.wall_s:.2f}",
                   "" if run.job_s is None else f"{run.job_s:.3f}", f"{rate:.1f}", f"{run.peak_rss_mb:.0f}",
                   "" if run.ok is None else run.ok, json.dumps(run.check), *(f"{v:.1f}" for v in lat),
                   json.dumps(run.latency), run.unsupported or "", run.error or "",
                   json.dumps(run.config), json.dumps(run.versions)])
            if run.unsupported:
                status = f"unsupported: {run.unsupported}"
            elif run.error:
                status = f"ERROR {run.error[:600]}"
            elif run.kind == "latency":
                status = f"p50 {lat[0]:,.0f} ms, p99 {lat[1]:,.0f} ms, {run.latency}"
            else:
                status = (f"job {run.job_s:.2f} s, wall {run.wall_s:.1f} s, peak {run.peak_rss_mb:,.0f} MB"
                          + (f", {rate:,.0f} rec/s" if rate == rate else "") + f", output {'ok' if run.ok else 'WRONG'}"
                          + f" {run.check}")
            print(f"[{run.kind} r{run.repeat}] {run.system:22} n={run.records:,} load {run.load:.1f}: {status}",
                  flush=True)
            return run

        for system in systems:
            if system.label in args.sizes:  # N given: no pilot (every startup run checks the output too)
                sizes[system.label] = args.sizes[system.label]
                continue
            first = record(throughput_run(system, topics, args.startup_records, 0, "startup", args))
            if first.unsupported or first.error:
                continue
            if args.records:
                sizes[system.label] = args.records
                continue
            pilot_records = args.pilot_records
            while True:
                pilot = record(throughput_run(system, topics, pilot_records, 0, "pilot", args))
                startup = startup_of(runs, system=system.label)
                busy = (pilot.job_s or 0.0) - (startup[1] if startup else 0.0)
                if pilot.error or busy >= 2.0 or pilot_records * 8 > args.max_records:
                    break
                pilot_records *= 8
            rate = rate_after_startup(pilot, startup_of(runs, system=system.label))
            wanted = args.min_records if rate != rate else rate * args.target_seconds
            sizes[system.label] = max(args.min_records, min(args.max_records, round_size(wanted)))
        for repeat in range(args.repeats):
            for system in systems:
                if system.label in sizes:
                    record(throughput_run(system, topics, args.startup_records, repeat, "startup", args))
                    record(throughput_run(system, topics, sizes[system.label], repeat, "timed", args))
            if repeat < args.latency_repeats:
                for system in systems:
                    if system.label in sizes:
                        record(latency_run(system, topics, repeat, args))
    return runs


def load_csv(path: Path) -> list[Run]:
    """The runs of an earlier ``kafka.csv`` (``--summarise-only``); latency samples are not in
    it, only each latency run's p50 and p99."""
    runs = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            run = Run(row["system"], row["kind"], int(row["repeat"]), int(row["records"]), load=float(row["load_1min"]),
                      wall_s=float(row["wall_s"]), job_s=float(row["job_s"]) if row["job_s"] else None,
                      peak_rss_mb=float(row["peak_rss_mb"]),
                      ok=None if row["output_ok"] == "" else row["output_ok"] == "True",
                      check=json.loads(row["output_check"]), latency=json.loads(row["latency"]),
                      unsupported=row["unsupported"] or None, error=row["error"] or None,
                      config=json.loads(row["config"]), versions=json.loads(row["versions"]))
            if run.kind == "latency" and row["latency_p50_ms"] != "nan":
                run.latency.update(p50=float(row["latency_p50_ms"]), p99=float(row["latency_p99_ms"]))
            runs.append(run)
    return runs


@dataclass
class Cell:
    system: System
    throughput: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    startup_s: float = float("nan")
    records: int = 0
    peak_rss_mb: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    #: (p50, p99) of latency runs whose samples are not at hand (a table rebuilt from the CSV)
    latency_runs: list[tuple[float, float]] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    checks: list[bool] = field(default_factory=list)
    duplicates: int = 0
    note: str = ""
    #: timed runs that took no longer than the median start-up run: no rate after start-up
    inseparable: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.throughput) if self.throughput else float("nan")

    @property
    def has_latency(self) -> bool:
        return bool(self.latency_ms or self.latency_runs)

    def latency(self, q: float) -> float:
        """The q-quantile of the pooled samples; from the CSV: the median over runs of their own."""
        if self.latency_ms:
            return percentile(self.latency_ms, q)
        if self.latency_runs:
            return statistics.median(run[0] if q == 0.5 else run[1] for run in self.latency_runs)
        return float("nan")


def summarize(runs: list[Run], systems: list[System]) -> dict[str, Cell]:
    cells = {s.label: Cell(s) for s in systems}
    for run in runs:
        cell = cells[run.system]
        if run.unsupported:
            cell.note = f"cannot run: {run.unsupported}"
            continue
        if run.error:
            cell.note = run.error[:300]
        if run.ok is not None:
            cell.checks.append(run.ok)
            cell.duplicates += max(0, run.check.get("duplicates", 0))
        if run.kind == "timed" and not run.error:
            startup = startup_of(runs, system=run.system)
            cell.startup_s = startup[1] if startup else float("nan")
            cell.records = run.records
            rate = rate_after_startup(run, startup)
            if rate == rate:
                cell.throughput.append(rate)
            else:
                cell.inseparable += 1
            cell.raw.append(run.records / run.job_s if run.job_s else float("nan"))
            cell.peak_rss_mb.append(run.peak_rss_mb)
            cell.loads.append(run.load)
        if run.kind == "latency" and not run.error:
            if run.latency_ms:
                cell.latency_ms.extend(run.latency_ms)
            elif "p50" in run.latency:
                cell.latency_runs.append((run.latency["p50"], run.latency["p99"]))
            cell.loads.append(run.load)
    return cells


def table(cells: dict[str, Cell], interval_s: float) -> str:
    ours = cells[OURS].median if OURS in cells else float("nan")
    lines = ["| system | sink guarantee | records/s (median) | min-max | epochal exactly-once / system "
             "| N / job_s (no subtraction) | latency p50 / p99 ms | peak RSS MB | N | start-up s | load (1 min) "
             "| output |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for cell in cells.values():
        latency = f"{number(cell.latency(0.5))} / {number(cell.latency(0.99))}" if cell.has_latency else "-"
        if cell.inseparable:
            cell.note += (f" {cell.inseparable} timed run(s) not longer than the median start-up: no rate after "
                          "start-up, left out of records/s")
        output = ("ok" if cell.checks and all(cell.checks) else "WRONG" if cell.checks else "not run") + \
            (f" ({cell.duplicates:,} duplicates)" if cell.duplicates else "") + (f" {cell.note}" if cell.note else "")
        if not cell.throughput:
            lines.append(f"| {cell.system.label} | {cell.system.guarantee} | n/a | | | | {latency} | | | | "
                         f"| {output} |")
            continue
        spread = f"{number(min(cell.throughput))}-{number(max(cell.throughput))}"
        loads = f"{min(cell.loads):.1f}-{max(cell.loads):.1f}"
        lines.append(f"| {cell.system.label} | {cell.system.guarantee} | {number(cell.median)} | {spread} "
                     f"| {number(ours / cell.median, 2)}x | {number(statistics.median(cell.raw))} | {latency} "
                     f"| {number(statistics.median(cell.peak_rss_mb))} "
                     f"| {cell.records / 1e6:g}M | {number(cell.startup_s, 1)} | {loads} | {output} |")
    lines.append("")
    lines += goals(cells, interval_s)
    return "\n".join(lines) + "\n"


def goals(cells: dict[str, Cell], interval_s: float) -> list[str]:
    """The issue's goals, as measured."""
    out = []
    ours = cells.get(OURS)
    if ours is None or not ours.throughput:
        return ["Goals: epochal exactly_once not measured."]

    def versus(label: str, factor: float, mine: Cell = ours) -> str:
        other = cells.get(label)
        if other is None or not other.throughput:
            return f"{label} not measured"
        ratio = mine.median / other.median
        raw = statistics.median(mine.raw) / statistics.median(other.raw)
        verdict = "met" if ratio >= factor else "NOT met"
        return (f"{ratio:.2f}x {label} after start-up, {raw:.2f}x by N / job_s (goal >= {factor:g}x): "
                f"{verdict}")

    out.append(f"- throughput: {versus('spark-python', 2.0)}")
    out.append(f"- throughput: {versus('bytewax', 1.0)}")
    columnar = cells.get("epochal-columnar")
    if columnar is not None and columnar.throughput:
        out.append(f"- batch API, exactly-once: {versus('spark-builtin', 2.0, columnar)}")
        out.append(f"- batch API, exactly-once: {versus('bytewax', 3.0, columnar)}")
    p99 = ours.latency(0.99)
    bound = 2 * interval_s * 1000
    verdict = "not measured" if p99 != p99 else "met" if p99 <= bound else "NOT met"
    out.append(f"- latency: epochal exactly_once p99 {number(p99)} ms (goal <= 2 checkpoint intervals = "
               f"{bound:,.0f} ms): {verdict}")
    return out


def plot(path: Path, cells: dict[str, Cell]) -> None:
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter

    labels = list(cells)
    colors = [RED if label.startswith("epochal") else BLUE for label in labels]
    ours = cells[OURS].median if OURS in cells else float("nan")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    medians, errors = error_bars((c.median, min(c.throughput), max(c.throughput)) if c.throughput else (0, 0, 0)
                                 for c in cells.values())
    bars = axes[0].bar(range(len(labels)), medians, yerr=errors, capsize=4, color=colors)
    axes[0].bar_label(bars, labels=["" if not m else "1.00x" if label == OURS else f"{ours / m:.2f}x"
                                    for label, m in zip(labels, medians, strict=True)], padding=2, fontsize=8)
    axes[0].set_title("records/s after start-up (median, min-max)\nlabel: epochal exactly-once / system", fontsize=9)
    axes[0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1e3:,.0f}k"))
    p50 = [c.latency(0.5) if c.has_latency else 0 for c in cells.values()]
    p99 = [c.latency(0.99) if c.has_latency else 0 for c in cells.values()]
    x = list(range(len(labels)))
    axes[1].bar([i - 0.2 for i in x], p50, width=0.4, label="p50", color="#8172b2")
    axes[1].bar([i + 0.2 for i in x], p99, width=0.4, label="p99", color="#ccb974")
    axes[1].set_yscale("log")
    axes[1].set_title("latency produced -> visible to read_committed (ms, log)", fontsize=9)
    axes[1].legend(fontsize=8)
    memory = [statistics.median(c.peak_rss_mb) if c.peak_rss_mb else 0 for c in cells.values()]
    axes[2].bar(x, memory, color=colors)
    axes[2].set_title("peak RSS of the run's process tree (MB)", fontsize=9)
    for ax in axes:
        ax.set_xticks(x, labels, rotation=35, ha="right", fontsize=8)
        ax.margins(y=0.15)
    fig.suptitle(f"Kafka -> parse -> keyed running count -> Kafka, parallelism 2, {os.cpu_count()} CPUs", fontsize=10)
    save_figure(fig, path, dpi=110)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", choices=list(SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--records", type=int, default=None, help="N of every timed run (default: sized per system)")
    parser.add_argument("--sizes", nargs="+", default=[], metavar="SYSTEM=N",
                        help="N of a system's timed runs (no pilot for it), e.g. bytewax=5000000")
    parser.add_argument("--target-seconds", type=float, default=15.0)
    parser.add_argument("--min-records", type=int, default=300_000)
    parser.add_argument("--max-records", type=int, default=20_000_000)
    parser.add_argument("--pilot-records", type=int, default=200_000)
    parser.add_argument("--startup-records", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-repeats", type=int, default=1, help="latency runs per system (one per round)")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--keys", type=int, default=job.KEYS)
    parser.add_argument("--rate", type=int, default=3000, help="records/s the latency run produces")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the latency run produces")
    parser.add_argument("--ready-timeout", type=float, default=300.0)
    parser.add_argument("--drain-s", type=float, default=30.0,
                        help="how long the latency run waits for the last records to become visible")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is killed")
    parser.add_argument("--out", type=Path, default=ROOT / RESULTS / "kafka")
    parser.add_argument("--summarise-only", action="store_true",
                        help="rebuild kafka.md and kafka.png from --out's kafka.csv without running anything")
    args = parser.parse_args(argv)
    if args.keys != job.KEYS:
        parser.error("--keys other than job.KEYS needs the fill and the oracle changed too")
    systems = [SYSTEMS[label] for label in SYSTEMS if label in args.systems]
    try:
        args.sizes = {label: int(n) for label, n in (item.split("=", 1) for item in args.sizes)}
    except ValueError:
        parser.error("--sizes takes SYSTEM=N pairs")
    if set(args.sizes) - set(SYSTEMS):
        parser.error(f"--sizes names unknown systems: {sorted(set(args.sizes) - set(SYSTEMS))}")
    if args.summarise_only:
        runs = load_csv(args.out / "kafka.csv")
        present = {run.system for run in runs}
        load_file = args.out / "kafka-load.txt"
        report(runs, [s for s in systems if s.label in present], args.out,
               load_file.read_text() if load_file.exists() else "")
        return
    for venv in sorted({s.venv for s in systems if s.venv}):
        ensure_venv(venv)
    args.out.mkdir(parents=True, exist_ok=True)
    uptime_before = uptime()
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB; "
          f"{uptime_before}", flush=True)
    with KafkaBroker(heap="1g") as broker:
        topics = Topics(broker)
        runs = measure(systems, topics, args, args.out / "kafka.csv")
    uptime_after = uptime()
    load = f"\nLoad: before `{uptime_before}`; after `{uptime_after}`\n"
    (args.out / "kafka-load.txt").write_text(load)
    report(runs, systems, args.out, load)


def report(runs: list[Run], systems: list[System], out: Path, load: str) -> None:
    """kafka.md and kafka.png from the runs."""
    cells = summarize(runs, systems)
    versions: dict[str, dict[str, str]] = {}
    for run in runs:
        versions.setdefault(run.system, {}).update(run.versions)
    text = table(cells, job.CHECKPOINT_INTERVAL_S)
    text += ("\nVersions: " + "; ".join(f"{s}: " + ", ".join(f"{k} {v}" for k, v in sorted(vs.items()))
                                        for s, vs in versions.items())
             + f"; broker: Apache Kafka {KAFKA_VERSION} (KRaft, one node)\n" + load)
    (out / "kafka.md").write_text(text)
    plot(out / "kafka.png", cells)
    print("\n" + text)
    print(f"wrote {out / 'kafka.md'}, {out / 'kafka.png'}")


if __name__ == "__main__":
    main()
