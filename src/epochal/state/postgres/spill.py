"""The PostgreSQL backend's write-ahead log past its memory budget: spilled to local disk.

papers/001 §4.1 (1): the changes of an epoch are kept "in memory, spilling to local disk". A
subtask's log (the current epoch's changes, and the frozen epochs not yet committed) stays in
memory up to ``wal_memory_bytes`` (:class:`~epochal.config.StateBackendConfig`); past it
:meth:`~epochal.state.postgres.wal.WriteAheadLog.spill` moves every change held in memory to its
epochs' :class:`SpilledChanges`, which the epochs keep beside the (now empty) changes in memory,
the newer of the two. One :class:`SpilledChanges` per epoch: a RocksDB database (``rocksdict``, as
the RocksDB backend) in a directory of its own under :class:`SpillDirectory`, each spill written
as one sorted SST file that RocksDB ingests (a later spill of a key replaces an earlier one), so
that a read of an own uncommitted change is one point lookup per epoch, the upload streams an
epoch in key order, and removing an epoch's spill (once its checkpoint committed it) is closing
the database and deleting its directory.

An entry's key is the *entry key* (:func:`entry_key`): 4 bytes of key group, the stored key, 4
bytes of state id; so entries sort by key group and then key, and a key group is one key range.
A removed key's value is the empty string (a stored value, a pickle, is never empty).
:func:`merge` streams the union of several epochs' changes (memory and disk), newest winning, in
entry-key order: what an upload writes.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, cast

from rocksdict import BlockBasedOptions, IngestExternalFileOptions, Options, Rdict, SstFileWriter

from epochal.processes import alive
from epochal.state.postgres.epochs import Changes, Entry
from epochal.state.rocksdict_scans import scan

__all__ = ["DiskSpill", "Entry", "SpillDirectory", "SpilledChanges", "decode", "entry_key", "merge",
           "sorted_changes"]

#: :meth:`SpilledChanges.get`: the spill holds nothing for the key
MISS: Any = object()
#: Python's memory per entry of the log beyond its key's and value's bytes (two bytes objects
#: and a dict slot), for the budget's estimate
ENTRY_OVERHEAD = 120


def entry_key(group: int, stored_key: bytes, state: int) -> bytes:
    """The sort and storage key of one change: key group, key, state (fixed-width ends: decodable)."""
    return group.to_bytes(4, "big") + stored_key + state.to_bytes(4, "big")


def decode(key: bytes, value: bytes | None) -> Entry:
    """An entry key and its value (None or b"": removed) as an :data:`Entry`."""
    return int.from_bytes(key[:4], "big"), key[4:-4], int.from_bytes(key[-4:], "big"), value or None


def sorted_changes(changes: Changes) -> list[tuple[bytes, bytes | None]]:
    """``changes`` as (entry key, value or None), in entry-key order."""
    out = [(entry_key(group, stored_key, state), value)
           for (state, group), entries in changes.items() for stored_key, value in entries.items()]
    out.sort(key=lambda item: item[0])
    return out


class SpilledChanges(Protocol):
    """The changes of one epoch that left memory (see the module docstring)."""

    def add(self, changes: Changes) -> int:
        """Add ``changes`` (newer than those held: a key's value is replaced); returns how many."""

    def get(self, slot: tuple[int, int], stored_key: bytes) -> bytes | None | Any:
        """The value of ``stored_key`` in ``slot`` (state id, key group): the stored value, None
        (removed), or :data:`MISS` (not changed here)."""

    def entries(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Every change as (entry key, value or None), in entry-key order."""

    def group(self, state: int, group: int) -> Iterator[tuple[bytes, bytes | None]]:
        """(stored key, value or None) of the changes of state ``state`` in key group ``group``."""

    def remove(self) -> None:
        """Forget the changes and free what holds them (idempotent)."""


def merge(layers: Iterable[tuple[Changes, SpilledChanges | None]]) -> Iterator[Entry]:
    """The union of ``layers`` (each an epoch: its changes in memory and its spilled ones; the
    epochs newest first) in entry-key order, each key once with its newest value: an epoch's
    memory before its spill, a newer epoch before an older one."""
    sources: list[Iterator[tuple[bytes, int, bytes | None]]] = []
    for changes, spill in layers:
        if changes:
            sources.append(_ranked(sorted_changes(changes), len(sources)))
        if spill is not None:
            sources.append(_ranked(spill.entries(), len(sources)))
    if len(sources) == 1:
        for key, _, value in sources[0]:
            yield decode(key, value)
        return
    last = None
    for key, _, value in heapq.merge(*sources):
        if key != last:
            last = key
            yield decode(key, value)


def _ranked(entries: Iterable[tuple[bytes, bytes | None]], rank: int) -> Iterator[tuple[bytes, int, bytes | None]]:
    for key, value in entries:
        yield key, rank, value


class SpillDirectory:
    """Where one backend's spilled epochs live: a directory of its own under ``root``'s
    ``epochal-postgres-wal``, named after ``name`` and this process's id, made when first needed
    and removed by :meth:`remove`. :meth:`sweep` removes those of processes that no longer run (a
    SIGKILLed worker's): a subtask's start calls it."""

    BASE = "epochal-postgres-wal"

    def __init__(self, root: str, name: str) -> None:
        self.base = os.path.join(root, self.BASE)
        self.name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]
        self.path: str | None = None
        self._made = 0

    def new_spill(self) -> DiskSpill:
        if self.path is None:
            os.makedirs(self.base, exist_ok=True)
            self.path = tempfile.mkdtemp(prefix=f"{self.name}-p{os.getpid()}-", dir=self.base)
        self._made += 1
        return DiskSpill(os.path.join(self.path, f"epoch{self._made}"))

    def remove(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None

    def sweep(self) -> list[str]:
        """Remove the directories of processes that are gone; returns them."""
        removed: list[str] = []
        try:
            names = os.listdir(self.base)
        except FileNotFoundError:
            return removed
        for name in names:
            match = re.search(r"-p(\d+)-[^-]*$", name)
            if match is None or alive(int(match.group(1))):
                continue
            shutil.rmtree(os.path.join(self.base, name), ignore_errors=True)
            removed.append(name)
        return removed


class DiskSpill:
    """:class:`SpilledChanges` in a RocksDB database at ``path`` (created; removed by
    :meth:`remove`). Each :meth:`add` writes one SST file, sorted, that the database ingests;
    reads are point lookups (a bloom filter answers most misses without reading a block).
    Thread-safe for one writer and readers (RocksDB's)."""

    def __init__(self, path: str) -> None:
        self.path = path
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)
        self._options = options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_block_based_table_factory(table)
        options.set_write_buffer_size(1 << 20)  # nothing is written but ingested files
        options.set_keep_log_file_num(1)
        self._db: Rdict | None = Rdict(path, options)
        self._files = 0
        #: entries and bytes written to disk (over every :meth:`add`)
        self.entries_written = 0
        self.bytes_written = 0

    def add(self, changes: Changes) -> int:
        entries = sorted_changes(changes)
        db = self._db
        if not entries or db is None:
            return 0
        self._files += 1
        path = os.path.join(self.path, f"spill-{self._files}.sst")
        writer = SstFileWriter(self._options)
        writer.open(path)
        written = 0
        for key, value in entries:
            raw = value or b""
            writer[key] = raw
            written += len(key) + len(raw)
        writer.finish()
        ingest = IngestExternalFileOptions()
        ingest.set_move_files(True)
        db.ingest_external_file([path], ingest)
        self.entries_written += len(entries)
        self.bytes_written += written
        return len(entries)

    def get(self, slot: tuple[int, int], stored_key: bytes) -> bytes | None | Any:
        db = self._db
        if db is None:
            return MISS
        raw = db.get(entry_key(slot[1], stored_key, slot[0]))
        if raw is None:
            return MISS
        return raw or None

    def entries(self) -> Iterator[tuple[bytes, bytes | None]]:
        db = self._db
        if db is None:
            return
        for key, raw in cast(Iterator[tuple[bytes, bytes]], db.items()):
            yield key, raw or None

    def group(self, state: int, group: int) -> Iterator[tuple[bytes, bytes | None]]:
        db = self._db
        if db is None:
            return
        suffix = state.to_bytes(4, "big")
        for key, raw in scan(db, group.to_bytes(4, "big"), (group + 1).to_bytes(4, "big")):
            if key.endswith(suffix):
                yield key[4:-4], raw or None

    def changes(self) -> Changes:
        """Every change read back into memory (for a savepoint's copy)."""
        out: Changes = {}
        for key, value in self.entries():
            group, stored_key, state, _ = decode(key, None)
            slot = out.get((state, group))
            if slot is None:
                slot = out[(state, group)] = {}
            slot[stored_key] = value
        return out

    def remove(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(Exception):
                db.close()
        shutil.rmtree(self.path, ignore_errors=True)
