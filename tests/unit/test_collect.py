"""collect() bookkeeping on the driver (CollectLedger) and its writer, without Spark: records are
published once the checkpoint covering them completes, exactly once across restarts."""

from __future__ import annotations

import dataclasses
import pickle
from collections import Counter
from typing import Any

import pytest

from epochal.api.functions import RuntimeContext
from epochal.connectors.memory import CollectBatch, CollectCommit, CollectEpoch, CollectSeal, CollectSink
from epochal.dataflow.collect import CollectLedger
from epochal.runtime.operators.base import SinkOperator
from epochal.state.operator_state import OperatorStateStore, redistribute


def batch(writer: str, epoch: int, records: list[Any], attempt: int = 0) -> CollectBatch:
    return CollectBatch(writer, attempt, epoch, records)


def seal(writer: str, epoch: int, checkpoint_id: int, attempt: int = 0) -> CollectSeal:
    return CollectSeal(writer, attempt, epoch, checkpoint_id)


def commit(*refs: tuple[str, int, int]) -> CollectCommit:
    return CollectCommit(tuple(CollectEpoch(w, a, e) for w, a, e in refs))


def test_records_are_published_only_when_committed_and_only_once():
    ledger = CollectLedger(["c"])
    ledger.receive("c", batch("w", 0, [1, 2]))
    ledger.receive("c", batch("w", 0, [3]))
    assert ledger.published == {"c": []} and ledger.staged_records() == 3
    ledger.receive("c", seal("w", 0, 1))
    ledger.receive("c", batch("w", 1, [4]))
    assert ledger.published["c"] == []  # sealed, but checkpoint 1 has not completed yet
    ledger.receive("c", commit(("w", 0, 0)))
    assert ledger.published["c"] == [1, 2, 3]
    ledger.receive("c", commit(("w", 0, 0)))  # a repeated commit (restored committable)
    ledger.receive("c", seal("w", 1, 2))
    ledger.receive("c", commit(("w", 0, 0), ("w", 0, 1)))
    assert ledger.published["c"] == [1, 2, 3, 4]
    assert ledger.staged_records() == 0 and ledger.unknown_commits == 0


def test_restart_keeps_what_the_restored_checkpoint_covers_and_drops_the_rest():
    ledger = CollectLedger(["c"])
    for epoch, checkpoint in ((0, 1), (1, 2), (2, 3)):
        ledger.receive("c", batch("a", epoch, [f"a{epoch}"]))
        ledger.receive("c", seal("a", epoch, checkpoint))
    ledger.receive("c", batch("a", 3, ["a3"]))  # never sealed
    ledger.receive("c", batch("b", 0, ["b0"]))
    ledger.receive("c", seal("b", 0, 2))
    ledger.receive("c", commit(("a", 0, 0)))  # checkpoint 1 committed; 2 completed, workers died first
    assert ledger.new_attempt(1, restored_checkpoint=2) == 2  # a2 (checkpoint 3 never completed), a3
    assert ledger.dropped_records == 2 and ledger.staged_records() == 2
    ledger.receive("c", batch("a", 4, ["late"]))  # a late message of the failed attempt: ignored
    ledger.receive("c", seal("a", 4, 4))
    assert ledger.staged_records() == 2
    # the new attempt's writers commit the committables of checkpoint 2 (some already published)
    ledger.receive("c", commit(("a", 0, 0), ("a", 0, 1)))
    ledger.receive("c", commit(("b", 0, 0)))
    ledger.receive("c", batch("a'", 0, ["new"], attempt=1))
    ledger.receive("c", seal("a'", 0, 3, attempt=1))
    ledger.receive("c", commit(("a'", 1, 0)))
    assert Counter(ledger.published["c"]) == Counter(["a0", "a1", "b0", "new"])
    assert ledger.staged_records() == 0


def test_restart_without_a_completed_checkpoint_drops_every_staged_epoch():
    ledger = CollectLedger(["c"])
    ledger.receive("c", batch("a", 0, [1, 2]))
    ledger.receive("c", seal("a", 0, 1))
    assert ledger.new_attempt(1, None) == 2
    ledger.receive("c", commit(("a", 0, 0)))  # cannot happen in a job; harmless if it did
    assert ledger.published["c"] == [] and ledger.unknown_commits == 1


