"""Checkpoints of the RocksDB backend: a local hard-link checkpoint at the barrier, incremental
uploads of its SST files to the job's ``shared/`` files, and restores from them.

papers/001 §4.2: "upon taking a snapshot, the synchronous triggerSnapshot() call simply marks the
current version ... an asynchronous thread iterates over the marked version, materializes it to
the snapshot store"; the LSM tree "lends itself to incremental snapshots". Here:

- **Synchronous part** (:meth:`RocksDBSnapshots.begin`, on the processing thread): flush the
  memtables and create a RocksDB checkpoint next to the database (hard links of the immutable SST
  files plus copies of the small MANIFEST/OPTIONS/CURRENT files). Milliseconds, whatever the
  state's size.
- **Asynchronous part** (:meth:`RocksDBPlan.upload`, on the worker's uploader thread): every SST
  file not already in a *completed* checkpoint of this database goes to
  ``shared/<uid>-<subtask>.<db id>.c<n>.<file>.sst`` (SST files never change, so one uploaded
  once is referenced by every later checkpoint that still contains it); the small files go to the
  checkpoint's own directory. The local checkpoint is deleted afterwards. A file uploaded for a
  checkpoint that never completes is never referenced, and is deleted with that checkpoint (its
  name carries ``.c<n>.``, see :mod:`epochal.dataflow.checkpointing.store`).
- **Handle**: ``{"format": "rocksdb", "key_groups": [start, stop], "shared": [...], "private":
  [...], "written_bytes": n}``, each file ``{"file", "size", "crc", "name"}`` (``name``: its name in the database).
- **Restore** (:func:`download`): the files of an old subtask are fetched (checksums verified;
  SST files hard-linked instead when the storage is a local file system on the same device)
  into a local directory with their database names, which is then a RocksDB checkpoint that
  :func:`~epochal.state.rocksdb.reads.read_key_groups` reads by key-group range (any backend can
  restore from it: :data:`READER`, which :mod:`epochal.state.registry` names for this format), or
  that a RocksDB backend adopts or ingests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from epochal.state.rocksdb.native import read_chunks
from epochal.state.rocksdb.reads import read_key_groups, read_stored_groups
from epochal.state.snapshot import stored_chunks, write_group_chunks
from epochal.state.storage import CheckpointStorage

__all__ = ["FORMAT", "READER", "CanonicalPlan", "CheckpointReader", "RocksDBPlan", "RocksDBSnapshots", "download"]

#: ``format`` of this backend's keyed-state handles in checkpoint metadata (:mod:`epochal.state.registry`)
FORMAT = "rocksdb"


@dataclass
class RocksDBPlan:
    """One checkpoint of one RocksDB backend: its local checkpoint ``directory`` and ``files``,
    and the SST files of completed checkpoints already uploaded (name -> handle)."""

    checkpoint_id: int
    directory: str
    files: list[str]
    key_groups: range
    db_id: str
    uploaded: dict[str, dict[str, Any]] = field(default_factory=dict)

    def upload(self, storage: CheckpointStorage, checkpoint_id: int, stem: str) -> dict[str, Any]:
        """Write this checkpoint's files (new SST files shared, the rest private); returns the
        handle. The local checkpoint directory is removed whatever happens."""
        shared: list[dict[str, Any]] = []
        private: list[dict[str, Any]] = []
        written_bytes = 0
        try:
            for name in self.files:
                if name.endswith(".sst") and name in self.uploaded:
                    shared.append(self.uploaded[name])
                    continue
                with open(os.path.join(self.directory, name), "rb") as source:
                    data = source.read()
                written_bytes += len(data)
                if name.endswith(".sst"):
                    written = storage.write_shared(f"{stem}.{self.db_id}.c{checkpoint_id}.{name}", data)
                    shared.append({**written, "name": name})
                else:
                    written = storage.write_file(checkpoint_id, f"{stem}.rocksdb.{name}", data)
                    private.append({**written, "name": name})
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
        return {"format": FORMAT, "key_groups": [self.key_groups.start, self.key_groups.stop],
                "shared": shared, "private": private, "written_bytes": written_bytes}


@dataclass
class CanonicalPlan:
    """A canonical savepoint of one RocksDB backend: a local checkpoint taken at the barrier
    (milliseconds), read by key group and written in the canonical layout on the uploader thread,
    so that the processing thread does not stall for a scan of the whole database. The native
    reader (:mod:`epochal.state.rocksdb.native`) reads it without the interpreter lock where it
    is built; else rocksdict reads it in Python. The keys and
    values go into the file as RocksDB stores them (:mod:`epochal.state.canonical`): nothing is
    unpickled or pickled again."""

    directory: str
    key_groups: range

    def upload(self, storage: CheckpointStorage, checkpoint_id: int, stem: str) -> dict[str, Any]:
        """Write the canonical ``<stem>.keyed`` file; returns its handle (``file``, ``size``,
        ``groups``, ``encoding``). The local checkpoint directory is removed whatever happens."""
        try:
            chunks = read_chunks(self.directory, self.key_groups)  # None: read in Python
            if chunks is None:
                chunks = stored_chunks(read_stored_groups(self.directory, self.key_groups))
            return write_group_chunks(storage, checkpoint_id, f"{stem}.keyed", chunks)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


class RocksDBSnapshots:
    """The checkpoints of one :class:`~epochal.state.rocksdb.backend.RocksDBKeyedStateBackend`: local
    checkpoints at barriers, which SST files completed checkpoints already hold."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.db_id = uuid.uuid4().hex[:12]  # SST numbers restart in a new database: names must not
        self.written_files: dict[int, dict[str, dict[str, Any]]] = {}
        self.confirmed: dict[str, dict[str, Any]] = {}

    def begin(self, checkpoint_id: int, whole: bool = False) -> RocksDBPlan:
        """The synchronous part: flush and hard-link a local checkpoint beside the database.
        ``whole``: every SST file is written again (a native savepoint shares nothing)."""
        directory = f"{self.backend.directory}.chk-{checkpoint_id}"
        shutil.rmtree(directory, ignore_errors=True)
        files = self.backend.local_checkpoint(directory)
        return RocksDBPlan(checkpoint_id, directory, files, self.backend.key_groups, self.db_id,
                           {} if whole else dict(self.confirmed))

    def begin_canonical(self, checkpoint_id: int) -> CanonicalPlan:
        """The synchronous part of a canonical savepoint: a local checkpoint, read later."""
        directory = f"{self.backend.directory}.savepoint-{checkpoint_id}"
        shutil.rmtree(directory, ignore_errors=True)
        self.backend.local_checkpoint(directory)
        return CanonicalPlan(directory, self.backend.key_groups)

    def written(self, checkpoint_id: int, handle: dict[str, Any]) -> None:
        self.written_files[checkpoint_id] = {file["name"]: file for file in handle.get("shared", ())}

    def completed(self, checkpoint_id: int) -> None:
        files = self.written_files.get(checkpoint_id)
        if files is None:
            return
        self.confirmed = files
        for done in [c for c in self.written_files if c <= checkpoint_id]:
            del self.written_files[done]


