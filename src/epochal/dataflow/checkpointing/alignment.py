"""Buffering of blocked inputs during barrier alignment: a memory budget, then local disk.

While an ``exactly_once`` (or ``synchronous``) subtask aligns checkpoint *n*, every input whose
barrier *n* already arrived is blocked: what comes after the barrier on that input must not be
processed before the snapshot. Rather than leaving those batches in the channel, which would hold
the producer's credit and stall it (and, through backpressure, everything upstream of it) for the
whole alignment, the worker moves them into the channel's :class:`AlignmentBuffer` and returns
the credit at once, as Flink's pre-credit ``BufferSpiller`` did. The producer keeps running.

Buffered items are serialised (pickle protocol 5) so their size is known exactly. The worker's
:class:`AlignmentSpill` keeps them in memory up to ``alignment_memory_bytes`` in all; beyond that
they are appended to one unlinked temporary file in the worker's local directory, which the OS
removes when the worker process ends, crash included. When the alignment ends (the snapshot was
taken, or the checkpoint was aborted) the channel is unblocked and its buffer is replayed, in
arrival order, before anything that arrived later. Once every buffer is empty, the file is
truncated. If a worker's buffers grow past ``alignment_max_bytes`` the pending checkpoint is
declined and its alignment released, so one slow input cannot fill the disk.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections import deque
from typing import Any, BinaryIO

from epochal import serialization

#: Entries whose item could not be pickled stay in memory as objects; they are charged this much.
UNPICKLABLE_CHARGE = 1024


def local_directory() -> str:
    """Where a worker spills: Spark's first local directory if set, else the temp directory."""
    spark_dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
    first = spark_dirs.split(",")[0].strip()
    return first if first and os.path.isdir(first) else tempfile.gettempdir()


class AlignmentSpill:
    """The worker-wide memory budget and spill file shared by all alignment buffers.

    Args:
        memory_bytes: serialised bytes kept in memory over all buffers before spilling.
        max_bytes: bytes (memory and disk) over all buffers beyond which alignment is given up;
            ``None`` for no limit.
        directory: where the spill file is created; ``None`` for :func:`local_directory`.
    """

    def __init__(self, memory_bytes: int, max_bytes: int | None = None, directory: str | None = None) -> None:
        self.memory_bytes = memory_bytes
        self.max_bytes = max_bytes
        self.directory = directory
        self.in_memory = 0
        self.on_disk = 0
        self.entries = 0
        self._file: BinaryIO | None = None
        self._end = 0
        #: Totals over the worker's life, for metrics.
        self.spilled_total = 0
        self.buffered_total = 0

    @property
    def buffered(self) -> int:
        """Bytes held now, in memory and on disk."""
        return self.in_memory + self.on_disk

    @property
    def over_limit(self) -> bool:
        return self.max_bytes is not None and self.buffered > self.max_bytes

    def write(self, data: bytes) -> int:
        """Append ``data`` to the spill file; returns its offset."""
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="epochal-alignment-", dir=self.directory or local_directory())
        offset = self._end
        os.pwrite(self._file.fileno(), data, offset)
        self._end += len(data)
        self.on_disk += len(data)
        self.spilled_total += len(data)
        return offset

    def read(self, offset: int, length: int) -> bytes:
        assert self._file is not None
        data = os.pread(self._file.fileno(), length, offset)
        if len(data) != length:
            raise OSError(f"alignment spill file ended early: wanted {length} bytes at {offset}, got {len(data)}")
        return data

    def released(self, in_memory: int, on_disk: int) -> None:
        """An entry was taken out of a buffer; truncate the file once nothing is buffered."""
        self.in_memory -= in_memory
        self.on_disk -= on_disk
        self.entries -= 1
        if self.entries == 0 and self._file is not None and self._end:
            self._file.truncate(0)
            self._end = 0

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class AlignmentBuffer:
    """What a blocked input channel delivered during one alignment, in arrival order.

    Items are ``(is_batch, item)`` exactly as they sat in the channel's queue: batches of records
    and in-band events (a later barrier, end of partition), so replaying them reproduces the
    channel's order. Their credit was returned when they were buffered, never again on replay.
    """

    __slots__ = ("spill", "entries", "bytes_buffered", "bytes_spilled")

    def __init__(self, spill: AlignmentSpill) -> None:
        self.spill = spill
        # (is_batch, data or object, offset on disk or -1 in memory or -2 unpickled, length)
        self.entries: deque[tuple[bool, Any, int, int]] = deque()
        #: Bytes buffered and spilled since the last :meth:`reset_stats`, for checkpoint statistics.
        self.bytes_buffered = 0
        self.bytes_spilled = 0

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, is_batch: bool, item: Any) -> None:
        spill = self.spill
        try:
            data = serialization.dumps(item)
        except Exception:  # records of an in-worker channel need not be picklable: keep the object
            self.entries.append((is_batch, item, -2, UNPICKLABLE_CHARGE))
            spill.in_memory += UNPICKLABLE_CHARGE
            spill.entries += 1
            self.bytes_buffered += UNPICKLABLE_CHARGE
            return
        size = len(data)
        if spill.on_disk == 0 and spill.in_memory + size <= spill.memory_bytes:
            self.entries.append((is_batch, data, -1, size))
            spill.in_memory += size
        else:  # once anything is on disk, later entries follow it there, keeping memory bounded
            self.entries.append((is_batch, None, spill.write(data), size))
            self.bytes_spilled += size
        spill.entries += 1
        spill.buffered_total += size
        self.bytes_buffered += size

    def reset_stats(self) -> tuple[int, int]:
        """Bytes buffered and spilled since the last call; starts counting again."""
        stats = (self.bytes_buffered, self.bytes_spilled)
        self.bytes_buffered = self.bytes_spilled = 0
        return stats

    def pop(self) -> tuple[bool, Any]:
        """The oldest buffered item, deserialised."""
        is_batch, data, offset, size = self.entries.popleft()
        if offset == -2:
            self.spill.released(size, 0)
            return is_batch, data
        if offset == -1:
            self.spill.released(size, 0)
        else:
            data = self.spill.read(offset, size)
            self.spill.released(0, size)
        return is_batch, pickle.loads(data)
