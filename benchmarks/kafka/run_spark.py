"""Spark Structured Streaming runner of the Kafka benchmark (see :mod:`benchmarks.kafka.job`).

Run with the Spark virtualenv (``.venv-peers/spark``, as ``benchmarks/peers``)::

    .venv-peers/spark/bin/python -m benchmarks.kafka.run_spark --bootstrap 127.0.0.1:9092 \
        --source in --sink out --variant python --work-dir /tmp/w --result /tmp/r.json

Configuration (as ``benchmarks/peers/run_spark.py``, whose docstring gives the reasons):

* ``local[P]``, ``spark.sql.shuffle.partitions = P``, UI off, 4 GiB driver heap. The Kafka
  source and sink are Spark's own ``spark-sql-kafka-0-10_2.13``, resolved from Maven Central
  through ``spark.jars.packages`` when the session starts (outside ``job_s``; Ivy caches it
  after the first run). Maven Central serves no ``spark-sql-kafka-0-10_2.13:4.3.0`` (the
  version of pyspark here), so the runner takes ``CONNECTOR_VERSION`` (4.2.0, with
  kafka-clients 3.9.2), the newest served, on Spark 4.3.0 (``KAFKA_SPARK_CONNECTOR``
  overrides it).
* Source: ``format("kafka")``, ``subscribe`` the input topic, ``startingOffsets = earliest``,
  ``kafka.isolation.level = read_committed`` (as the other systems), ``maxOffsetsPerTrigger``
  sized so that a micro-batch takes about the 1 s checkpoint interval on this 2-core machine
  (Spark checkpoints every micro-batch: offset WAL, commit log, state store version), per
  variant in ``MAX_OFFSETS`` (``KAFKA_SPARK_MAX_OFFSETS`` overrides it).
* Throughput runs: ``Trigger.AvailableNow``: the query reads what the topic holds when it starts,
  in micro-batches of at most ``maxOffsetsPerTrigger``, and stops. ``job_s`` runs from
  ``writeStream.start()`` until ``awaitTermination()`` returns. Latency runs: the default
  trigger (the next micro-batch as soon as the previous one committed), stopped by the driver.
* Variants:
  ``builtin``: Spark SQL only: ``split(value, ',')`` -> ``groupBy(key).agg(count, max(produced))``
  in update mode. Spark's aggregation emits one row per key and micro-batch (the key's count
  after the batch), not one per record: SQL has no per-record running aggregate in streaming.
  So its output topic gets about 1,000 rows per micro-batch instead of one per input record,
  and only the final counts can be checked.
  ``python``: the per-record logic in Python, as a Python user writes it: parsing in
  ``mapInPandas`` (Arrow-backed pandas ``str.split``), the running count in Spark 4's
  ``transformWithState`` (Row API; a ``ValueState`` count per key, RocksDB state store, which
  it requires) emitting one update per input record, like the other systems.
* Sink: ``format("kafka")`` with ``key`` and ``value`` (``key,count,max produced``), the Kafka
  producer's defaults. Spark's Kafka sink is at-least-once (no transactions): a micro-batch
  that is retried after a failure writes its rows again.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from benchmarks.kafka import job
from benchmarks.peers import run_spark as peers_spark

SYSTEM = "spark"
VARIANTS = ("builtin", "python")
CONNECTOR_VERSION = "4.2.0"
#: Offsets per micro-batch, per variant: about one 1 s micro-batch on the 2-core machine.
MAX_OFFSETS = {"builtin": 1_000_000, "python": 40_000}


def parse_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInPandas``: Kafka ``value`` bytes -> ``(key, produced)``."""
    import pandas as pd
    import pyarrow as pa

    for pdf in batches:
        fields = pdf["value"].astype(pd.ArrowDtype(pa.binary())).astype(pd.ArrowDtype(pa.string())) \
            .str.split(",", n=1, expand=True)
        yield pd.DataFrame({"key": fields[0], "produced": fields[1].astype("int64")})


