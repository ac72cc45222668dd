"""The checkpoint coordinator and its parts, driven by event sequences without Spark: trigger,
all acks, late ack, duplicate ack, decline, timeout, abort by a newer checkpoint, abort on a job
failure, a failed metadata write, retention, statistics. The coordinator is pure: every call
returns the messages to broadcast and the checkpoint I/O to do; the tests carry the I/O out as the
JobMaster's driver does (``CheckpointFiles`` on a real CheckpointStorage in tmp_path, a written
checkpoint answered with ``on_written``) and check the messages."""

from __future__ import annotations

import json

import pytest

from epochal.config import CheckpointConfig
from epochal.control.checkpoint_files import CheckpointFiles, CheckpointIO, RecordStats, WriteCheckpoint
from epochal.dataflow.checkpointing.coordinator import CheckpointCoordinator
from epochal.dataflow.checkpointing.failures import AbortReason, CheckpointFailureManager
from epochal.dataflow.checkpointing.messages import Ack, CheckpointAbort, CheckpointComplete, Decline, TriggerCheckpoint
from epochal.dataflow.checkpointing.pending import AckResult, PendingCheckpoint
from epochal.state.storage import CheckpointStorage

SUBTASKS = {(0, 0): "source", (1, 0): "sum", (1, 1): "sum"}
STATS = {"bytes": 10, "alignment_s": 0.5, "sync_s": 0.1, "async_s": 0.2, "source_records": 0}


def make(tmp_path, **config):
    options = {"interval": 1.0, "timeout": 10.0, "storage": str(tmp_path), **config}
    storage = CheckpointStorage(str(tmp_path / "job"))
    return CheckpointCoordinator(
        CheckpointConfig(**options), storage, "job",
        subtasks=dict(SUBTASKS), vertex_parallelism={0: 1, 1: 2}, max_parallelism=128,
        operators={"sum-0": {"name": "Sum", "operation": "sum"}}, completed=storage.completed())


FILES = CheckpointFiles()


def carry_out(coordinator, outbox, now, fail_write=None):
    """What the JobMaster does with an outbox: its driver carries out the I/O (a written checkpoint
    is answered with ``on_written``; ``fail_write`` makes the write fail); the messages for the
    workers, in order, are returned."""
    messages = []
    for item in outbox:
        if isinstance(item, WriteCheckpoint):
            error = fail_write or FILES.write(item)
            answer = coordinator.on_written(item.checkpoint_id, now) if error is None \
                else coordinator.on_write_failed(item.checkpoint_id, error, now)[1]
            messages += carry_out(coordinator, answer, now)
        elif isinstance(item, CheckpointIO):
            FILES.carry_out(item)
        else:
            messages.append(item)
    return messages


def on_ack(coordinator, message, now):
    result, outbox = coordinator.on_ack(message, now)
    return result, carry_out(coordinator, outbox, now)


def on_decline(coordinator, message, now):
    tolerable, outbox = coordinator.on_decline(message, now)
    return tolerable, carry_out(coordinator, outbox, now)


def check_timeouts(coordinator, now):
    tolerable, outbox = coordinator.check_timeouts(now)
    return tolerable, carry_out(coordinator, outbox, now)


def ack(checkpoint_id, vertex, subtask, records=0, **stats):
    handles = {"sum-0": {"keyed": {"file": f"sum-0-{subtask}.keyed"}}} if vertex == 1 else {}
    return Ack(checkpoint_id, vertex=vertex, subtask=subtask, worker=subtask, handles=handles,
               stats={**STATS, "source_records": records, **stats})


def ack_all(coordinator, checkpoint_id, now, records=0):
    """Every subtask acknowledges: (what each ack did, every message the acks asked to broadcast)."""
    results, sent = [], []
    for v, s in SUBTASKS:
        result, messages = on_ack(coordinator, ack(checkpoint_id, v, s, records if v == 0 else 0), now)
        results.append(result)
        sent += messages
    return results, sent


def test_trigger_broadcasts_and_waits_for_every_subtask(tmp_path):
    coordinator = make(tmp_path)
    assert coordinator.trigger(5.0, 1000.0) == (1, [TriggerCheckpoint(1)])
    pending = coordinator.pending[1]
    assert (pending.started, pending.triggered_at, pending.expected) == (5.0, 1000.0, set(SUBTASKS))
    assert coordinator.trigger(6.0, 1001.0) == (2, [TriggerCheckpoint(2)])  # ids grow; nothing completed yet
    assert coordinator.latest_completed is None


