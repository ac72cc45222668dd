"""Writing to Kafka: :class:`KafkaSink`, at-least-once or exactly-once (transactions).

``exactly_once`` runs two-phase commit with Kafka transactions. Sink subtask ``i`` writes under
the transactional id ``<prefix>-<i>``: the records of one checkpoint's epoch go into one
transaction, flushed at the barrier (pre-commit) and committed when the checkpoint completes;
read_committed consumers see them only then. librdkafka cannot resume a transaction another
producer opened (Flink does so in Java through the client's internals; KIP-939's "keep prepared
transaction" is in no released broker), so a worker that dies after a checkpoint completed but
before it committed would lose that epoch. The committable therefore carries the epoch's
serialised records (a write-ahead log inside the checkpoint), and every transaction also commits
a *marker*: the offset ``checkpoint id`` with metadata ``<job id>:<checkpoint id>`` in the
consumer group named like the transactional id, atomically with the records. After a restore the
writer first initialises each transactional id of the restored committables, which fences the
dead producer and aborts whatever it left open, then reads the marker: a transaction that
committed is not written again; one that did not is written again from its records and committed
with its marker. Transactional ids of subtasks a downscale removed are initialised (so aborted)
too; an id of this subtask is initialised when its producer starts. A running writer whose
marking or commit hangs (librdkafka after a broker restart) does the same in place: a new
producer fences the stuck one and the epoch is written again unless its marker shows it
committed. See :mod:`epochal.connectors.kafka.writers`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from epochal.connectors.base import AT_LEAST_ONCE, EXACTLY_ONCE, JobSettings, Sink, SinkContext, SinkWriter
from epochal.connectors.kafka.common import (
    SERIALIZERS,
    Serde,
    check_bootstrap,
    cluster_metadata,
    missing_topics,
    resolve_serde,
)
from epochal.connectors.kafka.writers import KafkaAtLeastOnceWriter, KafkaTransactionalWriter, Serialized
from epochal.errors import PlanError


class KafkaSink(Sink):
    """Writes records to Kafka.

    Args:
        bootstrap_servers: ``host:port[,host:port]`` of the cluster.
        topic: the topic every record goes to, or None with ``topic_selector(record) -> str``.
        guarantee: ``"exactly_once"`` (transactions: a read_committed consumer sees every record
            once, when the checkpoint covering it completes) or ``"at_least_once"`` (flushed at
            every checkpoint barrier: after a restart records written since the restored
            checkpoint are written again).
        value: ``value(record)`` is what is written as the value (default: the record itself).
        key: ``key(record)`` the record's key (default: no key); records of one key go to one
            partition (Kafka's default partitioner) unless ``partition`` says otherwise.
        partition: ``partition(record) -> int`` chooses the partition (None: by key).
        headers: ``headers(record) -> [(name, bytes)]``.
        value_serializer, key_serializer: ``"auto"`` (bytes as they are, str as UTF-8, anything
            else as JSON), ``"bytes"``, ``"str"``, ``"json"`` or a function returning bytes.
        transactional_id_prefix: exactly_once: the prefix of the sink's transactional ids, unique
            per job and sink (two running jobs with one prefix fence each other's producers).
        transaction_timeout: exactly_once: seconds the broker keeps a transaction open; must be
            longer than two checkpoint intervals plus the restart delay (checked at submit) and
            at most the broker's ``transaction.max.timeout.ms`` (15 min by default).
        operation_timeout: seconds one call to the broker may take (delivering the records of a
            batch or a transaction; initialising, committing or aborting a transaction) before the
            attempt fails and the job restarts from its latest checkpoint. A transactional call that
            librdkafka does not end by itself (confluentinc/librdkafka#3779, after a lost
            coordinator) is given up 15 s after it.
        config: further librdkafka producer settings.

    A batch stream (docs/columnar.md) is written a whole record batch at a time: its ``value``
    column (binary or string) is each record's value and its ``key`` column, if it has one, the
    key; nothing is called per record. With ``value=``, ``key=``, ``topic_selector=``,
    ``partition=`` or ``headers=`` functions the sink takes the batch stream's rows (tuples in
    column order) instead, and calls them on each.
    """

    #: (a class default too: a sink pickled before the option existed reads it)
    operation_timeout: float = 60.0

    @property
    def accepts_batches(self) -> bool:  # type: ignore[override]
        """A batch stream's record batches are produced as they are unless a function of the
        record must see each row."""
        return all(fn is None for fn in (self.value, self.key, self.topic_selector, self.partition, self.headers))

    def __init__(self, bootstrap_servers: str, topic: str | None = None, *, guarantee: str = EXACTLY_ONCE,
                 value: Callable[[Any], Any] | None = None, key: Callable[[Any], Any] | None = None,
                 topic_selector: Callable[[Any], str] | None = None,
                 partition: Callable[[Any], int | None] | None = None,
                 headers: Callable[[Any], list[tuple[str, bytes]] | None] | None = None,
                 value_serializer: Serde = "auto", key_serializer: Serde = "auto",
                 transactional_id_prefix: str | None = None, transaction_timeout: float = 60.0,
                 config: dict[str, Any] | None = None, metadata_timeout: float = 10.0,
                 operation_timeout: float = 60.0) -> None:
        check_bootstrap(bootstrap_servers, "KafkaSink")
        if not operation_timeout > 0:
            raise PlanError(f"KafkaSink operation_timeout must be a positive number of seconds, "
                            f"got {operation_timeout!r}")
        if (topic is None) == (topic_selector is None):
            raise PlanError("KafkaSink takes either topic='name' or topic_selector=fn(record), "
                            "not both and not neither")
        if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
            raise PlanError(f"KafkaSink guarantee must be 'exactly_once' or 'at_least_once', got {guarantee!r}")
        if guarantee == EXACTLY_ONCE and not transactional_id_prefix:
            raise PlanError("KafkaSink(guarantee='exactly_once') needs transactional_id_prefix='...', unique per job "
                            "and sink: its transactions are named by it")
        for name, fn in (("value", value), ("key", key), ("topic_selector", topic_selector),
                         ("partition", partition), ("headers", headers)):
            if fn is not None and not callable(fn):
                raise PlanError(f"KafkaSink {name}= takes a function of the record, got {fn!r}")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.guarantee = guarantee
        self.value = value
        self.key = key
        self.topic_selector = topic_selector
        self.partition = partition
        self.headers = headers
        self.value_serializer = resolve_serde(value_serializer, SERIALIZERS, "value_serializer")
        self.key_serializer = resolve_serde(key_serializer, SERIALIZERS, "key_serializer")
        self.transactional_id_prefix = transactional_id_prefix
        self.transaction_timeout = transaction_timeout
        self.config = dict(config or {})
        self.metadata_timeout = metadata_timeout
        self.operation_timeout = float(operation_timeout)

    def __repr__(self) -> str:
        return f"KafkaSink({self.bootstrap_servers}, topic={self.topic!r}, guarantee={self.guarantee!r})"

    def validate(self, settings: JobSettings) -> None:
        """At submit: the broker answers, a fixed topic exists, the transaction timeout is long enough."""
        if self.guarantee == EXACTLY_ONCE and settings.checkpoint_interval is not None:
            needed = 2 * settings.checkpoint_interval + settings.restart_delay
            if self.transaction_timeout <= needed:
                raise PlanError(
                    f"KafkaSink transaction_timeout={self.transaction_timeout:g} s is too short: a transaction stays "
                    f"open for a checkpoint interval ({settings.checkpoint_interval:g} s) until its checkpoint "
                    f"completes, and across a restart ({settings.restart_delay:g} s delay); the broker would abort "
                    f"it. Use more than {needed:g} s (2 x interval + restart delay)")
        metadata = cluster_metadata(self.bootstrap_servers, self.config, self.metadata_timeout, "KafkaSink")
        if self.topic is not None and missing_topics(metadata, [self.topic]):
            raise PlanError(f"KafkaSink: topic '{self.topic}' does not exist at {self.bootstrap_servers}")

    def serialize(self, record: Any) -> tuple[str, bytes | None, bytes | None, int | None, Any]:
        """``(topic, key, value, partition, headers)`` of one record."""
        value = record if self.value is None else self.value(record)
        key = None if self.key is None else self.key_serializer(self.key(record))
        topic = self.topic if self.topic_selector is None else self.topic_selector(record)
        partition = None if self.partition is None else self.partition(record)
        headers = None if self.headers is None else self.headers(record)
        return topic, key, self.value_serializer(value), partition, headers  # type: ignore[return-value]

    def serialize_batch(self, records: list[Any]) -> list[Serialized]:
        """:meth:`serialize` of every record; without a topic selector, partitioner or headers
        (the common case) in one comprehension instead of a method call per record. Record
        batches (a batch stream's) give their rows' ``key``/``value`` columns."""
        if records and type(records[0]).__name__ == "RecordBatch":
            from epochal.connectors.kafka.batches import serialized_rows

            return [row for batch in records for row in serialized_rows(batch, self.topic)]  # type: ignore[arg-type]
        if self.topic_selector is not None or self.partition is not None or self.headers is not None:
            serialize = self.serialize
            return [serialize(r) for r in records]
        topic, key, value = self.topic, self.key, self.value
        key_serializer, value_serializer = self.key_serializer, self.value_serializer
        if key is None and value is None:
            return [(topic, None, value_serializer(r), None, None) for r in records]  # type: ignore[misc]
        if key is None:
            return [(topic, None, value_serializer(value(r)), None, None) for r in records]  # type: ignore[misc]
        if value is None:
            return [(topic, key_serializer(key(r)), value_serializer(r), None, None) for r in records]  # type: ignore[misc]
        return [(topic, key_serializer(key(r)), value_serializer(value(r)), None, None)  # type: ignore[misc]
                for r in records]

    def create_writer(self, context: SinkContext) -> SinkWriter:
        if self.guarantee == EXACTLY_ONCE:
            return KafkaTransactionalWriter(self, context)
        return KafkaAtLeastOnceWriter(self, context)
