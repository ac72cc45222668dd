"""PyFlink runner for the peer benchmarks (see :mod:`benchmarks.peers.spec` for the jobs and the protocol).

Every job is built with PyFlink's DataStream API and run on Flink's local MiniCluster, which lives in the
JVM that PyFlink starts beside this interpreter (its start-up and the job graph's build are outside
``job_s``; ``job_s`` is the ``env.execute()`` call only).

Pipeline
--------
* source: ``NumberSequenceSource(0, N - 1)`` (Java, split into one ascending range per subtask), then a
  Python ``map`` that turns ``i`` into ``spec.make_line(i, keys)``, so the creation stamp of sampled records
  is taken in Python when the record is generated;
* ``parse`` is a Python ``map`` with ``spec.parse_line``; the job's own operators follow
  (``filter``/``map``; ``key_by`` + ``reduce`` for the running count; ``assign_timestamps_and_watermarks``
  with ``WatermarkStrategy.for_monotonous_timestamps()`` + ``key_by`` + ``TumblingEventTimeWindows`` +
  ``aggregate(count, ProcessWindowFunction)`` emitting ``(key, window start, count)`` for the window job);
* sink: in the latency-measured jobs a final Python ``flat_map`` computes ``spec.latency_ms(created)`` for
  records with ``created != 0``, emits nothing and appends its samples to a file per subtask under
  ``work_dir`` (merged by this runner); then Flink's ``DiscardingSink``.  The window job goes
  straight into the ``DiscardingSink``.  With ``--verify`` the job's output is collected instead with
  ``execute_and_collect`` and summarised.

Variants
--------
``process``  ``python.execution-mode: process``: Python workers in separate processes beside the JVM,
             fed over Beam's Fn API (gRPC data and state channels) in bundles.
``thread``   ``python.execution-mode: thread``: Python embedded in the JVM with PEMJA; no serialisation
             across processes, but every subtask's Python code shares the one interpreter (one GIL).

Configuration (the best honest settings found for these jobs; all recorded in the result's ``config``)
----------------------------------------------------------------------------------------------------------
* parallelism = ``--parallelism`` for every operator; operator chaining and Python operator fusion
  (``python.operator-chaining.enabled``) stay on, their defaults: consecutive Python functions of a subtask
  run in one Python operator without serialisation between them.  So in ``stateless`` the whole pipeline
  after the Java sequence source (make_line, parse, filter, map, latency sampler) is one fused Python call
  per record, and its latency samples only cover that in-Python path (microseconds).
* ``python.fn-execution.bundle.size`` / ``bundle.time`` (process mode's unit of exchange with the Python
  worker): Flink's defaults, 100 000 records / 1000 ms.  A bundle is also closed at every checkpoint
  barrier and at end of input, and at the end of each bundle the worker writes back every keyed state it
  touched, one blocking round trip per key, so smaller bundles only cost throughput here (tried: 1000 and
  10 000 records, 100 ms: slower or no better).  The bundle time bounds how long a record can wait in a
  Python operator's buffer, which shows in the process-mode latency samples.
* ``python.state.cache-size``: the Python worker's cache of keyed state, default 1000 keys; raised to the
  job's key space (10 000 / 1 000 000) so repeated keys are not re-read from the JVM over gRPC in process
  mode (thread mode reads the JVM's state backend directly).
* ``python.metric.enabled: false`` (PyFlink documents disabling Python metrics as a speed-up; the jobs use
  none), except in ``window``, whose Python window operator fails without its metric group.
* ``python.fn-execution.arrow.batch.size`` only applies to Pandas/Arrow UDFs of the Table API; unused.
* object reuse is enabled (it only affects chained Java operators: it avoids copying records between them).
* element types are declared (``Types.STRING``/``Types.TUPLE``/``Types.LONG``) where a record crosses from
  Python to Java (before ``key_by``, the window, the sink), so Flink's Cython coders are used instead of
  pickling (PyFlink's recommendation; measured as a wash here, within the noise of a shared machine).
* checkpointing (jobs with ``checkpointed``): ``enable_checkpointing(interval, EXACTLY_ONCE)`` (aligned
  barriers, the default), ``state.backend.type: hashmap`` (the state is at most 1M small counters and lives
  comfortably on the JVM heap; RocksDB would add (de)serialisation on every state access for no gain) and
  filesystem checkpoint storage (``execution.checkpointing.dir`` = ``file://<work_dir>/checkpoints``).
  Everything else is Flink's default, including the final checkpoint taken when the bounded input ends
  (``execution.checkpointing.checkpoints-after-tasks-finish``; it is triggered at once, so it adds little
  to ``job_s``).  ``restart-strategy.type: none`` so that a failure fails the run instead of looping.
* ``checkpoint_ms``: the durations (``checkpointDuration``, trigger to completion) of every completed
  checkpoint, read from the JobManager's log lines ``Completed checkpoint <n> ... checkpointDuration=<ms>``
  (the gateway JVM logs into ``<work_dir>/log`` via ``FLINK_LOG_DIR``).  The MiniCluster's REST API gives
  the same numbers but shuts down the moment the job ends, so polling it misses the last checkpoints.

PyFlink 2.3 quirks worked around: ``TumblingEventTimeWindows.of`` needs the old ``Time`` class (it calls
``to_milliseconds``); in thread mode ``RuntimeContext.get_index_of_this_subtask()`` calls a Java method Flink
2 removed (so the latency files are named by pid + uuid), and PEMJA's embedded interpreter needs the venv's
site-packages on ``python.pythonpath``.

The stateless job runs without checkpoints.
"""

