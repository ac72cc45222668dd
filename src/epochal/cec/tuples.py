"""CEC's control tuples and results as they appear in an operator's output (papers/002 §II.B, §III).

An operator instance in CEC mode emits, in timestamp order, into its persisted output queue:

- :class:`WindowCheckpoint` with ``kind="open"`` (G_open) when a window opens: the window's state
  after the tuple that opened it;
- :class:`WindowCheckpoint` with ``kind="check"`` (G_check) from the background path: the state
  accumulated so far;
- :class:`WindowResult` (R) when a window closes.

Each carries the number of windows open after it (N, what the EC reconstruction counts
footprints against) and the *position* of the last input tuple the operator had processed:
its timestamp ``ts`` (the paper's t_now) and its input sequence number ``seq``. The position
orders inputs exactly even where timestamps tie, which is what makes per-window deduplication
after a replay exact (:func:`already_counted`). Window ids must be unique within an operator
instance for its lifetime (a key's next count window gets a new id), so that a closed window is
never mistaken for an open one.

Downstream operators and sinks drop control tuples (:func:`is_control`); they never see them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """Where an input tuple was in the operator's input: ordered by timestamp, then sequence number."""

    ts: float
    seq: int


@dataclass(frozen=True, slots=True)
class WindowCheckpoint:
    """G_open or G_check of one window: its state ``state`` after the input at ``position``."""

    kind: Literal["open", "check"]
    window: Hashable
    state: Any
    open_windows: int
    position: Position


@dataclass(frozen=True, slots=True)
class WindowResult:
    """R: window ``window`` closed with ``value`` after the input at ``position``."""

    window: Hashable
    value: Any
    open_windows: int
    position: Position


def is_control(item: object) -> bool:
    """Whether ``item`` is a control tuple (consumers drop it)."""
    return isinstance(item, WindowCheckpoint)


def already_counted(footprint: WindowCheckpoint, position: Position) -> bool:
    """After a recovery, whether the window restored from ``footprint`` already holds the input at
    ``position`` (replayed from upstream): every input at or before the footprint's position."""
    return position <= footprint.position
