"""One run of the SQL-sink benchmark, in a fresh process (see :mod:`benchmarks.sql_sinks`).

    python -m benchmarks.sql_sinks.run --system epochal --sink delta --records 300000 \
        --parallelism 2 --work-dir /tmp/w --dsn "host=..." --result /tmp/r.json

The job is the same on both systems: the integers ``0 .. N-1`` become rows
``{"id": i, "key": i % 10000, "value": i * 2}`` written to the sink, with a checkpoint (epochal)
or micro-batch (Spark) about every second. ``job_s`` runs from the job's start call to its end
(SparkSession creation excluded); ``commit_ms`` lists per checkpoint (epochal: per subtask) or
micro-batch how long making that epoch's output durable and visible took (epochal: pre-commit at
the barrier plus commit after it; Spark: the micro-batch's ``addBatch``, which writes and commits).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

KEYS = 10_000
#: Spark's micro-batch size: about one second per batch on the 2-core machine, like the
#: 1 s checkpoint interval of epochal.
ROWS_PER_BATCH = 100_000


def row(i: int) -> dict[str, int]:
    return {"id": i, "key": i % KEYS, "value": i * 2}


# ---------------------------------------------------------------------------------- epochal


class _Timed:
    """Wraps a transactional writer: appends ``pre_commit`` + ``commit`` durations (ms) per
    checkpoint to ``<log_dir>/<pid>.jsonl``."""

    def __init__(self, writer: Any, log_dir: str) -> None:
        self.writer = writer
        self.log = os.path.join(log_dir, f"{os.getpid()}-{id(self)}.jsonl")
        self.pending: dict[int, float] = {}

    def write_batch(self, records: list[Any]) -> None:
        self.writer.write_batch(records)

    def flush(self) -> None:
        self.writer.flush()

    def pre_commit(self, checkpoint_id: int) -> Any:
        start = time.perf_counter()
        committable = self.writer.pre_commit(checkpoint_id)
        self.pending[checkpoint_id] = (time.perf_counter() - start) * 1000
        return committable

    def commit(self, committables: list[Any]) -> None:
        start = time.perf_counter()
        self.writer.commit(committables)
        took = (time.perf_counter() - start) * 1000
        with open(self.log, "a") as out:
            for checkpoint in sorted(self.pending):
                out.write(json.dumps({"checkpoint": checkpoint, "ms": self.pending[checkpoint] + took}) + "\n")
        self.pending.clear()

    def close(self) -> None:
        self.writer.close()


class _TimedPlain:
    """Wraps a plain writer (upsert): appends each barrier's ``flush`` duration (ms)."""

    def __init__(self, writer: Any, log_dir: str) -> None:
        self.writer = writer
        self.log = os.path.join(log_dir, f"{os.getpid()}-{id(self)}.jsonl")

    def write_batch(self, records: list[Any]) -> None:
        self.writer.write_batch(records)

    def flush(self) -> None:
        start = time.perf_counter()
        self.writer.flush()
        with open(self.log, "a") as out:
            out.write(json.dumps({"ms": (time.perf_counter() - start) * 1000}) + "\n")

    def close(self) -> None:
        self.writer.close()


def timed_sink(sink: Any, log_dir: str) -> Any:
    """``sink`` whose writers time their commits."""
    from epochal.connectors.base import Sink

    class TimedSink(Sink):
        guarantee = sink.guarantee

        def create_writer(self, context: Any) -> Any:
            writer = sink.create_writer(context)
            return _Timed(writer, log_dir) if hasattr(writer, "pre_commit") else _TimedPlain(writer, log_dir)

    return TimedSink()


def run_epochal(args: argparse.Namespace) -> dict[str, Any]:
    import epochal
    from epochal.connectors.delta import DeltaSink
    from epochal.connectors.files import ParquetFileSink
    from epochal.connectors.postgres import PostgresSink

    target = os.path.join(args.work_dir, "out")
    log_dir = os.path.join(args.work_dir, "commits")
    os.makedirs(log_dir, exist_ok=True)
    sink: Any
    if args.sink == "parquet":
        sink = ParquetFileSink(target)
    elif args.sink == "delta":
        sink = DeltaSink(target)
    elif args.sink == "postgres":
        sink = PostgresSink(args.dsn, args.table, columns=["id", "key", "value"], batch_size=10_000)
    else:
        sink = PostgresSink(args.dsn, args.table, mode="upsert", key=["key"], columns=["id", "key", "value"],
                            batch_size=10_000)
    env = epochal.Environment(args.parallelism, master=f"local[{args.parallelism + 2}]")
    env.enable_checkpointing(1.0, storage=os.path.join(args.work_dir, "checkpoints"))
    stream = env.from_sequence(0, args.records)
    if args.sink == "upsert":
        stream.key_by(lambda i: i % KEYS).map(row).sink_to(timed_sink(sink, log_dir), name="sink")
    elif args.sink in ("postgres",):
        stream.map(lambda i: (i, i % KEYS, i * 2)).sink_to(timed_sink(sink, log_dir), name="sink")
    else:
        stream.map(row).sink_to(timed_sink(sink, log_dir), name="sink")
    _ = env.spark  # the session starts outside the timed part
    start = time.perf_counter()
    env.execute(f"sql-bench-{args.sink}", timeout=3600)
    job_s = time.perf_counter() - start
    commits = []
    for name in os.listdir(log_dir):
        with open(os.path.join(log_dir, name)) as source:
            commits.extend(json.loads(line)["ms"] for line in source)
    return {"job_s": job_s, "commit_ms": commits}


