"""Bytewax runner of the peer benchmark (see :mod:`benchmarks.peers.spec` for the jobs and the protocol).

Run from the repository root with the Bytewax virtualenv::

    .venv-peers/bytewax/bin/python -m benchmarks.peers.run_bytewax --job keyed --records 500000 \
        --parallelism 2 --work-dir /tmp/bw --result /tmp/bw.json

Configuration, and why (the best honest setup of Bytewax 0.21 on a few cores):

* **Parallelism = P processes with one worker each.** Bytewax workers inside one process are
  threads that share the GIL, so the only way Bytewax uses P cores for Python code is P processes
  forming one Timely cluster -- what ``python -m bytewax.run -i <id> -a <addresses>`` (and
  ``python -m bytewax.testing -p P``) do. This runner starts the P processes itself (``python -m
  benchmarks.peers.run_bytewax`` again, in "process" mode) and each calls ``bytewax.run.cli_main``
  with ``process_id``/``addresses`` on free local ports. Each process imports Bytewax and builds the
  dataflow, reports ready, and only then is released; the processes are released in id order,
  each after the previous one listens on its port, so no process hits Timely's 1 s connect-retry.
  ``job_s`` is the runner's wall time from releasing the first process until all P processes have
  exited (interpreter start-up and imports excluded; the dataflow's cluster connection, execution,
  final snapshot and shutdown included). The span of ``cli_main`` inside the processes is written
  to ``config["in_process_s"]`` for reference.
* **Source**: a ``FixedPartitionedSource`` with P partitions; partition p generates
  ``spec.make_line(i, keys)`` for i = p, p + P, p + 2P, ... (so event times are ascending in every
  partition), ``SOURCE_BATCH`` lines per ``next_batch`` call. Its snapshot is the next ``i``, so
  it resumes exactly on recovery. Bytewax assigns the P partitions one per worker.
  ``SOURCE_BATCH`` = 1000, the default ``batch_size`` of Bytewax's own connectors (Kafka, files):
  100, 1000 and 10000 ran equally fast within the noise at 500 000 records (Bytewax moves items
  between Rust and Python in batches anyway), while 10000 delays the sampled records (p50 latency
  tens of ms instead of ~2 ms).
* **Operators**: the idiomatic per-item ``bytewax.operators`` (``map``, ``filter``,
  ``stateful_map``, ``windowing.count_window``). They run on batches internally (``map`` is a
  ``flat_map_batch`` shim), so hand-written ``flat_map_batch`` steps would only fuse the job's
  steps into one function -- not what a user writes, so not used.
  - ``stateless``: map(parse) -> filter(value < 90) -> map to (key, value * 2, created) -> sink.
  - ``keyed``/``keyed_1m``: map(parse) -> map to the keyed pair ``(key, (1, created))`` (a Bytewax
    keyed stream is a stream of ``(key, value)``) -> ``stateful_map`` running sum, emitting
    ``(key, (count, created))`` per record -> sink.
  - ``window``: map(parse) -> ``count_window`` keyed by the key, ``TumblingWindower(1 s, aligned to
    the Unix epoch)``, ``EventClock`` on the event-time field with ``wait_for_system_duration=0``
    -> map to ``(key, window start ms, count)`` (start = window id * 1000 ms) -> sink.
    The event clock is driven by event time only: ``now_getter`` is a constant and
    ``to_system_utc`` returns None. With the default system-time ``now_getter`` the watermark
    advances with wall-clock time, so whenever the job runs slower than the data's event rate
    (100 000 records per event-second) records would be dropped as late; and the default
    ``to_system_utc`` would schedule wake-ups at 1970 system times, i.e. immediately. With these
    two settings the watermark is the largest event time seen (zero allowed lateness), windows close
    when a later event arrives or at end of input, which is the benchmark's monotonous watermark.
    Bytewax's watermark is per key, not the minimum over the source partitions: a key fed by
    several partitions sees their skew as out-of-order events, and with zero lateness those are
    dropped as late. With P dividing 10 000 (P = 1, 2, 4, 5, 8, ...) every key comes from one
    partition only (its records are ``i0 + 10 000 j``), so nothing can be late and the output is
    exact; with e.g. P = 3 some records are dropped and ``--verify`` fails. The ``late`` stream is
    counted into ``config["late_records"]`` so such a loss is visible.
* **Recovery** (``keyed``, ``window``, ``keyed_1m``): ON. ``P`` recovery partitions are created
  under ``<work-dir>/recovery`` with ``bytewax.recovery.init_db_dir`` (what ``python -m
  bytewax.recovery <dir> <P>`` does); the epoch (snapshot) interval is ``--checkpoint-interval``
  (1 s) and the backup interval 0. Bytewax snapshots the state of every key changed in an epoch
  and commits it at the epoch's end, which gives exactly-once state with a resumable source
  (checked: a keyed run killed with SIGKILL mid-way and resumed ends with exact counts); the sink
  output is at-least-once (a resume replays the last epoch into a non-transactional sink).
  ``stateless`` runs without recovery (Bytewax's default 10 s epoch, which without recovery only
  paces progress tracking).
* **Sink**: a ``DynamicSink`` whose ``StatelessSinkPartition`` drops the records, computing
  ``spec.latency_ms(created)`` for the sampled ones (``created != 0``); each worker writes its
  samples to ``<work-dir>/latency-<worker>.json`` at close, merged by the runner. Bytewax's sinks
  are not transactional, so latency is from creation to the sink seeing the record (not to an
  epoch's commit). With ``--verify`` the sink writes the rows to ``<work-dir>/output-<worker>.json``
  instead, and the runner summarizes them.
* **Checkpoint durations**: not reported. Bytewax exposes snapshot-write timings only as aggregate
  Prometheus histograms on its optional API web server, not per checkpoint, so ``checkpoint_ms``
  is None.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from bytewax.operators.windowing import EventClock, TumblingWindower, count_window
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.recovery import RecoveryConfig, init_db_dir
from bytewax.run import cli_main

from benchmarks.peers import spec

SYSTEM = "bytewax"
VARIANTS = ["default"]
SOURCE_BATCH = 1_000
"""Lines per ``next_batch`` call of a source partition."""
PROCESS_ENV = "PEERS_BYTEWAX_PROCESS_ID"
"""Set (to the process id) in the environment of the dataflow processes this runner starts."""
ADDRESSES_ENV = "PEERS_BYTEWAX_ADDRESSES"
"""The cluster's addresses (``host:port;host:port...``) for the dataflow processes."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LISTEN_WAIT_S = 10.0