def download(storage: CheckpointStorage, checkpoint_id: int, handle: dict[str, Any], target: str) -> str:
    """Fetch the files of a RocksDB ``handle`` into the new directory ``target`` under their
    database names (checksums verified); returns ``target``, a RocksDB checkpoint."""
    os.makedirs(target)
    for file in [*handle["shared"], *handle["private"]]:
        path = os.path.join(target, file["name"])
        # SST files never change: on local storage they are hard-linked, not copied (the others,
        # MANIFEST, CURRENT, OPTIONS, are small and RocksDB may replace or append to them)
        if file["name"].endswith(".sst") and storage.link_file(checkpoint_id, file, path):
            continue
        data = storage.read_file(checkpoint_id, file)
        with open(path, "wb") as out:
            out.write(data)
    return target


def _wanted(handle: dict[str, Any], key_groups: range) -> range:
    """The groups of ``key_groups`` that the subtask of ``handle`` owned."""
    start, stop = handle["key_groups"]
    return range(max(start, key_groups.start), min(stop, key_groups.stop))


class CheckpointReader:
    """The reader of ``rocksdb`` handles (:class:`epochal.state.registry.FormatReader`): an old
    subtask's files fetched into a local directory (:func:`download`), which is then a RocksDB
    checkpoint that any backend reads by key group
    (:func:`~epochal.state.rocksdb.reads.read_key_groups`) or a RocksDB backend takes as it is
    (:meth:`fetch`)."""

    fetches_files = True

    def key_groups(self, storage: CheckpointStorage, checkpoint_id: int, uid: str, handle: dict[str, Any],
                   key_groups: range, names: frozenset[str] | None) -> Iterator[tuple[int, dict[str, dict[Any, Any]]]]:
        with contextlib.closing(self.fetch(storage, checkpoint_id, handle, key_groups)) as fetched:
            for directory, wanted in fetched:  # the directory is removed once its groups were read
                yield from read_key_groups(directory, wanted, names)

    def fetch(self, storage: CheckpointStorage, checkpoint_id: int, handle: dict[str, Any],
              key_groups: range) -> Generator[tuple[str, range], None, None]:
        wanted = _wanted(handle, key_groups)
        if not wanted:
            return
        local = tempfile.mkdtemp(prefix="epochal-restore-")
        try:
            yield download(storage, checkpoint_id, handle, f"{local}/db"), wanted
        finally:
            shutil.rmtree(local, ignore_errors=True)


#: What :data:`epochal.state.registry.FORMATS` names for :data:`FORMAT`
READER = CheckpointReader()