# ---------------------------------------------------------------------------------- Spark


def run_spark(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    builder = (SparkSession.builder.master(f"local[{args.parallelism}]").appName("sql-bench")
               .config("spark.sql.shuffle.partitions", str(args.parallelism)).config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "4g"))
    if args.sink == "jdbc":
        builder = builder.config("spark.jars.packages", "org.postgresql:postgresql:42.7.14")
    spark = builder.getOrCreate()
    target = os.path.join(args.work_dir, "out")
    rows_per_batch = min(ROWS_PER_BATCH, args.records)
    batches = -(-args.records // rows_per_batch)
    source = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
              .option("numPartitions", args.parallelism).load()
              .where(F.col("value") < args.records))
    if args.sink == "delta-python":  # the job's per-record map in Python, as epochal runs it
        make_row = F.udf(row, "struct<id:bigint,key:bigint,value:bigint>")
        stream = source.select(make_row("value").alias("r")).select("r.*")
    else:  # the same map as SQL expressions, run in the JVM
        stream = source.select(F.col("value").alias("id"), (F.col("value") % KEYS).alias("key"),
                               (F.col("value") * 2).alias("value"))
    writer = stream.writeStream.option("checkpointLocation", os.path.join(args.work_dir, "checkpoint"))
    if args.sink == "parquet":
        writer = writer.format("parquet").option("path", target)
    elif args.sink in ("delta-foreachbatch", "delta-python"):
        writer = writer.foreachBatch(_delta_batch_writer(target))
    else:
        jdbc_url, props = _jdbc(args.dsn)
        writer = writer.foreachBatch(lambda df, batch_id: df.write.jdbc(jdbc_url, args.table, "append", props))
    start = time.perf_counter()
    query = writer.start()
    while True:
        progress = query.lastProgress
        if progress is not None and progress["batchId"] >= batches - 1 and progress["numInputRows"] >= 0:
            if query.recentProgress and max(p["batchId"] for p in query.recentProgress) >= batches - 1:
                break
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        time.sleep(0.05)
    query.stop()
    job_s = time.perf_counter() - start
    commits = [p["durationMs"].get("addBatch", 0) for p in query.recentProgress if p["numInputRows"] > 0]
    spark.stop()
    return {"job_s": job_s, "commit_ms": commits}


def _delta_batch_writer(target: str) -> Any:
    """The Python ``foreachBatch`` writer: each micro-batch appended with ``deltalake`` under the
    transaction ``(txnAppId, txnVersion) = (query id, batch id)``, skipped when the table has it
    (Delta's documented idempotent foreachBatch write, in delta-rs's words)."""

    def write(df: Any, batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

        app_id = "spark-sql-bench"
        if DeltaTable.is_deltatable(target):
            done = DeltaTable(target).transaction_version(app_id)
            if done is not None and done >= batch_id:
                return
        data = df.toArrow()
        if data.num_rows == 0:
            return
        write_deltalake(target, data, mode="append",
                        commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]))
    return write


def _jdbc(dsn: str) -> tuple[str, dict[str, str]]:
    parts = dict(item.split("=", 1) for item in dsn.split())
    url = f"jdbc:postgresql://{parts['host']}:{parts['port']}/{parts['dbname']}"
    return url, {"user": parts["user"], "driver": "org.postgresql.Driver", "reWriteBatchedInserts": "true"}


def rows_written(sink: str, target: str) -> int | None:
    """Rows in the Delta table or Parquet directory the run wrote (None for PostgreSQL)."""
    if sink.startswith("delta"):
        from deltalake import DeltaTable

        return DeltaTable(target).to_pyarrow_dataset().count_rows()
    if sink == "parquet":
        import pyarrow.dataset as ds

        return ds.dataset(target, format="parquet", exclude_invalid_files=True,
                          ignore_prefixes=["_", "."]).count_rows()
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=["epochal", "spark"], required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--dsn", default="")
    parser.add_argument("--table", default="bench")
    parser.add_argument("--result", required=True)
    args = parser.parse_args()
    result = run_epochal(args) if args.system == "epochal" else run_spark(args)
    result["rows_out"] = rows_written(args.sink, os.path.join(args.work_dir, "out"))
    with open(args.result, "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
