"""The paper's workload (papers/002 §IV): tuples ``(item_id, item_price, item_time, pad)`` of about
100 bytes, the average price per item id over count windows, and its oracle.

``item_id`` and ``item_price`` come from a splitmix64 hash of the tuple's index, so ids are
uniformly random (the paper: "randomly distributed across ... item_ids") and a run is the same
stream every time. (A plain multiplicative hash modulo the key count is not random enough: with
100,000 ids it visits every id about once per 100,000 tuples, so every window of size 10 would
close at once near tuple 1,000,000.) ``pad`` (hex digits of the hash, different for every
tuple) fills a tuple to :data:`TUPLE_BYTES` as pickled in a batch.

Count windows over keys that all come from one source subtask are deterministic (each key's
tuples arrive in source order), so :func:`oracle` computes the exact expected output in plain
Python, and :func:`check_output` compares a run's committed lines with it as multisets.
"""

from __future__ import annotations

import math
import os
import pickle
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from epochal.serialization import PICKLE_PROTOCOL

_M64 = (1 << 64) - 1
#: the paper's tuple size (bytes), here the pickled size of one tuple on its own
TUPLE_BYTES = 100


def mix(i: int) -> int:
    """splitmix64 of ``i``: a cheap, well-mixed 64-bit hash (deterministic across processes)."""
    z = (i * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _record(i: int, keys: int, pad: int) -> tuple[int, int, int, str]:
    h = mix(i)
    return (h % keys, (h >> 40) % 1000, i, (f"{h:016x}" * (pad // 16 + 1))[:pad])


def _pad_length() -> int:
    """Pad characters that make a tuple ~:data:`TUPLE_BYTES` bytes inside a pickled batch of
    1,024 (how tuples travel and are logged; a different pad per tuple, so pickle's memo
    cannot share it)."""
    batch = [_record(i, 100_000, 0) for i in range(1024)]
    base = len(pickle.dumps(batch, protocol=PICKLE_PROTOCOL)) / len(batch)
    return max(0, round(TUPLE_BYTES - base - 1))


PAD_LENGTH = _pad_length()


@dataclass(frozen=True)
class Items:
    """``fn(i)`` of the generator source: tuple ``i`` of the stream over ``keys`` item ids."""

    keys: int
    pad: int = PAD_LENGTH

    def __call__(self, i: int) -> tuple[int, int, int, str]:
        h = mix(i)
        return (h % self.keys, (h >> 40) % 1000, i, (f"{h:016x}" * (self.pad // 16 + 1))[:self.pad])


def item_id(record: Any) -> Any:
    return record[0]


def item_price(record: Any) -> Any:
    return record[1]


def tuple_bytes(keys: int = 100_000) -> float:
    """Bytes per tuple in a pickled batch of 1,024 (the paper's 100-byte tuple, as logged here)."""
    batch = [Items(keys)(i) for i in range(1024)]
    return len(pickle.dumps(batch, protocol=PICKLE_PROTOCOL)) / len(batch)


@dataclass(frozen=True)
class Expected:
    """What a run must commit: the result lines as a multiset, their count and sum of averages,
    and the windows open at the end (never closed: count windows that are not full never fire)."""

    lines: Counter
    count: int
    total: float
    open_at_end: int


@lru_cache(maxsize=8)
def oracle(records: int, keys: int, size: int) -> Expected:
    """The exact output of ``key_by(item_id).count_window(size).avg(item_price)`` over the first
    ``records`` tuples (a plain Python replay of the windows)."""
    sums: dict[int, int] = {}
    counts: dict[int, int] = {}
    lines: Counter = Counter()
    values: list[float] = []
    for i in range(records):
        h = mix(i)
        key, price = h % keys, (h >> 40) % 1000  # as Items(keys)(i)
        c = counts.get(key, 0) + 1
        s = sums.get(key, 0) + price
        if c == size:
            value = s / size
            lines[str((key, value))] += 1
            values.append(value)
            counts.pop(key, None)
            sums.pop(key, None)
        else:
            counts[key], sums[key] = c, s
    return Expected(lines, len(values), math.fsum(values), len(counts))


def open_windows_at(records: int, keys: int, size: int) -> int:
    """Windows open after the first ``records`` tuples (keys whose count is not a multiple of
    ``size``)."""
    return oracle(records, keys, size).open_at_end


def read_lines(directory: str) -> list[str]:
    """Every committed line under ``directory`` (names starting with ``_`` or ``.`` skipped)."""
    lines: list[str] = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(("_", ".")):
            continue
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            lines.extend(handle.read().splitlines())
    return lines


def check_output(directory: str, expected: Expected) -> dict[str, Any]:
    """Compare the committed output in ``directory`` with ``expected``: ``exact`` only when the
    multiset of lines is equal (no result lost, none duplicated, every value right)."""
    lines = read_lines(directory)
    got = Counter(lines)
    values = []
    for line in lines:
        try:
            values.append(float(line.rsplit(",", 1)[1].rstrip(") ")))
        except (IndexError, ValueError):
            values.append(float("nan"))
    missing = sum((expected.lines - got).values())
    extra = sum((got - expected.lines).values())
    return {"results": len(lines), "expected_results": expected.count,
            "sum_avg": math.fsum(values), "expected_sum_avg": expected.total,
            "missing": missing, "duplicated_or_wrong": extra, "exact": missing == 0 and extra == 0}
