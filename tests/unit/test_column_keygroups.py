"""Key groups of Arrow key columns: exactly the row path's key group of each row's Python key,
whether the extension hashes the buffers or the rows fall back to Python."""

from __future__ import annotations

import datetime
import decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochal.plan import column_keygroups
from epochal.plan.column_keygroups import column_keys, key_groups_of_columns
from epochal.plan.keygroups import key_group_of

MAX_PARALLELISMS = (1, 7, 128, 32768)

INT_TYPES = {
    pa.int8(): (-(2**7), 2**7 - 1), pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1), pa.int64(): (-(2**63), 2**63 - 1),
    pa.uint8(): (0, 2**8 - 1), pa.uint16(): (0, 2**16 - 1),
    pa.uint32(): (0, 2**32 - 1), pa.uint64(): (0, 2**64 - 1),
}
TEXT = st.text()  # any code point but lone surrogates (Arrow strings are UTF-8), empty included
BLOB = st.binary(max_size=40) | st.sampled_from([b"", b"\x00", b"\x00\x00a\x00"])


KINDS = [*INT_TYPES, "bool", "string", "binary", "large_string", "large_binary", "dictionary",
         "fixed_size_binary", "null", "float64", "date32"]
KINDS += [view for view in ("string_view", "binary_view") if hasattr(pa, view)]  # pyarrow 16 and later


def oracle(columns, max_parallelism):
    return [key_group_of(key, max_parallelism) for key in column_keys(columns)]


def assert_same_groups(columns):
    for max_parallelism in MAX_PARALLELISMS:
        got = key_groups_of_columns(columns, max_parallelism)
        assert got.dtype == np.int32
        assert got.tolist() == oracle(columns, max_parallelism), (columns, max_parallelism)


@st.composite
def column_kinds(draw):
    """(a strategy for one value, how a list of values becomes an Arrow array)."""
    kind = draw(st.sampled_from(KINDS))
    if isinstance(kind, pa.DataType):
        low, high = INT_TYPES[kind]
        edges = st.sampled_from([low, high, 0, -1 if low else 1])
        return st.integers(low, high) | edges, lambda values: pa.array(values, kind)
    if kind == "bool":
        return st.booleans(), lambda values: pa.array(values, pa.bool_())
    if kind in ("string", "large_string", "string_view"):
        return TEXT, lambda values: pa.array(values, getattr(pa, kind)())
    if kind in ("binary", "large_binary", "binary_view"):
        return BLOB, lambda values: pa.array(values, getattr(pa, kind)())
    if kind == "dictionary":
        return st.sampled_from(["a", "b", "", "ключ", "k12345"]), lambda values: pa.array(values).dictionary_encode()
    if kind == "fixed_size_binary":
        width = draw(st.integers(0, 5))
        return st.binary(min_size=width, max_size=width), lambda values: pa.array(values, pa.binary(width))
    if kind == "float64":  # not compiled: the row path's encoding, alone or as a tuple's item
        return st.floats() | st.integers(-5, 5).map(float), lambda values: pa.array(values, pa.float64())
    if kind == "date32":
        return st.dates(), lambda values: pa.array(values, pa.date32())
    return st.none(), lambda values: pa.array(values, pa.null())


@st.composite
def key_columns(draw):
    """1 to 3 columns of 0 to 12 rows, with nulls, each maybe a slice of a longer array."""
    rows = draw(st.integers(0, 12))
    columns = []
    for _ in range(draw(st.integers(1, 3))):
        values, make = draw(column_kinds())
        maybe = values | st.none() if draw(st.booleans()) else values
        before = draw(st.lists(maybe, max_size=3))
        after = draw(st.lists(maybe, max_size=3))
        whole = make(before + draw(st.lists(maybe, min_size=rows, max_size=rows)) + after)
        columns.append(whole.slice(len(before), rows))
    return columns


def test_the_extension_is_built():
    assert column_keygroups._native is not None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key_columns())