def running_count_processor() -> Any:
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    class RunningCount(StatefulProcessor):
        """``transformWithState``: a ``ValueState`` count per key, one update per input record."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.count = handle.getValueState("count", "count long")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            previous = self.count.get()
            count = 0 if previous is None else previous[0]
            name = key[0]
            for row in rows:
                count += 1
                yield Row(key=name, count=count, produced=row.produced)
            self.count.update((count,))

        def close(self) -> None:
            pass

    return RunningCount()


def query(spark: Any, args: Any, max_offsets: int) -> Any:
    from pyspark.sql import functions as F

    records = (spark.readStream.format("kafka")
               .option("kafka.bootstrap.servers", args.bootstrap)
               .option("subscribe", args.source)
               .option("startingOffsets", "earliest")
               .option("kafka.isolation.level", "read_committed")
               .option("maxOffsetsPerTrigger", max_offsets)
               .load())
    if args.variant == "builtin":
        fields = F.split(F.col("value").cast("string"), ",")
        counts = (records.select(fields.getItem(0).alias("key"), fields.getItem(1).cast("long").alias("produced"))
                  .groupBy("key").agg(F.count("*").alias("count"), F.max("produced").alias("produced")))
    else:
        counts = (records.select("value").mapInPandas(parse_batches, "key string, produced long")
                  .groupBy("key").transformWithState(
                      statefulProcessor=running_count_processor(),
                      outputStructType="key string, count long, produced long",
                      outputMode="Update", timeMode="None"))
    return counts.select(F.col("key"), F.concat_ws(",", "key", F.col("count").cast("string"),
                                                    F.col("produced").cast("string")).alias("value"))


def create_session(args: Any, store: str) -> Any:
    """The peers' local SparkSession, with Spark's Kafka connector from Maven Central."""
    package = "org.apache.spark:spark-sql-kafka-0-10_2.13:" + os.environ.get("KAFKA_SPARK_CONNECTOR", CONNECTOR_VERSION)
    return peers_spark.create_session(args, store, app_name=f"kafka-bench-{args.variant}",
                                      extra={"spark.jars.packages": package})


class Batches:
    """The progress of every micro-batch (a ``StreamingQueryListener``)."""

    def __init__(self) -> None:
        self.progress: list[Any] = []
        self.first = threading.Event()

    def listener(self) -> Any:
        from pyspark.sql.streaming import StreamingQueryListener

        batches = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                batches.progress.append(event.progress)
                batches.first.set()

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        return Listener()


def main() -> None:
    args = job.runner_arguments("Spark Structured Streaming Kafka benchmark runner", VARIANTS)
    args.work_dir = args.work_dir.resolve()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    store = "rocksdb" if args.variant == "python" else "hdfs"  # transformWithState requires RocksDB
    max_offsets = int(os.environ.get("KAFKA_SPARK_MAX_OFFSETS", MAX_OFFSETS[args.variant]))
    stop = job.stdin_closed() if args.latency else None
    spark = create_session(args, store)
    batches = Batches()
    try:
        out = query(spark, args, max_offsets)
        spark.streams.addListener(batches.listener())
        writer = (out.writeStream.format("kafka").outputMode("update")
                  .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.sink)
                  .option("checkpointLocation", str(args.work_dir / "checkpoint")))
        if not args.latency:
            writer = writer.trigger(availableNow=True)
        started = time.perf_counter()
        running = writer.start()
        if args.latency:
            assert stop is not None
            while not stop.wait(0.5):
                if not running.isActive:
                    raise RuntimeError(f"the query ended early: {running.exception()}")
            spark.sparkContext.setLogLevel("OFF")
            running.stop()
            job_s = None
        else:
            running.awaitTermination()
            job_s = time.perf_counter() - started
            if running.exception() is not None:
                raise RuntimeError(f"the query failed: {running.exception()}")
    finally:
        spark.stop()
    import pandas as pd
    import pyarrow as pa
    import pyspark

    durations = [int(b.durationMs.get("triggerExecution", 0)) for b in batches.progress if b.numInputRows]
    config: dict[str, Any] = {
        "master": f"local[{args.parallelism}]", "shuffle_partitions": args.parallelism,
        "max_offsets_per_trigger": max_offsets,
        "trigger": "default (latency run)" if args.latency else "AvailableNow",
        "state_store": store + (" (changelog checkpointing)" if store == "rocksdb" else ""),
        "micro_batches_with_input": len(durations), "batch_ms": durations[:200],
        "output_rows": sum(sum(op.numRowsUpdated for op in b.stateOperators) for b in batches.progress),
        "sink": "kafka (at-least-once)",
    }
    if args.variant == "python":
        config["python"] = "mapInPandas parse, transformWithState running count (one update per record)"
    job.write_result(args, SYSTEM, job_s=job_s, config=config,
                     versions={"pyspark": pyspark.__version__, "pandas": pd.__version__, "pyarrow": pa.__version__,
                               "spark-sql-kafka": os.environ.get("KAFKA_SPARK_CONNECTOR", CONNECTOR_VERSION)})


if __name__ == "__main__":
    main()
