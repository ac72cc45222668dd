"""KafkaSource(batches=True) and KafkaSink's batches without a broker: the JSON decoding of a
batch's values (one row per value or the value named as bad, whatever the values hold: no row
ever shifts to another message), the runs of one partition's messages, the reader's positions,
bounded ends, watermarks and bad values over a consumer that hands out prepared
``confluent_kafka.Message``s, and the key/value bytes the sink takes from a batch's columns.
The broker-backed tests are tests/integration/test_columnar_kafka.py."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError as Codes
from confluent_kafka import Message

from epochal.connectors.base import ReaderContext
from epochal.connectors.kafka import KafkaError, KafkaSink, KafkaSource
from epochal.connectors.kafka.batches import decode_json, partition_runs
from epochal.connectors.kafka.partitions import KafkaPartitionSplit
from epochal.runtime.operators.functions import OutputTag

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string())])


def decoded(values: list[bytes | None], schema: pa.Schema = SCHEMA) -> tuple[list[tuple[Any, ...]], list[int]]:
    columns, bad = decode_json(values, schema)
    return list(zip(*(column.to_pylist() for column in columns), strict=True)), [index for index, _ in bad]


def test_a_batch_of_objects_is_one_row_per_value_in_order():
    rows, bad = decoded([b'{"k":1,"s":"a"}', b'{"k":2,"x":[1,{"y":2}]}', None, b"null", b' {"s":"\xc3\xa9"} ', b"{}"])
    assert bad == []
    assert rows == [(1, "a"), (2, None), (None, None), (None, None), (None, "é"), (None, None)]


@pytest.mark.parametrize("values,rows,bad", [
    # an empty value (no row) and a value of two objects (two rows) in one batch: as many rows as
    # values, but each row is another message's
    ([b"", b'{"k":1} {"k":2}', b'{"k":3}'], [(3, None)], [0, 1]),
    ([b'{"k":1}\n{"k":2}', b"", b'{"k":5}'], [(5, None)], [0, 1]),
    ([b"  ", b'{"k":1}{"k":2}', b'{"k":5}'], [(5, None)], [0, 1]),
    ([b'{"k":1}\r{"k":2}', b"\t", b'{"k":5}'], [(5, None)], [0, 1]),
    ([b'{"k":1}', b"", b'{"k":3}'], [(1, None), (3, None)], [1]),
])
def test_values_that_are_not_one_object_each_are_bad_and_shift_no_row(values, rows, bad):
    assert decoded(values) == (rows, bad)


@pytest.mark.parametrize("value", [b"5", b"[1]", b'"x"', b"true", b'{"k":"x"}', b'{"k":1.5}', b'{"k":1,"k":2}', b"{",
                                   b"nul", b'{"s":"\xff"}', b"\x00"])
def test_a_value_that_is_not_an_object_of_the_schema_is_bad_with_a_reason(value):
    columns, bad = decode_json([b'{"k":1}', value, b'{"k":3}'], SCHEMA)
    assert columns[0].to_pylist() == [1, 3]
    assert [index for index, _ in bad] == [1] and bad[0][1], bad


def test_a_pretty_printed_object_spanning_lines_is_read_alone():
    assert decoded([b'{\n  "k": 1,\n  "s": "a"\n}', b'{"k":2}']) == ([(1, "a"), (2, None)], [])


def test_a_non_nullable_field_makes_a_missing_or_null_value_bad():
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False)])
    assert decoded([b'{"k":1}', None, b"null", b"{}", b'{"k":4}'], schema) == ([(1,), (4,)], [1, 2, 3])


def test_a_json_null_first_in_a_batch_does_not_crash_pyarrow():
    """apache/arrow#47409: pyarrow 26 dereferences a null pointer on a top-level ``null`` that
    begins a read_json block (a SIGSEGV of the worker): checked in a child process."""
    code = ("import pyarrow as pa\nfrom epochal.connectors.kafka.batches import decode_json\n"
            "s = pa.schema([('k', pa.int64())])\n"
            "values = [b'null'] + [b'{\"k\":%d}' % i if i % 5 else b' null ' for i in range(1, 300_000)]\n"
            "columns, bad = decode_json(values, s)\n"
            "assert not bad and columns[0].to_pylist()[:6] == [None, 1, 2, 3, 4, None]\n"
            "assert decode_json([b'null'], s)[0][0].to_pylist() == [None]\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


GOOD = [b'{"k":1,"s":"a"}', b'{"k":2}', b"{}", b"null", None, b' {"k":3} ', b'{"s":"x","k":4,"z":[1,{"q":2}]}',
        b'{\n "k": 5\n}', b'\t{"k":6}\t', b'{"k":7,"s":"\xc3\xa9"}', b'{"k":null}']
BAD = [b"", b"  ", b"{", b"5", b"[1]", b'"x"', b'{"k":"x"}', b'{"k":1.5}', b'{"k":1}{"k":2}', b'{"k":1} {"k":2}',
       b'{"k":1}\n{"k":2}', b'{"k":1}\r{"k":2}', b'{"s":"\xff"}', b"\n", b"nul", b'{"k":1}}{"k":2', b"\x00"]


def oracle(value: bytes | None) -> tuple[Any, Any] | None:
    """What the row the value decodes to is by Python's json (None: bad)."""
    if value is None:
        return None, None
    try:
        document = json.loads(value)
    except ValueError:
        return None
    if document is None:
        return None, None
    if not isinstance(document, dict):
        return None
    k, s = document.get("k"), document.get("s")
    if (k is not None and (type(k) is not int)) or (s is not None and not isinstance(s, str)):
        return None
    return k, s


