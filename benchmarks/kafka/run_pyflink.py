"""PyFlink runner of the Kafka benchmark (see :mod:`benchmarks.kafka.job`).

Run with the PyFlink virtualenv (``.venv-peers/pyflink``, as ``benchmarks/peers``)::

    .venv-peers/pyflink/bin/python -m benchmarks.kafka.run_pyflink --bootstrap 127.0.0.1:9092 \
        --source in --sink out --variant thread --work-dir /tmp/w --result /tmp/r.json

* Connector: Flink's ``flink-sql-connector-kafka`` (the connector with the Kafka client in one
  jar) from Maven Central, version ``CONNECTOR_VERSION``: the newest release for Flink 2.x
  (there is none built for 2.3 yet). Resolved with ``mvn dependency:copy`` into
  ``~/.cache/epochal/flink-kafka/`` on first use and added with ``env.add_jars``.
* Job (DataStream API, MiniCluster in the JVM PyFlink starts; ``job_s`` is ``env.execute()``):
  ``KafkaSource`` (``SimpleStringSchema`` values, earliest offsets, ``isolation.level =
  read_committed``; ``set_bounded(latest)`` in throughput runs) -> Python ``map(parse)`` ->
  ``key_by(key)`` -> Python ``KeyedProcessFunction`` with a ``ValueState`` count (one update per
  record) -> ``KafkaSink`` with ``DeliveryGuarantee.EXACTLY_ONCE`` (Kafka transactions committed
  when a checkpoint completes; values ``key,count,produced``, no key: Flink's serialisation
  schema sees the whole record).
* Configuration as ``benchmarks/peers/run_pyflink.py`` (its docstring gives the reasons):
  variants ``thread`` (Python embedded in the JVM with PEMJA) and ``process`` (Python workers
  beside the JVM, Beam Fn API, bundles of 100k records / 1 s); exactly-once aligned checkpoints
  every second, hashmap state backend, filesystem checkpoint storage, Python state cache raised
  to the key space, Python metrics off, object reuse, restart strategy none.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.common.serialization import SimpleStringSchema
from pyflink.datastream import CheckpointingMode, KeyedProcessFunction, StreamExecutionEnvironment
from pyflink.datastream.connectors import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)
from pyflink.datastream.state import ValueStateDescriptor

from benchmarks.kafka import job

SYSTEM = "pyflink"
VARIANTS = ("thread", "process")
CONNECTOR = "org.apache.flink:flink-sql-connector-kafka"
CONNECTOR_VERSION = "5.0.0-2.2"
BUNDLE_SIZE = 100_000
BUNDLE_TIME_MS = 1_000


def connector_jar() -> Path:
    """The Kafka connector jar, fetched from Maven Central on first use."""
    directory = Path.home() / ".cache" / "epochal" / "flink-kafka"
    jar = directory / f"flink-sql-connector-kafka-{CONNECTOR_VERSION}.jar"
    if jar.exists():
        return jar
    if shutil.which("mvn") is None:
        raise RuntimeError("fetching Flink's Kafka connector needs Maven (mvn) on the PATH")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={CONNECTOR}:{CONNECTOR_VERSION}",
                    f"-DoutputDirectory={directory}"], check=True, timeout=900)
    return jar


def parse(value: str) -> tuple[str, str]:
    key, produced = value.split(",")
    return key, produced


class RunningCount(KeyedProcessFunction):
    """A ``ValueState`` count per key; one ``key,count,produced`` string per record."""

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield f"{value[0]},{count},{value[1]}"


def configuration(args: Any) -> dict[str, str]:
    return {
        "python.execution-mode": args.variant,
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "python.pythonpath": os.pathsep.join([str(Path.cwd()), *site.getsitepackages()]),
        "python.fn-execution.bundle.size": str(BUNDLE_SIZE),
        "python.fn-execution.bundle.time": str(BUNDLE_TIME_MS),
        "python.metric.enabled": "false",
        "python.state.cache-size": str(job.KEYS),
        "restart-strategy.type": "none",
        "parallelism.default": str(args.parallelism),
        "state.backend.type": "hashmap",
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": (args.work_dir / "checkpoints").as_uri(),
    }


def main() -> None:
    args = job.runner_arguments("PyFlink Kafka benchmark runner", VARIANTS)
    args.work_dir = args.work_dir.resolve()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    os.environ["FLINK_LOG_DIR"] = str(args.work_dir / "log")
    stop = job.stdin_closed() if args.latency else None
    jar = connector_jar()
    conf = configuration(args)
    flink_conf = Configuration()
    for key, value in conf.items():
        flink_conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(flink_conf)
    env.add_jars(jar.as_uri())
    env.set_parallelism(args.parallelism)
    env.get_config().enable_object_reuse()
    env.enable_checkpointing(round(args.checkpoint_interval * 1000), CheckpointingMode.EXACTLY_ONCE)

    builder = (KafkaSource.builder().set_bootstrap_servers(args.bootstrap).set_topics(args.source)
               .set_group_id(f"bench-{args.sink}")
               .set_starting_offsets(KafkaOffsetsInitializer.earliest())
               .set_value_only_deserializer(SimpleStringSchema())
               .set_property("isolation.level", "read_committed"))
    if not args.latency:
        builder = builder.set_bounded(KafkaOffsetsInitializer.latest())
    sink = (KafkaSink.builder().set_bootstrap_servers(args.bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(args.sink)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_transactional_id_prefix(f"bench-{args.sink}")
            .set_property("transaction.timeout.ms", "60000")
            .build())
    (env.from_source(builder.build(), WatermarkStrategy.no_watermarks(), "kafka")
     .map(parse, output_type=Types.TUPLE([Types.STRING(), Types.STRING()])).name("parse")
     .key_by(lambda r: r[0], key_type=Types.STRING())
     .process(RunningCount(), output_type=Types.STRING()).name("running_count")
     .sink_to(sink).name("kafka"))

    config: dict[str, Any] = {"api": "DataStream", "checkpointing": "EXACTLY_ONCE, 1 s",
                              "sink": "KafkaSink EXACTLY_ONCE", "connector": f"{CONNECTOR}:{CONNECTOR_VERSION}",
                              **{k: v for k, v in conf.items() if not k.startswith(("python.exec", "python.client",
                                                                                    "python.pythonpath"))}}
    versions = {"apache-flink": metadata.version("apache-flink"), "connector": CONNECTOR_VERSION}
    if args.latency:
        assert stop is not None
        client = env.execute_async("kafka-bench")
        stop.wait()
        client.cancel().result()
        job.write_result(args, SYSTEM, config=config, versions=versions)
        return
    started = time.perf_counter()
    env.execute("kafka-bench")
    job.write_result(args, SYSTEM, job_s=time.perf_counter() - started, config=config, versions=versions)


if __name__ == "__main__":
    main()
