"""CRC-32 of checkpoint files: zlib's ``crc32`` (IEEE 802.3), computed the fastest way here.

:func:`crc32` returns what ``zlib.crc32(data, value)`` returns, always: a checkpoint written
with one way is verified with any other. Where the native extension
(:mod:`epochal.state._rocksdb_native`, built at install) is present it computes the CRC by
folding with carry-less multiplication on CPUs that have it (about 14 GB/s here, zlib's 4 GB/s;
a canonical savepoint's group CRCs were 10 % of its CPU), and without the interpreter lock for
large buffers; else zlib's own.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

try:
    from epochal.state._rocksdb_native import crc32 as _native_crc32
except ImportError:  # the extension was not built (no C compiler at install)
    _native_crc32 = None

_crc32: Callable[[bytes | bytearray | memoryview, int], int] = _native_crc32 or zlib.crc32


def crc32(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """``zlib.crc32(data, value)``: the CRC-32 of ``data`` continued from ``value`` (0 to start),
    an unsigned 32-bit int."""
    return _crc32(data, value) & 0xFFFFFFFF


def way() -> str:
    """How :func:`crc32` computes here: ``folding``, ``zlib`` (zlib's, through the extension or
    Python's zlib module) or ``tables``."""
    if _native_crc32 is None:
        return "zlib"
    from epochal.state import _rocksdb_native

    return str(_rocksdb_native.crc_ways()[0])
