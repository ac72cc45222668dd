"""The canonical layout of a savepoint's keyed state: one layout that every state backend writes
for a ``canonical`` savepoint and every backend restores (docs/savepoints.md, "Formats").

A subtask's keyed state of one operator is one file of per-key-group blobs (each group's
``[offset, length, crc]`` in the handle, as in a checkpoint, so a restore at any parallelism
reads only the groups it owns). A blob holds one key group's states in one of two encodings,
named by the file's handle:

- **objects** (no ``encoding`` in the handle): the pickle of ``{state name: {key: value}}``.
  What the heap backends, PostgreSQL and the ``SavepointWriter`` write (one pickle per group is
  the cheapest they can do: encoding each entry on its own costs a heap savepoint 1.6-1.8x the
  CPU), and what the heap backends' checkpoints are.
- **stored bytes** (``"encoding": "pickled-entries"``, :data:`ENCODING`): the pickle of
  ``{state name: (keys, values)}``, two lists of bytes of equal length: ``keys[i]`` is the
  canonical bytes of a user key (:class:`KeyEncoder`'s pickle,
  protocol 5, memo-free for composite keys: what RocksDB stores after its 2-byte key-group
  prefix), ``values[i]`` the pickle of its value (:func:`epochal.serialization.dumps`: what
  RocksDB stores as the value). What RocksDB writes: it copies its stored bytes without
  unpickling anything, and a RocksDB restore writes them back as they are.

Every reader reads both (:func:`decoded_states` for the heap backends and the DataFrame reader,
:func:`stored_states` for a RocksDB restore), so a savepoint of any backend restores into any
other. The savepoint's metadata says ``"layout": 2`` (:data:`LAYOUT`). Layout 1 (savepoints before
2026-11-27) is the objects encoding alone, so it is still read; a handle with an encoding this
version does not know, or metadata of a later layout, is refused with a message that says so
(:func:`check_encoding`, :func:`check_layout`).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Collection
from typing import Any

from epochal.serialization import dumps as _dumps
from epochal.state.storage import CheckpointError

#: The ``encoding`` of a keyed-state handle whose groups hold stored bytes.
ENCODING = "pickled-entries"
#: The canonical layout's version, in a savepoint's metadata (``savepoint.layout``).
LAYOUT = 2

#: One key group's state as stored: state name -> (key bytes, value bytes)
Stored = dict[str, tuple[list[bytes], list[bytes]]]

_loads = pickle.loads
_pickle = pickle.dumps
#: Key types pickled with plain ``pickle.dumps`` (:class:`KeyEncoder`): their pickle does not
#: depend on identity.
SCALAR_KEYS = frozenset({str, int, bytes, float, bool, type(None)})


class KeyEncoder:
    """``key -> pickle``, the canonical bytes of a user key: equal bytes for equal keys of one type.

    Scalar keys (:data:`SCALAR_KEYS`) are ``pickle.dumps(key, protocol=5)``; any other key (tuples,
    dataclasses, date/time) is pickled without pickle's memo, because the memo makes the bytes
    depend on object identity: ``("ab", "ab")`` pickles differently when its two strings are one
    object than when they are two equal ones. Keys that are equal in Python but pickle differently
    (``1``, ``1.0`` and ``True``) stay distinct. What RocksDB stores after a key's group prefix, and
    PostgreSQL in its rows. One encoder per thread (it reuses one buffer)."""

    __slots__ = ("_buffer", "_pickler")

    def __init__(self) -> None:
        self._buffer = io.BytesIO()
        self._pickler = pickle.Pickler(self._buffer, protocol=5)
        self._pickler.fast = True  # no memo: the bytes do not depend on which parts are one object

    def __call__(self, key: Any) -> bytes:
        if type(key) in SCALAR_KEYS:
            return _pickle(key, 5)
        buffer = self._buffer
        buffer.seek(0)
        buffer.truncate()
        self._pickler.dump(key)
        return buffer.getvalue()



def encode_states(states: dict[str, dict[Any, Any]], encode_key: KeyEncoder | None = None) -> Stored:
    """``{name: {key: value}}`` as stored bytes, ``{name: (key bytes, value bytes)}``, in the
    dicts' order; states without entries are left out. Raises what
    :func:`epochal.serialization.dumps` raises for a value nothing can pickle."""
    encode = encode_key or KeyEncoder()
    out: Stored = {}
    for name, entries in states.items():
        if not entries:
            continue
        keys = [_pickle(key, 5) if type(key) in SCALAR_KEYS else encode(key) for key in entries]
        try:  # plain pickle for the whole group first: the fallback costs a second try only on failure
            values = [_pickle(value, 5) for value in entries.values()]
        except Exception:
            values = list(map(_dumps, entries.values()))
        out[name] = (keys, values)
    return out


def dump_stored(stored: Stored) -> bytes:
    """One group's blob: the pickle of ``stored`` without pickle's memo (nothing in it is shared
    or recursive; the memo's bookkeeping of every bytes object costs a third of the pickling)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=5)
    pickler.fast = True
    pickler.dump(stored)
    return buffer.getvalue()


def decode_states(stored: Stored, names: Collection[str] | None = None) -> dict[str, dict[Any, Any]]:
    """Stored bytes, ``{name: (key bytes, value bytes)}``, as ``{name: {key: value}}`` (``names``:
    only these states). Keys that decode equal (``1`` and ``1.0`` from a RocksDB savepoint,
    which keeps them apart) merge, the later one winning, as a heap backend's dict merges them."""
    return {name: dict(zip(map(_loads, keys), map(_loads, values), strict=True))
            for name, (keys, values) in stored.items() if names is None or name in names}


def check_encoding(handle: dict[str, Any], path: str) -> bool:
    """Whether keyed-state ``handle`` (a file of per-group blobs) holds stored bytes (else pickled
    dicts: the objects encoding, also layout 1's and a heap checkpoint's). Raises
    :class:`CheckpointError` for an encoding this version of epochal cannot read."""
    encoding = handle.get("encoding")
    if encoding is None:
        return False
    if encoding != ENCODING:
        raise CheckpointError(f"keyed state file {path} is encoded as {encoding!r}, which this version of epochal "
                              f"cannot read (it reads {ENCODING!r}): restore it with the epochal that wrote it",
                              path=path)
    return True


def stored_states(blob: Any, as_bytes: bool, encode_key: KeyEncoder | None = None) -> Stored:
    """One group blob, unpickled, as stored bytes (``as_bytes``: it is; else its dicts are encoded)."""
    return blob if as_bytes else encode_states(blob, encode_key)


def decoded_states(blob: Any, as_bytes: bool, names: Collection[str] | None = None) -> dict[str, dict[Any, Any]]:
    """One group blob, unpickled, as ``{name: {key: value}}`` (``as_bytes``: it holds stored bytes;
    ``names``: only these states)."""
    if as_bytes:
        return decode_states(blob, names)
    return blob if names is None else {name: entries for name, entries in blob.items() if name in names}


def check_layout(metadata: dict[str, Any], location: str) -> None:
    """Refuse (:class:`CheckpointError`) a savepoint whose metadata names a canonical layout later
    than this version of epochal reads; layouts 1 and 2 pass."""
    layout = (metadata.get("savepoint") or {}).get("layout", 1)
    if not isinstance(layout, int) or layout > LAYOUT:
        raise CheckpointError(f"savepoint {location} is in canonical layout {layout!r}, written by a later "
                              f"epochal; this version reads layouts 1 to {LAYOUT}", path=location)