# ------------------------------------------------------------------ source
class _LinePartition(StatefulSourcePartition[str, int]):
    """Lines ``make_line(i)`` for ``i = next, next + step, ... < end``, resumable at ``next``."""

    def __init__(self, start: int, step: int, end: int, keys: int) -> None:
        self._next = start
        self._step = step
        self._end = end
        self._keys = keys

    def next_batch(self) -> list[str]:
        if self._next >= self._end:
            raise StopIteration
        stop = min(self._next + self._step * SOURCE_BATCH, self._end)
        keys = self._keys
        make_line = spec.make_line
        batch = [make_line(i, keys) for i in range(self._next, stop, self._step)]
        self._next += self._step * len(batch)
        return batch

    def snapshot(self) -> int:
        return self._next


class LineSource(FixedPartitionedSource[str, int]):
    """The benchmark input split into ``parts`` interleaved partitions (partition p holds i = p mod parts)."""

    def __init__(self, records: int, keys: int, parts: int) -> None:
        self._records = records
        self._keys = keys
        self._parts = parts

    def list_parts(self) -> list[str]:
        return [str(part) for part in range(self._parts)]

    def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> _LinePartition:
        start = int(for_part) if resume_state is None else resume_state
        return _LinePartition(start, self._parts, self._records, self._keys)


# ------------------------------------------------------------------ sinks
class _LatencyPartition(StatelessSinkPartition[Any]):
    """Drops records; samples the latency of those whose created field is set."""

    def __init__(self, path: Path, created_of: Callable[[Any], int] | None) -> None:
        self._path = path
        self._created_of = created_of
        self._samples: list[float] = []

    def write_batch(self, items: list[Any]) -> None:
        created_of = self._created_of
        if created_of is None:
            return
        samples = self._samples
        for item in items:
            created = created_of(item)
            if created:
                samples.append(spec.latency_ms(created))

    def close(self) -> None:
        self._path.write_text(json.dumps(self._samples))


class _CollectPartition(StatelessSinkPartition[Any]):
    """Keeps the rows (``--verify``, small N) and writes them to a file at close."""

    def __init__(self, path: Path, row_of: Callable[[Any], tuple]) -> None:
        self._path = path
        self._row_of = row_of
        self._rows: list[tuple] = []

    def write_batch(self, items: list[Any]) -> None:
        self._rows.extend(self._row_of(item) for item in items)

    def close(self) -> None:
        self._path.write_text(json.dumps(self._rows))


class DiscardSink(DynamicSink[Any]):
    """One latency-sampling discard partition per worker, writing ``latency-<worker>.json``."""

    def __init__(self, work_dir: Path, created_of: Callable[[Any], int] | None) -> None:
        self._work_dir = work_dir
        self._created_of = created_of

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _LatencyPartition:
        return _LatencyPartition(self._work_dir / f"latency-{worker_index}.json", self._created_of)


