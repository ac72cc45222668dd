"""Window shapes: which windows a record belongs to (Borealis' and Flink's windows, papers/002 §II).

Two shapes, each tumbling (``slide`` = ``size``, the default) or sliding (``slide`` < ``size``:
overlapping windows, a record in ``ceil(size / slide)`` of them):

- :class:`TimeWindows`: by event time. Window ``start`` covers ``[start, start + size)``; starts
  are multiples of ``slide``. It closes once the event time (the watermark) reaches its end.
- :class:`CountWindows`: by arrival, per key. A key's ``n``-th record (``n`` from 0) opens a
  window when ``n % slide == 0``; a window closes with its ``size``-th record.

Both are pure values shared by every runtime that windows records (the dataflow runtime's window
operator, CEC's window aggregate); they hold no state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from epochal.validation import check_number


@dataclass(frozen=True)
class TimeWindows:
    """Event-time windows of ``size``, a new one every ``slide`` (``None``: tumbling)."""

    size: Any
    slide: Any = None

    def __post_init__(self) -> None:
        check_number(self.size, "window size")
        if self.size <= 0:
            raise ValueError(f"a window size must be positive, not {self.size}")
        if self.slide is not None:
            check_number(self.slide, "window slide")
            if not 0 < self.slide <= self.size:
                raise ValueError(f"a window slide must be positive and at most the size {self.size}, "
                                 f"not {self.slide}")

    @property
    def step(self) -> Any:
        """The distance between consecutive window starts."""
        return self.size if self.slide is None else self.slide

    @property
    def sliding(self) -> bool:
        return self.slide is not None and self.slide != self.size

    def starts(self, ts: Any) -> list[Any]:
        """The starts of the windows holding event time ``ts``, oldest first."""
        step, size = self.step, self.size
        last = ts - ts % step
        if not self.sliding:
            return [last]
        starts = []
        start = last
        while start > ts - size:
            starts.append(start)
            start -= step
        starts.reverse()
        return starts

    def end(self, start: Any) -> Any:
        """The first event time after window ``start``."""
        return start + self.size

    def closes(self, start: Any, watermark: Any) -> bool:
        """Whether window ``start`` is complete once the event time reached ``watermark`` (every
        record up to ``watermark`` arrived): at ``start + size - 1``, as Flink fires at a window's
        maximum timestamp."""
        return start + self.size - 1 <= watermark


@dataclass(frozen=True)
class CountWindows:
    """Windows of ``size`` consecutive records of a key, a new one every ``slide`` records
    (``None``: tumbling)."""

    size: int
    slide: int | None = None

    def __post_init__(self) -> None:
        check_number(self.size, "count window size", integer=True)
        if self.size < 1:
            raise ValueError(f"a count window holds at least 1 record, not {self.size}")
        if self.slide is not None:
            check_number(self.slide, "count window slide", integer=True)
            if not 1 <= self.slide <= self.size:
                raise ValueError(f"a count window slide must be between 1 and the size {self.size}, "
                                 f"not {self.slide}")

    @property
    def step(self) -> int:
        return self.size if self.slide is None else self.slide

    @property
    def sliding(self) -> bool:
        return self.slide is not None and self.slide != self.size

    def opens(self, n: int) -> bool:
        """Whether a key's ``n``-th record (from 0) opens a window."""
        return n % self.step == 0

    def windows_per_record(self) -> int:
        """How many windows a record lands in once the stream is long enough."""
        return math.ceil(self.size / self.step)
