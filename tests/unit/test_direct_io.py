"""Checkpoint files written past the page cache: the same bytes, durable, and not cached."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import random
import zlib
from pathlib import Path

import pytest

from epochal.state import direct_io
from epochal.state.direct_io import BUFFER_BYTES, write_durably


def _supports_direct(directory: Path) -> bool:
    if not direct_io.enabled():
        return False
    try:
        fd = os.open(directory / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    return True


def _chunks(size: int, seed: int) -> list[bytes | bytearray | memoryview]:
    rng = random.Random(seed)
    chunks: list[bytes | bytearray | memoryview] = []
    left = size
    while left:
        n = min(left, rng.choice([1, 17, 4096, 100_000, BUFFER_BYTES - 3, 3 * BUFFER_BYTES // 2]))
        data = rng.randbytes(n)
        chunks.append(rng.choice([data, bytearray(data), memoryview(data)]))
        left -= n
    return chunks


def _resident_pages(path: Path) -> int:
    """Pages of ``path`` in the page cache (mincore of a mapping of it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = path.stat().st_size
    with open(path, "rb") as file, mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vector = (ctypes.c_ubyte * pages)()
        buffer = (ctypes.c_char * size).from_buffer(mapped)
        try:
            if libc.mincore(ctypes.c_void_p(ctypes.addressof(buffer)), ctypes.c_size_t(size), vector) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del buffer
        return sum(page & 1 for page in vector)


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, BUFFER_BYTES - 1, BUFFER_BYTES, BUFFER_BYTES + 1,
                                  3 * BUFFER_BYTES + 12_345])
def test_the_file_holds_exactly_the_chunks_and_their_crc(tmp_path: Path, size: int) -> None:
    chunks = _chunks(size, seed=size)
    expected = b"".join(bytes(chunk) for chunk in chunks)
    written = write_durably(str(tmp_path / "f"), chunks, checksum=True)
    assert (tmp_path / "f").read_bytes() == expected
    assert written.size == size
    assert written.crc == zlib.crc32(expected) & 0xFFFFFFFF
    if _supports_direct(tmp_path):
        # whole buffers go directly, the unaligned tail and files under one buffer through the cache
        assert written.direct == (size - size % 4096 if size >= BUFFER_BYTES else 0)


def test_a_large_file_is_not_left_in_the_page_cache_and_without_direct_writes_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not _supports_direct(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    size = 4 * BUFFER_BYTES
    pages = size // mmap.PAGESIZE
    write_durably(str(tmp_path / "direct"), [os.urandom(size)])
    assert _resident_pages(tmp_path / "direct") < pages // 10
    monkeypatch.setenv("EPOCHAL_DIRECT_IO", "0")
    written = write_durably(str(tmp_path / "cached"), [os.urandom(size)])
    assert written.direct == 0
    assert _resident_pages(tmp_path / "cached") > pages // 2


def test_a_file_system_that_refuses_direct_writes_gets_the_same_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_fcntl = fcntl.fcntl

    def refusing(fd: int, command: int, argument: int = 0) -> int:
        if command == fcntl.F_SETFL and argument & direct_io._O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")  # as a file system without O_DIRECT
        return real_fcntl(fd, command, argument)

    monkeypatch.setattr(fcntl, "fcntl", refusing)
    data = os.urandom(2 * BUFFER_BYTES + 5)
    written = write_durably(str(tmp_path / "f"), [data], checksum=True)
    assert (tmp_path / "f").read_bytes() == data
    assert (written.size, written.crc, written.direct) == (len(data), zlib.crc32(data), 0)


def test_a_device_that_refuses_the_alignment_falls_back_to_the_cache_without_losing_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write
    calls = {"refused": 0}

    def write(fd: int, data: bytes | memoryview) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & direct_io._O_DIRECT:
            calls["refused"] += 1
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    data = os.urandom(3 * BUFFER_BYTES + 7)
    written = write_durably(str(tmp_path / "f"), [data])
    assert (tmp_path / "f").read_bytes() == data
    assert written.direct == 0
    assert calls["refused"] <= 1  # refused once, then never tried again for this file


def test_a_failing_producer_propagates_and_leaks_no_descriptor(tmp_path: Path) -> None:
    def chunks():
        yield os.urandom(BUFFER_BYTES + 1)
        raise RuntimeError("reader failed")

    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    with pytest.raises(RuntimeError, match="reader failed"):
        write_durably(str(tmp_path / "f"), chunks())
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before
