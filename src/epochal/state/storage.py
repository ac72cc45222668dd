"""Checkpoint storage on any filesystem pyarrow.fs supports (``file://`` by default).

Layout under the storage root of one job::

    chk-<n>/<operator uid>-<subtask>.keyed     key-group blobs, one after the other
    chk-<n>/<operator uid>-<subtask>.operator  the subtask's operator state
                                               (a uid with other characters than A-Z a-z 0-9 _ . -
                                               is written with those replaced, plus its CRC)
    chk-<n>/_metadata                          JSON; written last, atomically (write + rename)
    shared/<operator uid>-<subtask>.c<n>.full  incremental heap checkpoints: key-group blobs of
    shared/<operator uid>-<subtask>.c<n>.delta every entry, or of the entries changed since the
                                               chain's previous file
    shared/<uid>-<subtask>.<db>.c<n>.<f>.sst   RocksDB checkpoints: SST files, uploaded once
                                               Shared files are referenced by every checkpoint that
                                               needs them and deleted with the last of those

A checkpoint exists for a restore only once its ``_metadata`` exists. Every blob has a CRC-32
recorded in the metadata, and the metadata carries a checksum of itself, so corruption is
detected and reported with the file's name instead of producing wrong state.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from typing import Any

import pyarrow.fs as pafs

from epochal.errors import EpochalError
from epochal.state import direct_io
from epochal.state.checksums import crc32

METADATA = "_metadata"
#: Files more than one checkpoint may reference (incremental chains), under the root
SHARED = "shared"
_CHK = re.compile(r"chk-(\d+)$")


class CheckpointError(EpochalError):
    """A checkpoint cannot be written or read (missing, corrupt, unreachable storage).

    ``path`` is the file at fault when one is known (a state file, the metadata)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


def open_filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of ``uri`` (a local path or any URI pyarrow.fs understands)."""
    try:
        if "://" in uri:
            return pafs.FileSystem.from_uri(uri)
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    except Exception as error:
        raise CheckpointError(f"cannot open checkpoint storage '{uri}': {error}") from error


def _missing(path: str) -> CheckpointError:
    return CheckpointError(f"checkpoint state file {path} is missing", path=path)


def _corrupt(path: str, offset: int = 0) -> CheckpointError:
    return CheckpointError(f"checkpoint state file {path} is corrupt (checksum mismatch"
                           f"{f' at offset {offset}' if offset else ''}); restore from another checkpoint", path=path)


def crc(data: bytes | memoryview) -> int:
    """zlib's CRC-32 of ``data`` (:func:`epochal.state.checksums.crc32`)."""
    return crc32(data)


