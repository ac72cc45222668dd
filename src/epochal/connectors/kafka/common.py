"""What the Kafka source and sink share: the record type, (de)serialisers, client settings and
readable errors. The client is ``confluent-kafka`` (librdkafka), imported only where a connector
actually talks to a broker."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from epochal.errors import PlanError, SourceError

_log = logging.getLogger("epochal.kafka")

#: A (de)serialiser: a built-in's name or a function.
Serde = str | Callable[[Any], Any]


class KafkaRecord:
    """One record read from Kafka: ``key`` and ``value`` deserialised, the rest as stored.

    ``timestamp`` is the record's Kafka timestamp in milliseconds since the epoch, ``headers`` a
    list of ``(name, bytes)`` pairs (empty when there are none).
    """

    __slots__ = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")

    def __init__(self, key: Any, value: Any, topic: str, partition: int, offset: int, timestamp: int,
                 headers: list[tuple[str, bytes]] | None = None) -> None:
        self.key = key
        self.value = value
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.headers = headers or []

    def __reduce__(self) -> Any:
        return (KafkaRecord, (self.key, self.value, self.topic, self.partition, self.offset, self.timestamp,
                              self.headers))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KafkaRecord) and self.__reduce__()[1] == other.__reduce__()[1]

    def __hash__(self) -> int:
        return hash((self.topic, self.partition, self.offset))

    def __repr__(self) -> str:
        return (f"KafkaRecord(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
                f"key={self.key!r}, value={self.value!r}, timestamp={self.timestamp})")


class UndecodableRecord:
    """A record whose key or value did not deserialise, as sent to the ``errors`` side output:
    where it is (``topic``, ``partition``, ``offset``), its raw ``key`` and ``value`` bytes and
    the ``error`` message."""

    __slots__ = ("topic", "partition", "offset", "key", "value", "error")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 error: str) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.key, self.value, self.error = key, value, error

    def __reduce__(self) -> Any:
        return (UndecodableRecord, (self.topic, self.partition, self.offset, self.key, self.value, self.error))

    def __repr__(self) -> str:
        return f"UndecodableRecord({self.topic}/{self.partition}@{self.offset}: {self.error})"


class KafkaError(SourceError):
    """A Kafka source or sink cannot go on: the message says which topic, partition, offset or
    transactional id, and why."""

    #: The transaction it happened in was aborted and may be written again (librdkafka's
    #: ``txn_requires_abort``).
    abortable: bool = False


def _from_bytes(data: bytes | None) -> Any:
    return data


def _from_str(data: bytes | None) -> Any:
    return None if data is None else data.decode("utf-8")


def _from_json(data: bytes | None) -> Any:
    return None if data is None else json.loads(data)


def _to_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"the 'bytes' serialiser takes bytes, got {type(value).__name__}")


def _to_str(value: Any) -> bytes | None:
    return None if value is None else str(value).encode("utf-8")


def _to_json(value: Any) -> bytes | None:
    return None if value is None else json.dumps(value, separators=(",", ":")).encode("utf-8")


def _to_auto(value: Any) -> bytes | None:
    """bytes as they are, str as UTF-8, anything else as JSON."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return _to_json(value)


DESERIALIZERS: dict[str, Callable[[bytes | None], Any]] = {"bytes": _from_bytes, "str": _from_str,
                                                          "json": _from_json}
SERIALIZERS: dict[str, Callable[[Any], bytes | None]] = {"bytes": _to_bytes, "str": _to_str, "json": _to_json,
                                                        "auto": _to_auto}


def resolve_serde(serde: Serde, table: dict[str, Callable[..., Any]], what: str) -> Callable[..., Any]:
    """A built-in (de)serialiser by name, or the user's function; a PlanError otherwise."""
    if callable(serde):
        return serde
    if isinstance(serde, str) and serde in table:
        return table[serde]
    raise PlanError(f"{what} must be one of {sorted(table)} or a function, got {serde!r}")


def client_config(bootstrap_servers: str, extra: dict[str, Any] | None, **settings: Any) -> dict[str, Any]:
    """librdkafka settings: ``settings`` overridden by the user's ``extra``, logs to Python logging."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "logger": _log, **settings}
    config.update(extra or {})
    return config


def check_bootstrap(bootstrap_servers: Any, what: str) -> None:
    if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
        raise PlanError(f"{what} needs bootstrap_servers as 'host:port[,host:port...]', got {bootstrap_servers!r}")


def cluster_metadata(bootstrap_servers: str, extra: dict[str, Any] | None, timeout: float, what: str) -> Any:
    """The cluster's topic metadata, read on the driver at submit; a PlanError within ``timeout``
    seconds when no broker answers."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(client_config(bootstrap_servers, extra, **{"socket.connection.setup.timeout.ms": 5000}))
    try:
        return admin.list_topics(timeout=timeout)
    except KafkaException as error:
        raise PlanError(f"{what}: no Kafka broker answered at {bootstrap_servers} within {timeout:g} s "
                        f"({error.args[0].str() if error.args else error})") from None


def missing_topics(metadata: Any, topics: list[str]) -> list[str]:
    return [t for t in topics if t not in metadata.topics or metadata.topics[t].error is not None]