class CollectSink(DynamicSink[Any]):
    """One collecting partition per worker, writing ``output-<worker>.json``."""

    def __init__(self, work_dir: Path, row_of: Callable[[Any], tuple]) -> None:
        self._work_dir = work_dir
        self._row_of = row_of

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _CollectPartition:
        return _CollectPartition(self._work_dir / f"output-{worker_index}.json", self._row_of)


class LateCounter(DynamicSink[Any]):
    """Counts the records the window operator declared late (should be none); ``late-<worker>.json``."""

    def __init__(self, work_dir: Path) -> None:
        self._work_dir = work_dir

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _CollectPartition:
        return _CollectPartition(self._work_dir / f"late-{worker_index}.json", lambda item: (1,))


# ------------------------------------------------------------------ dataflow
def _event_time(record: tuple[str, int, int, int]) -> datetime:
    return EPOCH + timedelta(milliseconds=record[2])


def _running_sum(count: int | None, value: tuple[int, int]) -> tuple[int, tuple[int, int]]:
    count = (count or 0) + value[0]
    return count, (count, value[1])


def build_flow(job: str, records: int, parts: int, work_dir: Path, verify: bool) -> Dataflow:
    """The dataflow of ``job`` over ``records`` input records split into ``parts`` source partitions."""
    keys = spec.JOBS[job].keys
    flow = Dataflow(f"peers_{job}")
    lines = op.input("source", flow, LineSource(records, keys, parts))
    parsed = op.map("parse", lines, spec.parse_line)
    if job == "stateless":
        kept = op.filter("filter", parsed, lambda r: r[1] < spec.FILTER_BELOW)
        out = op.map("project", kept, lambda r: (r[0], r[1] * 2, r[3]))
        created_of: Callable[[Any], int] | None = lambda row: row[2]  # noqa: E731
        row_of: Callable[[Any], tuple] = lambda row: row  # noqa: E731
    elif spec.JOBS[job].windowed:
        clock = EventClock(_event_time, wait_for_system_duration=timedelta(0),
                           now_getter=lambda: EPOCH, to_system_utc=lambda _ts: None)
        windower = TumblingWindower(length=timedelta(milliseconds=spec.WINDOW_MS), align_to=EPOCH)
        windows = count_window("window_count", parsed, clock, windower, key=lambda r: r[0])
        out = op.map("window_row", windows.down, lambda kv: (kv[0], kv[1][0] * spec.WINDOW_MS, kv[1][1]))
        op.output("late_sink", windows.late, LateCounter(work_dir))
        created_of = None
        row_of = lambda row: row  # noqa: E731
    else:
        pairs = op.map("key_by", parsed, lambda r: (r[0], (1, r[3])))
        out = op.stateful_map("running_sum", pairs, _running_sum)
        created_of = lambda kv: kv[1][1]  # noqa: E731
        row_of = lambda kv: (kv[0], kv[1][0])  # noqa: E731
    op.output("sink", out, CollectSink(work_dir, row_of) if verify else DiscardSink(work_dir, created_of))
    return flow


def _run_options(args: Any) -> dict[str, Any]:
    """``cli_main``'s epoch interval and recovery for the job (recovery only for checkpointed jobs)."""
    if spec.JOBS[args.job].checkpointed:
        return {"epoch_interval": timedelta(seconds=args.checkpoint_interval),
                "recovery_config": RecoveryConfig(str(args.work_dir / "recovery"), timedelta(0))}
    return {"epoch_interval": timedelta(seconds=10), "recovery_config": None}


def process_main(args: Any, process_id: int, addresses: list[str]) -> None:
    """One dataflow process: build the flow, report ready on stdout, wait for ``go`` on stdin, run."""
    die_with_parent()
    flow = build_flow(args.job, args.records, args.parallelism, args.work_dir, args.verify)
    options = _run_options(args)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    os.dup2(2, 1)  # nothing more goes to the runner's pipe
    sys.stdin.readline()
    start = time.time()
    if len(addresses) > 1:
        cli_main(flow, workers_per_process=1, process_id=process_id, addresses=addresses, **options)
    else:
        cli_main(flow, workers_per_process=1, **options)
    end = time.time()
    (args.work_dir / f"span-{process_id}.json").write_text(json.dumps([start, end]))


# ------------------------------------------------------------------ runner (benchmarks.kafka.run_bytewax's too)
def die_with_parent() -> None:
    """Have Linux kill this dataflow process if the runner dies (so no orphaned workers stay behind)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def exit_on_sigterm(signum: int, frame: Any) -> None:
    """Turn SIGTERM into SystemExit so that the runner's cleanup kills its dataflow processes."""
    raise SystemExit(128 + signum)


