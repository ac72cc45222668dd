"""The parts of one CEC stage instance, made from its deployment: its output queue (persisted or in
memory) with the writer that appends to it, its window aggregate, its source reader and its sink.

:func:`make_parts` is what a worker does first, before it rebuilds (a replacement) or starts;
:func:`queue_writer` once it knows whether it rebuilt. Neither reads or writes data: opening an
:class:`~epochal.cec.output_log.OutputLog` reconciles its index and cuts a torn tail, nothing more.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from epochal.cec.aggregate import WindowAggregate
from epochal.cec.log_writer import LogWriter
from epochal.cec.output import Durable, MemoryQueue
from epochal.cec.output_log import OutputLog
from epochal.cec.plan import CecDeployment, Stage
from epochal.cec.sink import SinkCommitter
from epochal.connectors.base import SinkContext
from epochal.connectors.source_reader import SourceReader


@dataclass
class StageParts:
    """What one stage instance works with (None: its stage has no such part)."""

    log: OutputLog | MemoryQueue | None
    aggregate: WindowAggregate | None
    source: SourceReader | None
    sink: SinkCommitter | None


def make_parts(deployment: CecDeployment, stage: Stage, subtask: int, channels: int, directory: str,
               incarnation: int, post: Callable[[Durable], None]) -> StageParts:
    """The parts of instance ``subtask`` of ``stage`` with ``channels`` inputs, keeping its files
    under ``directory``: a queue for a stage with an output edge, a window or a source (in
    memory, posting :class:`~epochal.cec.output.Durable` at once, unless ``deployment.persist``)."""
    log: OutputLog | MemoryQueue | None = None
    if stage.downstream is not None or stage.window is not None or stage.upstream is None:
        log = OutputLog.open(os.path.join(directory, "out"), deployment.segment_bytes, deployment.fsync) \
            if deployment.persist else MemoryQueue(post)
    aggregate = None
    if stage.window is not None:
        spec = stage.window
        mode = "none" if deployment.mode == "native" else deployment.mode
        aggregate = WindowAggregate(spec.shape, spec.function, spec.key, channels, mode,  # type: ignore[arg-type]
                                    deployment.settings, spec.timestamp, spec.out_of_orderness)
    source = SourceReader(stage.splits[subtask]) if stage.splits is not None else None
    sink = None
    if stage.sink is not None:
        context = SinkContext(stage.sink_name, subtask, stage.parallelism, lambda payload: None, incarnation, True)
        sink = SinkCommitter(stage.sink, context, os.path.join(directory, "commits"))
    return StageParts(log, aggregate, source, sink)


def queue_writer(log: OutputLog | MemoryQueue, max_outstanding: int, post: Callable[[Durable], None]) -> Any:
    """What appends to ``log``: a :class:`~epochal.cec.log_writer.LogWriter` posting a
    :class:`~epochal.cec.output.Durable` per frame on disk, or the in-memory queue itself."""
    if isinstance(log, OutputLog):
        return LogWriter(log, max_outstanding, lambda frame: post(Durable(frame)))
    return log
