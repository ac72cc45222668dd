"""Kafka partitions as splits, what :class:`~epochal.connectors.kafka.source.KafkaSource` (on the
driver) and :class:`~epochal.connectors.kafka.reader.KafkaPartitionReader` (on a worker) both
speak: the split of one partition, its id (``"<topic>-<partition>"``), the logical offset "the
beginning of the partition", and which subtask reads a partition created while the job runs."""

from __future__ import annotations

import zlib
from typing import Any

from epochal.connectors.base import SourceSplit

__all__ = ["OFFSET_BEGINNING", "KafkaPartitionSplit", "owner_of_new_split", "split_id"]

#: librdkafka's logical offset "the beginning of the partition".
OFFSET_BEGINNING = -2


class KafkaPartitionSplit(SourceSplit):
    """One partition of a topic; ``start`` is the offset to read first, ``stop`` (bounded mode)
    the offset found at the end of the partition when the job started."""

    def __init__(self, topic: str, partition: int, start: int, stop: int | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.stop = stop
        self.split_id = split_id(topic, partition)

    def read_batch(self, max_records: int) -> list[Any] | None:
        raise NotImplementedError("Kafka partitions are read together, by KafkaSource.create_reader")

    def position(self) -> Any:
        return self.start

    def seek(self, position: Any) -> None:
        self.start = position

    def __repr__(self) -> str:
        return f"KafkaPartitionSplit({self.split_id}, start={self.start}, stop={self.stop})"


def split_id(topic: str, partition: int) -> str:
    """The id of a partition's split (and of its position in checkpoints)."""
    return f"{topic}-{partition}"


def owner_of_new_split(split: str, parallelism: int) -> int:
    """The subtask that reads a partition created while the job runs: a stable hash of its id."""
    return zlib.crc32(split.encode("utf-8")) % parallelism
