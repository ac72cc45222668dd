"""CRC-32 of checkpoint files: zlib's ``crc32`` (IEEE 802.3), computed by a maintained library.

:func:`crc32` returns what ``zlib.crc32(data, value)`` returns, always, so a file written by any
version of epochal verifies with any other (those written when the RocksDB extension computed
CRCs itself too: tests/unit/data/crc32-before-isal). It is python-isal's ``isal_zlib.crc32``
(Intel's ISA-L, folding with carry-less multiplication; a dependency of epochal: about 27 GB/s
here against zlib's 4, and a canonical savepoint checksums every byte it writes), or, where that
is not installed, Python's ``zlib.crc32``. Neither holds the interpreter lock for a large buffer.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

__all__ = ["crc32", "way"]

#: What :func:`crc32` reads: any contiguous buffer
Data = bytes | bytearray | memoryview

_crc32: Callable[[Data, int], int]
try:
    from isal.isal_zlib import crc32 as _crc32

    _WAY = "isal"
except ImportError:  # isal is a dependency of epochal: only an install without it gets here
    _crc32 = zlib.crc32
    _WAY = "zlib"


def crc32(data: Data, value: int = 0) -> int:
    """``zlib.crc32(data, value)``: the CRC-32 of ``data`` (a contiguous buffer) continued from
    ``value`` (0 to start), an unsigned 32-bit int."""
    return _crc32(data, value)


def way() -> str:
    """Which library computes :func:`crc32` here: ``isal`` or ``zlib``."""
    return _WAY
