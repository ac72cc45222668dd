"""TestSource and TestSink (epochal.testing): scripted END/PAUSE/ABORT markers, one split per
list, replay from positions, markers that survive pickling, and a sink that refuses to run
outside the process that reads it."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

from epochal.connectors.base import SinkContext
from epochal.connectors.source_reader import SourceReader
from epochal.testing import TestSink, TestSource, TestSourceAborted


def read_all(split, max_records=100):
    batches = []
    while (batch := split.read_batch(max_records)) is not None:
        batches.append(batch)
    return batches


def test_pause_returns_nothing_once_and_end_ends_the_split():
    (split,) = TestSource([1, 2, TestSource.PAUSE, 3, TestSource.END, 4]).create_splits(1)
    assert read_all(split) == [[1, 2], [], [3]]
    assert split.read_batch(100) is None  # ended stays ended
    assert split.position() == 5  # past END


def test_a_restore_past_end_continues_after_it():
    (split,) = TestSource([1, TestSource.END, 2, 3]).create_splits(1)
    read_all(split)
    position = split.position()
    (replayed,) = TestSource([1, TestSource.END, 2, 3]).create_splits(1)
    replayed.seek(position)
    assert read_all(replayed) == [[2, 3]]


def test_abort_raises_every_time_it_is_reached():
    (split,) = TestSource([1, TestSource.ABORT, 2]).create_splits(1)
    assert split.read_batch(10) == [1]
    with pytest.raises(TestSourceAborted, match="position 1"):
        split.read_batch(10)
    with pytest.raises(TestSourceAborted):
        split.read_batch(10)
    split.seek(2)
    assert split.read_batch(10) == [2]


def test_one_split_per_list_dealt_round_robin():
    source = TestSource([1], [2], [3])
    splits = source.create_splits(2)
    assert [s.split_id for s in splits] == ["test-0", "test-1", "test-2"]
    reader = SourceReader(splits[0::2])  # what subtask 0 of 2 reads
    out = []
    while (batch := reader.read(10)) is not None:
        out.extend(batch)
    assert out == [1, 3]
    assert source.records() == [1, 2, 3]


def test_max_batch_and_positions_replay():
    (split,) = TestSource(list(range(10)), max_batch=3).create_splits(1)
    assert split.read_batch(100) == [0, 1, 2]
    position = split.position()
    assert split.read_batch(2) == [3, 4]
    split.seek(position)
    assert read_all(split) == [[3, 4, 5], [6, 7, 8], [9]]


def test_markers_stay_singletons_through_pickling():
    source = cloudpickle.loads(cloudpickle.dumps(TestSource([1, TestSource.END, 2])))
    assert source.splits[0][1] is TestSource.END
    assert pickle.loads(pickle.dumps(TestSource.PAUSE)) is TestSource.PAUSE


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="one list of items per split"):
        TestSource("abc")
    with pytest.raises(ValueError):
        TestSource([1], max_batch=0)


def test_test_sink_refuses_other_processes():
    sink = TestSink()
    copy = pickle.loads(pickle.dumps(sink))
    context = SinkContext("sink", 0, 1, send_to_driver=lambda payload: None)
    copy.create_writer(context).write_batch([1, 2])
    assert sink.records == [1, 2]  # the pickled copy writes into the original's list
    copy.pid = -1  # as if unpickled in a Spark executor
    with pytest.raises(RuntimeError, match="run_locally"):
        copy.create_writer(context)
