"""Out-of-core keyed state: a keyed-state backend on RocksDB (through ``rocksdict``).

Layout, as in Flink's RocksDB backend: one RocksDB database per operator subtask, in a local
working directory that the backend owns; one column family per state name (the default column
family holds a state only if the state is named ``"default"``); in every column family

    key   = 2-byte big-endian key group + pickle of the user key
    value = :func:`epochal.serialization.dumps` of the value (read back with ``pickle.loads``)

RocksDB orders keys bytewise, so all keys of a key group share a prefix and key groups follow
each other in order: the state of any key-group range is one contiguous key range. That makes
the operations of a rescaled restore range operations: reading some groups of a checkpoint is a
range scan per column family (:func:`read_key_groups`), loading them is a scan written into one
SST file that is ingested whole (:meth:`~RocksDBKeyedStateBackend.ingest_key_groups`), and
dropping the groups a subtask no longer owns is one ``delete_range`` per column family
(:meth:`~RocksDBKeyedStateBackend.delete_key_groups_outside`). A subtask whose groups all come
from one predecessor (a restore at the same parallelism) takes that predecessor's checkpoint as
its database, files as they are, and drops the rest by range
(:meth:`~RocksDBKeyedStateBackend.adopt_checkpoint`).

User keys are encoded with pickle, not with the ``==``-preserving encoding key groups are hashed
from, so keys that are equal in Python but pickle differently (``1``, ``1.0`` and ``True``;
``0.0`` and ``-0.0``) are *distinct* keys here, while the heap backend's dicts merge them.
Scalar keys (str, int, bytes, float, bool, None) use ``pickle.dumps(key, protocol=5)``; any other
key (tuples, dataclasses, date/time) is pickled without pickle's memo, because the memo makes the
bytes depend on object identity: ``("ab", "ab")`` pickles differently when its two strings are
one object than when they are two equal ones. Keys must be picklable by plain pickle.

Durability comes from checkpoints only: the write-ahead log is off and the working directory is
wiped when a backend opens it, so :meth:`~RocksDBKeyedStateBackend.local_checkpoint` flushes the
memtables before linking the files. A backend is used by one thread at a time; the module
functions open their own read-only instance and may run on any thread.
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
from collections.abc import ItemsView, Iterator, MutableMapping, ValuesView
from typing import Any, cast

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    Checkpoint,
    IngestExternalFileOptions,
    Options,
    Rdict,
    ReadOptions,
    SstFileWriter,
    WriteBatch,
    WriteOptions,
)

from epochal.serialization import dumps as _dumps
from epochal.state.backend import Captured, GroupTables, KeyedStateBackend

__all__ = ["RocksDBKeyedStateBackend", "read_key_groups"]

_loads = pickle.loads
_pickle = pickle.dumps
#: Key types pickled with plain ``pickle.dumps``: their pickle does not depend on identity.
_SCALAR_KEYS = frozenset({str, int, bytes, float, bool, type(None)})
#: At or below every key, and above every key: prefixes are at most 0xffff and pickles start with 0x80.
_START, _END = b"\x00\x00", b"\xff\xff\xff"
_MISSING = object()


def _prefix(group: int) -> bytes:
    """The first key of ``group`` (``_END`` past the last possible group)."""
    return group.to_bytes(2, "big") if group < 0x10000 else _END


def _scan(cf: Rdict, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of ``cf`` in ``[lower, upper)``, in key order.

    Two rocksdict quirks: iterators ignore ``iterate_lower_bound`` (``from_key`` seeks instead),
    and an iterator does not keep its ReadOptions alive although it reads the upper bound from
    them (a dropped one ends the scan early at random), so this generator holds them."""
    opts = ReadOptions()
    opts.set_iterate_upper_bound(upper)
    yield from cast(Iterator[tuple[bytes, bytes]], cf.items(from_key=lower, read_opt=opts))


def _scan_keys(cf: Rdict, lower: bytes, upper: bytes) -> Iterator[bytes]:
    """The keys of ``cf`` in ``[lower, upper)`` (see :func:`_scan`)."""
    opts = ReadOptions()
    opts.set_iterate_upper_bound(upper)
    yield from cast(Iterator[bytes], cf.keys(from_key=lower, read_opt=opts))