from __future__ import annotations

import os
import re
import site
import sys
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from pyflink.common import Configuration, Time, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import (
    CheckpointingMode,
    DataStream,
    FlatMapFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from pyflink.datastream.connectors.base import Sink
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import AggregateFunction, ProcessWindowFunction
from pyflink.datastream.window import TimeWindow, TumblingEventTimeWindows
from pyflink.java_gateway import get_gateway

from benchmarks.peers import spec

SYSTEM = "pyflink"
VARIANTS = ("process", "thread")
BUNDLE_SIZE = 100_000
BUNDLE_TIME_MS = 1_000
LOCAL_PATHS = ("python.executable", "python.client.executable", "python.pythonpath")
CHECKPOINT_LOG = re.compile(r"Completed checkpoint (\d+) for job \w+ \(\d+ bytes, checkpointDuration=(\d+) ms")


# ------------------------------------------------------------------ Python functions of the jobs
class MakeLine(MapFunction):
    """The source's generator: sequence number ``i`` -> input line ``i`` (stamped in Python, now)."""

    def __init__(self, keys: int) -> None:
        self.keys = keys

    def map(self, value: int) -> str:
        return spec.make_line(value, self.keys)


class LatencySampler(FlatMapFunction):
    """Discarding sink's Python half: emits nothing, samples ``latency_ms(created)`` of stamped records.

    ``created`` is the last field of the record.  Each sample is appended (and flushed) at once to
    ``<out_dir>/latency-<pid>-<uuid>.txt``, one file per subtask, merged by the runner: written while the
    record is processed, it is on disk before the job can finish, whereas ``close()`` may still be running
    when ``env.execute()`` returns, and is never called on a process-mode subtask that received no input.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.file: TextIO | None = None

    def flat_map(self, value: Any) -> Any:
        created = value[-1]
        if created:
            if self.file is None:
                # unique per subtask; not get_index_of_this_subtask(): PyFlink 2.3's thread mode calls a
                # Java method (RuntimeContext.getIndexOfThisSubtask) that Flink 2 removed
                name = f"latency-{os.getpid()}-{uuid.uuid4().hex}.txt"
                self.file = open(Path(self.out_dir) / name, "a", encoding="ascii")
            self.file.write(f"{spec.latency_ms(created)}\n")
            self.file.flush()
        return ()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class EventTime(TimestampAssigner):
    """Event time (ms) of a ``(key, event ms)`` record."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return value[1]


class CountAggregate(AggregateFunction):
    """Incremental count of a window's records (so the window keeps one counter, not its records)."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, acc_a: int, acc_b: int) -> int:
        return acc_a + acc_b


class EmitWindow(ProcessWindowFunction):
    """``(key, window start ms, count)`` of a fired window."""

    def process(self, key: str, context: ProcessWindowFunction.Context, elements: Any) -> Any:
        window: TimeWindow = context.window()
        for count in elements:
            yield key, window.start, count


def parse_stateless(line: str) -> tuple[str, int, int, int]:
    return spec.parse_line(line)


def parse_keyed(line: str) -> tuple[str, int, int]:
    key, _value, _event_ms, created = spec.parse_line(line)
    return key, 1, created


def parse_window(line: str) -> tuple[str, int]:
    key, _value, event_ms, _created = spec.parse_line(line)
    return key, event_ms


def running_sum(a: tuple[str, int, int], b: tuple[str, int, int]) -> tuple[str, int, int]:
    """Running count of a key, carrying the newest record's ``created`` stamp to the sink."""
    return a[0], a[1] + b[1], b[2]


# ------------------------------------------------------------------ job graph
def build(env: StreamExecutionEnvironment, job: spec.Job, records: int) -> DataStream:
    """The job's pipeline up to (not including) its sink."""
    source = env.from_source(NumberSequenceSource(0, records - 1), WatermarkStrategy.no_watermarks(), "sequence")
    lines = source.map(MakeLine(job.keys), output_type=Types.STRING()).name("make_line")
    if job.name == "stateless":
        out_type = Types.TUPLE([Types.STRING(), Types.INT(), Types.LONG()])
        return (lines.map(parse_stateless).name("parse")
                .filter(lambda r: r[1] < spec.FILTER_BELOW).name("filter")
                .map(lambda r: (r[0], r[1] * 2, r[3]), output_type=out_type).name("map"))
    if job.windowed:
        strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime())
        return (lines.map(parse_window, output_type=Types.TUPLE([Types.STRING(), Types.LONG()])).name("parse")
                .assign_timestamps_and_watermarks(strategy)
                .key_by(lambda r: r[0], key_type=Types.STRING())
                .window(TumblingEventTimeWindows.of(Time.milliseconds(spec.WINDOW_MS)))
                .aggregate(CountAggregate(), window_function=EmitWindow(), accumulator_type=Types.LONG(),
                           output_type=Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG()]))
                .name("window_count"))
    row_type = Types.TUPLE([Types.STRING(), Types.LONG(), Types.LONG()])
    return (lines.map(parse_keyed, output_type=row_type).name("parse")
            .key_by(lambda r: r[0], key_type=Types.STRING())
            .reduce(running_sum).name("running_count"))


