"""epochal's batch API (``epochal-columnar``) in the Kafka benchmark (see :mod:`benchmarks.kafka.job`).

Job: ``KafkaSource(batches=True)`` (read_committed, ``bounded=True`` in throughput runs; each read
a record batch of the messages one ``consume()`` returns) -> ``map_batches`` splitting the values
``k<j>,<produced ms>`` with Arrow -> ``key_by("k").agg(count=("k", "count"), produced=("produced",
"last"))`` (running counts in update mode: one output row per key and batch, as Spark's SQL
aggregation emits one per key and micro-batch) -> ``map_batches`` joining ``k,count,produced``
-> ``KafkaSink`` taking the batches, exactly once (transactions per checkpoint). Spark
``local[P]``, aligned exactly-once checkpoints every second into ``--work-dir``, heap keyed state.
Its output is checked as Spark's SQL aggregation's: every key's final count.
"""

from __future__ import annotations

from importlib.metadata import version

import pyarrow as pa
import pyarrow.compute as pc

import epochal
from benchmarks.kafka import job
from benchmarks.kafka.run_epochal import run
from epochal import KafkaSink, KafkaSource

SYSTEM = "epochal-columnar"
QUIET = {"log_level": 0}


def parse(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``k<j>,<produced ms>`` values as the columns k and produced."""
    parts = pc.split_pattern(batch.column("value"), b",")
    return pa.RecordBatch.from_arrays([pc.list_element(parts, 0), pc.list_element(parts, 1)], names=["k", "produced"])


def output(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Key ``k``, value ``k,count,produced``."""
    count = pc.cast(pc.cast(batch.column("count"), pa.string()), pa.binary())
    value = pc.binary_join_element_wise(batch.column("k"), count, batch.column("produced"), b",")
    return pa.RecordBatch.from_arrays([batch.column("k"), value], names=["key", "value"])


def main() -> None:
    args = job.runner_arguments("epochal batch API Kafka benchmark runner", ["exactly_once"])
    args.work_dir.mkdir(parents=True, exist_ok=True)
    env = epochal.Environment(args.parallelism)
    env.enable_checkpointing(args.checkpoint_interval, storage=str(args.work_dir / "checkpoints"))
    records = env.from_source(KafkaSource(args.bootstrap, [args.source], bounded=not args.latency, batches=True,
                                          config=QUIET))
    counts = (records.map_batches(parse).key_by("k")
              .agg(count=("k", "count"), produced=("produced", "last")).map_batches(output))
    counts.sink_to(KafkaSink(args.bootstrap, args.sink, transactional_id_prefix=f"bench-{args.sink}", config=QUIET))
    config = {"parallelism": args.parallelism, "checkpoint_interval_s": args.checkpoint_interval,
              "sink_guarantee": "exactly_once", "state": "agg's accumulators (heap keyed state)"}
    versions = {"epochal": version("epochal"), "pyspark": version("pyspark"), "pyarrow": pa.__version__,
                "confluent-kafka": version("confluent-kafka")}
    run(env, args, SYSTEM, "kafka-bench-columnar", config, versions)

if __name__ == "__main__":
    main()