class _KeyEncoder:
    """``key -> pickle`` that gives equal bytes for equal keys of one type (see the module doc)."""

    __slots__ = ("_buffer", "_pickler")

    def __init__(self) -> None:
        self._buffer = io.BytesIO()
        self._pickler = pickle.Pickler(self._buffer, protocol=5)
        self._pickler.fast = True  # no memo: the bytes do not depend on which parts are one object

    def __call__(self, key: Any) -> bytes:
        if type(key) in _SCALAR_KEYS:
            return _pickle(key, 5)
        buffer = self._buffer
        buffer.seek(0)
        buffer.truncate()
        self._pickler.dump(key)
        return buffer.getvalue()


class _GroupView(MutableMapping[Any, Any]):
    """One key group of one state, as ``{key: value}``, read from and written to RocksDB.

    Values read are fresh copies (unpickled), so changing one in place changes nothing until it
    is assigned back. Iteration (keys, items, values) reads a consistent snapshot taken when it
    starts, so the view may be changed while it is iterated. ``len`` counts by scanning.
    """

    __slots__ = ("_cf", "_encode", "_get", "_prefix", "_put", "_upper")

    def __init__(self, cf: Rdict, group: int, encode: _KeyEncoder) -> None:
        self._cf = cf
        self._prefix = _prefix(group)
        self._upper = _prefix(group + 1)
        self._encode = encode
        self._get = cf.get
        self._put = cf.put

    def get(self, key: Any, default: Any = None) -> Any:
        raw = self._get(self._prefix + (_pickle(key, 5) if type(key) in _SCALAR_KEYS else self._encode(key)))
        return default if raw is None else _loads(raw)

    def __getitem__(self, key: Any) -> Any:
        raw = self._get(self._prefix + (_pickle(key, 5) if type(key) in _SCALAR_KEYS else self._encode(key)))
        if raw is None:
            raise KeyError(key)
        return _loads(raw)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._put(self._prefix + (_pickle(key, 5) if type(key) in _SCALAR_KEYS else self._encode(key)),
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
        for stored in _scan_keys(self._cf, self._prefix, self._upper):
            yield _loads(stored[2:])

    def __len__(self) -> int:
        return sum(1 for _ in _scan_keys(self._cf, self._prefix, self._upper))

    def decoded_items(self) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` of the group in key order, from one range scan."""
        for stored, raw in _scan(self._cf, self._prefix, self._upper):
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

    def __init__(self, view: _GroupView) -> None:
        super().__init__(view)
        self._view = view

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return self._view.decoded_items()


class _Values(ValuesView[Any]):
    __slots__ = ("_view",)

    def __init__(self, view: _GroupView) -> None:
        super().__init__(view)
        self._view = view

    def __iter__(self) -> Iterator[Any]:
        return (value for _, value in self._view.decoded_items())


def _open_read_only(path: str) -> tuple[Rdict, dict[str, Rdict]]:
    """A read-only instance of the database (or checkpoint) at ``path`` and all its column
    families by name. It writes nothing into ``path`` and takes no lock."""
    options = Options(raw_mode=True)
    names = Rdict.list_cf(path, options)
    db = Rdict(path, options, column_families={n: options for n in names if n != "default"} or None,
               access_type=AccessType.read_only(False))
    return db, {name: db.get_column_family(name) for name in names}


def _close(db: Rdict, cfs: dict[str, Rdict]) -> None:
    for cf in cfs.values():
        cf.close()
    db.close()


def read_key_groups(checkpoint_dir: str, key_groups: range) -> Iterator[tuple[int, dict[str, dict[Any, Any]]]]:
    """``(group, {state name: {key: value}})`` for each group of ``key_groups`` that has state
    in the checkpoint at ``checkpoint_dir``, in group order, one group in memory at a time.

    Assumes ``checkpoint_dir`` holds a checkpoint made by
    :meth:`RocksDBKeyedStateBackend.local_checkpoint` (or a copy of one) that nothing writes to
    while it is read; opens it read-only and reads each group with a range scan (a seek) per
    column family, never a full scan. The instance is closed when the iterator is exhausted or
    closed (or garbage-collected).
    """
    db, cfs = _open_read_only(checkpoint_dir)
    try:
        for group in key_groups:
            lower, upper = _prefix(group), _prefix(group + 1)
            states: dict[str, dict[Any, Any]] = {}
            for name, cf in cfs.items():
                entries = {_loads(stored[2:]): _loads(raw) for stored, raw in _scan(cf, lower, upper)}
                if entries:
                    states[name] = entries
            if states:
                yield group, states
    finally:
        _close(db, cfs)


class RocksDBKeyedStateBackend(KeyedStateBackend):
    """Keyed state of one operator subtask in a RocksDB database in ``directory``.

    ``directory`` is the backend's own working directory on local disk: whatever is there is
    deleted first; if ``restore_from`` names a local checkpoint directory (one made by
    :meth:`local_checkpoint`, on the same file system for hard links), the database starts as a
    copy of it (SST files hard-linked, the others copied) without the groups outside
    ``key_groups``. ``write_buffer_bytes`` is the memtable size of each column family (state
    name); ``block_cache_bytes`` the read cache shared by all of them. Not thread-safe: one
    thread at a time (the task thread).
    """

    def __init__(self, max_parallelism: int, key_groups: range, directory: str, *,
                 write_buffer_bytes: int = 64 << 20, block_cache_bytes: int = 64 << 20,
                 restore_from: str | None = None) -> None:
        if not 0 < max_parallelism <= 0x10000:
            raise ValueError(f"max_parallelism must be in 1..65536 (2-byte key groups), got {max_parallelism}")
        super().__init__(max_parallelism, key_groups)
        self.directory = os.path.abspath(directory)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(block_cache_bytes))
        table.set_bloom_filter(10, False)  # a get of a key not yet seen rarely reads a block
        self._options = options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_size(write_buffer_bytes)
        options.set_block_based_table_factory(table)
        options.set_keep_log_file_num(2)
        self._write_options = WriteOptions()
        self._write_options.disable_wal = True  # type: ignore[method-assign,assignment]  # a property
        self._encode = _KeyEncoder()
        self._open(restore_from)

    def _open(self, restore_from: str | None) -> None:
        """(Re)create the database in ``directory``: empty, or a copy of ``restore_from`` without
        the groups outside ``key_groups``."""
        shutil.rmtree(self.directory, ignore_errors=True)
        if restore_from is not None:
            _clone_checkpoint(restore_from, self.directory)
        options = self._options
        names = Rdict.list_cf(self.directory, options) if restore_from is not None else ["default"]
        self._db = Rdict(self.directory, options,
                         column_families={n: options for n in names if n != "default"} or None)
        self._db.set_write_options(self._write_options)
        self._cfs: dict[str, Rdict] = {}
        for name in names:
            self._column_family(name, existing=True)
        self._tables: dict[str, GroupTables] = {}
        self._closed = False
        if restore_from is not None:
            self.delete_key_groups_outside(self.key_groups)

    def adopt_checkpoint(self, checkpoint_dir: str) -> None:
        """Start over as a copy of the checkpoint at ``checkpoint_dir`` (a predecessor's,
        downloaded) without the groups outside ``key_groups``: its SST files hard-linked where
        the file system allows (else copied), nothing decoded or rewritten, as Flink restores a
        RocksDB subtask that takes one predecessor's key groups. Assumes nothing used the state
        yet (a restore, before the operators open); raises ``RuntimeError`` otherwise."""
        if self._tables or self._closed:
            raise RuntimeError("a RocksDB backend adopts a checkpoint only before its state is used")
        _close(self._db, self._cfs)
        self._open(checkpoint_dir)

    def _column_family(self, name: str, existing: bool = False) -> Rdict:
        """The column family of state ``name``, created if new."""
        cf = self._cfs.get(name)
        if cf is None:
            if existing or name == "default":
                cf = self._db.get_column_family(name)
            else:
                cf = self._db.create_column_family(name, self._options)
            cf.set_write_options(self._write_options)
            self._cfs[name] = cf
        return cf

    def owned_table(self, name: str) -> GroupTables:
        """State ``name`` as ``{owned group: view}``; the views read and write RocksDB (values read
        are copies: see :class:`KeyedStateBackend`). Built once per name and then cached."""
        table = self._tables.get(name)
        if table is None:
            cf = self._column_family(name)
            table = self._tables[name] = {group: _GroupView(cf, group, self._encode) for group in self.key_groups}
        return table

    def capture(self) -> Captured:
        """A full copy of the state, ``{group: {name: {key: value}}}``, read by scanning every
        column family (O(state size), in memory): prefer :meth:`local_checkpoint` for snapshots."""
        by_group: Captured = {}
        for name, cf in self._cfs.items():
            current = -1
            entries: dict[Any, Any] = {}
            for stored, raw in _scan(cf, _START, _END):
                group = stored[0] << 8 | stored[1]
                if group != current:
                    current, entries = group, {}
                    by_group.setdefault(group, {})[name] = entries
                entries[_loads(stored[2:])] = _loads(raw)
        return by_group

    def restore_group(self, group: int, states: dict[str, dict[Any, Any]]) -> None:
        """Replace the state of ``group`` (owned) for each name in ``states``, in one write batch."""
        if group not in self.key_groups:
            raise ValueError(f"key group {group} is not owned by this backend ({self.key_groups})")
        prefix, upper = _prefix(group), _prefix(group + 1)
        batch = WriteBatch(raw_mode=True)
        for name, entries in states.items():
            self._column_family(name)
            handle = self._db.get_column_family_handle(name)
            batch.delete_range(prefix, upper, handle)
            for key, value in entries.items():
                batch.put(prefix + self._encode(key), _dumps(value), handle)
            del handle  # a live handle keeps the database (and its lock) open after close()
        self._db.write(batch, self._write_options)

    def entry_count(self) -> int:
        """Number of (state name, key) entries, counted by scanning the keys (O(state size))."""
        return sum(sum(1 for _ in _scan_keys(cf, _START, _END)) for cf in self._cfs.values())

    def local_checkpoint(self, path: str) -> list[str]:
        """Flush every memtable and make a RocksDB checkpoint at ``path`` (which must not exist):
        SST files are hard links (``path`` must be on the directory's file system, else RocksDB
        copies them), the small metadata files copies. Returns the names of the files in ``path``.

        The synchronous part of a snapshot: afterwards the live database may change freely while
        the caller uploads (or reads, :func:`read_key_groups`) the files, which never change."""
        for cf in self._cfs.values():
            cf.flush()
        Checkpoint(self._db).create_checkpoint(path)
        return sorted(os.listdir(path))

    def ingest_key_groups(self, checkpoint_dir: str, key_groups: range) -> int:
        """Load the entries of ``key_groups`` (clipped to the owned groups) from the checkpoint at
        ``checkpoint_dir`` (another subtask's, before a rescale): per column family, a range scan
        written into one SST file that RocksDB ingests (moves in). Returns the entries loaded.

        Assumes the groups hold no state here yet, or that the checkpoint's entries should win."""
        groups = range(max(key_groups.start, self.key_groups.start), min(key_groups.stop, self.key_groups.stop))
        if not groups:
            return 0
        lower, upper = _prefix(groups.start), _prefix(groups.stop)
        staging = self.directory + ".ingest"
        os.makedirs(staging, exist_ok=True)
        ingest = IngestExternalFileOptions()
        ingest.set_move_files(True)
        total = 0
        db, cfs = _open_read_only(checkpoint_dir)
        try:
            for index, (name, source) in enumerate(cfs.items()):
                path = os.path.join(staging, f"{index}.sst")
                writer = SstFileWriter(self._options)
                count = 0
                for stored, raw in _scan(source, lower, upper):  # in key order, as the writer needs
                    if not count:
                        writer.open(path)
                    writer[stored] = raw
                    count += 1
                if count:  # rocksdict cannot finish an empty SST file
                    writer.finish()
                    self._column_family(name).ingest_external_file([path], ingest)
                    total += count
        finally:
            _close(db, cfs)
            shutil.rmtree(staging, ignore_errors=True)
        return total

    def delete_key_groups_outside(self, key_groups: range) -> None:
        """Delete every entry whose group is not in ``key_groups``: two ``delete_range`` per
        column family, whatever the amount of state (the space is reclaimed by compaction)."""
        bounds = [_START, _prefix(key_groups.start), _prefix(key_groups.stop), _END] if key_groups else [_START, _END]
        spans = list(zip(bounds[::2], bounds[1::2], strict=True))
        for cf in self._cfs.values():
            for begin, end in spans:
                if begin < end:
                    cf.delete_range(begin, end)

    def close(self) -> None:
        """Close the database (idempotent); the views then raise ``DbClosedError``. Open
        iterators of the views keep the database (and its lock) alive until they are dropped."""
        if self._closed:
            return
        self._closed = True
        _close(self._db, self._cfs)

    def dispose(self) -> None:
        """Close the database and delete its working directory."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _clone_checkpoint(source: str, target: str) -> None:
    """Copy the checkpoint ``source`` to ``target``: SST files (immutable) hard-linked when the
    file system allows it, the others (MANIFEST, CURRENT, OPTIONS, ... which RocksDB appends to
    or replaces) copied."""
    os.makedirs(target)
    for name in os.listdir(source):
        src, dst = os.path.join(source, name), os.path.join(target, name)
        if name.endswith(".sst"):
            try:
                os.link(src, dst)
                continue
            except OSError:
                pass
        shutil.copy2(src, dst)
