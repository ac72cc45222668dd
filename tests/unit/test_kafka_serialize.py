"""KafkaSink.serialize_batch: the writers' batch path gives what serialize gives record by record,
in every combination of the sink's functions (no broker needed: serialising talks to none)."""

from __future__ import annotations

import pytest

from epochal.connectors.kafka import KafkaSink

RECORDS = [("a", 1), ("b", 2), ("a", 3)]


def _sinks() -> list[KafkaSink]:
    def make(**kwargs: object) -> KafkaSink:
        return KafkaSink("127.0.0.1:9", guarantee="at_least_once", **kwargs)  # type: ignore[arg-type]

    return [
        make(topic="t"),
        make(topic="t", key=lambda r: r[0]),
        make(topic="t", value=lambda r: f"{r[0]}={r[1]}"),
        make(topic="t", key=lambda r: r[0], value=lambda r: r[1], key_serializer="str", value_serializer="json"),
        make(topic_selector=lambda r: f"t-{r[0]}", key=lambda r: r[0]),
        make(topic="t", partition=lambda r: r[1] % 2),
        make(topic="t", headers=lambda r: [("n", str(r[1]).encode())]),
    ]


@pytest.mark.parametrize("sink", _sinks())
def test_serialize_batch_is_serialize_of_every_record(sink: KafkaSink) -> None:
    assert sink.serialize_batch(RECORDS) == [sink.serialize(r) for r in RECORDS]


def test_serialize_batch_raises_what_serialize_raises() -> None:
    sink = KafkaSink("127.0.0.1:9", "t", guarantee="at_least_once", value_serializer="bytes")
    with pytest.raises(TypeError, match="bytes"):
        sink.serialize_batch(["not bytes"])


def test_a_transactional_call_that_blocks_past_its_limit_fails_the_writer_instead_of_hanging():
    import threading
    import time

    import pytest

    from epochal.connectors.kafka.common import KafkaError
    from epochal.connectors.kafka.writers import bounded

    assert bounded(lambda: 7, 1.0, "committing") == 7
    with pytest.raises(ValueError, match="boom"):
        bounded(lambda: (_ for _ in ()).throw(ValueError("boom")), 1.0, "committing")
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(KafkaError, match="did not return within 0.2 s"):
        bounded(lambda: release.wait(30), 0.2, "committing the transaction of 't-0'")
    assert time.monotonic() - started < 5
    release.set()


def test_the_operation_timeout_bounds_every_call_of_the_transactional_writer(monkeypatch):
    """``operation_timeout`` is what each transactional call is given (a call that librdkafka does
    not end by itself is abandoned STUCK_MARGIN after it) and the delivery wait of a flush; a
    timeout that is not a positive number is refused at the sink's construction."""
    from types import SimpleNamespace

    from epochal.connectors.kafka import writers
    from epochal.errors import PlanError

    with pytest.raises(PlanError, match="operation_timeout must be a positive"):
        KafkaSink("localhost:9092", "t", guarantee="at_least_once", operation_timeout=0)
    sink = KafkaSink("localhost:9092", "t", transactional_id_prefix="p", operation_timeout=7.5)
    writer = writers.KafkaTransactionalWriter(sink, SimpleNamespace(subtask_index=0))
    limits = []
    monkeypatch.setattr(writers, "bounded", lambda action, limit, what: limits.append(limit))
    writer._call(lambda: None, "p-0", "committing")
    assert limits == [7.5 + writers.STUCK_MARGIN]
    assert writers._Producer({"bootstrap.servers": "localhost:1"}, sink.operation_timeout).timeout == 7.5
