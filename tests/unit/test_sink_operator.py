"""The sink operator's part of the sink guarantees, without Spark: plain writers are flushed at
every barrier (at-least-once), transactional writers pre-commit at barriers, commit on
completion, commit restored committables again, and commit once at the end without checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from epochal.api.functions import RuntimeContext
from epochal.connectors.base import Sink, SinkContext, SinkWriter
from epochal.connectors.files import TextFileSink, read_committed_lines
from epochal.runtime.operators.base import SinkOperator
from epochal.state.operator_state import OperatorStateStore, redistribute


def open_sink(sink: Sink, attempt: int = 0, checkpointing: bool = True,
              restored: list[Any] | None = None) -> tuple[SinkOperator, OperatorStateStore]:
    state = OperatorStateStore()
    if restored:
        state.get_list_state(SinkOperator.PENDING).extend(restored)
    context = RuntimeContext("sink", "sink-0", 0, 1, 128, operator_state=state, attempt=attempt,
                             checkpointing=checkpointing)
    operator = SinkOperator(sink)
    operator.open(context, lambda payload: None)
    return operator, state


class Recording(SinkWriter):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def write_batch(self, records: list[Any]) -> None:
        self.log.append(f"write {records}")

    def flush(self) -> None:
        self.log.append("flush")


class RecordingSink(Sink):
    def __init__(self) -> None:
        self.log: list[str] = []

    def create_writer(self, context: SinkContext) -> SinkWriter:
        assert context.checkpointing
        return Recording(self.log)


def test_plain_writer_is_flushed_at_every_barrier():
    sink = RecordingSink()
    operator, _ = open_sink(sink)
    operator.process_batch([1])
    operator.prepare_snapshot(1)
    operator.process_batch([2])
    operator.notify_checkpoint_complete(1)
    operator.prepare_snapshot(2)
    assert sink.log == ["write [1]", "flush", "write [2]", "flush"]


def test_file_sink_through_the_operator_restart_and_end(tmp_path: Path):
    out = str(tmp_path / "out")
    first, state = open_sink(TextFileSink(out))
    first.process_batch(["a", "b"])
    first.prepare_snapshot(1)
    first.process_batch(["c"])
    first.prepare_snapshot(2)
    restored = redistribute([state.capture()], 0, 1)[SinkOperator.PENDING]
    first.notify_checkpoint_complete(1)
    assert read_committed_lines(out) == ["a", "b"]
    first.process_batch(["lost with the attempt, replayed by the next"])
    # the worker dies; checkpoint 2 had completed: the next attempt restores its committables
    second, _ = open_sink(TextFileSink(out), attempt=1, restored=restored)
    assert read_committed_lines(out) == ["a", "b", "c"]
    second.process_batch(["d"])
    second.end_input()
    second.prepare_snapshot(3)
    second.notify_checkpoint_complete(3)
    second.close()
    first.close()
    assert read_committed_lines(out) == ["a", "b", "c", "d"]


def test_without_checkpointing_commits_once_at_the_end_even_without_records(tmp_path: Path):
    out = tmp_path / "out"
    empty, _ = open_sink(TextFileSink(str(out)), checkpointing=False)
    empty.end_input()  # no records: nothing to commit, no file
    empty.close()
    operator, _ = open_sink(TextFileSink(str(out)), checkpointing=False)
    operator.process_batch([1, 2])
    assert read_committed_lines(str(out)) == []
    operator.end_input()
    operator.close()
    assert read_committed_lines(str(out)) == ["1", "2"]


def test_a_writer_learns_the_job_its_uid_and_the_checkpoint_its_attempt_restored():
    """What transactional sinks name external transactions by (Delta app ids, PostgreSQL gids)
    and what tells them which of an earlier attempt's transactions no restore will commit."""
    seen: list[SinkContext] = []

    class Remembering(Sink):
        def create_writer(self, context: SinkContext) -> SinkWriter:
            seen.append(context)
            return Recording([])

    state = OperatorStateStore()
    context = RuntimeContext("sink", "sink-uid", 1, 3, 128, operator_state=state, attempt=2, checkpointing=True,
                             job_name="orders", job_id="abc123", restored_checkpoint=7)
    SinkOperator(Remembering()).open(context, lambda payload: None)
    (made,) = seen
    assert (made.job_name, made.job_id, made.operator_uid, made.restored_checkpoint) == ("orders", "abc123",
                                                                                          "sink-uid", 7)
    assert (made.subtask_index, made.parallelism, made.attempt) == (1, 3, 2)
