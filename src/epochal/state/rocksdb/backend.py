"""Out-of-core keyed state: a keyed-state backend on RocksDB (through ``rocksdict``).

Layout, as in Flink's RocksDB backend: one RocksDB database per operator subtask, in a local
working directory that the backend owns; one column family per state name (the default column
family holds a state only if the state is named ``"default"``); in every column family

    key   = 2-byte big-endian key group + pickle of the user key
    value = :func:`epochal.serialization.dumps` of the value (read back with ``pickle.loads``)

RocksDB orders keys bytewise, so all keys of a key group share a prefix and key groups follow
each other in order: the state of any key-group range is one contiguous key range. That makes
the operations of a rescaled restore range operations: reading some groups of a checkpoint is a
range scan per column family (:func:`~epochal.state.rocksdb.reads.read_key_groups`), loading them
is a scan written into one SST file that is ingested whole (:meth:`~RocksDBKeyedStateBackend.ingest_key_groups`), and
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
memtables before linking the files. A backend is used by one thread at a time; the readers of
:mod:`epochal.state.rocksdb.reads` open their own read-only instance and may run on any thread.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from rocksdict import (
    BlockBasedOptions,
    Cache,
    Checkpoint,
    DBCompressionType,
    IngestExternalFileOptions,
    Options,
    Rdict,
    SstFileWriter,
    WriteBatch,
    WriteOptions,
)

from epochal.config import StateBackendConfig
from epochal.serialization import dumps as _dumps
from epochal.state.backend import Captured, GroupTables, KeyedStateBackend
from epochal.state.canonical import KeyEncoder, Stored
from epochal.state.local_disk import local_root
from epochal.state.rocksdb.checkpoints import RocksDBSnapshots
from epochal.state.rocksdb.keys import END, START, GroupView, RangeKeyCursor, group_prefix
from epochal.state.rocksdb.reads import close_database, open_read_only
from epochal.state.rocksdb.views import CheckpointViews, CommittedGroup
from epochal.state.rocksdict_scans import scan, scan_keys

__all__ = ["RocksDBKeyedStateBackend", "create"]

_loads = pickle.loads


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
        # LZ4, not RocksDB's default Snappy: blocks of the same size, and reading them (block cache
        # misses, the canonical savepoint's full scan) costs 40 % less CPU (500k entries of ~120
        # bytes: 0.155 against 0.254 CPU-s; docs/savepoints.md). Files written with Snappy before
        # stay readable: RocksDB records each block's compression.
        options.set_compression_type(DBCompressionType.lz4())
        options.set_keep_log_file_num(2)
        self._write_options = WriteOptions()
        self._write_options.disable_wal = True  # type: ignore[method-assign,assignment]  # a property
        self._encode = KeyEncoder()
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
        close_database(self._db, self._cfs)
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
            table = self._tables[name] = {group: GroupView(cf, group, self._encode) for group in self.key_groups}
        return table

    def cleanup_cursor(self, name: str) -> RangeKeyCursor:
        """State ``name``'s keys for its incremental TTL cleanup, by chunked range scans."""
        return RangeKeyCursor(self._column_family(name), self.key_groups)

    def capture(self) -> Captured:
        """A full copy of the state, ``{group: {name: {key: value}}}``, read by scanning every
        column family (O(state size), in memory): prefer :meth:`local_checkpoint` for snapshots."""
        by_group: Captured = {}
        for name, cf in self._cfs.items():
            current = -1
            entries: dict[Any, Any] = {}
            for stored, raw in scan(cf, START, END):
                group = stored[0] << 8 | stored[1]
                if group != current:
                    current, entries = group, {}
                    by_group.setdefault(group, {})[name] = entries
                entries[_loads(stored[2:])] = _loads(raw)
        return by_group

    def restore_group(self, group: int, states: dict[str, dict[Any, Any]]) -> None:
        """Replace the state of ``group`` (owned) for each name in ``states``, in one write batch."""
        encode = self._encode
        self._replace_group(group, {name: ((encode(key), _dumps(value)) for key, value in entries.items())
                                    for name, entries in states.items()})

    def restore_stored_group(self, group: int, stored: Stored) -> None:
        """:meth:`restore_group` of a group in the canonical layout's bytes: written as they are
        (the canonical key bytes are this backend's key encoding, the value bytes its values)."""
        self._replace_group(group, {name: zip(keys, values, strict=True) for name, (keys, values) in stored.items()})

    def _replace_group(self, group: int, entries: dict[str, Iterable[tuple[bytes, bytes]]]) -> None:
        """Replace ``group``'s entries of each state in ``entries`` (key without the group prefix,
        value as stored) in one write batch."""
        if group not in self.key_groups:
            raise ValueError(f"key group {group} is not owned by this backend ({self.key_groups})")
        prefix, upper = group_prefix(group), group_prefix(group + 1)
        batch = WriteBatch(raw_mode=True)
        for name, pairs in entries.items():
            self._column_family(name)
            handle = self._db.get_column_family_handle(name)
            batch.delete_range(prefix, upper, handle)
            for key, value in pairs:
                batch.put(prefix + key, value, handle)
            del handle  # a live handle keeps the database (and its lock) open after close()
        self._db.write(batch, self._write_options)

    def state_entries(self) -> dict[str, int]:
        """RocksDB's estimate per column family (``rocksdb.estimate-num-keys``: exact for keys
        written once and not yet compacted away, off by deletes and overwrites in memtables)."""
        counts = {}
        for name, cf in self._cfs.items():
            try:
                counts[name] = int(cf.property_int_value("rocksdb.estimate-num-keys") or 0)
            except Exception:  # noqa: BLE001 - a count for a view, never worth a failed snapshot
                continue
        return counts

    def entry_count(self) -> int:
        """Number of (state name, key) entries, counted by scanning the keys (O(state size))."""
        return sum(sum(1 for _ in scan_keys(cf, START, END)) for cf in self._cfs.values())

    def local_checkpoint(self, path: str) -> list[str]:
        """Flush every memtable and make a RocksDB checkpoint at ``path`` (which must not exist):
        SST files are hard links (``path`` must be on the directory's file system, else RocksDB
        copies them), the small metadata files copies. Returns the names of the files in ``path``.

        The synchronous part of a snapshot: afterwards the live database may change freely while
        the caller uploads (or reads, :func:`~epochal.state.rocksdb.reads.read_key_groups`) the
        files, which never change."""
        for cf in self._cfs.values():
            cf.flush()
        Checkpoint(self._db).create_checkpoint(path)
        return sorted(os.listdir(path))

    def committed_views(self, names: Mapping[str, str]) -> dict[str, dict[int, CommittedGroup]]:
        """The states ``names`` (query name -> state name) as they are now, read-only, as
        ``{query name: {owned group: view}}``: views of a local checkpoint made now (milliseconds
        after a snapshot's flush), not a copy (:mod:`epochal.state.rocksdb.views`). The views stay
        valid after this backend is closed; their checkpoint is deleted when the last is dropped."""
        directory = f"{self.directory}.query-{uuid.uuid4().hex[:12]}"
        self.local_checkpoint(directory)
        checkpoint = CheckpointViews(directory, self._encode)
        return {query: checkpoint.views(state, self.key_groups) for query, state in names.items()}

    def ingest_key_groups(self, checkpoint_dir: str, key_groups: range) -> int:
        """Load the entries of ``key_groups`` (clipped to the owned groups) from the checkpoint at
        ``checkpoint_dir`` (another subtask's, before a rescale): per column family, a range scan
        written into one SST file that RocksDB ingests (moves in). Returns the entries loaded.

        Assumes the groups hold no state here yet, or that the checkpoint's entries should win."""
        groups = range(max(key_groups.start, self.key_groups.start), min(key_groups.stop, self.key_groups.stop))
        if not groups:
            return 0
        lower, upper = group_prefix(groups.start), group_prefix(groups.stop)
        staging = self.directory + ".ingest"
        os.makedirs(staging, exist_ok=True)
        ingest = IngestExternalFileOptions()
        ingest.set_move_files(True)
        total = 0
        db, cfs = open_read_only(checkpoint_dir)
        try:
            for index, (name, source) in enumerate(cfs.items()):
                path = os.path.join(staging, f"{index}.sst")
                writer = SstFileWriter(self._options)
                count = 0
                for stored, raw in scan(source, lower, upper):  # in key order, as the writer needs
                    if not count:
                        writer.open(path)
                    writer[stored] = raw
                    count += 1
                if count:  # rocksdict cannot finish an empty SST file
                    writer.finish()
                    self._column_family(name).ingest_external_file([path], ingest)
                    total += count
        finally:
            close_database(db, cfs)
            shutil.rmtree(staging, ignore_errors=True)
        return total

    def delete_key_groups_outside(self, key_groups: range) -> None:
        """Delete every entry whose group is not in ``key_groups``: two ``delete_range`` per
        column family, whatever the amount of state (the space is reclaimed by compaction)."""
        bounds = [START, group_prefix(key_groups.start), group_prefix(key_groups.stop), END] if key_groups \
            else [START, END]
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
        close_database(self._db, self._cfs)

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


