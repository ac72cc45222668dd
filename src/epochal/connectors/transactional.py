"""An exactly-once text file sink: two-phase commit with atomic renames.

Records of an epoch go to an in-progress file under ``<dir>/_pending/`` (hidden from readers,
which skip names starting with ``_`` or ``.``). On the barrier of checkpoint *n* the file is
closed and fsynced: pre-committed. When *n* completes, it is renamed to its final name
``part-<subtask>-<n>-<writer>-<seq>.txt`` in ``<dir>``: committed. A rename of the same file twice
is harmless (the second finds it done), which makes commit idempotent across restores.
In-progress files of failed attempts are never renamed; ``cleanup_pending`` removes them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

from epochal.connectors.base import Sink, SinkContext, TransactionalSinkWriter

PENDING_DIR = "_pending"


class _ExactlyOnceWriter(TransactionalSinkWriter):
    def __init__(self, directory: str, context: SinkContext, format: Callable[[Any], str]) -> None:
        self.directory = directory
        self.pending_dir = os.path.join(directory, PENDING_DIR)
        os.makedirs(self.pending_dir, exist_ok=True)
        self.subtask = context.subtask_index
        self.attempt = context.attempt
        self.format = format
        self.file: Any = None
        self.path: str | None = None
        self.sequence = 0
        self.instance = uuid.uuid4().hex[:8]  # no two writers, in any run, share a pending name

    def _open(self) -> None:
        self.sequence += 1
        name = f"part-{self.subtask:05d}-{self.instance}-{self.sequence:06d}.inprogress"
        self.path = os.path.join(self.pending_dir, name)
        self.file = open(self.path, "w", encoding="utf-8")

    def write_batch(self, records: list[Any]) -> None:
        if self.file is None:
            self._open()
        fmt = self.format
        self.file.write("".join(f"{fmt(r)}\n" for r in records))

    def pre_commit(self, checkpoint_id: int) -> Any:
        if self.file is None:
            return None
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        final = f"part-{self.subtask:05d}-{checkpoint_id:06d}-{self.instance}-{self.sequence:06d}.txt"
        committable = (self.path, os.path.join(self.directory, final))  # absolute: valid from any restore
        self.file = None
        self.path = None
        return committable

    def commit(self, committables: list[Any]) -> None:
        for source, target in committables:
            try:
                os.replace(source, target)
            except FileNotFoundError:
                if not os.path.exists(target):
                    raise RuntimeError(f"cannot commit {target}: its pre-committed file {source} is gone "
                                       "and it was never committed") from None

    def close(self) -> None:
        if self.file is not None:
            self.file.close()  # left in _pending: never visible, removed by cleanup_pending
            self.file = None


class ExactlyOnceFileSink(Sink):
    """Text lines (``format(record)``) committed atomically per checkpoint: readers see each
    record exactly once, and never a record of an uncompleted checkpoint.

    Without checkpointing the output is committed when the input ends.
    """

    def __init__(self, directory: str, format: Callable[[Any], str] = str) -> None:
        self.directory = os.path.abspath(directory)
        self.format = format

    def create_writer(self, context: SinkContext) -> TransactionalSinkWriter:
        return _ExactlyOnceWriter(self.directory, context, self.format)


def read_committed_lines(directory: str) -> list[str]:
    """Every committed line under ``directory`` (what a reader of the sink's output sees)."""
    lines: list[str] = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(("_", ".")):
            continue
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            lines.extend(handle.read().splitlines())
    return lines


def cleanup_pending(directory: str) -> int:
    """Remove in-progress files left by failed attempts; returns how many were removed.

    Call only when no job writes to ``directory``."""
    pending = os.path.join(directory, PENDING_DIR)
    removed = 0
    if os.path.isdir(pending):
        for name in os.listdir(pending):
            os.remove(os.path.join(pending, name))
            removed += 1
    return removed