def _free_ports(count: int) -> list[int]:
    """``count`` currently free local TCP ports."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _listening(port: int) -> bool:
    """Whether some socket listens on local TCP ``port`` (from /proc/net/tcp, without connecting to it)."""
    wanted = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[1].endswith(wanted) and fields[3] == "0A":
                return True
    return False


def run_processes(args: Any, module: str = "benchmarks.peers.run_bytewax",
                   stop: threading.Event | None = None) -> float:
    """Start the P dataflow processes (``python -m <module>`` with this process's arguments),
    release them in order, and return the wall time until all exited. With ``stop`` (an
    unbounded dataflow: benchmarks.kafka's latency runs) the processes are killed once it is set."""
    count = args.parallelism
    addresses = ";".join(f"127.0.0.1:{port}" for port in _free_ports(count))
    ports = [int(address.rsplit(":", 1)[1]) for address in addresses.split(";")]
    procs: list[subprocess.Popen] = []
    try:
        for process_id in range(count):
            env = dict(os.environ, **{PROCESS_ENV: str(process_id), ADDRESSES_ENV: addresses})
            procs.append(subprocess.Popen([sys.executable, "-m", module, *sys.argv[1:]],
                                          env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for proc in procs:
            if proc.stdout is None or proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"dataflow process {proc.pid} failed before start")
        start = time.perf_counter()
        for process_id, proc in enumerate(procs):
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.close()
            if count > 1 and process_id < count - 1:
                deadline = time.monotonic() + LISTEN_WAIT_S
                while not _listening(ports[process_id]) and time.monotonic() < deadline and proc.poll() is None:
                    time.sleep(0.001)
        if stop is not None:
            while not stop.wait(0.2):
                if any(proc.poll() is not None for proc in procs):
                    break
            if all(proc.poll() is None for proc in procs):
                return time.perf_counter() - start  # stopped as asked: the finally kills them
        codes = [proc.wait() for proc in procs]
        elapsed = time.perf_counter() - start
        if any(codes):
            raise RuntimeError(f"dataflow processes exited with {codes}")
        return elapsed
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _read_lists(work_dir: Path, prefix: str) -> list[Any]:
    """The concatenated JSON lists of ``<work_dir>/<prefix>-*.json``."""
    merged: list[Any] = []
    for path in sorted(work_dir.glob(f"{prefix}-*.json")):
        merged.extend(json.loads(path.read_text()))
    return merged


def main() -> None:
    """Run one job as P Bytewax processes and write the result."""
    args = spec.runner_arguments(__doc__.splitlines()[0], VARIANTS)
    args.work_dir = args.work_dir.resolve()
    if PROCESS_ENV in os.environ:
        process_main(args, int(os.environ[PROCESS_ENV]), os.environ[ADDRESSES_ENV].split(";"))
        return
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    job = spec.JOBS[args.job]
    args.work_dir.mkdir(parents=True, exist_ok=True)
    for prefix in ("latency", "output", "late", "span"):
        for stale in args.work_dir.glob(f"{prefix}-*.json"):
            stale.unlink()
    if job.checkpointed:
        recovery = args.work_dir / "recovery"
        shutil.rmtree(recovery, ignore_errors=True)  # a stale recovery store would "resume" a finished run
        recovery.mkdir(parents=True)
        init_db_dir(recovery, args.parallelism)
    job_s = run_processes(args)
    spans = [json.loads(path.read_text()) for path in args.work_dir.glob("span-*.json")]
    summary = spec.summarize(args.job, _read_lists(args.work_dir, "output")) if args.verify else None
    latency = None if args.verify or not job.measures_latency else _read_lists(args.work_dir, "latency")
    config: dict[str, Any] = {
        "processes": args.parallelism, "workers_per_process": 1, "source_partitions": args.parallelism,
        "source_batch": SOURCE_BATCH, "recovery": job.checkpointed,
        "epoch_interval_s": args.checkpoint_interval if job.checkpointed else 10.0,
        "backup_interval_s": 0 if job.checkpointed else None,
        "recovery_partitions": args.parallelism if job.checkpointed else None,
        "in_process_s": max(end for _, end in spans) - min(start for start, _ in spans) if spans else None,
    }
    if job.windowed:
        config.update(clock="EventClock(event time only, wait_for_system_duration=0)",
                      windower=f"TumblingWindower({spec.WINDOW_MS} ms)",
                      late_records=len(_read_lists(args.work_dir, "late")))
    spec.write_result(args, SYSTEM, job_s=job_s, latency=latency, checkpoint_ms=None, summary=summary,
                      config=config, versions={"bytewax": metadata.version("bytewax")})


if __name__ == "__main__":
    main()
