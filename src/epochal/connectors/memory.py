"""Sources and sinks that need no external system: collections, sequences, generators,
print, collect-to-driver and discard.

The sequence and generator sources are deterministic functions of an index, so they are
replayable from any offset: the tests' and benchmarks' workhorses.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from epochal.connectors.base import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    NO_OUTPUT,
    Sink,
    SinkContext,
    SinkWriter,
    Source,
    SourceSplit,
    TransactionalSinkWriter,
)
from epochal.validation import check_number


class _IndexSplit(SourceSplit):
    """A split that produces ``record(i)`` for ``i`` in ``start, start+step, ...`` below ``end``.

    The position is the next index, so seeking is O(1). ``end=None`` makes it unbounded;
    ``rate`` (records per second for this split) paces it for latency experiments.
    """

    def __init__(self, split_id: str, start: int, end: int | None, step: int,
                 rate: float | None = None) -> None:
        self.split_id = split_id
        self.start = start
        self.end = end
        self.step = step
        self.rate = rate
        self.next_index = start
        self._began: float | None = None
        self._emitted = 0

    def _record(self, index: int) -> Any:
        raise NotImplementedError

    def _allowed(self, max_records: int) -> int:
        if self.rate is None:
            return max_records
        now = time.monotonic()
        if self._began is None:
            self._began = now
        due = int((now - self._began) * self.rate) - self._emitted
        return max(0, min(max_records, due))

    def read_batch(self, max_records: int) -> list[Any] | None:
        if self.end is not None and self.next_index >= self.end:
            return None
        count = self._allowed(max_records)
        stop = self.next_index + count * self.step
        if self.end is not None:
            stop = min(stop, self.end)
        indices = range(self.next_index, stop, self.step)
        self.next_index = indices[-1] + self.step if len(indices) else self.next_index
        self._emitted += len(indices)
        return self._records(indices)

    def _records(self, indices: range) -> list[Any]:
        return [self._record(i) for i in indices]

    def position(self) -> int:
        return self.next_index

    def seek(self, position: int) -> None:
        self.next_index = int(position)


class _CollectionSplit(_IndexSplit):
    def __init__(self, split_id: str, items: list[Any]) -> None:
        super().__init__(split_id, 0, len(items), 1)
        self.items = items

    def _records(self, indices: range) -> list[Any]:
        return self.items[indices.start:indices.stop] if len(indices) else []


class CollectionSource(Source):
    """Records from a Python collection, dealt round robin to the reading subtasks."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = list(items)

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [_CollectionSplit(f"collection-{i}", self.items[i::parallelism]) for i in range(parallelism)]

    def size_hint(self) -> int | None:
        return len(self.items)


class _SequenceSplit(_IndexSplit):
    def _records(self, indices: range) -> list[Any]:
        return list(indices)


class SequenceSource(Source):
    """The integers ``start <= i < end`` (unbounded if ``end`` is None), split by stride.

    Split ``j`` of ``n`` produces ``start + j, start + j + n, ...``; its position is the next
    integer, so it can be replayed from any point.
    """

    def __init__(self, start: int = 0, end: int | None = None, rate: float | None = None) -> None:
        check_number(start, "from_sequence start", minimum=None, integer=True)
        check_number(end, "from_sequence end", minimum=None, integer=True, optional=True)
        check_number(rate, "rate (records per second)", optional=True)
        self.start = start
        self.end = end
        self.rate = rate
        self.bounded = end is not None

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        rate = None if self.rate is None else self.rate / parallelism
        return [_SequenceSplit(f"sequence-{j}", self.start + j, self.end, parallelism, rate)
                for j in range(parallelism)]

    def size_hint(self) -> int | None:
        return None if self.end is None else max(self.end - self.start, 0)


class _GeneratorSplit(_IndexSplit):
    def __init__(self, split_id: str, fn: Callable[[int], Any], start: int, end: int | None,
                 step: int, rate: float | None) -> None:
        super().__init__(split_id, start, end, step, rate)
        self.fn = fn

    def _records(self, indices: range) -> list[Any]:
        return list(map(self.fn, indices))


class GeneratorSource(Source):
    """``fn(i)`` for ``i`` in ``0 .. count-1`` (unbounded if ``count`` is None).

    ``fn`` must be a deterministic function of the index: that is what makes the source
    replayable from a recorded offset.
    """

    def __init__(self, fn: Callable[[int], Any], count: int | None = None,
                 rate: float | None = None) -> None:
        check_number(count, "from_generator count", strict=False, integer=True, optional=True)
        check_number(rate, "rate (records per second)", optional=True)
        self.fn = fn
        self.count = count
        self.rate = rate
        self.bounded = count is not None

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        rate = None if self.rate is None else self.rate / parallelism
        return [_GeneratorSplit(f"generator-{j}", self.fn, j, self.count, parallelism, rate)
                for j in range(parallelism)]

    def size_hint(self) -> int | None:
        return self.count


class BatchGeneratorSource(GeneratorSource):
    """``fn(i)``, a ``pyarrow.RecordBatch``, for ``i`` in ``0 .. count-1`` (unbounded if ``count``
    is None), ``rate`` batches per second in all: a batch stream's generator.

    ``fn`` must be a deterministic function of the index (the source replays from the index of a
    checkpoint). A split emits one batch per read, so every batch is its own unit of flow control
    and checkpoint barriers pass between batches."""

    produces_batches = True

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        rate = None if self.rate is None else self.rate / parallelism
        return [_BatchGeneratorSplit(f"batches-{j}", self.fn, j, self.count, parallelism, rate)
                for j in range(parallelism)]


