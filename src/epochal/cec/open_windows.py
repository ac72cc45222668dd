"""The open windows of CEC's window aggregate: one record per window, and the no-record marker.

:class:`OpenWindow` is what :class:`~epochal.cec.aggregate.WindowAggregate` keeps per open window
(its key, start, accumulator, tuple count and newest footprint); :data:`NOTHING` stands for no
record (``process(channel, seq, NOTHING)`` only moves a channel's position); :func:`fullest_first`
orders windows for G_checks.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any


class _Nothing:
    """No record: ``process(channel, seq, NOTHING)`` only says the channel was read up to ``seq``
    (the end of a frame that held nothing for this instance)."""

    def __repr__(self) -> str:
        return "NOTHING"


NOTHING: Any = _Nothing()
NEVER = float("-inf")


def fullest_first(window: OpenWindow) -> int:
    return -window.count


@dataclass(slots=True)
class OpenWindow:
    """One open window of a :class:`~epochal.cec.aggregate.WindowAggregate`: its key, start,
    accumulator and tuple count, and its newest footprint (what a G_check wrote of it)."""

    key: Any
    start: Any  # time windows: the start; count windows: None
    acc: Any
    count: int
    #: per channel, the last tuple its newest footprint holds (None: no footprint yet)
    footprint: tuple[int, ...] | None = None
    opened: float = 0.0  # the driver's time when it opened (response times)
    wid: Hashable = None  # its id (count windows: found through ``by_key`` without hashing it)
