"""CEC's control tuples and results as they appear in an operator's output (papers/002 §II.B, §III).

An operator instance in CEC mode emits, in timestamp order, into its persisted output queue:

- :class:`WindowCheckpoint` with ``kind="open"`` (G_open) when a window opens: the window's state
  after the tuple that opened it;
- :class:`WindowCheckpoint` with ``kind="check"`` (G_check) from the background path: the state
  accumulated so far (the background path emits those it takes in one go as one
  :class:`WindowChecks`);
- its result when a window closes, with a :class:`WindowClosed` marker (R) if the window has a
  footprint in the output.

Each footprint carries the operator's input :class:`Position` after the tuple that caused it:
for every input channel the sequence number of the last tuple taken from it, and the watermark.
Sequence numbers are per channel, so input merged from several upstream instances is still
ordered exactly, timestamps tied or not, which is what makes per-window deduplication after a
replay exact (:func:`already_counted`). What the paper puts in every control tuple, N (windows
open) and t (the position), the queue keeps once per stream event (:class:`LoggedFrame`): the
reconstruction needs them of the newest output only. Window ids are unique within an operator
instance for its lifetime (a key's next count window gets a new id), so that a closed window is
never mistaken for an open one.

Downstream operators and sinks never see control tuples: a stream event's records for its
consumers and its control tuples are stored apart.
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


def earliest(positions: list[tuple[tuple[int, ...], float]]) -> Position:
    """Per channel the oldest of ``positions`` (T: replay must start after it on every channel):
    :class:`Position` objects or the ``(seqs, watermark)`` pairs of stored footprints."""
    seqs = tuple(map(min, zip(*(p[0] for p in positions), strict=True)))
    return Position(seqs, min(p[1] for p in positions))


class WindowCheckpoint(NamedTuple):
    """G_open or G_check of one window: its state ``state`` after the input at ``position``."""

    kind: Literal["open", "check"]
    window: Hashable
    state: Any
    position: Position


class WindowChecks(NamedTuple):
    """G_checks of several windows taken in one go by the background path: no input came between
    them, so they share ``position``; ``states[i]`` is the state of ``windows[i]``. Stored as one
    entry (the per-window cost of a G_check is then a few list appends, not a tuple each)."""

    windows: list[Hashable]
    states: list[Any]
    position: Position


class WindowClosed(NamedTuple):
    """R as the output queue keeps it: window ``window`` closed, its result is among the records
    of the same stream event. Logged only for a window that has a footprint in the output (the
    only case in which reconstruction must know it closed: it skips the window's older
    footprints); a window that closes with the tuple that opened it (a count window of size 1)
    never had one, so its result goes out bare, as without fault tolerance."""

    window: Hashable


class OutputBatch(NamedTuple):
    """What a window operator emitted since it last handed its output over (one stream event of
    its queue): result ``records``, ``control`` tuples in output order, and N (windows open) and
    the input position after the last tuple it took."""

    records: list[Any]
    control: list[Any]
    open_windows: int
    position: Position


class LoggedFrame(NamedTuple):
    """One stream event of a window operator's output queue as reconstruction reads it: N and the
    position after it, how many result ``records`` it holds, and its ``control`` tuples as
    :func:`encode_items` stored them, oldest first."""

    open_windows: int
    position: Position
    records: int
    control: list[tuple[Any, ...]]


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
    return isinstance(item, (WindowCheckpoint, WindowChecks, WindowClosed, FullCheckpoint))


def already_counted(footprint: WindowCheckpoint, channel: int, seq: int) -> bool:
    """After a recovery, whether the window restored from ``footprint`` already holds tuple
    ``seq`` of input ``channel`` (replayed from upstream): every tuple its position covers."""
    return footprint.position.covers(channel, seq)


def window_frame_meta(batch: OutputBatch, records: int) -> tuple[Any, ...]:
    """What a window operator's stream event stores beside its ``records`` and control tuples:
    ``(N, seqs, watermark, records)``, read back as :class:`LoggedFrame`."""
    return batch.open_windows, batch.position.seqs, batch.position.watermark, records


def logged_frame(meta: tuple[Any, ...], control: list[tuple[Any, ...]] | None) -> LoggedFrame:
    """The stream event whose :func:`window_frame_meta` and stored control tuples are these."""
    open_windows, seqs, watermark, records = meta
    return LoggedFrame(open_windows, Position(seqs, watermark), records, control or [])


# Control tuples as they are stored: plain tuples pickle and unpickle several times faster than
# NamedTuples or dataclasses, and reconstruction reads ~100,000 of them.
OPEN, CHECK, CLOSED, FULL, CHECKS = 0, 1, 2, 3, 4


def encode_items(items: list[Any]) -> list[tuple[Any, ...]]:
    """Control tuples ``items`` as plain tuples, for the output queue: ``(OPEN | CHECK, window,
    state, seqs, watermark)``, ``(CHECKS, windows, states, seqs, watermark)``, ``(CLOSED,
    window)``, ``(FULL, windows, phase, N, seqs, watermark, suppressed)``."""
    out: list[tuple[Any, ...]] = []
    append = out.append
    for item in items:
        kind = type(item)
        if kind is WindowClosed:
            append((CLOSED, item.window))
        elif kind is WindowCheckpoint:
            position = item.position
            append((OPEN if item.kind == "open" else CHECK, item.window, item.state, position.seqs,
                    position.watermark))
        elif kind is WindowChecks:
            position = item.position
            append((CHECKS, item.windows, item.states, position.seqs, position.watermark))
        else:
            position = item.position
            append((FULL, item.windows, item.phase, item.open_windows, position.seqs, position.watermark,
                    item.suppressed))
    return out


def decode_item(entry: tuple[Any, ...]) -> Any:
    """The control tuple :func:`encode_items` stored as ``entry``."""
    kind = entry[0]
    if kind == CLOSED:
        return WindowClosed(entry[1])
    if kind == CHECKS:
        return WindowChecks(entry[1], entry[2], Position(entry[3], entry[4]))
    if kind == FULL:
        return FullCheckpoint(entry[1], entry[2], entry[3], Position(entry[4], entry[5]), entry[6])
    return WindowCheckpoint("open" if kind == OPEN else "check", entry[1], entry[2], Position(entry[3], entry[4]))
