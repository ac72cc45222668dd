"""Reading Kafka topics: :class:`KafkaSource`.

Every partition is a split (``"<topic>-<partition>"``, :mod:`epochal.connectors.kafka.partitions`)
whose position, the offset of the next record, is operator state in checkpoints: a restore seeks
every partition back to it, at any parallelism (the positions of all partitions go to every
subtask; each takes the partitions it is assigned now). On the worker one consumer per source
subtask reads all its partitions (:class:`~epochal.connectors.kafka.reader.KafkaPartitionReader`).
Offsets are committed to the consumer group when a checkpoint completes, for monitoring only
(Flink does the same): the checkpoint, not the group, is what a restore reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from epochal.connectors.base import JobSettings, ReaderContext, Source, SourceSplit, SplitReader
from epochal.connectors.kafka.common import (
    DESERIALIZERS,
    Serde,
    check_bootstrap,
    client_config,
    cluster_metadata,
    missing_topics,
    resolve_serde,
)
from epochal.connectors.kafka.partitions import KafkaPartitionSplit
from epochal.connectors.kafka.reader import KafkaPartitionReader
from epochal.errors import PlanError

#: Where a partition without a restored position starts (``starting_offsets``).
EARLIEST, LATEST, COMMITTED = "earliest", "latest", "committed"


class KafkaSource(Source):
    """Records of Kafka topics, as :class:`~epochal.connectors.kafka.common.KafkaRecord` objects.

    Args:
        bootstrap_servers: ``host:port[,host:port]`` of the cluster.
        topics: the topics to read (a list or one name), or ``pattern``: a regular expression
            that whole topic names match. Topics that match later are picked up too.
        group_id: the consumer group offsets are committed to on checkpoint completion (for
            monitoring; and what ``starting_offsets="committed"`` reads). None: nothing is committed.
        starting_offsets: where partitions start when no checkpoint is restored: ``"earliest"``,
            ``"latest"``, ``"committed"`` (the group's offsets, earliest where it has none) or an
            int, a timestamp in ms (the first record at or after it). Resolved on the driver at
            submit, so every attempt of the job starts from the same offsets. Partitions created
            while the job runs start at their beginning.
        bounded: stop at the end offsets found at submit (backfills, tests): the job then ends.
        key_deserializer, value_deserializer: ``"bytes"``, ``"str"``, ``"json"`` or a function of
            the raw bytes (or None).
        errors: an ``OutputTag``: records that fail to deserialise go to this side output as
            :class:`~epochal.connectors.kafka.common.UndecodableRecord` instead of failing the job
            (``stream.side_output(tag)`` reads them). None: such a record fails the job with an
            error naming its topic, partition and offset.
        watermarks: make event-time watermarks per partition; a subtask's watermark is the minimum
            over its partitions that are not idle. ``timestamp(record)`` is a record's event time
            (default: its Kafka timestamp, in ms); ``max_out_of_orderness`` is in the same unit.
        idle_timeout: seconds without records after which a partition no longer holds the
            watermark back (None: never). When every partition of a subtask is idle, its
            watermark is the latest event time it read (less ``max_out_of_orderness``), so a quiet
            subtask does not hold back the event time of the operators downstream.
        discovery_interval: seconds between looks for new partitions and topics (None: never;
            bounded sources never look).
        isolation_level: ``"read_committed"`` (the default: records of aborted or open
            transactions are never read) or ``"read_uncommitted"``.
        config: further librdkafka consumer settings.
        metadata_timeout: seconds to wait for the broker at submit.
        batches: a batch stream's source (docs/columnar.md, docs/kafka.md#batches): each read
            gives one ``pyarrow.RecordBatch`` of the messages of one ``consume()``, at most
            ``batch_records``, with the columns ``key`` and ``value`` (binary), ``topic``
            (string), ``partition`` (int32), ``offset`` and ``timestamp`` (int64, the Kafka
            timestamp in ms); headers are not read. Positions are checkpointed as for records (a
            barrier comes between reads: no batch straddles a checkpoint). The deserializers stay
            ``"bytes"``; watermarks, with ``watermarks=True``, come from the Kafka timestamps.
            The consumer fetches with ``fetch.queue.backoff.ms`` 20 unless ``config`` says
            otherwise (:data:`~epochal.connectors.kafka.reader.BATCH_CONSUMER_SETTINGS`).
        value_format: with ``batches=True``, ``"json"`` decodes the values of a whole batch in one
            call (``pyarrow.json``) into the columns of ``value_schema`` (a ``pyarrow.Schema``),
            which replace ``value``. Each value must be one JSON object: fields not in the schema
            are ignored, missing ones are null, a null value or the JSON ``null`` is a row of
            nulls (bad where the schema has a non-nullable field). A value that is not an object
            of that schema fails the job naming its topic, partition, offset and why, or goes to
            ``errors``' side output; no row takes another message's place
            (:func:`~epochal.connectors.kafka.batches.decode_json`).
        value_schema: the schema of the JSON values (``value_format="json"``).
        batch_records: with ``batches=True``, the most records of one batch (default 65,536):
            smaller batches mean lower latency and checkpoint barriers sooner, larger ones less
            work per record.
    """

    def __init__(self, bootstrap_servers: str, topics: list[str] | str | None = None, *, pattern: str | None = None,
                 group_id: str | None = None, starting_offsets: str | int = EARLIEST, bounded: bool = False,
                 key_deserializer: Serde = "bytes", value_deserializer: Serde = "bytes", errors: Any = None,
                 watermarks: bool = False, timestamp: Callable[[Any], Any] | None = None,
                 max_out_of_orderness: float = 0, idle_timeout: float | None = None,
                 discovery_interval: float | None = 10.0, isolation_level: str = "read_committed",
                 config: dict[str, Any] | None = None, metadata_timeout: float = 10.0, batches: bool = False,
                 value_format: str | None = None, value_schema: Any = None, batch_records: int = 65_536) -> None:
        check_bootstrap(bootstrap_servers, "KafkaSource")
        _check_batches(batches, value_format, value_schema, key_deserializer, value_deserializer, timestamp)
        self.batches = batches
        self.produces_batches = batches
        self.value_format = value_format
        self.value_schema = value_schema
        if isinstance(batch_records, bool) or not isinstance(batch_records, int) or not 1 <= batch_records <= 1_000_000:
            raise PlanError(f"KafkaSource batch_records must be an int in 1..1,000,000, got {batch_records!r}")
        self.batch_records = batch_records
        if (topics is None) == (pattern is None):
            raise PlanError("KafkaSource takes either topics=[...] or pattern='regex', not both and not neither")
        self.topics = [topics] if isinstance(topics, str) else list(topics or [])
        self.pattern = pattern
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as error:
                raise PlanError(f"KafkaSource pattern {pattern!r} is not a regular expression: {error}") from None
        if not (starting_offsets in (EARLIEST, LATEST, COMMITTED) or
                (isinstance(starting_offsets, int) and not isinstance(starting_offsets, bool))):
            raise PlanError("KafkaSource starting_offsets must be 'earliest', 'latest', 'committed' or a "
                            f"timestamp in ms, got {starting_offsets!r}")
        if starting_offsets == COMMITTED and group_id is None:
            raise PlanError("KafkaSource starting_offsets='committed' needs a group_id")
        if isolation_level not in ("read_committed", "read_uncommitted"):
            raise PlanError(f"KafkaSource isolation_level must be 'read_committed' or 'read_uncommitted', "
                            f"got {isolation_level!r}")
        self.bootstrap_servers = bootstrap_servers
        self.group_id = group_id
        self.starting_offsets = starting_offsets
        self.bounded = bounded
        #: bounded: its readers' progress counts offsets up to the end found at submit
        self.progress_unit = "offsets" if bounded else None
        self.key_deserializer = resolve_serde(key_deserializer, DESERIALIZERS, "key_deserializer")
        self.value_deserializer = resolve_serde(value_deserializer, DESERIALIZERS, "value_deserializer")
        self.errors_tag = None if errors is None else _tag_id(errors)
        self.watermarks = watermarks
        self.emits_watermarks = watermarks
        self.timestamp = timestamp
        self.max_out_of_orderness = max_out_of_orderness
        self.idle_timeout = idle_timeout
        self.discovery_interval = None if bounded else discovery_interval
        self.isolation_level = isolation_level
        self.config = dict(config or {})
        self.metadata_timeout = metadata_timeout
        #: split ids known when the job was planned (set by create_splits, shipped with the source):
        #: a partition not among them was created while the job ran.
        self.known_splits: frozenset[str] = frozenset()

    def batch_schema(self) -> Any:
        """A batch stream's columns: key, value (or ``value_schema``'s columns), topic, partition,
        offset, timestamp."""
        if not self.batches:
            return None
        from epochal.connectors.kafka.batches import batch_schema

        return batch_schema(self.value_schema if self.value_format == "json" else None)

    def __repr__(self) -> str:
        what = self.topics if self.pattern is None else f"pattern={self.pattern!r}"
        return f"KafkaSource({self.bootstrap_servers}, {what})"

    def validate(self, settings: JobSettings) -> None:
        if self.watermarks and self.idle_timeout is not None and self.idle_timeout <= 0:
            raise PlanError(f"KafkaSource idle_timeout must be positive seconds, got {self.idle_timeout}")

    # ------------------------------------------------------------------ on the driver
    def matching_topics(self, metadata: Any) -> list[str]:
        """The topics this source reads, among those in ``metadata``."""
        if self.pattern is None:
            return list(self.topics)
        regex = re.compile(self.pattern)
        return sorted(t for t in metadata.topics if regex.fullmatch(t) and not t.startswith("__"))

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        """One split per partition, its start resolved to an offset now (at submit)."""
        from confluent_kafka import Consumer, TopicPartition

        metadata = cluster_metadata(self.bootstrap_servers, self.config, self.metadata_timeout, "KafkaSource")
        topics = self.matching_topics(metadata)
        missing = missing_topics(metadata, topics)
        if missing:
            raise PlanError(f"KafkaSource: topic(s) {', '.join(missing)} do not exist at {self.bootstrap_servers}")
        partitions = [TopicPartition(t, p) for t in topics for p in sorted(metadata.topics[t].partitions)]
        consumer = Consumer(self.consumer_config(group=self.group_id or "epochal-plan"))
        try:
            starts = self._resolve_starts(consumer, partitions)
            stops = [self._high(consumer, tp) for tp in partitions] if self.bounded else [None] * len(partitions)
        finally:
            consumer.close()
        splits: list[SourceSplit] = [KafkaPartitionSplit(tp.topic, tp.partition, start, stop)
                                     for tp, start, stop in zip(partitions, starts, stops, strict=True)]
        self.known_splits = frozenset(s.split_id for s in splits)
        return splits

    def _high(self, consumer: Any, tp: Any) -> int:
        return int(consumer.get_watermark_offsets(tp, timeout=self.metadata_timeout)[1])

    def _resolve_starts(self, consumer: Any, partitions: list[Any]) -> list[int]:
        from confluent_kafka import TopicPartition

        if not partitions:
            return []
        timeout = self.metadata_timeout
        lows = [int(consumer.get_watermark_offsets(tp, timeout=timeout)[0]) for tp in partitions]
        if self.starting_offsets == EARLIEST:
            return lows
        if self.starting_offsets == LATEST:
            return [self._high(consumer, tp) for tp in partitions]
        if self.starting_offsets == COMMITTED:
            committed = consumer.committed(partitions, timeout=timeout)
            return [tp.offset if tp.offset >= 0 else low for tp, low in zip(committed, lows, strict=True)]
        wanted = [TopicPartition(tp.topic, tp.partition, int(self.starting_offsets)) for tp in partitions]
        found = consumer.offsets_for_times(wanted, timeout=timeout)
        return [tp.offset if tp.offset >= 0 else self._high(consumer, tp) for tp in found]

    def consumer_config(self, group: str, **settings: Any) -> dict[str, Any]:
        """librdkafka settings of a consumer of this source in consumer group ``group`` (offsets
        stored and committed only on request), ``settings`` added."""
        return client_config(self.bootstrap_servers, self.config, **{
            "group.id": group, "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest", "isolation.level": self.isolation_level, **settings})

    # ------------------------------------------------------------------ on the worker
    def create_reader(self, splits: list[SourceSplit], restored: dict[str, Any],
                      context: ReaderContext) -> SplitReader | None:
        return KafkaPartitionReader(self, [s for s in splits if isinstance(s, KafkaPartitionSplit)], restored,
                                    context)


def _check_batches(batches: bool, value_format: str | None, value_schema: Any, key_deserializer: Serde,
                   value_deserializer: Serde, timestamp: Any) -> None:
    """PlanErrors for options a batch source does not take, or takes only together."""
    if not batches:
        if value_format is not None or value_schema is not None:
            raise PlanError("KafkaSource value_format= and value_schema= decode a batch stream's values: pass "
                            "batches=True too (or value_deserializer='json' for records)")
        return
    if key_deserializer != "bytes" or value_deserializer != "bytes":
        raise PlanError("KafkaSource(batches=True) reads keys and values as binary columns: leave key_deserializer "
                        "and value_deserializer as 'bytes' (value_format='json' decodes values into columns)")
    if timestamp is not None:
        raise PlanError("KafkaSource(batches=True) takes its watermarks from the Kafka timestamps: timestamp= is "
                        "for records (use with_watermarks(\"column\") on the batch stream for another column)")
    if value_format not in (None, "json"):
        raise PlanError(f"KafkaSource value_format must be 'json' or None, got {value_format!r}")
    if value_format == "json":
        import pyarrow as pa

        from epochal.connectors.kafka.batches import RESERVED

        if not isinstance(value_schema, pa.Schema):
            raise PlanError("KafkaSource(value_format='json') needs value_schema=, a pyarrow.Schema of the values' "
                            f"fields; got {type(value_schema).__name__}")
        clash = [name for name in value_schema.names if name in RESERVED]
        if clash:
            raise PlanError(f"KafkaSource value_schema field {clash[0]!r} has the name of a column every batch has "
                            f"({', '.join(RESERVED)}); rename it in the schema")
    elif value_schema is not None:
        raise PlanError("KafkaSource value_schema= goes with value_format='json'")


def _tag_id(tag: Any) -> str:
    tag_id = getattr(tag, "id", None)
    if not isinstance(tag_id, str):
        raise PlanError(f"KafkaSource errors= takes an OutputTag, got {tag!r}")
    return tag_id
