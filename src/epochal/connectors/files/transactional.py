"""The exactly-once text file sink, and helpers to read and tidy its output.

The two-phase commit itself lives in :mod:`epochal.connectors.files.sinks`, shared by
:class:`~epochal.connectors.files.TextFileSink` and
:class:`~epochal.connectors.files.ParquetFileSink`: records of an epoch go to an in-progress file
under ``<dir>/_pending/`` (hidden from readers, which skip names starting with ``_`` or ``.``).
On the barrier of checkpoint *n* the file is closed and fsynced: pre-committed. When *n*
completes, it is renamed to its final name ``part-<subtask>-<n>-<writer>-<seq>.txt`` in
``<dir>``: committed. A rename of the same file twice is harmless (the second finds it done),
which makes commit idempotent across restores. In-progress files of failed attempts are never
renamed; ``cleanup_pending`` removes them.
"""

from __future__ import annotations

import os

from epochal.connectors.files.sinks import PENDING_DIR, FileCommittable, TextFileSink

__all__ = ["PENDING_DIR", "ExactlyOnceFileSink", "FileCommittable", "cleanup_pending", "read_committed_lines"]


class ExactlyOnceFileSink(TextFileSink):
    """Text lines (``format(record)``) committed atomically per checkpoint: readers see each
    record exactly once, and never a record of an uncompleted checkpoint.

    The same sink as :class:`~epochal.connectors.files.TextFileSink` (local paths or any
    ``pyarrow.fs`` URI), under the name that says what it guarantees. Without checkpointing the
    output is committed when the input ends.
    """


def read_committed_lines(directory: str) -> list[str]:
    """Every committed line under the local ``directory`` (what a reader of the sink's output
    sees): its files in name order, skipping names that start with ``_`` or ``.``."""
    lines: list[str] = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(("_", ".")):
            continue
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            lines.extend(handle.read().splitlines())
    return lines


def cleanup_pending(directory: str) -> int:
    """Remove in-progress files left by failed attempts in the local ``directory``; returns how
    many were removed.

    Call only when no job writes to ``directory`` and no job will restore a checkpoint whose
    commits are still due (their pre-committed files wait there too)."""
    pending = os.path.join(directory, PENDING_DIR)
    removed = 0
    if os.path.isdir(pending):
        for name in os.listdir(pending):
            os.remove(os.path.join(pending, name))
            removed += 1
    return removed
