"""Key groups: every group has exactly one owner, and placement is the same in every process."""

from __future__ import annotations

import dataclasses
import decimal
import json
import os
import subprocess
import sys

import pytest

from epochal.plan.keygroups import (
    key_group_bytes,
    key_group_of,
    key_group_range,
    key_groups_of,
    stable_key_bytes,
    subtask_for_key_group,
)


@pytest.mark.parametrize("max_parallelism", [1, 7, 128, 1000])
def test_every_key_group_has_exactly_one_owner(max_parallelism):
    for parallelism in range(1, max_parallelism + 1):
        owners = [0] * max_parallelism
        for subtask in range(parallelism):
            for group in key_group_range(subtask, parallelism, max_parallelism):
                owners[group] += 1
                assert subtask_for_key_group(group, parallelism, max_parallelism) == subtask
        assert owners == [1] * max_parallelism, parallelism


def test_ranges_are_contiguous_and_balanced():
    ranges = [key_group_range(i, 3, 128) for i in range(3)]
    assert [r.start for r in ranges] == [0, 43, 86]
    assert ranges[-1].stop == 128
    assert max(len(r) for r in ranges) - min(len(r) for r in ranges) <= 1


def test_equal_keys_share_an_encoding():
    assert stable_key_bytes(1) == stable_key_bytes(1.0) == stable_key_bytes(True)
    assert stable_key_bytes((1, "a")) == stable_key_bytes((1.0, "a"))
    assert stable_key_bytes("1") != stable_key_bytes(1)
    assert stable_key_bytes(("ab", "c")) != stable_key_bytes(("a", "bc"))


@pytest.mark.parametrize("key,hint", [([1, "a"], "return a tuple"), ({"a": 1}, "a tuple of its items"),
                                      (bytearray(b"x"), "return bytes"), ((1, [2]), "return a tuple")])
def test_unhashable_keys_are_refused_with_a_hint(key, hint):
    # such a key could be hashed to a group but never index keyed state (a dict)
    with pytest.raises(TypeError, match="unhashable") as raised:
        stable_key_bytes(key)
    assert hint in str(raised.value)


def test_dataclass_and_numpy_keys():
    import numpy as np

    @dataclasses.dataclass(frozen=True)
    class Point:
        x: int
        y: int

    assert stable_key_bytes(Point(1, 2)) == stable_key_bytes((1, 2))
    assert key_group_of(np.int64(5), 128) == key_group_of(5, 128)


def test_unsupported_key_type_has_a_clear_error():
    with pytest.raises(TypeError, match="no stable encoding"):
        stable_key_bytes(object())


KEYS = ["alpha", "beta", "", "ü", 0, 1, -17, 2**70, 3.5, None, b"raw", ("a", 1), (("n",), 2.0), True]


def _groups_in_subprocess(seed: str) -> list[int]:
    code = ("import json, sys; from epochal.plan.keygroups import key_group_of; "
            f"keys = {KEYS!r}; print(json.dumps([key_group_of(k, 128) for k in keys]))")
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_key_groups_are_identical_across_processes_with_different_hash_seeds():
    here = [key_group_of(k, 128) for k in KEYS]
    assert _groups_in_subprocess("1") == here
    assert _groups_in_subprocess("4242") == here
    # Python's own hash() would differ between those processes for str keys; ours must not.


def test_the_fast_paths_give_the_groups_of_the_general_encoding():
    """str and bytes keys (Kafka's) skip stable_key_bytes; their groups must not move."""
    import mmh3

    keys = ["k1", "", "\u00e9t\u00e9", b"k1", b"", bytes(range(256)), 7, -3, 2.5, None, ("k", 1), (b"k", "k")]
    for max_parallelism in (1, 128, 32768):
        expected = [mmh3.hash(key_group_bytes(k), 0, False) % max_parallelism for k in keys]
        assert [key_group_of(k, max_parallelism) for k in keys] == expected
        assert key_groups_of(keys, max_parallelism) == expected
    assert key_group_bytes(b"k1") == b"k1"


def test_an_int_key_past_pythons_digit_limit_has_a_key_group():
    """str() of an int of more than 4,300 digits raises ValueError (sys.set_int_max_str_digits);
    such a key is still a hashable key and must be placed, equal to its decimal digits' group."""
    import mmh3

    huge = 10**5000 + 7
    expected = mmh3.hash(decimal.Decimal(huge).to_eng_string().encode(), 0, False) % 128
    assert key_group_of(huge, 128) == expected
    assert key_groups_of(["a", huge, 3], 128)[1] == expected
    assert stable_key_bytes(huge) == b"i" + str(decimal.Decimal(huge)).encode()
    assert stable_key_bytes((huge, "x")) != stable_key_bytes((huge + 1, "x"))
    limit = sys.get_int_max_str_digits()
    try:
        sys.set_int_max_str_digits(0)  # no limit: the same group from str() itself
        assert key_group_of(huge, 128) == expected == mmh3.hash(str(huge).encode(), 0, False) % 128
    finally:
        sys.set_int_max_str_digits(limit)
