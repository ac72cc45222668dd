"""The connector interface extensions a Kafka source and sink need, without a broker: a source
that reads its splits together (SplitReader), and a transactional writer told it was restored."""

from __future__ import annotations

from typing import Any

from epochal.api.functions import RuntimeContext
from epochal.connectors.base import (
    ReaderContext,
    Sink,
    SinkContext,
    Source,
    SourceSplit,
    SplitReader,
    TransactionalSinkWriter,
)
from epochal.connectors.source_reader import SourceReader
from epochal.runtime.operators.base import SinkOperator
from epochal.state.operator_state import OperatorStateStore, redistribute


class Split(SourceSplit):
    def __init__(self, split_id: str) -> None:
        self.split_id = split_id

    def read_batch(self, max_records: int) -> list[Any] | None:
        raise AssertionError("read through the split reader")

    def position(self) -> Any:
        return 0

    def seek(self, position: Any) -> None:
        raise AssertionError("read through the split reader")


class Together(SplitReader):
    def __init__(self, splits, restored, context) -> None:
        self.offsets = {s.split_id: restored.get(s.split_id, 0) for s in splits}
        self.context = context
        self.completed: list[tuple[int, list]] = []
        self.closed = False

    def read_batch(self, max_records):
        for split in self.offsets:
            self.offsets[split] += 1
        return [f"{split}@{offset}" for split, offset in self.offsets.items()]

    def positions(self):
        return sorted(self.offsets.items())

    def watermark(self):
        return min(self.offsets.values())

    def take_side_output(self):
        return [("bad", "x")]

    def notify_checkpoint_complete(self, checkpoint_id, positions):
        self.completed.append((checkpoint_id, positions))

    def close(self):
        self.closed = True


class TogetherSource(Source):
    bounded = False

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [Split("a"), Split("b")]

    def create_reader(self, splits, restored, context):
        return Together(splits, restored, context)


def test_a_split_reader_reads_every_split_together_and_hears_completed_checkpoints():
    reader = SourceReader(TogetherSource().create_splits(1), TogetherSource(), ReaderContext("s", 0, 1, True))
    reader.restore([("a", 5), ("b", 7)])
    assert reader.read(10) == ["a@6", "b@8"]
    assert reader.split_reader.context.restored and reader.watermark() == 6
    assert reader.take_side_output() == [("bad", "x")]
    assert reader.snapshot(1) == [("a", 6), ("b", 8)]
    reader.read(10)
    assert reader.snapshot(2) == [("a", 7), ("b", 9)]
    reader.notify_checkpoint_complete(2)  # 1 never completed: only 2's positions are reported
    reader.notify_checkpoint_complete(1)
    assert reader.split_reader.completed == [(2, [("a", 7), ("b", 9)])]
    split_reader = reader.split_reader
    reader.close()
    assert split_reader.closed


def test_splits_without_a_reader_are_still_read_one_after_the_other():
    from epochal.connectors.memory import CollectionSource

    source = CollectionSource([1, 2, 3])
    reader = SourceReader(source.create_splits(1), source)
    assert reader.read(10) == [1, 2, 3] and reader.read(10) is None and reader.watermark() is None


class Restorable(TransactionalSinkWriter):
    def __init__(self, log: list, context: SinkContext) -> None:
        self.log, self.context = log, context

    def write_batch(self, records):
        pass

    def pre_commit(self, checkpoint_id):
        return f"c{checkpoint_id}"

    def commit(self, committables):
        self.log.append(("commit", committables))

    def restore_committables(self, committables):
        self.log.append(("restore", committables, self.context.restored, self.context.restored_parallelism,
                         self.context.job_id))


class RestorableSink(Sink):
    guarantee = "exactly_once"

    def __init__(self) -> None:
        self.log: list = []

    def create_writer(self, context):
        return Restorable(self.log, context)


def open_sink(sink, index, parallelism, restored_lists=None, restored=False):
    state = OperatorStateStore()
    for name, items in (restored_lists or {}).items():
        state.get_list_state(name, "union" if name == SinkOperator.PARALLELISM else "split").extend(items)
    context = RuntimeContext("sink", "sink-0", index, parallelism, 128, operator_state=state, checkpointing=True,
                             job_id="job-7", restored=restored)
    operator = SinkOperator(sink)
    operator.open(context, lambda payload: None)
    return operator, state


def test_a_restored_transactional_writer_learns_the_old_parallelism_even_without_committables():
    sink = RestorableSink()
    snapshots = []
    for index in range(3):
        operator, state = open_sink(sink, index, 3)
        operator.prepare_snapshot(4)
        snapshots.append(state.capture())
    assert sink.log == []  # a fresh start restores nothing
    restored = redistribute(snapshots, 0, 1)
    open_sink(sink, 0, 1, restored, restored=True)
    assert sink.log == [("restore", ["c4", "c4", "c4"], True, 3, "job-7")]


class Finite(Together):
    """Reads one record per split, then is done."""

    def read_batch(self, max_records):
        if all(offset >= 1 for offset in self.offsets.values()):
            return None
        return super().read_batch(max_records)


class FiniteSource(TogetherSource):
    bounded = True

    def create_reader(self, splits, restored, context):
        return Finite(splits, restored, context)


def test_a_finished_split_reader_keeps_reporting_where_it_ended():
    """A source subtask that finished before the job did is still snapshotted: its positions must
    be where its reader ended, never its splits' start (a restore would read them again, and the
    state that already counted them would count them twice)."""
    reader = SourceReader(FiniteSource().create_splits(1), FiniteSource(), ReaderContext("s", 0, 1, False))
    assert reader.read(10) == ["a@1", "b@1"] and reader.read(10) is None
    reader.close()  # the subtask finishes
    assert reader.snapshot(3) == [("a", 1), ("b", 1)]
    restored = SourceReader(FiniteSource().create_splits(1), FiniteSource(), ReaderContext("s", 0, 1, True))
    restored.restore(reader.snapshot(4))
    assert restored.read(10) is None  # nothing read twice
