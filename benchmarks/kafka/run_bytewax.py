"""Bytewax runner of the Kafka benchmark (see :mod:`benchmarks.kafka.job`).

Run with the Bytewax virtualenv (``.venv-peers/bytewax``, with ``bytewax[kafka]``)::

    .venv-peers/bytewax/bin/python -m benchmarks.kafka.run_bytewax --bootstrap 127.0.0.1:9092 \
        --source in --sink out --work-dir /tmp/w --result /tmp/r.json

Configuration (as ``benchmarks/peers/run_bytewax.py``, whose docstring gives the reasons):

* P processes with one worker each, forming one Timely cluster (threads would share the GIL),
  started and released by ``benchmarks.peers.run_bytewax.run_processes``. ``job_s`` is the
  wall time from releasing the first process until all exited.
* Source: Bytewax's own ``bytewax.connectors.kafka.KafkaSource`` (each Kafka partition a source
  partition, its offset the recovery snapshot), ``starting_offset = OFFSET_BEGINNING``,
  ``batch_size`` 1,000 (its default), ``isolation.level = read_committed``. Throughput runs use
  ``tail=False`` (each partition ends at its end offset: the bounded read); latency runs
  ``tail=True``.
* ``map(parse)`` -> ``(key, produced)`` (Bytewax keys are ``str``) -> ``stateful_map`` running
  count (one update per record) -> ``KafkaSinkMessage(key, b"key,count,produced")`` ->
  Bytewax's ``KafkaSink`` (a plain producer: at-least-once, no transactions; its
  ``write_batch`` flushes the producer after every batch, as shipped).
* Recovery on: ``P`` recovery partitions under ``--work-dir``, a 1 s epoch (snapshot) interval,
  backup interval 0: exactly-once state and a resumable source, at-least-once output.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from datetime import timedelta
from importlib import metadata
from typing import Any

from bytewax import operators as op
from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource
from bytewax.dataflow import Dataflow
from bytewax.recovery import RecoveryConfig, init_db_dir
from bytewax.run import cli_main
from confluent_kafka import OFFSET_BEGINNING

from benchmarks.kafka import job
from benchmarks.peers import run_bytewax as peers

SYSTEM = "bytewax"
VARIANTS = ("at_least_once",)
BATCH_SIZE = 1_000
QUIET = {"log_level": "0"}


def parse(message: Any) -> tuple[str, bytes]:
    key, produced = message.value.split(b",")
    return key.decode(), produced


def running_count(count: int | None, produced: bytes) -> tuple[int, tuple[int, bytes]]:
    count = (count or 0) + 1
    return count, (count, produced)


def to_message(item: tuple[str, tuple[int, bytes]]) -> KafkaSinkMessage:
    key, (count, produced) = item
    raw = key.encode()
    return KafkaSinkMessage(raw, b"%s,%d,%s" % (raw, count, produced))


def build_flow(args: Any) -> Dataflow:
    flow = Dataflow("kafka_bench")
    brokers = [args.bootstrap]
    source = KafkaSource(brokers, [args.source], tail=args.latency, starting_offset=OFFSET_BEGINNING,
                         add_config={"isolation.level": "read_committed", **QUIET}, batch_size=BATCH_SIZE)
    records = op.input("source", flow, source)
    counts = op.stateful_map("running_count", op.map("parse", records, parse), running_count)
    op.output("sink", op.map("serialize", counts, to_message), KafkaSink(brokers, args.sink, add_config=QUIET))
    return flow


def process_main(args: Any, process_id: int, addresses: list[str]) -> None:
    """One dataflow process: build the flow, report ready, wait for ``go`` on stdin, run."""
    peers.die_with_parent()
    flow = build_flow(args)
    options = {"epoch_interval": timedelta(seconds=args.checkpoint_interval),
               "recovery_config": RecoveryConfig(str(args.work_dir / "recovery"), timedelta(0))}
    print("ready", flush=True)
    os.dup2(2, 1)
    import sys

    sys.stdin.readline()
    if len(addresses) > 1:
        cli_main(flow, workers_per_process=1, process_id=process_id, addresses=addresses, **options)
    else:
        cli_main(flow, workers_per_process=1, **options)


def main() -> None:
    args = job.runner_arguments("Bytewax Kafka benchmark runner", VARIANTS)
    args.work_dir = args.work_dir.resolve()
    if peers.PROCESS_ENV in os.environ:
        process_main(args, int(os.environ[peers.PROCESS_ENV]), os.environ[peers.ADDRESSES_ENV].split(";"))
        return
    signal.signal(signal.SIGTERM, peers.exit_on_sigterm)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    recovery = args.work_dir / "recovery"
    shutil.rmtree(recovery, ignore_errors=True)
    recovery.mkdir(parents=True)
    init_db_dir(recovery, args.parallelism)
    stop = job.stdin_closed() if args.latency else None
    started = time.perf_counter()
    elapsed = peers.run_processes(args, "benchmarks.kafka.run_bytewax", stop)
    config = {"processes": args.parallelism, "workers_per_process": 1, "source_batch_size": BATCH_SIZE,
              "recovery": True, "epoch_interval_s": args.checkpoint_interval, "backup_interval_s": 0,
              "sink": "bytewax.connectors.kafka.KafkaSink (at-least-once)",
              "runner_s": round(time.perf_counter() - started, 3)}
    job.write_result(args, SYSTEM, job_s=None if args.latency else elapsed, config=config,
                     versions={"bytewax": metadata.version("bytewax"),
                               "confluent-kafka": metadata.version("confluent-kafka")})


if __name__ == "__main__":
    main()