def create(config: StateBackendConfig, max_parallelism: int, key_groups: range, name: str, **_: Any) -> \
        RocksDBKeyedStateBackend:
    """The RocksDB backend of one keyed operator subtask (``name``: its uid and index), as
    :func:`epochal.state.backends.create_backend` makes it: its database in a new directory under
    :func:`~epochal.state.local_disk.local_root` (``epochal-rocksdb/<name>-<random>/db``), removed
    with the subtask (``dispose``); local checkpoints are made beside the database, on the same
    file system, so that they are hard links (:class:`~epochal.state.rocksdb.checkpoints.RocksDBSnapshots`)."""
    base = os.path.join(local_root(config), "epochal-rocksdb")
    os.makedirs(base, exist_ok=True)
    owned = tempfile.mkdtemp(prefix=re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] + "-", dir=base)
    backend = RocksDBKeyedStateBackend(max_parallelism, key_groups, os.path.join(owned, "db"),
                                       write_buffer_bytes=config.write_buffer_bytes,
                                       block_cache_bytes=config.block_cache_bytes)
    backend.snapshots = RocksDBSnapshots(backend)
    dispose = backend.dispose

    def dispose_all() -> None:
        dispose()
        shutil.rmtree(owned, ignore_errors=True)

    backend.dispose = dispose_all  # type: ignore[method-assign]
    return backend