def test_maybe_trigger_respects_interval_concurrency_pause_and_min_pause(tmp_path):
    coordinator = make(tmp_path, interval=2.0, min_pause=1.0)
    assert coordinator.maybe_trigger(1.0, 0.0) == []  # interval not yet elapsed since 0
    assert coordinator.maybe_trigger(2.0, 0.0) == [TriggerCheckpoint(1)]
    assert coordinator.maybe_trigger(10.0, 0.0) == []  # max_concurrent = 1
    ack_all(coordinator, 1, 10.0)
    assert coordinator.maybe_trigger(10.5, 0.0) == []  # min_pause after the end at 10.0
    coordinator.paused = True
    assert coordinator.maybe_trigger(20.0, 0.0) == []
    coordinator.paused = False
    assert coordinator.maybe_trigger(20.0, 0.0) == [TriggerCheckpoint(2)]


def test_all_acks_complete_write_metadata_notify_and_abort_older_pending(tmp_path):
    coordinator = make(tmp_path, max_concurrent=2)
    coordinator.trigger(0.0, 100.0)
    coordinator.trigger(1.0, 101.0)
    results, sent = ack_all(coordinator, 2, 3.0, records=7)
    assert results == [AckResult.SUCCESS] * 3
    assert coordinator.latest_completed == 2 and coordinator.completed == [2]
    assert coordinator.pending == {}
    # the older pending checkpoint is aborted first, then the workers hear of completion
    assert sent == [CheckpointAbort(1), CheckpointComplete(2)]
    metadata = coordinator.storage.read_metadata(2)
    assert metadata["checkpoint_id"] == 2 and metadata["timestamp"] == 101.0 and metadata["job"] == "job"
    assert metadata["operators"]["sum-0"] == {
        "vertex": 1, "parallelism": 2, "name": "Sum", "operation": "sum",
        "subtasks": {"0": {"keyed": {"file": "sum-0-0.keyed"}}, "1": {"keyed": {"file": "sum-0-1.keyed"}}}}
    assert coordinator.source_records == {2: 7}


def test_completion_waits_for_the_last_ack(tmp_path):
    coordinator = make(tmp_path)
    coordinator.trigger(0.0, 0.0)
    assert on_ack(coordinator, ack(1, 0, 0), 1.0) == (AckResult.SUCCESS, [])
    assert on_ack(coordinator, ack(1, 1, 0), 1.0) == (AckResult.SUCCESS, [])  # no CheckpointComplete yet
    assert coordinator.latest_completed is None and coordinator.storage.completed() == []
    assert on_ack(coordinator, ack(1, 1, 1), 1.0) == (AckResult.SUCCESS, [CheckpointComplete(1)])


def test_late_ack_of_an_aborted_checkpoint_is_unknown_and_ignored(tmp_path):
    coordinator = make(tmp_path, tolerable_failures=5)
    coordinator.trigger(0.0, 0.0)
    on_decline(coordinator, Decline(1, worker=0, reason="disk full"), 1.0)
    assert [on_ack(coordinator, ack(1, v, s), 2.0) for v, s in SUBTASKS] == [(AckResult.UNKNOWN, [])] * 3
    assert coordinator.latest_completed is None and coordinator.storage.completed() == []


def test_ack_of_an_unexpected_subtask_is_unknown(tmp_path):
    coordinator = make(tmp_path)
    coordinator.trigger(0.0, 0.0)
    assert on_ack(coordinator, ack(1, 7, 0), 1.0) == (AckResult.UNKNOWN, [])
    assert coordinator.pending[1].acks == {}


def test_duplicate_ack_is_ignored_and_never_completes_twice(tmp_path):
    coordinator = make(tmp_path)
    coordinator.trigger(0.0, 0.0)
    first = ack(1, 1, 0, bytes=1)
    assert on_ack(coordinator, first, 1.0) == (AckResult.SUCCESS, [])
    assert on_ack(coordinator, ack(1, 1, 0, bytes=99), 1.0) == (AckResult.DUPLICATE, [])
    assert coordinator.pending[1].acks[(1, 0)] is first  # the first ack counts
    assert coordinator.latest_completed is None  # a duplicate does not stand in for a missing ack
    assert on_ack(coordinator, ack(1, 0, 0), 2.0) == (AckResult.SUCCESS, [])
    assert on_ack(coordinator, ack(1, 1, 1), 2.0) == (AckResult.SUCCESS, [CheckpointComplete(1)])
    assert on_ack(coordinator, ack(1, 1, 1), 2.0) == (AckResult.UNKNOWN, [])  # after completion: no second one
    assert coordinator.completed == [1]
    assert [s["status"] for s in coordinator.stats] == ["completed"]