def discarding_sink() -> Sink:
    """Flink's own ``DiscardingSink`` (Sink V2)."""
    return Sink(get_gateway().jvm.org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink())


def configuration(args: Any, job: spec.Job) -> dict[str, str]:
    """The Flink configuration of this run (string options, recorded in the result)."""
    conf = {
        "python.execution-mode": args.variant,
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        # the repository root (for benchmarks.peers.spec) and this venv's packages: PEMJA's embedded
        # interpreter (thread mode) does not see the venv's site-packages by itself
        "python.pythonpath": os.pathsep.join([str(Path.cwd()), *site.getsitepackages()]),
        "python.fn-execution.bundle.size": str(BUNDLE_SIZE),
        "python.fn-execution.bundle.time": str(BUNDLE_TIME_MS),
        # PyFlink's Python window operator needs the metric group (late-record counter)
        "python.metric.enabled": "true" if job.windowed else "false",
        "python.state.cache-size": str(max(1000, job.keys)),
        # a failure fails the run instead of restarting it forever (the default once checkpointing is on)
        "restart-strategy.type": "none",
        "parallelism.default": str(args.parallelism),
    }
    if job.checkpointed:
        conf.update({
            "state.backend.type": "hashmap",
            "execution.checkpointing.storage": "filesystem",
            "execution.checkpointing.dir": (args.work_dir.resolve() / "checkpoints").as_uri(),
        })
    return conf