def test_random_batches_decode_as_pythons_json_says():
    rng = random.Random(7)
    for _ in range(80):  # (a bad value costs a few read_json calls of ~0.2 ms each)
        size = rng.choice([1, 2, 3, 17, 300])
        share_bad = rng.choice([0.0, 0.01, 0.1, 0.9])
        values = [rng.choice(BAD) if rng.random() < share_bad else rng.choice(GOOD) for _ in range(size)]
        expected = [oracle(value) for value in values]
        rows, bad = decoded(values)
        assert bad == [index for index, row in enumerate(expected) if row is None], values
        assert rows == [row for row in expected if row is not None], values


def test_runs_of_one_partition_are_found_over_the_columns():
    assert partition_runs(["t"] * 5, [0, 0, 1, 1, 0])[0] == [(0, 2), (2, 4), (4, 5)]
    runs, topics, partitions = partition_runs(["a", "a", "b", "b"], [0, 0, 0, 0])
    assert runs == [(0, 2), (2, 4)] and topics.to_pylist() == ["a", "a", "b", "b"] and partitions.type == pa.int32()
    assert partition_runs(["t"], [3])[0] == [(0, 1)]
    assert partition_runs([], [])[0] == []


# ---------------------------------------------------------------------- the reader, no broker
class Prepared:
    """A consumer whose consume() hands out prepared lists of messages."""

    def __init__(self, reads: list[list[Message]]) -> None:
        self.reads = list(reads)

    def consume(self, count: int, timeout: float) -> list[Message]:
        return self.reads.pop(0) if self.reads else []

    def close(self) -> None:
        pass


def message(partition: int, offset: int, value: bytes | None, timestamp: int = 0, topic: str = "t") -> Message:
    return Message(topic=topic, partition=partition, offset=offset, key=b"k%d" % offset, value=value,
                   timestamp=(1, timestamp))


def end_of(partition: int, offset: int) -> Message:
    return Message(topic="t", partition=partition, offset=offset, error=Codes(Codes._PARTITION_EOF))


def reader_over(reads: list[list[Message]], splits: list[KafkaPartitionSplit], **options: Any) -> Any:
    source = KafkaSource("127.0.0.1:9", "t", batches=True, discovery_interval=None, config={"log_level": 0},
                         **options)
    reader = source.create_reader(splits, {}, ReaderContext("kafka", 0, 1, False))
    reader.consumer.close()
    reader.consumer = Prepared(reads)
    return reader


def test_a_bounded_partition_reads_nothing_at_or_past_its_end_offset():
    # offset 3 is a transaction marker (never delivered): 4 and 5 were written after submit
    reader = reader_over([[message(0, 0, b"a"), message(0, 1, b"b"), message(0, 2, b"c"), message(0, 4, b"d"),
                           message(1, 7, b"x"), message(0, 5, b"e")]],
                         [KafkaPartitionSplit("t", 0, 0, stop=4), KafkaPartitionSplit("t", 1, 7, stop=20)])
    [batch] = reader.read_batch(100)
    assert batch.column("offset").to_pylist() == [0, 1, 2, 7] and batch.column("partition").to_pylist() == [0, 0, 0, 1]
    assert batch.column("value").to_pylist() == [b"a", b"b", b"c", b"x"]
    assert batch.column("key").to_pylist() == [b"k0", b"k1", b"k2", b"k7"]
    assert dict(reader.positions()) == {"t-0": 4, "t-1": 8}
    assert reader.partitions["t-0"].done and not reader.partitions["t-1"].done


