"""Kafka in and out: :class:`KafkaSource` (partitions as checkpointed splits, per-partition
watermarks) and :class:`KafkaSink` (at-least-once, or exactly-once with transactions).

User code imports from here. The modules: ``common`` (records, (de)serialisers, client settings,
errors), ``partitions`` (a partition as a split), ``source`` (:class:`KafkaSource`, on the
driver), ``reader`` (its worker side), ``sink`` (:class:`KafkaSink`) and ``writers`` (its
at-least-once and transactional writers). Imports go one way: ``source`` -> ``reader`` ->
``partitions``, ``sink`` -> ``writers``, all -> ``common``."""

from epochal.connectors.kafka.common import KafkaError, KafkaRecord, UndecodableRecord
from epochal.connectors.kafka.partitions import KafkaPartitionSplit
from epochal.connectors.kafka.sink import KafkaSink
from epochal.connectors.kafka.source import COMMITTED, EARLIEST, LATEST, KafkaSource

__all__ = ["COMMITTED", "EARLIEST", "LATEST", "KafkaError", "KafkaPartitionSplit", "KafkaRecord", "KafkaSink",
           "KafkaSource", "UndecodableRecord"]
