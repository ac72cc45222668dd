"""epochal's runner of the Kafka benchmark (see :mod:`benchmarks.kafka.job` for the job and the
protocol); variants ``exactly_once`` and ``at_least_once`` (the KafkaSink's guarantee).

Job: ``KafkaSource`` (read_committed, ``bounded=True`` in throughput runs) -> ``map(parse)`` ->
``key_by(key)`` -> ``process(RunningCount)`` (a ``KeyedProcessFunction`` with a ``ValueState``
count, one update per record) -> ``KafkaSink`` writing ``key,count,produced_ms``. Spark
``local[P]``, the defaults a user gets (batch size 1,024), aligned exactly-once checkpoints every
second into ``--work-dir``. As in ``benchmarks.peers.run_epochal``, Spark is started before the
timed region and ``job_s`` is the wall time of ``env.execute`` (planning, shipping the job,
worker registration, the job, its final checkpoint and the commit of its last transactions).
"""

from __future__ import annotations

import time
from importlib.metadata import version
from typing import Any

import epochal
from benchmarks.kafka import job
from epochal import KafkaSink, KafkaSource

SYSTEM = "epochal"
VARIANTS = ("exactly_once", "at_least_once")
QUIET = {"log_level": 0}


def parse(record):
    key, produced = record.value.split(b",")
    return key, produced


def value(update):
    return b"%s,%d,%s" % update


class RunningCount(epochal.KeyedProcessFunction):
    """The running count per key, carrying the record's produce time to the output."""

    def open(self, context):
        self.count = context.get_state(epochal.ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value[0], count, value[1]


def main() -> None:
    args = job.runner_arguments("epochal Kafka benchmark runner", VARIANTS)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    env = epochal.Environment(args.parallelism)
    env.enable_checkpointing(args.checkpoint_interval, storage=str(args.work_dir / "checkpoints"))
    records = env.from_source(KafkaSource(args.bootstrap, [args.source], bounded=not args.latency, config=QUIET))
    counts = records.map(parse).key_by(lambda r: r[0]).process(RunningCount())
    counts.sink_to(KafkaSink(args.bootstrap, args.sink, guarantee=args.variant, key=lambda c: c[0], value=value,
                             value_serializer="bytes", key_serializer="bytes",
                             transactional_id_prefix=f"bench-{args.sink}", config=QUIET))
    config = {"parallelism": args.parallelism, "checkpoint_interval_s": args.checkpoint_interval,
              "sink_guarantee": args.variant, "state": "ValueState in a KeyedProcessFunction (heap)"}
    versions = {"epochal": version("epochal"), "pyspark": version("pyspark"),
                "confluent-kafka": version("confluent-kafka")}
    run(env, args, SYSTEM, "kafka-bench", config, versions)


def run(env: epochal.Environment, args: Any, system: str, name: str, config: dict[str, Any],
        versions: dict[str, str]) -> None:
    """Run the built job as the runner protocol says (:mod:`benchmarks.kafka.job`): unbounded
    until standard input closes with ``--latency``, else timed with Spark already started; then
    write the result with ``config`` (and the run's checkpoints) and ``versions``."""
    if args.latency:
        stop = job.stdin_closed()
        client = env.execute_async(name)
        client.wait_until_running()
        stop.wait()
        client.cancel(timeout=60)
        job.write_result(args, system, config=config, versions=versions)
        return
    env.spark  # start Spark before the timed region: its JVM start is process start-up  # noqa: B018
    started = time.perf_counter()
    result = env.execute(name, timeout=3600)
    job_s = time.perf_counter() - started
    config["records_processed"] = result.records_processed
    config["checkpoint_ms"] = [round(c["duration_s"] * 1000, 1) for c in result.checkpoints
                               if c["status"] == "completed"]
    job.write_result(args, system, job_s=job_s, config=config, versions=versions)

if __name__ == "__main__":
    main()
