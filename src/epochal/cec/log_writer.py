"""Asynchronous writes to an :class:`~epochal.cec.output_log.OutputLog` (papers/002 Appendix).

The paper's persistence path keeps a configurable window of N outstanding write I/Os and moves
a stream event to the forward list only once its write completed. :class:`LogWriter` is that
path for one log: the operator thread submits stream events and goes on computing; one writer
thread appends them in submission order; ``on_durable`` is called (on the writer thread) for each
event once it is on disk, in sequence order, which is when the caller may forward it downstream.
At most ``max_outstanding`` events wait: a further ``submit`` blocks (back-pressure on the
operator), so memory stays bounded when the disk is slower than the operator; ``full()`` says
beforehand whether it would.

A failed write (disk full, I/O error) stops the writer: the error is raised by the next
``submit`` or ``flush`` on the operator thread, and nothing after it is written or forwarded.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from epochal.cec.output_log import Frame, OutputLog

_STOP = object()


@dataclass(frozen=True)
class _Event:
    """A submitted stream event."""

    seq: int
    min_ts: float
    max_ts: float
    payload: bytes


class LogWriter:
    """One writer thread for ``log`` (see the module docstring)."""

    def __init__(self, log: OutputLog, max_outstanding: int = 8,
                 on_durable: Callable[[Frame], None] | None = None) -> None:
        if max_outstanding < 1:
            raise ValueError(f"max_outstanding must be at least 1, not {max_outstanding}")
        self.log = log
        self.on_durable = on_durable
        self._pending: queue.Queue[object] = queue.Queue(maxsize=max_outstanding)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="epochal-output-log", daemon=True)
        self._thread.start()

    def submit(self, seq: int, min_ts: float, max_ts: float, payload: bytes) -> None:
        """Queue one stream event (blocks while ``max_outstanding`` wait)."""
        self._raise()
        self._pending.put(_Event(seq, min_ts, max_ts, payload))

    def full(self) -> bool:
        """Whether ``max_outstanding`` events wait, so that a ``submit`` now would block. The
        background path asks before it produces G_checks: checkpointing never waits for the disk
        (input does, which is the back-pressure the bound exists for)."""
        return self._pending.full()

    def flush(self) -> None:
        """Wait until every submitted event is on disk (or raise the write's error)."""
        self._pending.join()
        self._raise()

    def close(self) -> None:
        """Flush, stop the thread and close the log's files."""
        try:
            self.flush()
        finally:
            self._pending.put(_STOP)
            self._thread.join()
            self.log.close()

    def _raise(self) -> None:
        if self._error is not None:
            raise OSError(f"writing the persisted output queue in {self.log.directory} failed: {self._error}") \
                from self._error

    def _run(self) -> None:
        while True:
            item = self._pending.get()
            try:
                if item is _STOP:
                    return
                if self._error is None:
                    assert isinstance(item, _Event)
                    frame = self.log.append(item.seq, item.min_ts, item.max_ts, item.payload)
                    if self.on_durable is not None:
                        self.on_durable(frame)
            except BaseException as error:  # noqa: BLE001 - reported on the operator thread
                self._error = error
            finally:
                self._pending.task_done()
