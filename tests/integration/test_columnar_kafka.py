"""Kafka as a batch stream's source and sink, against the real test broker: record batches with
the records' fields as columns, read on from restored positions; JSON values decoded into
columns in one call (bad values named or routed to a side output); a batch stream produced a
whole batch at a time, exactly once and at least once; and a Kafka -> windowed aggregate ->
Kafka job on Spark equal to its oracle. (tests/unit/test_kafka_batches.py has what needs no
broker.)

Topics given Kafka timestamps of 1970 (small event times the oracles compute with) are made with
``retention.ms=-1``: the broker's retention check, 30 s after it starts and every 5 minutes
after, deletes records older than 7 days, and a test then reads nothing."""

from __future__ import annotations

import collections
import json
import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from epochal import BatchStream
from epochal.connectors.base import ReaderContext, SinkContext
from epochal.connectors.kafka import KafkaError, KafkaSink, KafkaSource
from epochal.errors import PlanError
from epochal.runtime.operators.functions import OutputTag
from tests.kafka_helpers import QUIET, new_topic, produce, read_committed

VALUES = pa.schema([("k", pa.int64()), ("i", pa.int64())])


def kept_topic(broker, partitions: int = 1, name: str = "t") -> str:
    """A new topic whose records retention never deletes, whatever their timestamps."""
    topic = f"{name}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions, **{"retention.ms": "-1"})
    return topic


def reader_of(source, restored=None):
    splits = source.create_splits(1)
    return source.create_reader(splits, restored or {}, ReaderContext("src", 0, 1, restored is not None))


def read_batches(reader, rows: int, timeout: float = 20.0) -> list[pa.RecordBatch]:
    out: list[pa.RecordBatch] = []
    deadline = time.monotonic() + timeout
    while sum(b.num_rows for b in out) < rows and time.monotonic() < deadline:
        got = reader.read_batch(1000)
        if got is None:
            break
        out += got
        if not got:
            time.sleep(0.02)
    return out


def test_a_batch_holds_the_records_fields_as_columns(kafka_broker):
    topic = kept_topic(kafka_broker)
    produce(kafka_broker, topic, [f"v{i}" for i in range(500)], key=lambda v: v[-1:],
            timestamps=list(range(1000, 1500)))  # (a timestamp of 0 means "now" to the producer)
    source = KafkaSource(kafka_broker.bootstrap, topic, bounded=True, batches=True, batch_records=200, config=QUIET)
    assert source.produces_batches and source.batch_schema().names == ["key", "value", "topic", "partition", "offset",
                                                                       "timestamp"]
    reader = reader_of(source)
    batches = read_batches(reader, 500)
    assert max(b.num_rows for b in batches) <= 200
    table = pa.Table.from_batches(batches)
    assert table.schema == source.batch_schema()
    assert table["value"].to_pylist() == [f"v{i}".encode() for i in range(500)]
    assert table["key"].to_pylist() == [f"v{i}"[-1:].encode() for i in range(500)]
    assert table["offset"].to_pylist() == list(range(500)) and table["timestamp"].to_pylist() == list(range(1000, 1500))
    assert set(table["topic"].to_pylist()) == {topic} and set(table["partition"].to_pylist()) == {0}
    assert reader.positions() == [(f"{topic}-0", 500)]
    assert read_batches(reader, 1, timeout=3) == [] and reader.read_batch(10) is None
    reader.close()
    # a restored position (a checkpoint's) is where reading goes on: nothing before it again
    restored = reader_of(source, {f"{topic}-0": 321})
    table = pa.Table.from_batches(read_batches(restored, 179))
    assert table["offset"].to_pylist() == list(range(321, 500)) and restored.positions() == [(f"{topic}-0", 500)]
    restored.close()


def test_json_values_are_decoded_into_columns_and_a_bad_one_is_named_or_set_aside(kafka_broker):
    topic = new_topic(kafka_broker)
    values = [json.dumps({"k": i % 3, "i": i, "extra": "ignored"}) for i in range(100)]
    values[0] = "null"  # (first in a batch: crashes pyarrow 26 unless read around, see batches.decode_json)
    values[40] = "{not json"
    values[41] = ""  # (an empty value and one of two objects in one batch: no row may shift)
    values[42] = '{"k": 1, "i": 42} {"k": 2, "i": 43}'
    produce(kafka_broker, topic, values)
    source = KafkaSource(kafka_broker.bootstrap, topic, bounded=True, batches=True, value_format="json",
                         value_schema=VALUES, config=QUIET)
    assert source.batch_schema().names == ["key", "k", "i", "topic", "partition", "offset", "timestamp"]
    with pytest.raises(KafkaError, match=rf"topic '{topic}' partition 0 offset 40 does not deserialise"):
        read_batches(reader_of(source), 100)
    tag = OutputTag("bad")
    lenient = KafkaSource(kafka_broker.bootstrap, topic, bounded=True, batches=True, value_format="json",
                          value_schema=VALUES, errors=tag, config=QUIET)
    reader = reader_of(lenient)
    table = pa.Table.from_batches(read_batches(reader, 97))
    assert table["i"].to_pylist() == [None] + [i for i in range(1, 100) if i not in (40, 41, 42)]
    assert table["offset"].to_pylist() == [i for i in range(100) if i not in (40, 41, 42)]
    side = [record for _, record in reader.take_side_output()]
    assert [(record.topic, record.offset) for record in side] == [(topic, 40), (topic, 41), (topic, 42)]
    assert "2 JSON values, not one object" in side[2].error