def test_pending_checkpoint_classifies_acks():
    pending = PendingCheckpoint(3, 0.0, 0.0, {(0, 0), (0, 1)})
    assert pending.acknowledge(ack(3, 0, 0)) is AckResult.SUCCESS
    assert pending.acknowledge(ack(3, 0, 0)) is AckResult.DUPLICATE
    assert pending.acknowledge(ack(3, 2, 0)) is AckResult.UNKNOWN
    assert not pending.fully_acknowledged
    pending.discard()
    assert pending.acknowledge(ack(3, 0, 1)) is AckResult.DISCARDED
    assert not pending.fully_acknowledged


def test_decline_aborts_counts_a_failure_and_signals_past_tolerance(tmp_path):
    coordinator = make(tmp_path, tolerable_failures=1)
    coordinator.trigger(0.0, 0.0)
    coordinator.storage.write_file(1, "partial", b"x")  # an upload that did happen
    assert (tmp_path / "job" / "chk-1").exists()
    assert on_decline(coordinator, Decline(1, worker=2, reason="upload failed"), 1.0) == (True, [CheckpointAbort(1)])
    assert 1 not in coordinator.pending
    assert coordinator.consecutive_failures == 1
    assert not (tmp_path / "job" / "chk-1").exists()  # what it wrote is deleted
    assert coordinator.stats[-1]["reason"] == "declined by worker 2: upload failed"
    coordinator.trigger(2.0, 0.0)
    assert on_decline(coordinator, Decline(2, worker=0, reason="again"), 3.0) == (False, [CheckpointAbort(2)])
    # a decline of a checkpoint no longer pending changes nothing (and signals nothing again)
    assert on_decline(coordinator, Decline(1, worker=0, reason="late"), 4.0) == (True, [])
    assert coordinator.consecutive_failures == 2


def test_a_completed_checkpoint_resets_the_failure_count(tmp_path):
    coordinator = make(tmp_path, tolerable_failures=1)
    coordinator.trigger(0.0, 0.0)
    assert on_decline(coordinator, Decline(1, worker=0, reason="x"), 1.0)[0]
    coordinator.trigger(2.0, 0.0)
    ack_all(coordinator, 2, 3.0)
    assert coordinator.consecutive_failures == 0
    coordinator.trigger(4.0, 0.0)
    assert on_decline(coordinator, Decline(3, worker=0, reason="y"), 5.0)[0] is True


def test_timeout_aborts_and_counts(tmp_path):
    coordinator = make(tmp_path, timeout=10.0, tolerable_failures=0)
    coordinator.trigger(0.0, 0.0)
    assert check_timeouts(coordinator, 10.0) == (True, [])  # not past the timeout yet
    assert 1 in coordinator.pending
    assert check_timeouts(coordinator, 10.5) == (False, [CheckpointAbort(1)])  # aborted, and 1 > 0 tolerated
    assert coordinator.pending == {}
    entry = coordinator.stats[-1]
    assert entry == {"checkpoint_id": 1, "status": "aborted", "reason": "timed out after 10 s",
                     "trigger_time": 0.0, "duration_s": 10.5}


def test_abort_by_a_newer_completed_checkpoint_is_not_a_failure(tmp_path):
    coordinator = make(tmp_path, max_concurrent=3, tolerable_failures=0)
    for now in (0.0, 1.0, 2.0):
        coordinator.trigger(now, now)
    assert ack_all(coordinator, 2, 3.0)[1] == [CheckpointAbort(1), CheckpointComplete(2)]
    assert coordinator.consecutive_failures == 0
    assert list(coordinator.pending) == [3]  # the newer one still runs
    assert [(s["checkpoint_id"], s["status"], s.get("reason")) for s in coordinator.stats] == [
        (1, "aborted", "a newer checkpoint completed"), (2, "completed", None)]
    assert on_ack(coordinator, ack(1, 0, 0), 4.0) == (AckResult.UNKNOWN, [])
    ack_all(coordinator, 3, 5.0)
    assert coordinator.completed == [3]


def test_abort_all_on_a_job_failure_is_not_a_failure(tmp_path):
    coordinator = make(tmp_path, max_concurrent=2, tolerable_failures=0)
    coordinator.trigger(0.0, 0.0)
    coordinator.trigger(1.0, 0.0)
    outbox = coordinator.abort_all("job attempt 0 failed", 4.0)
    assert carry_out(coordinator, outbox, 4.0) == [CheckpointAbort(1), CheckpointAbort(2)]
    assert coordinator.pending == {}
    assert coordinator.consecutive_failures == 0
    assert [s["reason"] for s in coordinator.stats] == ["job attempt 0 failed"] * 2
    assert coordinator.stats[0]["duration_s"] == 4.0
    assert check_timeouts(coordinator, 100.0) == (True, [])