def collect_latency(latency_dir: Path) -> list[float]:
    """The latency samples of all sink subtasks."""
    return [float(line) for path in sorted(latency_dir.glob("latency-*.txt"))
            for line in path.read_text().splitlines() if line]


def checkpoint_durations(log_dir: Path) -> list[float]:
    """Durations (ms) of the completed checkpoints, from the JobManager's log lines
    ``Completed checkpoint <n> for job <id> (<bytes> bytes, checkpointDuration=<ms> ms, ...)``."""
    durations: dict[int, float] = {}
    for path in log_dir.glob("*.log"):
        for match in CHECKPOINT_LOG.finditer(path.read_text(errors="replace")):
            durations[int(match.group(1))] = float(match.group(2))
    return [durations[k] for k in sorted(durations)]


def main() -> None:
    args = spec.runner_arguments("PyFlink runner for the peer benchmarks", VARIANTS)
    job = spec.JOBS[args.job]
    args.work_dir.mkdir(parents=True, exist_ok=True)
    latency_dir = args.work_dir.resolve() / "latency"
    latency_dir.mkdir(exist_ok=True)
    versions = {name: metadata.version(name) for name in ("apache-flink", "apache-beam", "pemja")}

    # the gateway JVM (and its MiniCluster) logs here: one log per run, read for the checkpoint durations
    log_dir = args.work_dir.resolve() / "log"
    os.environ["FLINK_LOG_DIR"] = str(log_dir)
    conf = configuration(args, job)
    flink_conf = Configuration()
    for key, value in conf.items():
        flink_conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(flink_conf)
    env.set_parallelism(args.parallelism)
    env.get_config().enable_object_reuse()
    interval_ms = round(args.checkpoint_interval * 1000)
    if job.checkpointed:
        env.enable_checkpointing(interval_ms, CheckpointingMode.EXACTLY_ONCE)

    config: dict[str, Any] = {
        "api": "DataStream", "state_backend": "hashmap" if job.checkpointed else None,
        "checkpoint_interval_ms": interval_ms if job.checkpointed else None,
        "checkpointing_mode": "EXACTLY_ONCE" if job.checkpointed else None,
        "object_reuse": True, "operator_chaining": True,
        **{k: v for k, v in conf.items() if k not in LOCAL_PATHS},
    }
    stream = build(env, job, args.records)

    if args.verify:
        start = time.perf_counter()
        with stream.execute_and_collect(f"{job.name}-verify") as results:
            output = list(results)
        job_s = time.perf_counter() - start
        spec.write_result(args, SYSTEM, job_s=job_s, summary=spec.summarize(job.name, output),
                          config=config, versions=versions)
        return

    if job.measures_latency:
        stream = stream.flat_map(LatencySampler(str(latency_dir))).name("latency_sampler")
    stream.sink_to(discarding_sink()).name("discard")

    start = time.perf_counter()
    env.execute(job.name)
    job_s = time.perf_counter() - start

    latency = collect_latency(latency_dir) if job.measures_latency else None
    checkpoint_ms = checkpoint_durations(log_dir) if job.checkpointed else None
    spec.write_result(args, SYSTEM, job_s=job_s, latency=latency, checkpoint_ms=checkpoint_ms,
                      config=config, versions=versions)


if __name__ == "__main__":
    main()
