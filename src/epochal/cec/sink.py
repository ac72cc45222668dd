"""A sink instance's exactly-once commits under CEC: a two-phase commit decided by its own log.

Under CEC no global checkpoint tells a sink when to commit. :class:`SinkCommitter` commits on
its own, every ``commit_interval``: it pre-commits the writer's open output (invisible,
durable), appends one fsync'd frame ``(number, committable, position)`` to its *commit log*
(an :class:`~epochal.cec.output_log.OutputLog` next to the worker's output queue): that frame
is the decision, and then makes the output visible (``commit``, idempotent). ``position`` is
how far the sink's input had been read (per input channel, the last item's sequence number).

After a crash the replacement reads the newest decision, commits it again (harmless if it was
done) and asks its input for everything after its position. Output pre-committed without a
decision is never made visible. A writer that is not transactional (print, discard) is flushed
instead: its output is at least once.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

from epochal.cec.output_log import OutputLog
from epochal.connectors.base import Sink, SinkContext


class SinkCommitter:
    """The writer of one sink instance and its commit log in ``directory``."""

    def __init__(self, sink: Sink, context: SinkContext, directory: str | os.PathLike[str]) -> None:
        self.writer = sink.create_writer(context)
        self.transactional = hasattr(self.writer, "pre_commit")
        self.log = OutputLog.open(directory, segment_bytes=1 << 20, fsync=True)
        self.number = self.log.last_seq + 1
        #: the input position of the newest decision (None: nothing committed yet)
        self.committed: Any = None
        self.dirty = False
        last = next(self.log.read_backwards(), None)
        if last is not None:
            committable, self.committed = pickle.loads(last[1])
            if committable is not None:
                self.writer.commit([committable])  # type: ignore[attr-defined]  # idempotent

    def write(self, records: list[Any]) -> None:
        if records:
            self.writer.write_batch(records)
            self.dirty = True

    def commit(self, position: Any) -> None:
        """Make everything written so far visible, read up to input ``position``."""
        committable = None
        if self.transactional:
            committable = self.writer.pre_commit(self.number)  # type: ignore[attr-defined]
        else:
            self.writer.flush()
        self.log.append(self.number, 0.0, 0.0, pickle.dumps((committable, position)))  # the decision
        if committable is not None:
            self.writer.commit([committable])  # type: ignore[attr-defined]
        self.committed = position
        self.number += 1
        self.dirty = False
        if self.number % 64 == 0:
            self.log.trim(self.number - 1)  # older decisions are never read again

    def close(self) -> None:
        try:
            self.writer.close()
        finally:
            self.log.close()
