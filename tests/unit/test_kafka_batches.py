"""KafkaSource(batches=True) without a broker: the JSON decoding of a batch's values (one row per
value or the value named as bad, whatever the values hold: no row ever shifts to another
message). The broker-backed tests are tests/integration/test_columnar_kafka.py."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest

from epochal.connectors.kafka.batches import decode_json

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