class _BatchGeneratorSplit(_GeneratorSplit):
    def read_batch(self, max_records: int) -> list[Any] | None:
        return super().read_batch(1)

    def _records(self, indices: range) -> list[Any]:
        made = list(map(self.fn, indices))
        for index, batch in zip(indices, made, strict=True):
            if type(batch).__name__ != "RecordBatch":
                raise TypeError(f"from_batches: fn({index}) returned a {type(batch).__name__}; it must return a "
                                "pyarrow.RecordBatch")
        return made


class _PrintWriter(SinkWriter):
    def __init__(self, prefix: str, stream: str) -> None:
        self.prefix = prefix
        self.stream = sys.stderr if stream == "stderr" else sys.stdout

    def write_batch(self, records: list[Any]) -> None:
        prefix = self.prefix
        self.stream.write("".join(f"{prefix}{record!r}\n" for record in records))

    def flush(self) -> None:
        self.stream.flush()


class PrintSink(Sink):
    """Prints each record on its worker's stdout, prefixed with the subtask number like Flink.

    At-least-once: output is flushed at every checkpoint barrier, and records printed after the
    checkpoint a restarted job restores are printed again.
    """

    guarantee = AT_LEAST_ONCE

    def __init__(self, prefix: str = "", stream: str = "stdout") -> None:
        self.prefix = prefix
        self.stream = stream

    def create_writer(self, context: SinkContext) -> SinkWriter:
        number = f"{context.subtask_index + 1}> " if context.parallelism > 1 else ""
        return _PrintWriter(f"{self.prefix}{number}", self.stream)


# ---------------------------------------------------------------------- what a collect writer sends
# (in a Collect message to the driver, whose CollectLedger takes them: epochal.dataflow.collect)
@dataclass(frozen=True, slots=True)
class CollectEpoch:
    """One epoch of one collect writer: the committable kept in the sink's checkpointed state."""

    writer: str
    attempt: int
    epoch: int


@dataclass(frozen=True, slots=True)
class CollectBatch:
    """Records of writer ``writer`` (of job attempt ``attempt``), epoch ``epoch``."""

    writer: str
    attempt: int
    epoch: int
    records: list[Any]


@dataclass(frozen=True, slots=True)
class CollectSeal:
    """Epoch ``epoch`` is complete; it ends at checkpoint ``checkpoint_id``."""

    writer: str
    attempt: int
    epoch: int
    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class CollectCommit:
    """Publish these sealed epochs (their checkpoints completed)."""

    epochs: tuple[CollectEpoch, ...]


#: What a collect sink sends: epoch-tagged messages under checkpointing, else plain record lists.
CollectPayload = CollectBatch | CollectSeal | CollectCommit | list[Any]


class _CollectWriter(TransactionalSinkWriter):
    """Streams records to the driver tagged with this writer's epoch; the driver publishes an
    epoch when the checkpoint that sealed it completes (see :mod:`epochal.dataflow.collect`)."""

    def __init__(self, context: SinkContext) -> None:
        self.send = context.send_to_driver
        self.checkpointing = context.checkpointing
        self.attempt = context.attempt
        self.writer = f"{context.subtask_index}.{context.attempt}.{uuid.uuid4().hex[:12]}"
        self.epoch = 0
        self.dirty = False  # records sent in the current epoch

    def write_batch(self, records: list[Any]) -> None:
        if not records:
            return
        if not self.checkpointing:
            self.send(list(records))  # no epochs to commit: published as it arrives
            return
        self.send(CollectBatch(self.writer, self.attempt, self.epoch, list(records)))
        self.dirty = True

    def pre_commit(self, checkpoint_id: int) -> CollectEpoch | None:
        if not self.dirty:
            return None
        committable = CollectEpoch(self.writer, self.attempt, self.epoch)
        self.send(CollectSeal(self.writer, self.attempt, self.epoch, checkpoint_id))
        self.epoch += 1
        self.dirty = False
        return committable

    def commit(self, committables: list[Any]) -> None:
        if committables:
            self.send(CollectCommit(tuple(committables)))


class CollectSink(Sink):
    """Sends every record back to the driver, where the job's result holds them.

    Exactly-once under checkpointing: the driver stages each epoch's records and publishes them
    (``JobClient.collected``, ``JobResult.collected``) when the checkpoint covering them
    completes, so after restarts nothing is repeated or lost; records appear once per
    checkpoint. Without checkpointing records are published as they arrive.

    Meant for tests, examples and small results: everything collected lives in driver memory.
    """

    guarantee = EXACTLY_ONCE
    #: a batch stream's record batches are collected as they are
    accepts_batches = True

    def create_writer(self, context: SinkContext) -> SinkWriter:
        return _CollectWriter(context)


class _DiscardWriter(SinkWriter):
    def write_batch(self, records: list[Any]) -> None:
        pass


class DiscardSink(Sink):
    """Drops every record: for benchmarks that measure the pipeline, not the sink."""

    guarantee = NO_OUTPUT
    accepts_batches = True

    def create_writer(self, context: SinkContext) -> SinkWriter:
        return _DiscardWriter()