def test_positions_follow_each_run_and_an_end_of_partition_after_its_records():
    # partition 1 ends with a transaction marker at offset 4: only its end (5) says it is done
    reader = reader_over([[message(0, 10, b"a"), message(1, 3, b"b"), message(0, 11, b"c"), end_of(0, 12)],
                          [end_of(1, 5)]],
                         [KafkaPartitionSplit("t", 0, 10, stop=12), KafkaPartitionSplit("t", 1, 3, stop=5)])
    [batch] = reader.read_batch(100)
    assert batch.column("offset").to_pylist() == [10, 3, 11]
    assert dict(reader.positions()) == {"t-0": 12, "t-1": 4} and reader.partitions["t-0"].done
    assert reader.read_batch(100) == [] and dict(reader.positions()) == {"t-0": 12, "t-1": 5}
    assert reader.read_batch(100) is None


def test_watermarks_come_from_the_newest_kafka_timestamp_of_each_partition():
    reader = reader_over([[message(0, 0, b"a", 1000), message(0, 1, b"b", 1500), message(1, 0, b"c", 900)]],
                         [KafkaPartitionSplit("t", 0, 0), KafkaPartitionSplit("t", 1, 0)], watermarks=True)
    assert reader.watermark() is None
    [batch] = reader.read_batch(100)
    assert batch.column("timestamp").to_pylist() == [1000, 1500, 900]
    assert reader.watermark() == 899  # min over the partitions of their newest time, less 1


def test_a_bad_json_value_fails_naming_its_message_or_goes_to_the_side_output_and_rows_stay_aligned():
    reads = [[message(0, 0, b'{"k":1}'), message(0, 1, b'{"k":"x"}'), message(0, 2, b""), message(0, 3, b'{"k":4}')]]
    options = {"value_format": "json", "value_schema": SCHEMA}
    strict = reader_over([list(reads[0])], [KafkaPartitionSplit("t", 0, 0)], **options)
    with pytest.raises(KafkaError, match=r"topic 't' partition 0 offset 1 does not deserialise .*Column\(/k\)"):
        strict.read_batch(100)
    lenient = reader_over(reads, [KafkaPartitionSplit("t", 0, 0)], errors=OutputTag("bad"), **options)
    [batch] = lenient.read_batch(100)
    assert batch.schema.names == ["key", "k", "s", "topic", "partition", "offset", "timestamp"]
    assert list(zip(batch.column("offset").to_pylist(), batch.column("k").to_pylist(), strict=True)) == [(0, 1), (3, 4)]
    assert batch.column("key").to_pylist() == [b"k0", b"k3"]
    side = lenient.take_side_output()
    assert [(record.offset, record.value) for _, record in side] == [(1, b'{"k":"x"}'), (2, b"")]
    assert "an empty value" in side[1][1].error
    assert dict(lenient.positions()) == {"t-0": 4}


# ---------------------------------------------------------------------- the sink's batches
def test_a_sink_batch_gives_each_row_its_key_and_value_as_bytes_from_any_binary_or_string_column():
    sink = KafkaSink("127.0.0.1:9", "out", guarantee="at_least_once")
    batch = pa.record_batch({"key": pa.array(["a", None], pa.string_view()),
                             "value": pa.array([b"1", b"2"], pa.binary_view()), "n": [1, 2]})
    assert sink.serialize_batch([batch, pa.record_batch({"value": pa.array(["é"], pa.large_string())})]) == [
        ("out", b"a", b"1", None, None), ("out", None, b"2", None, None), ("out", None, "é".encode(), None, None)]
    with pytest.raises(ValueError, match="'value' column as bytes: it must be binary or string, not int64"):
        sink.serialize_batch([pa.record_batch({"value": [1]})])
    with pytest.raises(ValueError, match="writes a batch's 'value' column .* the batches have key, n"):
        sink.serialize_batch([pa.record_batch({"key": ["a"], "n": [1]})])
