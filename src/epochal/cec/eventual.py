"""Reconstructing an eventual checkpoint from an operator's output, newest first (papers/002 §II.B).

The eventual checkpoint (EC) of an operator at the time t_c of its newest output is, for each
window open at t_c, its most recent footprint (G_open or G_check) in the output queue. Rolling
back over the output from the newest tuple:

- the newest tuple (control or result) says how many windows were open at t_c (its N): that is
  how many footprints to find;
- a result R of a window seen before any footprint of it means the window closed before t_c:
  its older footprints are skipped;
- the first footprint met of every other window is its part of the EC.

Reconstruction stops as soon as N footprints are found; ``extent`` counts the tuples gone
through (the paper's q at the crash). The upstream replay starts after T, per input channel
the oldest position among the footprints, and each restored window ignores replayed input at or before its own
footprint's position (:func:`~epochal.cec.tuples.already_counted`).

A pure function of the tuples: reading the log (:meth:`~epochal.cec.output_log.OutputLog.read_backwards`)
and decoding frames is the caller's.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from epochal.cec.tuples import FullCheckpoint, Position, WindowCheckpoint, WindowResult, earliest


class ReconstructionError(Exception):
    """The output ends before every open window's footprint was found (trimmed too far)."""


@dataclass(frozen=True)
class EventualCheckpoint:
    """Every window open at the newest output, each with its newest footprint."""

    windows: dict[Hashable, WindowCheckpoint] = field(default_factory=dict)
    #: T: replay upstream input after this position, per channel (None: nothing was open; replay
    #: nothing older than ``newest``)
    replay_after: Position | None = None
    #: the position of the newest output (t_c)
    newest: Position | None = None
    #: tuples rolled back over, the last footprint included (the extent at the crash)
    extent: int = 0
    #: windows whose R lies inside the extent, with the position that closed them: replayed input
    #: of such a window must not open it again (its result is already out)
    closed: dict[Hashable, Position] = field(default_factory=dict)


def reconstruct(newest_first: Iterable[object]) -> EventualCheckpoint:
    """The EC from an operator's output tuples, newest first (other items, such as a stateless
    operator's data tuples, are passed over and counted in the extent). An empty output gives an
    empty EC. Raises :class:`ReconstructionError` if the output ends before N footprints."""
    wanted: int | None = None
    newest: Position | None = None
    closed: dict[Hashable, Position] = {}
    found: dict[Hashable, WindowCheckpoint] = {}
    extent = 0
    for item in newest_first:
        if not isinstance(item, (WindowCheckpoint, WindowResult)):
            extent += 1
            continue
        extent += 1
        if wanted is None:
            wanted, newest = item.open_windows, item.position
        if isinstance(item, WindowResult):
            closed.setdefault(item.window, item.position)
        elif item.window not in closed and item.window not in found:
            found[item.window] = item
        if len(found) == wanted:  # (none open at the newest output: done at once)
            replay_after = earliest([f.position for f in found.values()]) if found else None
            return EventualCheckpoint(found, replay_after, newest, extent, closed)
    if wanted is None:
        return EventualCheckpoint()
    raise ReconstructionError(f"the operator's output ends after {extent} tuples with {len(found)} of the "
                              f"{wanted} open windows' checkpoints found: it was trimmed past a footprint still needed")


@dataclass(frozen=True)
class FullRestore:
    """CRB's restore point: the newest full checkpoint (None: none was written; replay all) and
    the windows whose results came after it (their results must not be emitted again)."""

    checkpoint: FullCheckpoint | None
    results_after: set[Hashable]
    #: tuples rolled back over
    extent: int


def reconstruct_full(newest_first: Iterable[object]) -> FullRestore:
    """CRB's restore point from an operator's output tuples, newest first."""
    results: set[Hashable] = set()
    extent = 0
    for item in newest_first:
        extent += 1
        if isinstance(item, FullCheckpoint):
            return FullRestore(item, results, extent)
        if isinstance(item, WindowResult):
            results.add(item.window)
    return FullRestore(None, results, extent)