def test_options_a_batch_source_does_not_take_are_plan_errors(kafka_broker):
    bootstrap = kafka_broker.bootstrap
    with pytest.raises(PlanError, match="leave key_deserializer and value_deserializer as 'bytes'"):
        KafkaSource(bootstrap, "t", batches=True, value_deserializer="json")
    with pytest.raises(PlanError, match="needs value_schema="):
        KafkaSource(bootstrap, "t", batches=True, value_format="json")
    with pytest.raises(PlanError, match="field 'offset' has the name of a column every batch has"):
        KafkaSource(bootstrap, "t", batches=True, value_format="json", value_schema=pa.schema([("offset", pa.int64())]))
    with pytest.raises(PlanError, match="pass batches=True too"):
        KafkaSource(bootstrap, "t", value_format="json", value_schema=VALUES)


def test_a_batch_stream_is_produced_a_batch_at_a_time_in_transactions(kafka_broker):
    topic = new_topic(kafka_broker)
    sink = KafkaSink(kafka_broker.bootstrap, topic, transactional_id_prefix=f"b-{topic}", config=QUIET)
    assert sink.accepts_batches
    assert not KafkaSink(kafka_broker.bootstrap, topic, value=str, transactional_id_prefix="x").accepts_batches
    writer = sink.create_writer(SinkContext(operator_name="sink", subtask_index=0, parallelism=1,
                                            send_to_driver=lambda _: None, checkpointing=True, job_id="job"))
    writer.write_batch([pa.record_batch({"key": ["a", "b"], "value": ["1", "2"]}),
                        pa.record_batch({"key": ["c"], "value": ["3"]})])
    committable = writer.pre_commit(1)
    assert committable is not None and len(committable.records) == 3  # the epoch's write-ahead log
    writer.commit([committable])
    assert sorted(read_committed(kafka_broker, topic, with_keys=True)) == [("a", "1"), ("b", "2"), ("c", "3")]
    with pytest.raises(ValueError, match="writes a batch's 'value' column"):
        writer.write_batch([pa.record_batch({"v": ["x"]})])
    writer.close()


def test_a_batch_stream_is_produced_at_least_once_with_or_without_keys(kafka_broker):
    topic = new_topic(kafka_broker)
    sink = KafkaSink(kafka_broker.bootstrap, topic, guarantee="at_least_once", config=QUIET)
    writer = sink.create_writer(SinkContext(operator_name="sink", subtask_index=0, parallelism=1,
                                            send_to_driver=lambda _: None, checkpointing=True, job_id="job"))
    writer.write_batch([pa.record_batch({"value": pa.array([b"1", b"2"], pa.binary())}),
                        pa.record_batch({"key": pa.array(["k"], pa.large_string()), "value": ["3"], "n": [3]})])
    writer.flush()
    writer.close()
    assert sorted(read_committed(kafka_broker, topic, with_keys=True), key=str) == sorted(
        [(None, "1"), (None, "2"), ("k", "3")], key=str)


def test_kafka_batches_to_a_windowed_aggregate_to_kafka_exactly_once(kafka_broker, make_env, tmp_path):
    source, out = kept_topic(kafka_broker, partitions=4, name="in"), new_topic(kafka_broker, partitions=2, name="out")
    records = 3_000
    produce(kafka_broker, source, [json.dumps({"k": i % 7, "i": i}) for i in range(records)],
            key=lambda value: str(json.loads(value)["k"]), timestamps=list(range(1000, 1000 + records)))
    env = make_env(2)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    stream = env.from_source(KafkaSource(kafka_broker.bootstrap, [source], bounded=True, batches=True,
                                         value_format="json", value_schema=VALUES, watermarks=True, idle_timeout=5.0,
                                         batch_records=500, config=QUIET))
    assert isinstance(stream, BatchStream)
    windows = stream.key_by("k").window(100, timestamp="timestamp").agg(n=("i", "count"))
    text = windows.map_batches(lambda b: pa.RecordBatch.from_arrays(
        [pc.cast(b["k"], pa.string()), pc.binary_join_element_wise(
            pc.cast(b["k"], pa.string()), pc.cast(b["window_start"], pa.string()), pc.cast(b["n"], pa.string()), ":")],
        names=["key", "value"]))
    text.sink_to(KafkaSink(kafka_broker.bootstrap, out, transactional_id_prefix=f"w-{out}", config=QUIET))
    result = env.execute("kafka-batches-windows", timeout=180)
    assert result.late_records_dropped == 0
    oracle = collections.Counter(f"{k}:{start}:{n}" for (k, start), n in
                                 collections.Counter((i % 7, (1000 + i) // 100 * 100) for i in range(records)).items())
    assert collections.Counter(read_committed(kafka_broker, out)) == oracle
