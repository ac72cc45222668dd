"""Reconstructing an eventual checkpoint from an operator's output, newest first (papers/002 §II.B).

The eventual checkpoint (EC) of an operator at the time t_c of its newest output is, for each
window open at t_c, its most recent footprint (G_open or G_check) in the output queue. Rolling
back over the output's stream events from the newest:

- the newest stream event says how many windows were open at t_c (its N) and how far the
  operator had read (t_c's position): N is how many footprints to find;
- an R of a window seen before any footprint of it means the window closed before t_c:
  its older footprints are skipped;
- the first footprint met of every other window is its part of the EC.

Reconstruction stops as soon as N footprints are found; ``extent`` counts the tuples (results
and control tuples, a G_check per window checked) of the stream events gone through (the
paper's q at the crash, to a stream event). The upstream replay starts after T, per input
channel the oldest position among the footprints, and each restored window ignores replayed
input at or before its own footprint's position (:func:`~epochal.cec.tuples.already_counted`).

A pure function of the stream events: reading the log
(:meth:`~epochal.cec.output_log.OutputLog.read_backwards`) and unpickling frames is the caller's
(:func:`~epochal.cec.rebuild.logged_frames`). Control tuples stay in their stored form
(:func:`~epochal.cec.tuples.encode_items`): nothing is decoded that loading does not need.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from epochal.cec.tuples import (
    CHECK,
    CHECKS,
    CLOSED,
    FULL,
    FullCheckpoint,
    LoggedFrame,
    Position,
    WindowCheckpoint,
    decode_item,
    earliest,
)


class ReconstructionError(Exception):
    """The output ends before every open window's footprint was found (trimmed too far)."""


@dataclass(frozen=True)
class EventualCheckpoint:
    """Every window open at the newest output, each with its newest footprint."""

    #: per open window its newest footprint in its stored form (see
    #: :func:`~epochal.cec.tuples.encode_items`), newest first as reconstruction met them:
    #: loading ~100,000 windows reads them as they are
    footprints: dict[Hashable, tuple[Any, ...]] = field(default_factory=dict)
    #: T: replay upstream input after this position, per channel (None: nothing was open; replay
    #: nothing older than ``newest``)
    replay_after: Position | None = None
    #: the position of the newest output (t_c)
    newest: Position | None = None
    #: tuples of the stream events rolled back over (the extent at the crash)
    extent: int = 0

    @property
    def windows(self) -> dict[Hashable, WindowCheckpoint]:
        """The footprints as :class:`~epochal.cec.tuples.WindowCheckpoint`, newest first."""
        return {window: decode_item(entry) for window, entry in self.footprints.items()}


def reconstruct(newest_first: Iterable[LoggedFrame]) -> EventualCheckpoint:
    """The EC from an operator's output stream events, newest first. An empty output gives an
    empty EC. Raises :class:`ReconstructionError` if the output ends before N footprints."""
    wanted: int | None = None
    newest: Position | None = None
    closed: set[Hashable] = set()
    found: dict[Hashable, tuple[Any, ...]] = {}
    extent = 0
    for frame in newest_first:
        if wanted is None:
            wanted, newest = frame.open_windows, frame.position
        control = frame.control
        extent += frame.records + sum(len(entry[1]) if entry[0] == CHECKS else 1 for entry in control)
        if len(found) < wanted:
            for entry in reversed(control):
                kind, window = entry[0], entry[1]
                if kind == CLOSED:
                    closed.add(window)
                elif kind == CHECKS:  # several windows' G_checks at one position, newest last
                    _, windows, states, seqs, watermark = entry
                    for window, state in zip(reversed(windows), reversed(states), strict=True):
                        if window not in closed and window not in found:
                            found[window] = (CHECK, window, state, seqs, watermark)
                elif window not in closed and window not in found and kind != FULL:
                    found[window] = entry
        if len(found) == wanted:  # (none open at the newest output: done at once)
            replay_after = earliest([(f[3], f[4]) for f in found.values()]) if found else None
            return EventualCheckpoint(found, replay_after, newest, extent)
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


def reconstruct_full(newest_first: Iterable[LoggedFrame]) -> FullRestore:
    """CRB's restore point from an operator's output stream events, newest first."""
    results: set[Hashable] = set()
    extent = 0
    for frame in newest_first:
        extent += frame.records
        for entry in reversed(frame.control):
            extent += 1
            if entry[0] == FULL:
                return FullRestore(decode_item(entry), results, extent)
            if entry[0] == CLOSED:
                results.add(entry[1])
    return FullRestore(None, results, extent)
