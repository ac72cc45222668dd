"""Key groups: the stable mapping key -> key group -> subtask (papers/001 §3.1.2).

``key_group = murmur3_32(key_group_bytes(key)) mod max_parallelism``, where
``key_group_bytes`` is :func:`stable_key_bytes` without its type tag for a plain str, bytes or
int key (so the common keys hash in one C call: ``mmh3.hash(key.encode())``); the tag only
matters inside tuples, and different keys sharing a key group is harmless. Subtask ``i`` of ``p``
owns the contiguous range ``[ceil(i*maxP/p), ceil((i+1)*maxP/p) - 1]``, which is exactly the
set of key groups ``g`` with ``g * p // maxP == i``. Python's ``hash()`` is salted per process
and never decides placement: keys are hashed from an encoding that is equal for equal keys in
every process, on every machine.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import struct
from typing import Any

import mmh3

_PACK_LEN = struct.Struct("!I").pack


def stable_key_bytes(key: Any) -> bytes:
    """Encode ``key`` to bytes that are equal whenever the keys are equal (``==``).

    Keys that compare equal in Python (``1 == 1.0 == True``) share one encoding, so they share
    one key group, just as they share one entry in a dict of keyed state.

    Raises:
        TypeError: for a key type without a stable encoding; the message lists the supported ones.
    """
    kind = type(key)
    if kind is str:
        return b"s" + key.encode("utf-8", "surrogatepass")
    if kind is int or kind is bool:
        return b"i" + int_digits(int(key)).encode()
    if kind is bytes:
        return b"y" + key
    if key is None:
        return b"n"
    if kind is float:
        if key.is_integer():
            return b"i" + int_digits(int(key)).encode()
        return b"f" + repr(key).encode()
    if isinstance(key, tuple):
        parts = [b"t", _PACK_LEN(len(key))]
        for item in key:
            encoded = stable_key_bytes(item)
            parts.append(_PACK_LEN(len(encoded)))
            parts.append(encoded)
        return b"".join(parts)
    if isinstance(key, str):
        return stable_key_bytes(str(key))
    if isinstance(key, int):
        return stable_key_bytes(int(key))
    if isinstance(key, float):
        return stable_key_bytes(float(key))
    if isinstance(key, memoryview) and key.readonly:
        return b"y" + bytes(key)
    if isinstance(key, (datetime.datetime, datetime.date, datetime.time)):
        return b"d" + key.isoformat().encode()
    if dataclasses.is_dataclass(key) and not isinstance(key, type):
        return stable_key_bytes(dataclasses.astuple(key))
    item = getattr(key, "item", None)  # numpy scalars
    if callable(item) and type(key).__module__ == "numpy":
        return stable_key_bytes(item())
    if kind.__hash__ is None:
        hint = {list: "a tuple", bytearray: "bytes", set: "a tuple of its sorted items",
                dict: "a tuple of its items"}.get(kind, "a tuple of its fields")
        raise TypeError(
            f"key {_short(key)} is a {kind.__name__}, which is unhashable: keys must be hashable "
            f"(they index keyed state); return {hint} from the key selector instead")
    raise TypeError(
        f"key {_short(key)} of type {kind.__name__} has no stable encoding; key_by must return "
        "str, bytes, int, float, bool, None, date/time, a dataclass, a numpy scalar, "
        "or a tuple of these"
    )


def int_digits(number: int) -> str:
    """``str(number)``, also past Python's limit on the digits of an int's ``str`` (4,300 by
    default, ``sys.set_int_max_str_digits``): an int key of any size has its key group, the same
    in every process whatever its limit."""
    try:
        return str(number)
    except ValueError:  # more digits than this process's limit: decimal's conversion has none
        return str(decimal.Decimal(number))


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Type tags :func:`key_group_bytes` drops from a top-level key (str, int, bytes).
_UNTAGGED = frozenset(b"siy")
_hash = mmh3.hash


def key_group_bytes(key: Any) -> bytes:
    """The bytes a key's group is hashed from: :func:`stable_key_bytes`, untagged for scalars."""
    encoded = stable_key_bytes(key)
    return encoded[1:] if encoded[0] in _UNTAGGED else encoded


def key_group_of(key: Any, max_parallelism: int) -> int:
    """The key group of ``key``: the same in every process for equal keys."""
    kind = type(key)
    if kind is str:
        try:
            return _hash(key.encode(), 0, False) % max_parallelism
        except UnicodeEncodeError:  # lone surrogates: the general path encodes them
            pass
    elif kind is bytes:  # key_group_bytes of bytes is the bytes themselves (Kafka keys are bytes)
        return _hash(key, 0, False) % max_parallelism
    elif kind is int:
        try:  # int_digits inline: int keys are on the hot path of keyed shuffles
            text = str(key)
        except ValueError:
            text = int_digits(key)
        return _hash(text.encode(), 0, False) % max_parallelism
    return _hash(key_group_bytes(key), 0, False) % max_parallelism


def key_groups_of(keys: list[Any], max_parallelism: int) -> list[int]:
    """:func:`key_group_of` of every key of a batch; one C hash call per str or bytes key, no
    Python call.

    Equal to ``[key_group_of(k, max_parallelism) for k in keys]``; the batch form exists because
    key hashing is on the hot path of every keyed shuffle and keyed operator.
    """
    hash_ = _hash
    group_of = key_group_of
    try:
        return [hash_(k.encode(), 0, False) % max_parallelism if type(k) is str
                else hash_(k, 0, False) % max_parallelism if type(k) is bytes
                else group_of(k, max_parallelism) for k in keys]
    except UnicodeEncodeError:
        return [group_of(k, max_parallelism) for k in keys]


def subtask_for_key_group(key_group: int, parallelism: int, max_parallelism: int) -> int:
    """The index of the subtask (of ``parallelism``) that owns ``key_group``."""
    return key_group * parallelism // max_parallelism


def key_group_range(subtask: int, parallelism: int, max_parallelism: int) -> range:
    """The contiguous key groups owned by ``subtask`` of ``parallelism`` (may be empty)."""
    start = -(-subtask * max_parallelism // parallelism)
    end = -(-(subtask + 1) * max_parallelism // parallelism)
    return range(start, end)
