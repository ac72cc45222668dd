"""Spark Structured Streaming runner of the peer benchmark (see :mod:`benchmarks.peers.spec`).

Run from the repository root with the Spark virtualenv::

    .venv-peers/spark/bin/python -m benchmarks.peers.run_spark --job keyed --records 500000 \
        --parallelism 2 --variant builtin --work-dir /tmp/w --result /tmp/r.json [--verify]

What runs and why (the best honest, idiomatic Spark 4 configuration on a 2-core machine):

* Engine: ``local[P]`` master (P = ``--parallelism``), ``spark.sql.shuffle.partitions = P``, the
  Spark UI off, 4 GiB driver heap (the 1 GiB default is tight for 1M keys of state).
* Source: the ``rate-micro-batch`` source with ``numPartitions = P`` and a fixed
  ``rowsPerBatch``: it is deterministic (row ``value`` = i, interleaved over the partitions) and
  runs as fast as the engine can, with the default trigger (next micro-batch as soon as the
  previous one commits). The input line of ``spec.make_line`` is generated in the source with
  SQL expressions (the same for both variants); sampled records carry as creation time the
  micro-batch's timestamp (``current_timestamp()`` is fixed per micro-batch: when it was planned).
* Micro-batch size: Spark checkpoints every micro-batch (offset WAL, commit log, state store
  version), so the micro-batch length IS the checkpoint interval. ``rowsPerBatch``
  (``ROWS_PER_BATCH``, per job and variant) is the size at which a steady-state micro-batch took
  about the 1 s checkpoint interval on the 2-core machine (larger batches amortise the per-batch
  overhead further but checkpoint less often than the other systems). The Python stateful jobs
  pay a fixed cost per key touched in a batch, so their batches cannot get much shorter than
  ~1 s (10k keys): 50k rows gives ~1.0-1.1 s (keyed) and ~1.5 s (window, the batches that fire
  windows cost more); 200k rows would double the keyed throughput at ~1.7 s batches. keyed_1m
  with Python state touches ~1 new key per record: 15k rows ~ 1 s. The size is a multiple of 100
  (the records of one event-time ms), capped at N, and can be overridden with
  ``SPARK_PEER_ROWS_PER_BATCH``. The first micro-batch also pays the query's warm-up (code
  generation, Python workers, state store opening): 1.5-3 s builtin, 6-8 s with Python state.
* Bounded input: the source is unbounded, so a ``value < N`` filter right after it bounds the
  input (rows of later micro-batches are dropped there: their batches are empty), and a
  ``StreamingQueryListener`` stops the query once the micro-batches that hold the N records have
  committed. ``Trigger.AvailableNow`` is no option: ``rate-micro-batch`` does not support it (it
  would run a single batch). ``job_s`` runs from ``writeStream.start()`` to ``query.stop()``
  having returned (SparkSession creation excluded).
* Window job, end of input: Spark fires a window in the micro-batch AFTER the one whose
  watermark passed its end, and has no end-of-input flush. So the source ends its input with
  one marker record (i = N) whose event time is far in the future (like Flink's final
  ``Long.MAX`` watermark of a bounded source); it moves the watermark past every window and is
  dropped right after the watermark operator. The job ends with the batch that ran with that
  watermark (it emitted every remaining window): two extra, nearly empty micro-batches.
  Event time = ``i * 1000 // EVENTS_PER_SECOND`` ms parsed from the line (not the rate source's
  synthetic timestamp), watermark delay 0 (event times ascend per partition; batches hold whole
  event-time ms, so no record is ever late). Spark's first watermark is 0 and
  ``transformWithState`` drops rows with ts <= watermark as late, which would drop the records
  of event time 0: the Python variant's event-time column is therefore offset by
  ``EVENT_EPOCH_MS`` (2020-01-01, whole windows), the window starts it emits are the spec's.
* Variants:
  ``builtin``: Spark SQL operators only (``split`` to parse, ``filter``, ``groupBy(key).count()``
  in update mode, ``window(ts, '1 second')`` + ``withWatermark`` in append mode): no Python per
  record, everything whole-stage code-generated in the JVM.
  ``pandas``: the per-record logic in Python: parsing, filter and map in a ``mapInPandas``
  function (vectorised pandas on Arrow-backed strings: measured ~1.5-2x faster than a loop over
  ``spec.parse_line`` and 2-7x faster than object-dtype ``str.split``); the stateful logic with Spark 4's
  Python stateful API ``transformWithState`` (Row API, a ``StatefulProcessor`` with a
  ``ValueState`` count per key; for the window a ``MapState`` window start -> count per key and
  an event-time timer at each window's end that emits and clears it). Measured on keyed (10k
  keys, 100k-row batches) it was ~2x faster than ``applyInPandasWithState`` and ~3x faster than
  ``transformWithStateInPandas`` (both build pandas DataFrames per key and micro-batch, which
  dominates with 10k-100k keys per batch), and ~4x faster than ``applyInPandasWithState`` on
  keyed_1m. The two pandas APIs can be selected with ``SPARK_PEER_STATEFUL_API`` for comparison
  (keyed jobs only; the window job is written for ``transformWithState`` only).
* State store: builtin variant: the default HDFS-backed store (state in a JVM hash map per
  version, each batch commits a delta file of the touched keys); measured against RocksDB (with
  changelog checkpointing) here it was 10-25% faster for keyed (10k keys) and keyed_1m (1M keys,
  ~200 MB of heap, well inside the 4 GiB). Python variant: RocksDB with changelog checkpointing,
  because ``transformWithState`` requires it. Override with ``SPARK_PEER_STATE_STORE=rocksdb``.
* Checkpoints: ``checkpointLocation`` under ``--work-dir`` for every query. Spark cannot run a
  streaming query without its offset/commit log, so the stateless job writes that too (no
  state); its ``checkpoint_ms`` is None as the spec has it run without checkpoints.
  ``checkpoint_ms`` per micro-batch = ``durationMs.walCommit + durationMs.commitOffsets`` + the
  state operators' ``commitTimeMs``, from the query progress.
* Latency: Spark exposes no per-record time at the sink (the ``noop`` sink drops rows in the JVM
  and ``current_timestamp()`` is constant per batch), and the rate source's timestamps are
  synthetic. A record is created when its micro-batch is planned and reaches the sink when the
  batch commits, so each micro-batch holding input records contributes its duration
  (``durationMs.triggerExecution``) as one latency sample, in ms. This is the same for both
  variants (a Python-side stamp in the python variant would not see the batch commit and would
  not be comparable with the builtin variant).
* Sink: ``noop`` for timing; with ``--verify`` a ``foreachBatch`` sink collects every batch's
  output rows to the driver (update-mode rows ``(key, count)`` for the keyed jobs, whose
  summary takes each key's largest count; ``(key, window start ms, count)`` for the window).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from benchmarks.common.results import ROOT
from benchmarks.peers import spec

SYSTEM = "spark"
VARIANTS = ("builtin", "python")

#: Event time (ms) of the end-of-input marker record of the window job (year 2109).
FAR_EVENT_MS = 1 << 42
#: Offset (ms, a whole number of windows: 2020-01-01) added to the Python window job's event-time
#: column: Spark's first watermark is 0 and transformWithState drops rows with ts <= watermark
#: as late, which would drop the records of event time 0.
EVENT_EPOCH_MS = 1_577_836_800_000
#: Records per event-time ms: micro-batches are whole multiples of it (see module docstring).
RECORDS_PER_MS = spec.EVENTS_PER_SECOND // 1000

#: Rows per micro-batch, per (job, variant): about one 1 s micro-batch on the 2-core machine.
ROWS_PER_BATCH: dict[tuple[str, str], int] = {
    ("stateless", "builtin"): 1_000_000,
    ("keyed", "builtin"): 300_000,
    ("window", "builtin"): 300_000,
    ("keyed_1m", "builtin"): 150_000,
    ("stateless", "python"): 800_000,
    ("keyed", "python"): 50_000,
    ("window", "python"): 50_000,
    ("keyed_1m", "python"): 15_000,
}
STATEFUL_APIS = ("transformWithState", "transformWithStateInPandas", "applyInPandasWithState")
STATE_STORES = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}


def rows_per_batch(job: str, variant: str, records: int) -> int:
    """Micro-batch size: the tuned value (or ``SPARK_PEER_ROWS_PER_BATCH``), a multiple of 100, at most N."""
    rows = int(os.environ.get("SPARK_PEER_ROWS_PER_BATCH", ROWS_PER_BATCH[(job, variant)]))
    rows = max(RECORDS_PER_MS, rows - rows % RECORDS_PER_MS)
    return min(rows, max(records, 1))


# ------------------------------------------------------------------ pandas / Python logic
# Module-level so that cloudpickle ships them by reference (the workers import this module:
# the repository root is put on PYTHONPATH before Spark starts).
def _split_lines(lines: Any) -> Any:
    """Split input lines (a pandas Series) into their fields, vectorised on Arrow-backed strings."""
    import pandas as pd
    import pyarrow as pa

    return lines.astype(pd.ArrowDtype(pa.string())).str.split(",", n=4, expand=True)


def parse_stateless(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInPandas``: parse -> filter(value < 90) -> ``(key, value * 2, created)``."""
    import pandas as pd

    for pdf in batches:
        fields = _split_lines(pdf["line"])
        value = fields[2].astype("int64")
        keep = value < spec.FILTER_BELOW
        created = fields[4].fillna("0").astype("int64") if 4 in fields.columns else 0
        out = pd.DataFrame({"key": fields[1], "value2": value * 2, "created": created})
        yield out[keep]