def test_compiled_groups_are_the_row_paths(columns):
    assert_same_groups(columns)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key_columns())
def test_fallback_groups_are_the_row_paths(columns):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(column_keygroups, "_native", None)
        assert_same_groups(columns)


@pytest.mark.parametrize("kind", [pa.int64(), pa.uint64(), pa.int8(), pa.uint8(), pa.int32()])
def test_int_extremes_hash_as_their_decimal_digits(kind):
    low, high = INT_TYPES[kind]
    column = pa.array([low, low + 1, -1 if low else 1, 0, 1, 9, 10, 99, 100, high - 1, high, None], kind)
    assert_same_groups([column])
    assert_same_groups([column, column])


def test_strings_of_many_lengths_and_scripts():
    words = ["", "a", "ab", "abc", "abcd", "abcde", "é", "日本語", "🎉x", "\x00", "k12345", "x" * 1000]
    assert_same_groups([pa.array(words)])
    assert_same_groups([pa.array(words, pa.large_string()), pa.array(words[::-1]).dictionary_encode()])


def test_floats_dates_and_timestamps_fall_back_alone_or_beside_compiled_columns():
    floats = pa.array([1.0, 1.5, None, -0.0, float("inf"), 3.0])
    dates = pa.array([datetime.date(2024, 1, d) for d in range(1, 6)] + [None])
    stamps = pa.array([datetime.datetime(2024, 1, 1, h) for h in range(6)], pa.timestamp("us"))
    words = pa.array(["a", "b", None, "", "é", "a"])
    for columns in ([floats], [dates], [stamps], [words, floats], [dates, words], [floats, stamps, words],
                    [words.slice(1), stamps.slice(1)]):
        assert_same_groups(columns)
    # a float key equal to an int shares the int's key group, as in the row path
    as_float, as_int = (key_groups_of_columns([pa.array([3.0])], 128), key_groups_of_columns([pa.array([3])], 128))
    assert as_float.tolist() == as_int.tolist()


def test_chunked_arrays_and_no_rows():
    chunked = pa.chunked_array([["a", "b"], ["c"]])
    assert key_groups_of_columns([chunked], 7).tolist() == [key_group_of(k, 7) for k in "abc"]
    assert key_groups_of_columns([pa.array([], pa.string())], 7).tolist() == []
    assert key_groups_of_columns([pa.array([], pa.int64()), pa.array([], pa.binary())], 7).tolist() == []
    assert key_groups_of_columns([], 7).tolist() == []
    assert key_groups_of_columns([pa.array(["k"])], 2**31).tolist() == [key_group_of("k", 2**31)]


@pytest.mark.parametrize("native", [True, False])
def test_errors_are_the_row_paths(native, monkeypatch):
    if not native:
        monkeypatch.setattr(column_keygroups, "_native", None)
    with pytest.raises(ValueError):
        key_groups_of_columns([pa.array([1, 2]), pa.array(["a"])], 7)
    decimals = pa.array([decimal.Decimal("1.5")])
    with pytest.raises(TypeError, match="no stable encoding"):
        key_groups_of_columns([decimals], 7)
    with pytest.raises(TypeError, match="no stable encoding"):
        key_groups_of_columns([pa.array(["a"]), decimals], 7)


def test_the_extension_refuses_offsets_outside_the_data():
    native = column_keygroups._native
    offsets = pa.py_buffer(np.array([0, 2, 99], dtype=np.int32).tobytes())
    data = pa.py_buffer(b"abcd")
    out = np.empty(2, dtype=np.int32)
    with pytest.raises(ValueError, match="outside"):
        native.key_groups(out, 7, [(native.BINARY32, ord("s"), 0, None, offsets, data, 0)])
    with pytest.raises(ValueError, match="offsets buffer"):
        native.key_groups(out, 7, [(native.BINARY32, ord("s"), 1, None, offsets, data, 0)])
    with pytest.raises(ValueError, match="max_parallelism"):
        native.key_groups(out, 0, [(native.NULL, ord("n"), 0, None, None, None, 0)])
