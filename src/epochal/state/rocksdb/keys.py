"""How the RocksDB backend lays out keyed state, and its view of one key group.

In every column family (one per state name): key = 2-byte big-endian key group + the canonical
bytes of the user key (:class:`~epochal.state.canonical.KeyEncoder`: equal bytes for equal keys of
one type; see :mod:`epochal.state.rocksdb.backend` on which keys are distinct), value =
:func:`epochal.serialization.dumps` of the value. Keys of a key group share a prefix and key groups
follow each other, so a key-group range is one key range (:func:`group_prefix`,
:func:`~epochal.state.rocksdict_scans.scan`), and :class:`GroupView` is one group of one state as a
mutable mapping over RocksDB.
"""

from __future__ import annotations

import pickle
from collections.abc import ItemsView, Iterator, MutableMapping, ValuesView
from itertools import islice
from typing import Any

from rocksdict import Rdict

from epochal.serialization import dumps as _dumps
from epochal.state.canonical import SCALAR_KEYS, KeyEncoder
from epochal.state.rocksdict_scans import scan, scan_keys

_loads = pickle.loads
_pickle = pickle.dumps
#: At or below every key, and above every key: prefixes are at most 0xffff and pickles start with 0x80.
START, END = b"\x00\x00", b"\xff\xff\xff"
_MISSING = object()


def group_prefix(group: int) -> bytes:
    """The first key of ``group`` (``END`` past the last possible group)."""
    return group.to_bytes(2, "big") if group < 0x10000 else END


class RangeKeyCursor:
    """The keys of column family ``cf`` in the key groups ``groups`` (a range, so one key range),
    for a state's incremental TTL cleanup (:class:`epochal.state.ttl.KeyCursor`): read ``chunk``
    keys at a time by one range scan that resumes after the last key read. Empty key groups are
    never visited, a scan costs one iterator per ``chunk`` keys (not one and a count per group),
    and keys stay the stored bytes (:class:`StoredKeys`): no key is pickled or unpickled."""

    __slots__ = ("_cf", "_lower", "_upper", "_chunk", "_from", "_entries")

    def __init__(self, cf: Rdict, groups: range, chunk: int = 256) -> None:
        self._cf = cf
        self._lower, self._upper = group_prefix(groups.start), group_prefix(groups.stop)
        self._chunk = chunk
        self._from: bytes | None = self._lower  # where the next scan starts; None: the round's last chunk was read
        self._entries = StoredKeys(cf)

    def next_keys(self) -> tuple[MutableMapping[Any, Any], list[Any]] | None:
        start = self._from
        stored = [] if start is None else list(islice(scan_keys(self._cf, start, self._upper), self._chunk))
        if not stored:
            self._from = self._lower
            return None  # the round is over
        self._from = stored[-1] + b"\x00" if len(stored) == self._chunk else None
        return self._entries, stored


class StoredKeys(MutableMapping[bytes, Any]):
    """A column family as ``{stored key: value}`` (key-group prefix and pickled key, as stored),
    for the TTL cleanup, which deletes only keys it has just read: deleting a missing key does
    nothing here (no KeyError)."""

    __slots__ = ("_cf",)

    def __init__(self, cf: Rdict) -> None:
        self._cf = cf

    def get(self, stored: bytes, default: Any = None) -> Any:
        raw = self._cf.get(stored)
        return default if raw is None else _loads(raw)

    def __getitem__(self, stored: bytes) -> Any:
        raw = self._cf.get(stored)
        if raw is None:
            raise KeyError(stored)
        return _loads(raw)

    def __setitem__(self, stored: bytes, value: Any) -> None:
        self._cf.put(stored, _dumps(value))

    def __delitem__(self, stored: bytes) -> None:
        self._cf.delete(stored)

    def __iter__(self) -> Iterator[bytes]:
        return scan_keys(self._cf, START, END)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class GroupView(MutableMapping[Any, Any]):
    """One key group of one state, as ``{key: value}``, read from and written to RocksDB.

    Values read are fresh copies (unpickled), so changing one in place changes nothing until it
    is assigned back. Iteration (keys, items, values) reads a consistent snapshot taken when it
    starts, so the view may be changed while it is iterated. ``len`` counts by scanning.
    """

    __slots__ = ("_cf", "_encode", "_get", "_prefix", "_put", "_upper")

    def __init__(self, cf: Rdict, group: int, encode: KeyEncoder) -> None:
        self._cf = cf
        self._prefix = group_prefix(group)
        self._upper = group_prefix(group + 1)
        self._encode = encode
        self._get = cf.get
        self._put = cf.put

    def get(self, key: Any, default: Any = None) -> Any:
        raw = self._get(self._prefix + (_pickle(key, 5) if type(key) in SCALAR_KEYS else self._encode(key)))
        return default if raw is None else _loads(raw)

    def __getitem__(self, key: Any) -> Any:
        raw = self._get(self._prefix + (_pickle(key, 5) if type(key) in SCALAR_KEYS else self._encode(key)))
        if raw is None:
            raise KeyError(key)
        return _loads(raw)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._put(self._prefix + (_pickle(key, 5) if type(key) in SCALAR_KEYS else self._encode(key)),
                  _dumps(value))

    def __contains__(self, key: object) -> bool:
        return self._get(self._prefix + self._encode(key)) is not None

    def __delitem__(self, key: Any) -> None:
        stored = self._prefix + self._encode(key)
        if self._get(stored) is None:
            raise KeyError(key)
        self._cf.delete(stored)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        stored = self._prefix + self._encode(key)
        raw = self._get(stored)
        if raw is None:
            if default is _MISSING:
                raise KeyError(key)
            return default
        self._cf.delete(stored)
        return _loads(raw)

    def clear(self) -> None:
        self._cf.delete_range(self._prefix, self._upper)

    def __iter__(self) -> Iterator[Any]:
        for stored in scan_keys(self._cf, self._prefix, self._upper):
            yield _loads(stored[2:])

    def __len__(self) -> int:
        return sum(1 for _ in scan_keys(self._cf, self._prefix, self._upper))

    def decoded_items(self) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` of the group in key order, from one range scan."""
        for stored, raw in scan(self._cf, self._prefix, self._upper):
            yield _loads(stored[2:]), _loads(raw)

    def items(self) -> ItemsView[Any, Any]:
        return _Items(self)

    def values(self) -> ValuesView[Any]:
        return _Values(self)

    def __repr__(self) -> str:
        return f"<RocksDB key group {int.from_bytes(self._prefix, 'big')}: {dict(self.decoded_items())!r}>"


class _Items(ItemsView[Any, Any]):
    """``items()`` of a group view: one range scan instead of a lookup per key."""

    __slots__ = ("_view",)

    def __init__(self, view: GroupView) -> None:
        super().__init__(view)
        self._view = view

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return self._view.decoded_items()


class _Values(ValuesView[Any]):
    __slots__ = ("_view",)

    def __init__(self, view: GroupView) -> None:
        super().__init__(view)
        self._view = view

    def __iter__(self) -> Iterator[Any]:
        return (value for _, value in self._view.decoded_items())