def parse_keyed(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInPandas``: parse -> ``(key,)`` (each record counts 1; latency comes from the batch durations)."""
    import pandas as pd

    for pdf in batches:
        yield pd.DataFrame({"key": _split_lines(pdf["line"])[1]})


def parse_window(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInPandas``: parse -> ``(key, event time ms)``."""
    import pandas as pd

    for pdf in batches:
        fields = _split_lines(pdf["line"])
        yield pd.DataFrame({"key": fields[1], "event_ms": fields[3].astype("int64")})


def count_in_pandas_with_state(key: tuple[str], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    """``applyInPandasWithState``: add the group's records to the key's count, emit ``(key, count)``."""
    import pandas as pd

    count = sum(len(pdf) for pdf in pdfs) + (state.get[0] if state.exists else 0)
    state.update((count,))
    yield pd.DataFrame({"key": [key[0]], "count": [count]})


def _stateful_processors() -> dict[str, type]:
    """The ``StatefulProcessor`` classes (built lazily: pyspark is imported only after parsing args)."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    class RunningCount(StatefulProcessor):
        """``transformWithState`` (Row API): a ``ValueState`` count per key; emits ``(key, count)`` per batch."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.count = handle.getValueState("count", "count long")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            count = sum(1 for _ in rows)
            previous = self.count.get()  # None for a new key: one state call instead of exists() + get()
            if previous is not None:
                count += previous[0]
            self.count.update((count,))
            yield Row(key=key[0], count=count)

        def close(self) -> None:
            pass

    class RunningCountPandas(StatefulProcessor):
        """``transformWithStateInPandas``: as :class:`RunningCount` with pandas DataFrames in and out."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.count = handle.getValueState("count", "count long")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            import pandas as pd

            count = sum(len(pdf) for pdf in rows)
            previous = self.count.get()
            if previous is not None:
                count += previous[0]
            self.count.update((count,))
            yield pd.DataFrame({"key": [key[0]], "count": [count]})

        def close(self) -> None:
            pass

    class WindowCount(StatefulProcessor):
        """``transformWithState`` (Row API): tumbling event-time window count per key.

        A ``MapState`` window start -> count per key and one event-time timer per open window at
        its end: when the watermark reaches the end, the timer emits ``(key, start, count)`` and
        clears the window.
        """

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.handle = handle
            self.windows = handle.getMapState("windows", "start long", "count long")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            counts: dict[int, int] = {}
            for row in rows:
                start = spec.window_start(row.event_ms)  # the spec's event time, not the offset ts
                counts[start] = counts.get(start, 0) + 1
            for start, count in counts.items():
                previous = self.windows.getValue((start,))  # None for a new window
                if previous is not None:
                    count += previous[0]
                else:
                    self.handle.registerTimer(EVENT_EPOCH_MS + start + spec.WINDOW_MS)
                self.windows.updateValue((start,), (count,))
            return iter(())

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
            start = expiredTimerInfo.getExpiryTimeInMs() - EVENT_EPOCH_MS - spec.WINDOW_MS
            value = self.windows.getValue((start,))
            if value is not None:
                self.windows.removeKey((start,))
                yield Row(key=key[0], start=start, count=value[0])

        def close(self) -> None:
            pass

    return {"count": RunningCount, "count_pandas": RunningCountPandas, "window": WindowCount}


# ------------------------------------------------------------------ the query
def source(spark: Any, job: spec.Job, records: int, rows: int, parallelism: int) -> Any:
    """The rate-micro-batch source, bounded to N records, as ``spec.make_line`` lines (SQL)."""
    bound = records + 1 if job.windowed else records  # the window job's end-of-input marker is i = N
    event_ms = f"value * 1000 div {spec.EVENTS_PER_SECOND}"
    if job.windowed:
        event_ms = f"CASE WHEN value < {records} THEN {event_ms} ELSE {FAR_EVENT_MS} END"
    line = (
        "concat_ws(',', CAST(value AS STRING),"
        f" concat('k', CAST(value * {spec.STRIDE} % {job.keys} AS STRING)),"
        " CAST(value % 100 AS STRING),"
        f" CAST({event_ms} AS STRING),"
        f" CASE WHEN value % {spec.LATENCY_SAMPLE_EVERY} = 0"
        " THEN CAST(unix_micros(current_timestamp()) * 1000 AS STRING) END) AS line"
    )
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", parallelism)
        .load()
        .where(f"value < {bound}")
        .selectExpr(line)
    )


def builtin_query(lines: Any, job: spec.Job) -> tuple[Any, str]:
    """The job in Spark SQL operators only; returns (DataFrame, output mode)."""
    from pyspark.sql import functions as F

    fields = F.split("line", ",")
    key = fields.getItem(1).alias("key")
    if job.name == "stateless":
        value = fields.getItem(2).cast("int")
        created = F.coalesce(F.try_element_at(fields, F.lit(5)).cast("long"), F.lit(0)).alias("created")
        return (
            lines.select(key, value.alias("value"), created)
            .where(F.col("value") < spec.FILTER_BELOW)
            .select("key", (F.col("value") * 2).alias("value2"), "created")
        ), "append"
    if job.windowed:
        ts = F.timestamp_millis(fields.getItem(3).cast("long")).alias("ts")
        return (
            lines.select(key, ts)
            .withWatermark("ts", "0 seconds")
            .where(F.col("ts") < F.timestamp_millis(F.lit(FAR_EVENT_MS)))
            .groupBy("key", F.window("ts", f"{spec.WINDOW_MS} milliseconds"))
            .count()
            .select("key", F.unix_millis(F.col("window.start")).alias("start"), "count")
        ), "append"
    return lines.select(key).groupBy("key").count(), "update"


def pandas_query(lines: Any, job: spec.Job, api: str) -> tuple[Any, str]:
    """The job with its per-record and stateful logic in Python; returns (DataFrame, output mode)."""
    from pyspark.sql import functions as F

    if job.name == "stateless":
        return lines.mapInPandas(parse_stateless, "key string, value2 long, created long"), "append"
    processors = _stateful_processors()
    if job.windowed:
        if api != "transformWithState":
            raise SystemExit(f"the window job is implemented with transformWithState only, not {api}")
        events = (
            lines.mapInPandas(parse_window, "key string, event_ms long")
            .withColumn("ts", F.timestamp_millis(F.col("event_ms") + EVENT_EPOCH_MS))
            .withWatermark("ts", "0 seconds")
            .where(F.col("ts") < F.timestamp_millis(F.lit(FAR_EVENT_MS + EVENT_EPOCH_MS)))
        )
        return events.groupBy("key").transformWithState(
            statefulProcessor=processors["window"](), outputStructType="key string, start long, count long",
            outputMode="Append", timeMode="EventTime"), "append"
    keys = lines.mapInPandas(parse_keyed, "key string").groupBy("key")
    if api == "transformWithState":
        out = keys.transformWithState(statefulProcessor=processors["count"](),
                                      outputStructType="key string, count long", outputMode="Update", timeMode="None")
    elif api == "transformWithStateInPandas":
        out = keys.transformWithStateInPandas(statefulProcessor=processors["count_pandas"](),
                                              outputStructType="key string, count long", outputMode="Update",
                                              timeMode="None")
    else:
        from pyspark.sql.streaming.state import GroupStateTimeout

        out = keys.applyInPandasWithState(count_in_pandas_with_state, "key string, count long", "count long",
                                          "Update", GroupStateTimeout.NoTimeout)
    return out, "update"


def watermark_ms(progress: Any) -> int:
    """The watermark (ms) a micro-batch ran with, from its progress; -1 if none."""
    text = (progress.eventTime or {}).get("watermark")
    if not text:
        return -1
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


class Progress:
    """Collects the query progress of every micro-batch; signals once the job's output is complete.

    Complete means: the micro-batches holding the N records have committed (all jobs), and for the
    window job also the micro-batch that ran with the end-of-input marker's watermark (which
    emitted every remaining window).
    """

    def __init__(self, records: int, windowed: bool) -> None:
        self.records = records
        self.windowed = windowed
        self.batches: list[Any] = []
        self.input_rows = 0
        self.done = threading.Event()
        self.done_at: float | None = None

    def add(self, progress: Any) -> None:
        if self.done.is_set():
            return
        self.batches.append(progress)
        self.input_rows += progress.numInputRows
        complete = self.input_rows >= self.records
        if self.windowed:
            complete = complete and watermark_ms(progress) >= FAR_EVENT_MS
        if complete:
            self.done_at = time.perf_counter()
            self.done.set()


def make_listener(progress: Progress) -> Any:
    """A ``StreamingQueryListener`` feeding ``progress``."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress.add(event.progress)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Listener()


def create_session(args: Any, store: str, app_name: str | None = None, extra: dict[str, str] | None = None) -> Any:
    """The local SparkSession (its creation is not part of ``job_s``); ``extra``: more settings
    (the Kafka benchmark's ``spark.jars.packages``)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{args.parallelism}]")
        .appName(app_name or f"peer-{args.job}-{args.variant}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", str(args.parallelism))
        .config("spark.default.parallelism", str(args.parallelism))
        .config("spark.sql.streaming.stateStore.providerClass", STATE_STORES[store])
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.warehouse.dir", str(args.work_dir / "warehouse"))
        .config("spark.local.dir", str(args.work_dir / "tmp"))
    )
    for name, value in (extra or {}).items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def versions() -> dict[str, str]:
    """Versions of the system's packages."""
    import pandas as pd
    import pyarrow as pa
    import pyspark

    return {"pyspark": pyspark.__version__, "pandas": pd.__version__, "pyarrow": pa.__version__}


def main() -> None:
    args = spec.runner_arguments("Spark Structured Streaming peer runner", VARIANTS)
    job = spec.JOBS[args.job]
    rows = rows_per_batch(job.name, args.variant, args.records)
    api = os.environ.get("SPARK_PEER_STATEFUL_API", STATEFUL_APIS[0])
    if api not in STATEFUL_APIS:
        raise SystemExit(f"SPARK_PEER_STATEFUL_API must be one of {STATEFUL_APIS}")
    store = os.environ.get("SPARK_PEER_STATE_STORE", "hdfs")
    if args.variant == "python" and api.startswith("transformWithState"):
        store = "rocksdb"  # transformWithState requires the RocksDB state store
    args.work_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_dir = args.work_dir / "checkpoint"
    shutil.rmtree(checkpoint_dir, ignore_errors=True)

    spark = create_session(args, store)
    try:
        lines = source(spark, job, args.records, rows, args.parallelism)
        if args.variant == "builtin":
            out, mode = builtin_query(lines, job)
        else:
            out, mode = pandas_query(lines, job, api)
        progress = Progress(args.records, job.windowed)
        listener = make_listener(progress)
        spark.streams.addListener(listener)
        collected: list[tuple[Any, ...]] = []
        writer = out.writeStream.outputMode(mode).option("checkpointLocation", str(checkpoint_dir))
        if args.verify:
            def collect(batch: Any, batch_id: int) -> None:
                collected.extend(tuple(row) for row in batch.collect())

            writer = writer.foreachBatch(collect)
        else:
            writer = writer.format("noop")

        started = time.perf_counter()
        query = writer.start()
        while not progress.done.wait(0.5):
            if not query.isActive:
                raise RuntimeError(f"the query ended early: {query.exception()}")
        spark.sparkContext.setLogLevel("OFF")  # the in-flight empty batch is aborted by stop(): no error logs
        query.stop()
        job_s = time.perf_counter() - started
        spark.streams.removeListener(listener)
    finally:
        spark.stop()

    batches = progress.batches
    with_input: list[Any] = []
    seen = 0
    for batch in batches:
        if seen < args.records and batch.numInputRows > 0:
            with_input.append(batch)
        seen += batch.numInputRows
    durations = [float(b.durationMs.get("triggerExecution", 0)) for b in with_input]
    latency = durations if job.measures_latency else None
    checkpoint_ms = None
    if job.checkpointed:
        checkpoint_ms = [
            float(b.durationMs.get("walCommit", 0) + b.durationMs.get("commitOffsets", 0)
                  + sum(op.commitTimeMs for op in b.stateOperators))
            for b in batches
        ]
    offset_log = [float(b.durationMs.get("walCommit", 0) + b.durationMs.get("commitOffsets", 0)) for b in batches]
    config: dict[str, Any] = {
        "master": f"local[{args.parallelism}]",
        "shuffle_partitions": args.parallelism,
        "source": "rate-micro-batch (SQL-generated spec.make_line lines, value < N filter)",
        "rows_per_batch": rows,
        "micro_batches": len(batches),
        "micro_batches_with_input": len(with_input),
        "batch_ms_mean": round(sum(durations) / len(durations), 1) if durations else None,
        "batch_ms": [int(b.durationMs.get("triggerExecution", 0)) for b in batches],
        "trigger": "default (next micro-batch as soon as the previous one commits)",
        "checkpoint": "every micro-batch (offset WAL + commit log + state store version)",
        "offset_log_ms_mean": round(sum(offset_log) / len(offset_log), 1) if offset_log else None,
        "state_store": store + (" (changelog checkpointing)" if store == "rocksdb" else ""),
        "output_mode": mode,
        "sink": "foreachBatch collect" if args.verify else "noop",
        "latency": "micro-batch durations (durationMs.triggerExecution), one sample per batch with input",
        "job_s_to_last_commit": round(progress.done_at - started, 3) if progress.done_at else None,
        "driver_memory": "4g",
    }
    if args.variant == "python":
        config["python_logic"] = "mapInPandas (Arrow-backed pandas str.split)"
        if job.name != "stateless":
            config["stateful_api"] = api
    if job.windowed:
        config["watermark"] = "withWatermark(ts, '0 seconds'); end-of-input marker record at event time 2^42 ms"
    summary = spec.summarize(job.name, collected) if args.verify else None
    spec.write_result(args, SYSTEM, job_s=job_s, latency=latency, checkpoint_ms=checkpoint_ms, summary=summary,
                      config=config, versions=versions())


if __name__ == "__main__":
    main()
