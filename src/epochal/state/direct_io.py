"""Durable writes of large checkpoint files past the page cache (``O_DIRECT``).

A checkpoint or savepoint file is written once and read again only by a restore. Written
through the page cache, every byte is first copied by the kernel into a cache page allocated
for it, then written to the disk by ``fsync``: in a profile of a RocksDB canonical savepoint
(5 M entries, 700 MB) that copy was 37 % of the upload's CPU, on the cores the job runs on, and
the dirty pages evict the job's own cached files. Written with ``O_DIRECT`` the disk takes the
bytes from an aligned buffer of the writer's: one copy into that buffer, no cache pages.

:func:`write_durably` stages what it is given in a page-aligned buffer of
:data:`BUFFER_BYTES` and writes each full buffer with ``O_DIRECT``; a file smaller than one
buffer is written through the page cache as before (its write-back is cheap, and metadata files
are read back at once). The last, unaligned bytes of a large file are written through the page
cache, and ``fsync`` makes the whole file and its size durable. Where the file system refuses
``O_DIRECT`` (tmpfs, some network and FUSE file systems: ``EINVAL``), or the platform has no
``O_DIRECT``, or ``EPOCHAL_DIRECT_IO=0``, the file is written through the page cache; the
result on disk is the same bytes either way.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
from collections.abc import Iterable
from dataclasses import dataclass

from epochal.state.checksums import crc32

#: Alignment of ``O_DIRECT`` writes: buffer address, length and file offset (covers 512-byte
#: and 4 KiB logical blocks)
ALIGN = 4096
#: The staging buffer: the size of each direct write, and the smallest file written directly
BUFFER_BYTES = 8 << 20
_O_DIRECT = getattr(os, "O_DIRECT", 0)


def enabled() -> bool:
    """Whether large files are written with ``O_DIRECT`` here (the platform has it and
    ``EPOCHAL_DIRECT_IO`` is not ``0``)."""
    return bool(_O_DIRECT) and os.environ.get("EPOCHAL_DIRECT_IO", "1") != "0"


@dataclass(frozen=True)
class Written:
    """What :func:`write_durably` wrote: ``size`` bytes, their CRC-32 (0 unless asked), and
    ``direct`` bytes of them with ``O_DIRECT``."""

    size: int
    crc: int
    direct: int


class _Writer:
    """One file being written: a staging buffer, flushed with ``O_DIRECT`` while that works."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = mmap.mmap(-1, BUFFER_BYTES)  # page-aligned, as O_DIRECT needs
        self.view = memoryview(self.buffer)
        self.fill = 0
        self.direct = 0
        self.can_direct = enabled()

    def add(self, data: memoryview) -> None:
        while data:
            n = min(len(data), BUFFER_BYTES - self.fill)
            self.view[self.fill:self.fill + n] = data[:n]
            self.fill += n
            data = data[n:]
            if self.fill == BUFFER_BYTES:
                self._flush(BUFFER_BYTES)

    def finish(self) -> None:
        """Write what is staged (its aligned part directly if the file is already written so)."""
        if self.direct:
            self._flush(self.fill - self.fill % ALIGN)
        self._set_direct(False)
        _write_all(self.fd, self.view[:self.fill])
        self.fill = 0

    def close(self) -> None:
        self.view.release()
        self.buffer.close()

    def _flush(self, length: int) -> None:
        """Write the first ``length`` (aligned) staged bytes, directly where possible, and move
        the rest to the buffer's start."""
        done = 0
        if length and self.can_direct and self._set_direct(True):
            try:
                while done < length:
                    done += os.write(self.fd, self.view[done:length])
            except OSError as error:  # an alignment this device refuses: go on through the cache
                if error.errno != errno.EINVAL:
                    raise
                self.can_direct = False
                self._set_direct(False)
            self.direct += done
        _write_all(self.fd, self.view[done:length])
        self.buffer.move(0, length, self.fill - length)
        self.fill -= length

    def _set_direct(self, on: bool) -> bool:
        """Turn ``O_DIRECT`` on or off for the file; False when the file system refuses it."""
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        wanted = flags | _O_DIRECT if on else flags & ~_O_DIRECT
        if wanted == flags:
            return True
        try:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, wanted)
            return True
        except OSError:
            self.can_direct = False
            return False


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]


def write_durably(path: str, chunks: Iterable[bytes | bytearray | memoryview], checksum: bool = False) -> Written:
    """Write the file ``path`` (created or truncated), the concatenation of ``chunks``, and
    ``fsync`` it before returning: it survives a machine crash once this returns. Chunks may be
    produced while the file is written (a reader thread filling them meanwhile). Raises
    :class:`OSError` as ``open``/``write`` do; a file left by a failed write is incomplete."""
    size, crc = 0, 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
    writer = None
    try:
        writer = _Writer(fd)
        for chunk in chunks:
            data = memoryview(chunk).cast("B")
            size += len(data)
            if checksum:
                crc = crc32(data, crc)
            writer.add(data)
        writer.finish()
        os.fsync(fd)
        return Written(size, crc, writer.direct)
    finally:
        if writer is not None:
            writer.close()
        os.close(fd)
