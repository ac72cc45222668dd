"""Rebuilding a lost CEC stage instance from what its predecessor left on disk (papers/002 §II.B-C).

:func:`rebuild` is what a replacement does before it is ready: a window stage reads its output
queue newest first into :func:`~epochal.cec.eventual.reconstruct` (CEC) or
:func:`~epochal.cec.eventual.reconstruct_full` (CRB) and loads the result into its
:class:`~epochal.cec.aggregate.WindowAggregate`; a source seeks its splits to the positions in
its newest frame; a stateless stage resumes after its newest frame's input position; a sink
stage after its newest commit. It returns, per input channel, the position to ask the producer
to replay after (T for a window stage), and the timings of each phase.
"""

from __future__ import annotations

import gc
import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from epochal.cec.aggregate import WindowAggregate
from epochal.cec.eventual import reconstruct, reconstruct_full
from epochal.cec.output_log import OutputLog
from epochal.cec.sink import SinkCommitter
from epochal.cec.tuples import LoggedFrame, logged_frame
from epochal.connectors.source_reader import SourceReader


@dataclass
class Rebuilt:
    """What a replacement continues from."""

    #: per input channel: ask the producer for everything after this position
    after: list[int]
    #: a source: the records its predecessor had read
    records_read: int = 0
    phases: dict[str, float] = field(default_factory=dict)


def logged_frames(log: OutputLog) -> Iterator[LoggedFrame]:
    """A window stage's queue ``log`` read newest first, as reconstruction takes it."""
    for _, payload in log.read_backwards():
        meta, _, control = pickle.loads(payload)
        yield logged_frame(meta, control)


def rebuild(log: OutputLog | None, channels: int, mode: str, aggregate: WindowAggregate | None,
            source: SourceReader | None, sink: SinkCommitter | None) -> Rebuilt:
    """Restore ``aggregate`` / ``source`` from ``log`` (the instance's own queue) and say where
    each of its ``channels`` inputs resumes (see the module docstring). The garbage collector
    is off meanwhile: rebuilding allocates every open window at once, and collections scanning
    them again and again took two thirds of a rebuild of 100,000 windows."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _rebuild(log, channels, mode, aggregate, source, sink)
    finally:
        if enabled:
            gc.enable()
        gc.freeze()  # the restored windows live long: later collections need not scan them


def _rebuild(log: OutputLog | None, channels: int, mode: str, aggregate: WindowAggregate | None,
             source: SourceReader | None, sink: SinkCommitter | None) -> Rebuilt:
    started = time.monotonic()
    if aggregate is not None:
        aggregate.now = started  # restored windows' response times count from their restore
    out = Rebuilt([-1] * channels)
    phases = out.phases
    if aggregate is not None and log is not None:
        frames = logged_frames(log)
        start: Any
        if mode == "cec":
            ec = reconstruct(frames)
            phases["reconstruct_s"] = time.monotonic() - started
            loaded = time.monotonic()
            aggregate.restore(ec)
            phases.update(load_s=time.monotonic() - loaded, extent=float(ec.extent), windows=float(len(ec.footprints)))
            start = ec.replay_after or ec.newest
        else:
            restore = reconstruct_full(frames)
            phases["reconstruct_s"] = time.monotonic() - started
            loaded = time.monotonic()
            aggregate.restore_full(restore.checkpoint, restore.results_after)
            phases.update(load_s=time.monotonic() - loaded, extent=float(restore.extent),
                          windows=float(len(aggregate.windows)))
            start = restore.checkpoint.position if restore.checkpoint is not None else None
        if start is not None:
            out.after = list(start.seqs)
    elif log is not None and log.frames:
        meta = pickle.loads(log.read(log.frames[-1]))[0]
        if source is not None:
            positions, out.records_read = meta
            source.restore(positions)
        else:
            out.after = list(meta)
    elif sink is not None and sink.committed is not None and channels:
        out.after = list(sink.committed)
    phases["rebuild_s"] = time.monotonic() - started
    return out
