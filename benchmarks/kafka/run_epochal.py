"""One epochal run of the Kafka benchmark job, in its own process (``python -m
benchmarks.kafka.run_epochal``); prints one JSON line: ``{"job_s": ...}``.

Job: KafkaSource (read_committed) -> parse ``key,produced_ms`` -> keyed running count ->
KafkaSink writing ``key,count,produced_ms``, ``exactly_once`` or ``at_least_once``.
``--bounded`` stops at the end offsets found at submit (throughput); otherwise the job runs for
``--seconds`` and is cancelled (latency, while a producer writes at a fixed rate)."""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import epochal
from epochal import KafkaSink, KafkaSource


def parse(record):
    key, produced = record.value.split(b",")
    return key, produced


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--guarantee", default="exactly_once")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--bounded", action="store_true")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    quiet = {"log_level": 0}
    env = epochal.Environment(args.parallelism)
    env.enable_checkpointing(args.interval, storage=tempfile.mkdtemp(prefix="kafka-bench-"))
    records = env.from_source(KafkaSource(args.bootstrap, [args.source], bounded=args.bounded, config=quiet))
    counts = records.map(parse).key_by(lambda r: r[0]).process(RunningCount())
    counts.sink_to(KafkaSink(args.bootstrap, args.sink, guarantee=args.guarantee, key=lambda c: c[0],
                             value=lambda c: b"%s,%d,%s" % c, value_serializer="bytes", key_serializer="bytes",
                             transactional_id_prefix=f"bench-{args.sink}", config=quiet))
    if args.bounded:  # the job's own duration: Spark's start-up is outside it
        result = env.execute("kafka-bench", timeout=1800)
        print(json.dumps({"job_s": result.duration_s, "records": result.records_processed}))
        return
    client = env.execute_async("kafka-bench")
    client.wait_until_running()
    print(json.dumps({"running": True}), flush=True)  # the benchmark starts producing now
    time.sleep(args.seconds)
    client.cancel(timeout=60)
    print(json.dumps({"job_s": args.seconds}))


class RunningCount(epochal.KeyedProcessFunction):
    """The running count per key, carrying the record's produce time to the output."""

    def open(self, context):
        self.count = context.get_state(epochal.ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value[0], count, value[1]


if __name__ == "__main__":
    main()
