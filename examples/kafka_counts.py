"""Kafka in and out, exactly once: a running count per key from one topic into another.

``python examples/kafka_counts.py`` starts a local Kafka broker (KRaft, its jars fetched from
Maven Central into ~/.cache/epochal/ on the first run: needs Java 17 and Maven), writes 20,000
``user,amount`` lines to the topic ``orders`` (4 partitions), and runs the job on Spark
``local[N]`` with two workers, a checkpoint every 500 ms and one worker killed midway (a real
SIGKILL). Then a read_committed consumer reads ``order-counts`` and checks it against a
plain-Python oracle: every update ``user:count`` exactly once.

``python examples/kafka_counts.py --bootstrap host:port`` uses your broker instead (the topics
``orders`` and ``order-counts`` must exist; ``orders`` is read from its beginning and not filled).
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time

import epochal
from epochal import KafkaSink, KafkaSource
from epochal.testing import Fault

USERS = 50
ORDERS = 20_000


def parse(record):
    user, amount = record.value.split(",")
    return user, int(amount)


def build(env: epochal.Environment, bootstrap: str) -> None:
    orders = env.from_source(KafkaSource(bootstrap, ["orders"], group_id="order-counts", bounded=True,
                                         value_deserializer="str"), name="orders")
    counts = orders.map(parse).key_by(lambda order: order[0]).count()
    counts.sink_to(KafkaSink(bootstrap, "order-counts", guarantee="exactly_once", key=lambda uc: uc[0],
                             value=lambda uc: f"{uc[0]}:{uc[1]}", transactional_id_prefix="order-counts"))


def fill(bootstrap: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(ORDERS):
        producer.produce("orders", f"user{i % USERS},{i % 97}".encode(), f"user{i % USERS}".encode())
        producer.poll(0)
    producer.flush(30)


def read_committed(bootstrap: str, topic: str) -> list[str]:
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "example-check", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.subscribe([topic])
    out, ended, quiet_until = [], set(), time.monotonic() + 60
    while len(ended) < len(partitions) and time.monotonic() < quiet_until:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            if message.error().code() == KafkaError._PARTITION_EOF:
                ended.add(message.partition())
            continue
        out.append(message.value().decode())
    consumer.close()
    return out


def main() -> None:
    bootstrap = sys.argv[sys.argv.index("--bootstrap") + 1] if "--bootstrap" in sys.argv else None
    broker = None
    if bootstrap is None:
        from epochal.testing.kafka_broker import KafkaBroker

        broker = KafkaBroker().start()
        bootstrap = broker.bootstrap
        broker.create_topic("orders", partitions=4)
        broker.create_topic("order-counts", partitions=2)
        fill(bootstrap)
    try:
        env = epochal.Environment(parallelism=2)
        env.enable_checkpointing(0.5, storage=tempfile.mkdtemp(prefix="kafka-counts-"))
        env.set_restart_strategy(epochal.FixedDelayRestart(attempts=2, delay=0.5))
        build(env, bootstrap)
        faults = [Fault("time", worker=1, after=1.0)] if broker is not None else []
        result = env.execute("kafka-counts", faults=faults)
        print(f"done in {result.duration_s:.1f} s, {result.completed_checkpoints} checkpoints, "
              f"{len(result.restarts)} restart(s)")
        if broker is not None:
            per_user = collections.Counter(f"user{i % USERS}" for i in range(ORDERS))
            oracle = collections.Counter(f"{u}:{c}" for u, n in per_user.items() for c in range(1, n + 1))
            output = collections.Counter(read_committed(bootstrap, "order-counts"))
            assert output == oracle, (len(oracle - output), len(output - oracle))
            print(f"order-counts: {sum(output.values())} updates, each exactly once")
    finally:
        if broker is not None:
            broker.close()


if __name__ == "__main__":
    main()