def test_plain_lists_are_published_at_once_and_sinks_are_kept_apart():
    ledger = CollectLedger(["x", "y"])
    ledger.receive("x", [1, 2])
    ledger.receive("y", batch("w", 0, ["y"]))
    ledger.receive("y", seal("w", 0, 1))
    ledger.receive("y", commit(("w", 0, 0)))
    assert ledger.published == {"x": [1, 2], "y": ["y"]}
    with pytest.raises(TypeError):
        ledger.receive("x", {"records": [1]})


def test_a_restart_without_checkpointing_withdraws_what_it_will_recompute():
    ledger = CollectLedger(["x"])
    seen = ledger.published["x"]
    ledger.receive("x", [1, 2, 3])
    assert ledger.new_attempt(1, None, checkpointing=False) == 3
    ledger.receive("x", [1, 2, 3, 4])
    assert seen == [1, 2, 3, 4]  # the same list, recomputed once: nothing repeated


def test_out_of_order_commits_still_publish_each_epoch_once():
    ledger = CollectLedger(["c"])
    for epoch in range(4):
        ledger.receive("c", batch("w", epoch, [epoch]))
        ledger.receive("c", seal("w", epoch, epoch + 1))
    ledger.receive("c", commit(("w", 0, 2), ("w", 0, 0)))
    ledger.receive("c", commit(("w", 0, 3), ("w", 0, 1), ("w", 0, 2), ("w", 0, 0)))
    assert sorted(ledger.published["c"]) == [0, 1, 2, 3]
    ledger.receive("c", batch("w", 1, ["too late"]))  # for a published epoch: ignored
    assert ledger.staged_records() == 0


def test_messages_are_frozen_and_picklable():
    message = batch("w", 0, [1])
    assert pickle.loads(pickle.dumps(message)) == message
    assert pickle.loads(pickle.dumps(commit(("w", 0, 0)))) == commit(("w", 0, 0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.epoch = 1  # type: ignore[misc]


# ------------------------------------------------------------------ writer + sink operator + ledger


class Subtask:
    """One collect sink subtask of one attempt, wired to the ledger like a worker is."""

    def __init__(self, ledger: CollectLedger, attempt: int, restored: list[Any] | None = None,
                 checkpointing: bool = True) -> None:
        self.state = OperatorStateStore()
        if restored:
            self.state.get_list_state(SinkOperator.PENDING).extend(restored)
        context = RuntimeContext("Sink: collect", "sink-1", 0, 1, 128, operator_state=self.state,
                                 attempt=attempt, checkpointing=checkpointing)
        self.operator = SinkOperator(CollectSink())
        self.operator.open(context, lambda payload: ledger.receive("c", pickle.loads(pickle.dumps(payload))))

    def snapshot(self, checkpoint_id: int) -> list[Any]:
        self.operator.prepare_snapshot(checkpoint_id)
        return redistribute([self.state.capture()], 0, 1)[SinkOperator.PENDING]


def test_collect_sink_exactly_once_across_a_restart():
    ledger = CollectLedger(["c"])
    first = Subtask(ledger, attempt=0)
    first.operator.process_batch([0, 1])
    snapshot_1 = first.snapshot(1)
    first.operator.process_batch([2])
    snapshot_2 = first.snapshot(2)
    first.operator.notify_checkpoint_complete(1)
    assert ledger.published["c"] == [0, 1]
    first.operator.process_batch([3, 4])  # after checkpoint 2: replayed by the next attempt
    assert snapshot_1 and snapshot_2
    # checkpoint 2 completes on the driver, the worker dies before it commits
    ledger.new_attempt(1, restored_checkpoint=2)
    second = Subtask(ledger, attempt=1, restored=snapshot_2)  # commits checkpoint 2's epochs again
    assert ledger.published["c"] == [0, 1, 2]
    second.operator.process_batch([3, 4])
    second.operator.end_input()
    second.snapshot(3)
    second.operator.notify_checkpoint_complete(3)
    assert ledger.published["c"] == [0, 1, 2, 3, 4]
    assert ledger.staged_records() == 0 and ledger.dropped_records == 2


def test_collect_sink_without_checkpointing_publishes_as_records_arrive():
    ledger = CollectLedger(["c"])
    subtask = Subtask(ledger, attempt=0, checkpointing=False)
    subtask.operator.process_batch([1, 2])
    assert ledger.published["c"] == [1, 2]
    subtask.operator.end_input()
    assert ledger.published["c"] == [1, 2]
