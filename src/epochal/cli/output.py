"""Text for people: tables, times, durations, sizes."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns aligned on the widest cell; ``-`` for None."""
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def when(epoch: float | None) -> str:
    """A wall-clock time as local ISO date and time to the second."""
    if not epoch:
        return "-"
    return datetime.datetime.fromtimestamp(epoch).isoformat(sep=" ", timespec="seconds")


def duration(seconds: float | None) -> str:
    """``1h 02m``, ``3m 05s``, ``4.2s``, ``35ms``."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def size(count: float | None) -> str:
    if count is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def number(value: float | None) -> str:
    """A watermark or count: None as ``-``, whole numbers without a fraction."""
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
