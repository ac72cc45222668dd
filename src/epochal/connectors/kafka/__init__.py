"""Kafka in and out: :class:`KafkaSource` (partitions as checkpointed splits, per-partition
watermarks) and :class:`KafkaSink` (at-least-once, or exactly-once with transactions)."""

from epochal.connectors.kafka.common import KafkaError, KafkaRecord, UndecodableRecord
from epochal.connectors.kafka.sink import KafkaSink
from epochal.connectors.kafka.source import COMMITTED, EARLIEST, LATEST, KafkaPartitionSplit, KafkaSource

__all__ = ["COMMITTED", "EARLIEST", "LATEST", "KafkaError", "KafkaPartitionSplit", "KafkaRecord", "KafkaSink",
           "KafkaSource", "UndecodableRecord"]