class CheckpointStorage:
    """Reads and writes the checkpoints under one root directory."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.fs, self.root = open_filesystem(uri)

    def __getstate__(self) -> dict[str, Any]:
        return {"uri": self.uri}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["uri"])  # type: ignore[misc]

    # ---------------------------------------------------------------- paths
    def checkpoint_path(self, checkpoint_id: int) -> str:
        return f"{self.root}/chk-{checkpoint_id}"

    def location(self, checkpoint_id: int) -> str:
        """Checkpoint ``checkpoint_id`` as a user passes it to ``execute(restore_from=...)``."""
        base = self.uri.rstrip("/") if "://" in self.uri else self.root
        return f"{base}/chk-{checkpoint_id}"

    def _ensure_dir(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    # ---------------------------------------------------------------- blobs
    def write_file(self, checkpoint_id: int, name: str, data: bytes) -> dict[str, Any]:
        """Write one state file of checkpoint ``checkpoint_id``; returns its handle."""
        return self.write_file_chunks(checkpoint_id, name, (data,))

    def write_file_chunks(self, checkpoint_id: int, name: str, chunks: Iterable[bytes | memoryview],
                          whole_crc: bool = True) -> dict[str, Any]:
        """:meth:`write_file` of the concatenation of ``chunks``, written as they come (a reader
        may produce them meanwhile, so reading and writing overlap). ``whole_crc=False``: the
        handle has no ``crc`` (the caller checksums the parts it reads back)."""
        directory = self.checkpoint_path(checkpoint_id)
        self._ensure_dir(directory)
        size, checksum = self._write_durably(f"{directory}/{name}", chunks, whole_crc)
        return {"file": name, "size": size, **({"crc": checksum} if whole_crc else {})}

    def _write_durably(self, path: str, chunks: Iterable[bytes | memoryview],
                       checksum: bool = False) -> tuple[int, int]:
        """Write a file, the concatenation of ``chunks``, so that it survives a machine crash
        before the checkpoint is acknowledged: on local disks large files past the page cache
        and fsync'd (:func:`epochal.state.direct_io.write_durably`); object stores and HDFS are
        durable once the stream is closed. Returns its size and, if asked, its CRC-32 (else 0)."""
        if isinstance(self.fs, pafs.LocalFileSystem):
            written = direct_io.write_durably(path, chunks, checksum)
            return written.size, written.crc
        size, so_far = 0, 0
        with self.fs.open_output_stream(path) as out:
            for chunk in chunks:
                out.write(chunk)
                size += len(chunk)
                if checksum:
                    so_far = crc32(chunk, so_far)
        return size, so_far

    def write_shared(self, name: str, data: bytes) -> dict[str, Any]:
        """Write a state file that later checkpoints may reference too (an incremental
        checkpoint's chain file) under ``<root>/shared/``; returns its handle, whose ``file`` is
        relative to the root (``shared/<name>``)."""
        directory = f"{self.root}/{SHARED}"
        self._ensure_dir(directory)
        size, checksum = self._write_durably(f"{directory}/{name}", (data,), checksum=True)
        return {"file": f"{SHARED}/{name}", "size": size, "crc": checksum}

    def file_path(self, checkpoint_id: int, handle: dict[str, Any]) -> str:
        """Where the file of ``handle`` (of checkpoint ``checkpoint_id``) is: in the checkpoint's
        directory, or, for a shared file, under the root."""
        name = handle["file"]
        if name.startswith(f"{SHARED}/"):
            return f"{self.root}/{name}"
        return f"{self.checkpoint_path(checkpoint_id)}/{name}"

    def delete_shared(self, names: list[str]) -> None:
        """Delete shared files (``shared/<name>`` as handles name them) no checkpoint references."""
        for name in names:
            try:
                self.fs.delete_file(f"{self.root}/{name}")
            except (FileNotFoundError, OSError):
                pass

    def shared_files(self) -> list[str]:
        """Every file under ``shared/``, as handles name them."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(f"{self.root}/{SHARED}", allow_not_found=True))
        except OSError:
            return []
        return sorted(f"{SHARED}/{info.base_name}" for info in infos if info.type == pafs.FileType.File)

    def read_file(self, checkpoint_id: int, handle: dict[str, Any], offset: int = 0,
                  length: int | None = None, checksum: int | None = None) -> bytes:
        """Read (a range of) a state file and verify its checksum."""
        path = self.file_path(checkpoint_id, handle)
        try:
            with self.fs.open_input_file(path) as source:
                data = source.read_at(length if length is not None else handle["size"], offset)
        except FileNotFoundError as error:
            raise _missing(path) from error
        except OSError as error:
            raise CheckpointError(f"cannot read checkpoint state file {path}: {error}", path=path) from error
        expected = checksum if checksum is not None else handle["crc"]
        if crc(data) != expected:
            raise _corrupt(path, offset)
        return data

    def link_file(self, checkpoint_id: int, handle: dict[str, Any], target: str) -> bool:
        """Make the file of ``handle`` appear at local path ``target`` without copying it: a hard
        link, when the storage is a local file system on the same device (Flink's task-local
        recovery, for the embedded default). Only for files nobody modifies in place (RocksDB's
        SST files). Its checksum is verified as :meth:`read_file` does, streaming. Returns False
        (nothing done) where it cannot link: another file system, another device, no
        permission; the caller then copies."""
        if not isinstance(self.fs, pafs.LocalFileSystem):
            return False
        path = self.file_path(checkpoint_id, handle)
        try:
            os.link(path, target)
        except FileNotFoundError as error:
            raise _missing(path) from error
        except OSError:
            return False
        checksum, size = 0, 0
        with open(target, "rb") as linked:
            while chunk := linked.read(8 << 20):
                checksum, size = crc32(chunk, checksum), size + len(chunk)
        if size != handle["size"] or checksum & 0xFFFFFFFF != handle["crc"]:
            os.unlink(target)
            raise _corrupt(path)
        return True

    def verify_files(self, checkpoint_id: int, metadata: dict[str, Any], uids: set[str] | None = None) -> None:
        """Before a restore: check that every state file the metadata references (of ``uids``
        only, if given) exists with its recorded size. Cheap (no file is read); the checksums
        are verified by the workers as they read."""
        expected: dict[str, int] = {}
        for uid, operator in metadata.get("operators", {}).items():
            if uids is not None and uid not in uids:
                continue
            for handle in operator.get("subtasks", {}).values():
                for part in ("keyed", "operator"):
                    for file in state_files(handle[part]) if part in handle else ():
                        expected[self.file_path(checkpoint_id, file)] = file["size"]
        if not expected:
            return
        try:
            infos = self.fs.get_file_info(sorted(expected))
        except OSError as error:
            raise CheckpointError(f"cannot list the state files of checkpoint {self.location(checkpoint_id)}: "
                                  f"{error}") from error
        problems = []
        for info in infos:
            if info.type != pafs.FileType.File:
                problems.append((info.path, "is missing"))
            elif info.size != expected[info.path]:
                problems.append((info.path, f"is damaged: it has {info.size} bytes, the checkpoint recorded "
                                            f"{expected[info.path]}"))
        if problems:
            path, what = problems[0]
            others = "".join(f"\n  also: {p} {w}" for p, w in problems[1:6])
            more = f"\n  and {len(problems) - 6} more" if len(problems) > 6 else ""
            raise CheckpointError(f"checkpoint state file {path} {what}; checkpoint "
                                  f"{self.location(checkpoint_id)} cannot be restored{others}{more}\n"
                                  f"{self.earlier_checkpoints_hint(checkpoint_id)}", path=path)

    def earlier_checkpoints_hint(self, checkpoint_id: int) -> str:
        """What to restore from instead of a broken checkpoint: the completed checkpoints older
        than it under the same root, newest first, as ``restore_from`` paths."""
        earlier = [c for c in self.completed() if c < checkpoint_id]
        if earlier:
            paths = ", ".join(f"restore_from='{self.location(c)}'" for c in reversed(earlier[-5:]))
            return f"Restore from an earlier checkpoint instead (newest first): {paths}"
        base = self.uri.rstrip("/") if "://" in self.uri else self.root
        return (f"No earlier completed checkpoint is retained in {base}; enable_checkpointing(retained=N) "
                "keeps the last N checkpoints, so that an older one is left when the latest is damaged")

    # ---------------------------------------------------------------- metadata
    def write_metadata(self, checkpoint_id: int, metadata: dict[str, Any]) -> str:
        """Complete checkpoint ``checkpoint_id``: write its metadata atomically (temp + rename)."""
        body = json.dumps(metadata, sort_keys=True)
        document = json.dumps({"checksum": crc(body.encode()), "body": body})
        directory = self.checkpoint_path(checkpoint_id)
        self._ensure_dir(directory)
        temporary = f"{directory}/{METADATA}.inprogress"
        self._write_durably(temporary, (document.encode(),))
        self.fs.move(temporary, f"{directory}/{METADATA}")
        return f"{directory}/{METADATA}"

    def read_metadata(self, checkpoint_id: int) -> dict[str, Any]:
        return read_metadata_at(self.fs, f"{self.checkpoint_path(checkpoint_id)}/{METADATA}")

    def checkpoint_dirs(self) -> list[int]:
        """Ids of every ``chk-<n>`` directory under the root, completed or not, oldest first."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        except OSError:
            return []
        return sorted(int(match.group(1)) for info in infos
                      if info.type == pafs.FileType.Directory and (match := _CHK.search(info.path)))

    def completed(self) -> list[int]:
        """Ids of the completed checkpoints under the root (their metadata written), oldest first."""
        return [checkpoint_id for checkpoint_id in self.checkpoint_dirs()
                if self.fs.get_file_info(f"{self.checkpoint_path(checkpoint_id)}/{METADATA}").type
                == pafs.FileType.File]

    def latest(self) -> int | None:
        done = self.completed()
        return done[-1] if done else None

    def delete(self, checkpoint_id: int) -> None:
        try:
            self.fs.delete_dir(self.checkpoint_path(checkpoint_id))
        except (FileNotFoundError, OSError):
            pass


class SavepointStorage(CheckpointStorage):
    """One savepoint: a directory holding its ``_metadata`` and every file its state needs
    (papers/001 §3.3.1). Unlike a job's checkpoints it shares nothing: its "shared" files (a
    native RocksDB savepoint's SST files) are under its own directory, and every handle names its
    file relative to the directory, so a savepoint can be moved or copied and restored from the
    new place. The user owns it: retention never deletes one."""

    def checkpoint_path(self, checkpoint_id: int) -> str:
        return self.root

    def location(self, checkpoint_id: int) -> str:
        return self.uri.rstrip("/") if "://" in self.uri else self.root

    def checkpoint_dirs(self) -> list[int]:
        return []  # a savepoint is the user's: nothing in it is a checkpoint directory to clean up

    def completed(self) -> list[int]:
        try:
            return [int(self.read_metadata(0)["checkpoint_id"])]
        except (CheckpointError, KeyError, TypeError, ValueError):
            return []

    def earlier_checkpoints_hint(self, checkpoint_id: int) -> str:
        return (f"Savepoint {self.location(checkpoint_id)} is damaged; restore from another savepoint or from a "
                "checkpoint of the job it was taken from")


def is_savepoint(metadata: dict[str, Any]) -> bool:
    """Whether ``metadata`` is a savepoint's (its files are all in its own directory)."""
    return bool(metadata.get("savepoint"))


def storage_of(uri: str, metadata: dict[str, Any]) -> CheckpointStorage:
    """The storage to read the snapshot whose ``metadata`` is at ``uri`` (its savepoint directory,
    or its job's checkpoint root) from."""
    return SavepointStorage(uri) if is_savepoint(metadata) else CheckpointStorage(uri)


def state_files(handle: dict[str, Any]) -> list[dict[str, Any]]:
    """The files one ``keyed`` or ``operator`` handle references: one file, an incremental
    chain's files, or a RocksDB checkpoint's shared and private files."""
    if "chain" in handle:
        return list(handle["chain"])
    if handle.get("format") == "rocksdb":
        return [*handle["shared"], *handle["private"]]
    if handle.get("format") == "postgres":  # the state is in the database: no file
        return []
    return [handle]


def read_metadata_at(fs: pafs.FileSystem, path: str) -> dict[str, Any]:
    """Read and verify a ``_metadata`` file."""
    try:
        with fs.open_input_stream(path) as source:
            raw = source.read()
    except FileNotFoundError as error:
        raise CheckpointError(f"checkpoint metadata {path} does not exist: the checkpoint is missing or "
                              "was never completed", path=path) from error
    except OSError as error:
        raise CheckpointError(f"cannot read checkpoint metadata {path}: {error}", path=path) from error
    try:
        document = json.loads(raw)
        body = document["body"]
        if crc(body.encode()) != document["checksum"]:
            raise ValueError("checksum mismatch")
        return json.loads(body)
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"checkpoint metadata {path} is corrupt ({error}); "
                              "restore from another checkpoint", path=path) from error
