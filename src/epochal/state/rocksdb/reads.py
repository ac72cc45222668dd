"""Reading a RocksDB checkpoint (or database) read-only, on any thread: its key groups decoded
(:func:`read_key_groups`, what a restore into another backend reads) or as stored bytes
(:func:`read_stored_groups`, what a canonical savepoint writes when the native reader is not in
use), and the read-only instance itself (:func:`open_read_only`, which the read_committed views
of :mod:`epochal.state.rocksdb.views` open too). The checkpoint is one that
:meth:`~epochal.state.rocksdb.backend.RocksDBKeyedStateBackend.local_checkpoint` made (or a copy of
one, :mod:`epochal.state.rocksdb.checkpoints`), laid out as :mod:`epochal.state.rocksdb.keys` says;
nothing writes to it while it is read."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from rocksdict import AccessType, Options, Rdict

from epochal.state.canonical import Stored
from epochal.state.rocksdb.keys import group_prefix
from epochal.state.rocksdict_scans import scan

__all__ = ["close_database", "open_read_only", "read_key_groups", "read_stored_groups"]

_loads = pickle.loads


def open_read_only(path: str) -> tuple[Rdict, dict[str, Rdict]]:
    """A read-only instance of the database (or checkpoint) at ``path`` and all its column
    families by name. It writes nothing into ``path`` and takes no lock."""
    options = Options(raw_mode=True)
    names = Rdict.list_cf(path, options)
    db = Rdict(path, options, column_families={n: options for n in names if n != "default"} or None,
               access_type=AccessType.read_only(False))
    return db, {name: db.get_column_family(name) for name in names}


def close_database(db: Rdict, cfs: dict[str, Rdict]) -> None:
    """Close ``db`` and its column families ``cfs`` (as :func:`open_read_only` returns them, or a
    backend's own)."""
    for cf in cfs.values():
        cf.close()
    db.close()


def read_key_groups(checkpoint_dir: str, key_groups: range,
                    names: frozenset[str] | None = None) -> Iterator[tuple[int, dict[str, dict[Any, Any]]]]:
    """``(group, {state name: {key: value}})`` for each group of ``key_groups`` that has state
    in the checkpoint at ``checkpoint_dir``, in group order, one group in memory at a time
    (``names``: of these states only; the other column families are not read).

    Assumes ``checkpoint_dir`` holds such a checkpoint (see the module doc); opens it read-only
    and reads each group with a range scan (a seek) per column family, never a full scan. The
    instance is closed when the iterator is exhausted or closed (or garbage-collected).
    """
    db, cfs = open_read_only(checkpoint_dir)
    wanted = cfs if names is None else {name: cf for name, cf in cfs.items() if name in names}
    try:
        for group in key_groups:
            lower, upper = group_prefix(group), group_prefix(group + 1)
            states: dict[str, dict[Any, Any]] = {}
            for name, cf in wanted.items():
                entries = {_loads(stored[2:]): _loads(raw) for stored, raw in scan(cf, lower, upper)}
                if entries:
                    states[name] = entries
            if states:
                yield group, states
    finally:
        close_database(db, cfs)


def read_stored_groups(checkpoint_dir: str, key_groups: range) -> Iterator[tuple[int, Stored]]:
    """:func:`read_key_groups` without decoding: ``(group, {state name: (key bytes, value
    bytes)})`` (:mod:`epochal.state.canonical`: the key without its group prefix, the value as
    stored), in group order, for a canonical savepoint. Nothing is unpickled; the scans read
    ahead and keep no block in the cache (``scan(..., bulk=True)``)."""
    db, cfs = open_read_only(checkpoint_dir)
    try:
        for group in key_groups:
            lower, upper = group_prefix(group), group_prefix(group + 1)
            states: Stored = {}
            for name, cf in cfs.items():
                keys: list[bytes] = []
                values: list[bytes] = []
                add_key, add_value = keys.append, values.append
                for stored, raw in scan(cf, lower, upper, bulk=True):
                    add_key(stored[2:])
                    add_value(raw)
                if keys:
                    states[name] = (keys, values)
            if states:
                yield group, states
    finally:
        close_database(db, cfs)
