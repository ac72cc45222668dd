"""Paths on any filesystem pyarrow knows: a local path, ``file://`` or any URI that
:meth:`pyarrow.fs.FileSystem.from_uri` understands. A leaf: the file connectors, checkpoint storage's fences, the
driver's savepoint and sink-claim files and the graph loaders all use it; it imports nothing of epochal."""

from __future__ import annotations

import os

import pyarrow.fs as pafs

#: Bytes buffered per output stream of the file sinks (and read per chunk by the text source).
TEXT_CHUNK = 1 << 20


def is_uri(location: str) -> bool:
    return "://" in location


def resolve(location: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and the filesystem-internal path of ``location`` (a local path or a URI)."""
    if not is_uri(location):
        return pafs.LocalFileSystem(), os.path.abspath(location)
    fs, path = pafs.FileSystem.from_uri(location)
    return fs, path


def join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}" if directory.rstrip("/") else f"/{name}"


def is_hidden(path: str) -> bool:
    """Names starting with ``.`` or ``_`` (``.crc``, ``_SUCCESS``, a sink's ``_pending/``)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith((".", "_"))
