"""Checkpoint storage on any filesystem pyarrow.fs supports (``file://`` by default).

Layout under the storage root of one job::

    chk-<n>/<operator uid>-<subtask>.keyed     key-group blobs, one after the other
    chk-<n>/<operator uid>-<subtask>.operator  the subtask's operator state
    chk-<n>/_metadata                          JSON; written last, atomically (write + rename)

A checkpoint exists for a restore only once its ``_metadata`` exists. Every blob has a CRC-32
recorded in the metadata, and the metadata carries a checksum of itself, so corruption is
detected and reported with the file's name instead of producing wrong state.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from typing import Any

import pyarrow.fs as pafs

from epochal.errors import EpochalError

METADATA = "_metadata"
_CHK = re.compile(r"chk-(\d+)$")


class CheckpointError(EpochalError):
    """A checkpoint cannot be written or read (missing, corrupt, unreachable storage)."""


def open_filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of ``uri`` (a local path or any URI pyarrow.fs understands)."""
    try:
        if "://" in uri:
            return pafs.FileSystem.from_uri(uri)
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    except Exception as error:
        raise CheckpointError(f"cannot open checkpoint storage '{uri}': {error}") from error


def crc(data: bytes | memoryview) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


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

    def _ensure_dir(self, path: str) -> None:
        self.fs.create_dir(path, recursive=True)

    # ---------------------------------------------------------------- blobs
    def write_file(self, checkpoint_id: int, name: str, data: bytes) -> dict[str, Any]:
        """Write one state file of checkpoint ``checkpoint_id``; returns its handle."""
        directory = self.checkpoint_path(checkpoint_id)
        self._ensure_dir(directory)
        path = f"{directory}/{name}"
        self._write_durably(path, data)
        return {"file": name, "size": len(data), "crc": crc(data)}

    def _write_durably(self, path: str, data: bytes) -> None:
        """Write a file so that it survives a machine crash before the checkpoint is acknowledged:
        fsync on local disks; object stores and HDFS are durable once the stream is closed."""
        if isinstance(self.fs, pafs.LocalFileSystem):
            with open(path, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            return
        with self.fs.open_output_stream(path) as out:
            out.write(data)

    def read_file(self, checkpoint_id: int, handle: dict[str, Any], offset: int = 0,
                  length: int | None = None, checksum: int | None = None) -> bytes:
        """Read (a range of) a state file and verify its checksum."""
        path = f"{self.checkpoint_path(checkpoint_id)}/{handle['file']}"
        try:
            with self.fs.open_input_file(path) as source:
                data = source.read_at(length if length is not None else handle["size"], offset)
        except FileNotFoundError as error:
            raise CheckpointError(f"checkpoint state file {path} is missing") from error
        except OSError as error:
            raise CheckpointError(f"cannot read checkpoint state file {path}: {error}") from error
        expected = checksum if checksum is not None else handle["crc"]
        if crc(data) != expected:
            raise CheckpointError(f"checkpoint state file {path} is corrupt (checksum mismatch"
                                  f"{f' at offset {offset}' if offset else ''}); restore from another checkpoint")
        return data

    # ---------------------------------------------------------------- metadata
    def write_metadata(self, checkpoint_id: int, metadata: dict[str, Any]) -> str:
        """Complete checkpoint ``checkpoint_id``: write its metadata atomically (temp + rename)."""
        body = json.dumps(metadata, sort_keys=True)
        document = json.dumps({"checksum": crc(body.encode()), "body": body})
        directory = self.checkpoint_path(checkpoint_id)
        self._ensure_dir(directory)
        temporary = f"{directory}/{METADATA}.inprogress"
        self._write_durably(temporary, document.encode())
        self.fs.move(temporary, f"{directory}/{METADATA}")
        return f"{directory}/{METADATA}"

    def read_metadata(self, checkpoint_id: int) -> dict[str, Any]:
        return read_metadata_at(self.fs, f"{self.checkpoint_path(checkpoint_id)}/{METADATA}")

    def completed(self) -> list[int]:
        """Ids of the completed checkpoints under the root, oldest first."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        except OSError:
            return []
        ids = []
        for info in infos:
            match = _CHK.search(info.path)
            if match and info.type == pafs.FileType.Directory:
                if self.fs.get_file_info(f"{info.path}/{METADATA}").type == pafs.FileType.File:
                    ids.append(int(match.group(1)))
        return sorted(ids)

    def latest(self) -> int | None:
        done = self.completed()
        return done[-1] if done else None

    def delete(self, checkpoint_id: int) -> None:
        try:
            self.fs.delete_dir(self.checkpoint_path(checkpoint_id))
        except (FileNotFoundError, OSError):
            pass


def read_metadata_at(fs: pafs.FileSystem, path: str) -> dict[str, Any]:
    """Read and verify a ``_metadata`` file."""
    try:
        with fs.open_input_stream(path) as source:
            raw = source.read()
    except FileNotFoundError as error:
        raise CheckpointError(f"checkpoint metadata {path} does not exist: the checkpoint is missing or "
                              "was never completed") from error
    except OSError as error:
        raise CheckpointError(f"cannot read checkpoint metadata {path}: {error}") from error
    try:
        document = json.loads(raw)
        body = document["body"]
        if crc(body.encode()) != document["checksum"]:
            raise ValueError("checksum mismatch")
        return json.loads(body)
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"checkpoint metadata {path} is corrupt ({error}); "
                              "restore from another checkpoint") from error


def resolve_restore_path(uri: str) -> tuple[CheckpointStorage, int]:
    """A user-given restore path: a ``chk-<n>`` directory, or a job's checkpoint root (latest)."""
    stripped = uri.rstrip("/")
    match = _CHK.search(stripped)
    if match:
        storage = CheckpointStorage(stripped[: match.start()].rstrip("/") or "/")
        checkpoint_id = int(match.group(1))
        storage.read_metadata(checkpoint_id)  # fails clearly if missing or corrupt
        return storage, checkpoint_id
    storage = CheckpointStorage(stripped)
    latest = storage.latest()
    if latest is None:
        raise CheckpointError(f"no completed checkpoint under {uri} (no chk-<n>/_metadata found)")
    return storage, latest