def test_retention_deletes_the_oldest_beyond_retained_never_the_latest(tmp_path):
    coordinator = make(tmp_path, retained=2)
    for checkpoint_id in (1, 2, 3, 4):
        assert coordinator.trigger(float(checkpoint_id), 0.0)[0] == checkpoint_id
        ack_all(coordinator, checkpoint_id, checkpoint_id + 0.5)
    assert coordinator.completed == [3, 4]
    assert coordinator.storage.completed() == [3, 4]
    coordinator = make(tmp_path, retained=1)  # a new coordinator finds the stored ones
    assert coordinator.completed == [3, 4] and coordinator.latest_completed == 4
    coordinator.next_id = 5
    coordinator.trigger(9.0, 0.0)
    ack_all(coordinator, 5, 9.5)
    assert coordinator.storage.completed() == [5] and coordinator.latest_completed == 5


def test_source_records_accumulate_over_attempts(tmp_path):
    coordinator = make(tmp_path)
    coordinator.trigger(0.0, 0.0)
    ack_all(coordinator, 1, 1.0, records=5)
    coordinator.records_base = coordinator.source_records[1]
    coordinator.trigger(2.0, 0.0)
    ack_all(coordinator, 2, 3.0, records=4)
    assert coordinator.source_records == {1: 5, 2: 9}


def test_statistics_of_a_completed_checkpoint_in_memory_and_jsonl(tmp_path):
    coordinator = make(tmp_path)
    coordinator.trigger(1.0, 500.0)
    on_ack(coordinator, ack(1, 0, 0, buffered_bytes=3), 1.5)
    on_ack(coordinator, ack(1, 1, 0, alignment_s=2.0, spilled_bytes=4), 1.5)
    on_ack(coordinator, ack(1, 1, 1, loop_log_records=6, async_s=0.9), 3.0)
    [entry] = coordinator.stats_snapshot()
    assert {k: v for k, v in entry.items() if k != "subtasks"} == {
        "checkpoint_id": 1, "status": "completed", "trigger_time": 500.0, "duration_s": 2.0, "bytes": 30,
        "alignment_s_max": 2.0, "sync_s_max": 0.1, "async_s_max": 0.9, "alignment_buffered_bytes": 3,
        "alignment_spilled_bytes": 4, "loop_log_records": 6, "state_bytes": {"sum-0": 0}}
    assert set(entry["subtasks"]) == {"0/0", "1/0", "1/1"}
    coordinator.trigger(4.0, 0.0)
    check_timeouts(coordinator, 20.0)
    lines = (tmp_path / "job" / "checkpoint_stats.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == coordinator.stats_snapshot()
    assert coordinator.stats_snapshot() is not coordinator.stats


def test_the_last_ack_asks_for_the_metadata_and_only_its_write_completes_the_checkpoint(tmp_path):
    coordinator = make(tmp_path)
    coordinator.trigger(0.0, 100.0)
    coordinator.on_ack(ack(1, 0, 0), 1.0)
    coordinator.on_ack(ack(1, 1, 0), 1.0)
    result, [write] = coordinator.on_ack(ack(1, 1, 1), 1.0)
    assert result is AckResult.SUCCESS and isinstance(write, WriteCheckpoint) and write.checkpoint_id == 1
    assert coordinator.latest_completed is None and coordinator.storage.completed() == []  # nothing done yet
    assert coordinator.maybe_trigger(50.0, 0.0) == []  # a checkpoint being written still counts as running
    FILES.write(write)
    outbox = coordinator.on_written(1, 1.5)
    assert [type(o) for o in outbox] == [CheckpointComplete, RecordStats]
    assert coordinator.latest_completed == 1 and coordinator.storage.completed() == [1]


def test_a_failed_metadata_write_aborts_the_checkpoint_and_counts_as_a_failure(tmp_path):
    coordinator = make(tmp_path, tolerable_failures=0)
    coordinator.trigger(0.0, 0.0)
    outbox = [o for v, s in SUBTASKS for o in coordinator.on_ack(ack(1, v, s), 1.0)[1]]
    assert carry_out(coordinator, outbox, 1.0, fail_write="OSError: no space left") == [CheckpointAbort(1)]
    assert coordinator.latest_completed is None and coordinator.consecutive_failures == 1
    assert coordinator.stats[-1]["reason"] == "its metadata could not be written: OSError: no space left"
    assert not coordinator.failures.tolerable


@pytest.mark.parametrize(("kind", "counted"), [(AbortReason.DECLINED, True), (AbortReason.TIMED_OUT, True),
                                                (AbortReason.WRITE_FAILED, True), (AbortReason.SUPERSEDED, False),
                                                (AbortReason.JOB_FAILED, False)])
def test_failure_manager_counts_only_declines_and_timeouts(kind, counted):
    manager = CheckpointFailureManager(tolerable_failures=0)
    assert manager.on_aborted(kind) is not counted
    assert manager.consecutive_failures == int(counted)
    manager.on_completed()
    assert manager.consecutive_failures == 0
