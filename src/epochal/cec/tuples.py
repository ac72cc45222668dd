"""CEC's control tuples and results as they appear in an operator's output (papers/002 §II.B, §III).

An operator instance in CEC mode emits, in timestamp order, into its persisted output queue:

- :class:`WindowCheckpoint` with ``kind="open"`` (G_open) when a window opens: the window's state
  after the tuple that opened it;
- :class:`WindowCheckpoint` with ``kind="check"`` (G_check) from the background path: the state
  accumulated so far;
- :class:`WindowResult` (R) when a window closes.

Each carries the number of windows open after it (N, what the EC reconstruction counts
footprints against) and the operator's input :class:`Position` after the tuple that caused it:
for every input channel the sequence number of the last tuple taken from it, and the watermark.
Sequence numbers are per channel, so input merged from several upstream instances is still
ordered exactly, timestamps tied or not, which is what makes per-window deduplication after a
replay exact (:func:`already_counted`). Window ids are unique within an operator instance for
its lifetime (a key's next count window gets a new id), so that a closed window is never
mistaken for an open one.

Downstream operators and sinks drop control tuples (:func:`is_control`); they never see them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

#: An item's sequence number in its channel: ``frame << ITEM_BITS | index in the frame``.
ITEM_BITS = 20
#: The index that stands for a frame's end: position ``item_seq(frame, ITEM_LAST)`` has read all
#: of ``frame`` (a consumer may get no item of a frame and still have read it).
ITEM_LAST = (1 << ITEM_BITS) - 1


def item_seq(frame_seq: int, index: int) -> int:
    """The sequence number of item ``index`` of stream event ``frame_seq``."""
    return frame_seq << ITEM_BITS | index


def split_seq(seq: int) -> tuple[int, int]:
    """``(frame sequence number, index in the frame)`` of an item sequence number."""
    return seq >> ITEM_BITS, seq & ((1 << ITEM_BITS) - 1)


class Position(NamedTuple):
    """How far an operator instance had read: per input channel the sequence number of the last
    tuple it took (-1: none yet), and its watermark then."""

    seqs: tuple[int, ...]
    watermark: float = float("-inf")

    def covers(self, channel: int, seq: int) -> bool:
        """Whether the tuple ``seq`` of ``channel`` had been read at this position."""
        return seq <= self.seqs[channel]


def earliest(positions: list[Position]) -> Position:
    """Per channel the oldest of ``positions`` (T: replay must start after it on every channel)."""
    seqs = tuple(min(column) for column in zip(*(p.seqs for p in positions), strict=True))
    return Position(seqs, min(p.watermark for p in positions))


class WindowCheckpoint(NamedTuple):
    """G_open or G_check of one window: its state ``state`` after the input at ``position``."""

    kind: Literal["open", "check"]
    window: Hashable
    state: Any
    open_windows: int
    position: Position


class WindowResult(NamedTuple):
    """R: window ``window`` closed with ``value`` after the input at ``position``."""

    window: Hashable
    value: Any
    open_windows: int
    position: Position


@dataclass(frozen=True, slots=True)
class FullCheckpoint:
    """CRB (the paper's baseline): every open window's state at once, ``windows`` by id as
    ``(accumulator, count)``, with the per-key phases of count windows, at ``position``.
    ``suppressed``: open windows whose result is already in the output (a replay after an
    earlier crash rebuilt them): their results must not be emitted again."""

    windows: dict[Hashable, Any]
    phase: dict[Any, int]
    open_windows: int
    position: Position
    suppressed: frozenset[Hashable] = frozenset()


def is_control(item: object) -> bool:
    """Whether ``item`` is a control tuple (consumers drop it)."""
    return isinstance(item, (WindowCheckpoint, FullCheckpoint))


def already_counted(footprint: WindowCheckpoint, channel: int, seq: int) -> bool:
    """After a recovery, whether the window restored from ``footprint`` already holds tuple
    ``seq`` of input ``channel`` (replayed from upstream): every tuple its position covers."""
    return footprint.position.covers(channel, seq)


# Items as they are stored: plain tuples pickle several times faster than slotted dataclasses,
# and a window operator writes one or two items per input tuple.
_OPEN, _CHECK, _RESULT, _FULL = 0, 1, 2, 3


def encode_items(items: list[Any]) -> list[tuple[Any, ...]]:
    """``items`` (control tuples and results) as plain tuples, for the output queue."""
    out: list[tuple[Any, ...]] = []
    append = out.append
    for item in items:
        kind = type(item)
        position = item.position
        if kind is WindowCheckpoint:
            append((_OPEN if item.kind == "open" else _CHECK, item.window, item.state, item.open_windows,
                    position.seqs, position.watermark))
        elif kind is WindowResult:
            append((_RESULT, item.window, item.value, item.open_windows, position.seqs, position.watermark))
        else:
            append((_FULL, item.windows, item.phase, item.open_windows, position.seqs, position.watermark,
                    item.suppressed))
    return out


def decode_items(encoded: list[tuple[Any, ...]]) -> list[Any]:
    """The items :func:`encode_items` stored."""
    out: list[Any] = []
    for entry in encoded:
        kind, position = entry[0], Position(entry[4], entry[5])
        if kind == _RESULT:
            out.append(WindowResult(entry[1], entry[2], entry[3], position))
        elif kind == _FULL:
            out.append(FullCheckpoint(entry[1], entry[2], entry[3], position, entry[6]))
        else:
            out.append(WindowCheckpoint("open" if kind == _OPEN else "check", entry[1], entry[2], entry[3], position))
    return out
