"""The worker side of :class:`~epochal.connectors.kafka.source.KafkaSource`: one consumer per
source subtask reads all the partitions it is assigned, tracks the offset of the next record of
each (the checkpointed position), keeps event time per partition, and looks for partitions
created while the job runs. The reader knows its source only by :class:`SourceSettings`, what it
reads of it: the source module imports this one, never the other way round."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any, Protocol

from epochal.connectors.base import ReaderContext, SplitReader
from epochal.connectors.kafka.common import KafkaError, KafkaRecord, UndecodableRecord, _from_bytes
from epochal.connectors.kafka.partitions import OFFSET_BEGINNING, KafkaPartitionSplit, owner_of_new_split, split_id

#: How long the consumer may go without reaching any broker before the job fails (and restarts
#: from its latest checkpoint): librdkafka reconnects by itself within this time.
BROKER_DOWN_LIMIT = 60.0

#: librdkafka settings of a batch source's consumer (``config=`` overrides them). Once a
#: partition's prefetched messages pass ``queued.min.messages`` (100,000), librdkafka waits
#: ``fetch.queue.backoff.ms`` (1 s) before fetching it again: a batch source drains that in a
#: tenth of a second and then idled, reading small records at a third of the speed it reads
#: them with 20 ms (measured: 1M 50-byte records, one partition).
BATCH_CONSUMER_SETTINGS = {"fetch.queue.backoff.ms": 20}


class SourceSettings(Protocol):
    """What a :class:`KafkaPartitionReader` reads of its source: the settings of a
    :class:`~epochal.connectors.kafka.source.KafkaSource` (which the source passes as itself),
    the consumer settings it makes, and which topics it reads."""

    @property
    def bootstrap_servers(self) -> str: ...
    @property
    def group_id(self) -> str | None: ...
    @property
    def bounded(self) -> bool: ...
    @property
    def discovery_interval(self) -> float | None: ...
    @property
    def known_splits(self) -> frozenset[str]:
        """The split ids known when the job was planned: a partition not among them is new."""
    @property
    def key_deserializer(self) -> Callable[[bytes | None], Any]: ...
    @property
    def value_deserializer(self) -> Callable[[bytes | None], Any]: ...
    @property
    def errors_tag(self) -> str | None:
        """The side output of undecodable records; None: such a record fails the job."""
    @property
    def watermarks(self) -> bool: ...
    @property
    def timestamp(self) -> Callable[[Any], Any] | None: ...
    @property
    def max_out_of_orderness(self) -> float: ...
    @property
    def idle_timeout(self) -> float | None: ...
    @property
    def batches(self) -> bool:
        """Whether reads give record batches (a batch stream's source)."""
    @property
    def value_format(self) -> str | None:
        """``"json"``: a batch's values are decoded into the columns of :attr:`value_schema`."""
    @property
    def value_schema(self) -> Any: ...
    @property
    def batch_records(self) -> int:
        """The most records of one batch."""

    def consumer_config(self, group: str, **settings: Any) -> dict[str, Any]:
        """librdkafka settings of a consumer in consumer group ``group``, ``settings`` added."""

    def matching_topics(self, metadata: Any) -> list[str]:
        """The topics the source reads, among those of the cluster's ``metadata``."""


class _Partition:
    __slots__ = ("topic", "partition", "next", "stop", "max_time", "last_seen", "done")

    def __init__(self, topic: str, partition: int, next_offset: int, stop: int | None) -> None:
        self.topic = topic
        self.partition = partition
        self.next = next_offset
        self.stop = stop
        self.max_time: Any = None
        self.last_seen = time.monotonic()
        self.done = stop is not None and 0 <= stop <= next_offset


class KafkaPartitionReader(SplitReader):
    """Reads one source subtask's partitions with one ``confluent_kafka.Consumer``."""

    def __init__(self, source: SourceSettings, splits: list[KafkaPartitionSplit], restored: dict[str, Any],
                 context: ReaderContext) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.source = source
        self.context = context
        self.side: list[tuple[str, Any]] = []
        self.partitions: dict[str, _Partition] = {}
        self.watermark_value: Any = None
        self.next_discovery = time.monotonic() + (source.discovery_interval or 0)
        self.down_since: float | None = None
        group = source.group_id or f"epochal-{context.operator_name}"
        settings = BATCH_CONSUMER_SETTINGS if source.batches else {}
        self.consumer = Consumer(source.consumer_config(group, **{"enable.partition.eof": True, **settings}))
        assignment = []
        #: each split's offset at submit (its start), what its progress counts from
        self.origins = {split.split_id: split.start for split in splits}
        for split in splits:
            start = restored.get(split.split_id, OFFSET_BEGINNING if context.restored else split.start)
            self.partitions[split.split_id] = _Partition(split.topic, split.partition, start, split.stop)
            assignment.append(TopicPartition(split.topic, split.partition, start))
        # partitions created after the restored checkpoint, whose positions it recorded, that are
        # this subtask's now (a restore redistributes them like the rest)
        for sid, position in restored.items():
            if sid in self.partitions or sid in source.known_splits:
                continue
            topic, _, partition = sid.rpartition("-")
            if owner_of_new_split(sid, context.parallelism) == context.subtask_index:
                self.partitions[sid] = _Partition(topic, int(partition), position, None)
                assignment.append(TopicPartition(topic, int(partition), position))
        self.consumer.assign(assignment)

    # ------------------------------------------------------------------ reading
    def read_batch(self, max_records: int) -> list[Any] | None:
        if self.source.discovery_interval is not None and time.monotonic() >= self.next_discovery:
            self._discover()
        if self.partitions and all(p.done for p in self.partitions.values()):
            return None
        if not self.partitions and self.source.bounded:
            return None
        if self.source.batches:
            return self._read_record_batch()
        messages: list[Any] = self.consumer.consume(max_records, 0)
        out: list[Any] = []
        append = out.append
        source = self.source
        # the "bytes" deserialiser returns its argument: not calling it saves a call per record
        key_of = None if source.key_deserializer is _from_bytes else source.key_deserializer
        value_of = None if source.value_deserializer is _from_bytes else source.value_deserializer
        timestamp = source.timestamp
        watermarks = source.watermarks
        partitions = self.partitions
        now = time.monotonic()
        # a consume() returns runs of one partition's records: look its state up once per run
        last_topic, last_partition, state = None, None, None
        for message in messages:
            error = message.error()
            if error is not None:
                self._on_error(message, error)
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            if partition != last_partition or topic != last_topic:
                state = partitions.get(f"{topic}-{partition}")
                last_topic, last_partition = topic, partition
            if state is None or state.done:  # (a record past a bounded split's end)
                continue
            state.next = offset + 1
            if state.stop is not None and state.next >= state.stop:
                state.done = True
            raw_key, raw_value = message.key(), message.value()
            try:
                key = raw_key if key_of is None else key_of(raw_key)
                value = raw_value if value_of is None else value_of(raw_value)
            except Exception as decode_error:
                self._undecodable(topic, partition, offset, raw_key, raw_value, decode_error)
                continue
            headers = message.headers()
            record = KafkaRecord(key, value, topic, partition, offset, message.timestamp()[1],
                                 list(headers) if headers else None)
            if watermarks:
                event_time = timestamp(record) if timestamp is not None else record.timestamp
                if state.max_time is None or event_time > state.max_time:
                    state.max_time = event_time
                state.last_seen = now
            append(record)
        if messages:
            self.down_since = None
        return out

    def _read_record_batch(self) -> list[Any]:
        """A batch stream's read: the messages of one ``consume()`` as one record batch (none when
        nothing came). Positions and watermarks are kept as for records, but once per run of one
        partition's messages (:meth:`_advance`): what is done per message is one list
        comprehension per column (a call of the message's accessor) and its conversion to Arrow."""
        from epochal.connectors.kafka.batches import decode_json, partition_runs, record_batch

        messages: list[Any] = self.consumer.consume(self.source.batch_records, 0)
        if not messages:
            return []
        errors = [m for m in messages if m.error() is not None]
        if errors:
            messages = [m for m in messages if m.error() is None]
        topics = [m.topic() for m in messages]
        partitions = [m.partition() for m in messages]
        offsets = [m.offset() for m in messages]
        timestamps = [m.timestamp()[1] for m in messages]
        runs, topic_column, partition_column = partition_runs(topics, partitions)
        read = self._advance(runs, topics, partitions, offsets, timestamps)
        for message in errors:  # after the records: a partition's end (EOF) comes after its records
            self._on_error(message, message.error())
        self.down_since = None
        if read is not None:  # some messages are not read: past a bounded partition's end offset
            messages, topics, partitions, offsets, timestamps = (
                [item for start, end in read for item in column[start:end]]
                for column in (messages, topics, partitions, offsets, timestamps))
            _, topic_column, partition_column = partition_runs(topics, partitions)
        if not messages:
            return []
        values: list[Any] = [m.value() for m in messages]
        schema = self.source.value_schema if self.source.value_format == "json" else None
        rows = None
        if schema is not None:
            values, bad = decode_json(values, schema)
            if bad:
                rows = self._undecodable_json(messages, bad)
        return [record_batch([m.key() for m in messages], values, topic_column, partition_column, offsets,
                             timestamps, schema, rows)]

    def _advance(self, runs: list[tuple[int, int]], topics: list[str], partitions: list[int], offsets: list[int],
                 timestamps: list[int]) -> list[tuple[int, int]] | None:
        """Every run's partition moved past the run's messages (its position, event time and
        ``done``); returns None when every message is to be read, else the ranges of those that
        are: a bounded partition's messages at or past its end offset are not (nor those of a
        partition this reader does not own)."""
        partitions_state = self.partitions
        watermarks = self.source.watermarks
        now = time.monotonic()
        read: list[tuple[int, int]] = []
        whole = True
        for start, end in runs:
            state = partitions_state.get(split_id(topics[start], partitions[start]))
            if state is None:
                whole = False
                continue
            # offsets rise within a partition: those before its end offset come first
            last = end if state.stop is None else bisect_left(offsets, state.stop, start, end)
            if last > start:
                state.next = offsets[last - 1] + 1
                if watermarks:
                    event_time = max(timestamps[start:last])
                    if state.max_time is None or event_time > state.max_time:
                        state.max_time = event_time
                    state.last_seen = now
                read.append((start, last))
            if state.stop is not None:
                if last < end:  # a message at or past the end: nothing before it is left to read
                    whole = False
                    state.next = max(state.next, state.stop)
                state.done = state.next >= state.stop
        return None if whole else read

    def _undecodable_json(self, messages: list[Any], bad: list[tuple[int, str]]) -> list[bool]:
        """The messages whose values are not JSON objects of the schema fail the job (naming the
        first) or go to the ``errors`` side output; returns which messages are decoded."""
        rows = [True] * len(messages)
        for index, reason in bad:
            message = messages[index]
            rows[index] = False
            self._undecodable(message.topic(), message.partition(), message.offset(), message.key(), message.value(),
                              ValueError(f"not a JSON object of the value_schema: {reason}"))
        return rows

    def _undecodable(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                     error: Exception) -> None:
        message = f"{type(error).__name__}: {error}"
        if self.source.errors_tag is None:
            raise KafkaError(f"the record at topic '{topic}' partition {partition} offset {offset} does not "
                             f"deserialise ({message}); pass errors=OutputTag(...) to KafkaSource to route such "
                             "records to a side output instead")
        self.side.append((self.source.errors_tag, UndecodableRecord(topic, partition, offset, key, value, message)))

    def _on_error(self, message: Any, error: Any) -> None:
        from confluent_kafka import KafkaError as Codes

        code = error.code()
        if code == Codes._PARTITION_EOF:
            state = self.partitions.get(split_id(message.topic(), message.partition()))
            if state is not None:
                state.next = max(state.next, message.offset())
                if state.stop is not None and state.next >= state.stop:
                    state.done = True
            return
        if code in (Codes.UNKNOWN_TOPIC_OR_PART, Codes._UNKNOWN_PARTITION, Codes._UNKNOWN_TOPIC,
                    Codes.TOPIC_AUTHORIZATION_FAILED) or error.fatal():
            raise KafkaError(f"KafkaSource cannot read topic '{message.topic()}' partition {message.partition()}: "
                             f"{error.str()}")
        # transport errors: librdkafka reconnects; fail (and restart from the checkpoint) only
        # when no broker came back within BROKER_DOWN_LIMIT
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
        elif now - self.down_since > BROKER_DOWN_LIMIT:
            raise KafkaError(f"KafkaSource: no broker of {self.source.bootstrap_servers} reachable for "
                             f"{BROKER_DOWN_LIMIT:g} s ({error.str()})")

    # ------------------------------------------------------------------ new partitions
    def _discover(self) -> None:
        from confluent_kafka import TopicPartition

        self.next_discovery = time.monotonic() + (self.source.discovery_interval or 0)
        try:
            metadata = self.consumer.list_topics(timeout=1.0)
        except Exception:
            return  # the broker is away: look again next time
        source, context = self.source, self.context
        added = []
        for topic in source.matching_topics(metadata):
            info = metadata.topics.get(topic)
            if info is None or info.error is not None:
                continue
            for partition in info.partitions:
                sid = split_id(topic, partition)
                if sid in self.partitions or sid in source.known_splits:
                    continue
                if owner_of_new_split(sid, context.parallelism) != context.subtask_index:
                    continue
                self.partitions[sid] = _Partition(topic, partition, OFFSET_BEGINNING, None)
                added.append(TopicPartition(topic, partition, OFFSET_BEGINNING))
        if added:
            self.consumer.incremental_assign(added)

    # ------------------------------------------------------------------ checkpoints and time
    def positions(self) -> list[tuple[str, Any]]:
        return [(sid, state.next) for sid, state in self.partitions.items()]

    def progress(self) -> tuple[int, int] | None:
        """Bounded: offsets read of those between each partition's start at submit and its end
        (``KafkaSource.progress_unit``: offsets, which count transaction markers too); None when
        unbounded, or for a partition created while the job ran (no end known)."""
        done = total = 0
        for sid, state in list(self.partitions.items()):
            origin = self.origins.get(sid)
            if state.stop is None or origin is None or origin < 0:
                return None
            size = max(state.stop - origin, 0)
            done, total = done + min(max(state.next - origin, 0), size), total + size
        return done, total

    def take_side_output(self) -> list[tuple[str, Any]]:
        side, self.side = self.side, []
        return side

    def watermark(self) -> Any:
        source = self.source
        if not source.watermarks or not self.partitions:
            return None
        idle = source.idle_timeout
        now = time.monotonic()
        active = [p for p in self.partitions.values()
                  if not p.done and (idle is None or now - p.last_seen < idle)]
        if not active:  # every partition idle: nothing holds event time back but what was seen
            seen = [p.max_time for p in self.partitions.values() if p.max_time is not None]
            if not seen:
                return self.watermark_value
            latest = max(seen)
        elif any(p.max_time is None for p in active):
            return self.watermark_value
        else:
            latest = min(p.max_time for p in active)
        candidate = latest - source.max_out_of_orderness - 1
        if self.watermark_value is None or candidate > self.watermark_value:
            self.watermark_value = candidate
        return self.watermark_value

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[tuple[str, Any]]) -> None:
        if self.source.group_id is None:
            return
        from confluent_kafka import TopicPartition

        offsets = [TopicPartition(self.partitions[sid].topic, self.partitions[sid].partition, offset)
                   for sid, offset in positions if sid in self.partitions and offset >= 0]
        if offsets:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=True)
            except Exception:
                pass  # monitoring only: the checkpoint holds the offsets that count

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:
            pass
