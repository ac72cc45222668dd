"""Producing to and reading from the test broker: what the Kafka tests share."""

from __future__ import annotations

import time
import uuid
from typing import Any

QUIET = {"log_level": 0}


def new_topic(broker: Any, partitions: int = 1, name: str = "t") -> str:
    topic = f"{name}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions)
    return topic


def produce(broker: Any, topic: str, values: list[Any], key: Any = None, partition: int | None = None,
            timestamps: list[int] | None = None) -> None:
    """Write ``values`` (str or bytes), keyed by ``key(value)`` when given, and wait for them, in
    order per partition: idempotent, because a plain producer retries a batch the broker refused
    (a topic just created, its leader not yet known) behind the batches sent after it, and the
    event-time tests then see records out of order (one topic in 20 here, 500-1,500 records)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "enable.idempotence": True,
                         **QUIET})
    for index, value in enumerate(values):
        kwargs: dict[str, Any] = {}
        if key is not None:
            kwargs["key"] = str(key(value)).encode()
        if partition is not None:
            kwargs["partition"] = partition
        if timestamps is not None:
            kwargs["timestamp"] = timestamps[index]
        data = value if isinstance(value, bytes) else str(value).encode()
        while True:
            try:
                producer.produce(topic, data, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0


def end_offsets(broker: Any, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    # read_uncommitted: the high watermark, not the last stable offset (an open transaction's end)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe",
                         "isolation.level": "read_uncommitted", **QUIET})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        consumer.close()


def read_committed(broker: Any, topic: str, timeout: float = 60.0, with_keys: bool = False) -> list[Any]:
    """Every record a read_committed consumer sees in ``topic``, as str values (or (key, value)):
    reads until every partition's position reached its end (open transactions must end first)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    ends = end_offsets(broker, topic)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    done = {p for p, end in ends.items() if end == 0}
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(done) < len(ends):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(set(ends) - done)} did not reach their end "
                                   f"(an open transaction?)")
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                eof = message.error().code() == KafkaError._PARTITION_EOF
                if eof and message.offset() >= ends[message.partition()]:
                    done.add(message.partition())
                continue
            value = message.value().decode()
            out.append((message.key().decode() if message.key() else None, value) if with_keys else value)
    finally:
        consumer.close()
    return out


def open_transactions_block(broker: Any, topic: str, wait: float = 5.0) -> bool:
    """True when a read_committed consumer cannot reach the end of ``topic`` within ``wait``
    seconds: a transaction is still open on it."""
    try:
        read_committed(broker, topic, timeout=wait)
        return False
    except TimeoutError:
        return True
