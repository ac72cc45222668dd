"""Savepoints without Spark (papers/001 §3.3.1): the worker's snapshot pipeline, the checkpoint
coordinator and the JobMaster's machine fed event sequences. A savepoint is a checkpoint written
whole to a directory of its own, never retained or restored after a failure, not counted among the
job's checkpoint failures; stopping at one halts the sources after its barrier and ends the job
once every worker confirmed its commit; draining ends the sources first."""

from __future__ import annotations

import pytest

from epochal.config import EXACTLY_ONCE
from epochal.control.checkpoint_files import DiscardCheckpoint, RecordStats, WriteCheckpoint
from epochal.control.jobmaster_events import (
    Broadcast,
    SavepointDone,
    SavepointRequest,
    SavepointRequested,
    WorkerMessage,
)
from epochal.control.lifecycle import JobStatus
from epochal.control.restart import FixedDelayRestart
from epochal.dataflow.checkpointing.events import Capture, EmitBarrier, NotifyComplete, SubtaskAligned, SubtaskInfo
from epochal.dataflow.checkpointing.messages import (
    CheckpointAbort,
    CheckpointComplete,
    Committed,
    Decline,
    SavepointTarget,
    TriggerCheckpoint,
)
from epochal.dataflow.checkpointing.snapshots import SnapshotPipeline
from epochal.dataflow.protocol import EndSources
from epochal.machines import TimePassed
from epochal.messages import Finished, Shutdown
from epochal.runtime.host.events import ReachPoint, Send
from epochal.state.checkpoint_dirs import resolve_restore_path
from epochal.state.storage import SavepointStorage
from tests.unit.test_jobmaster_machine import ATTEMPT_0, ack, conn, coordinator_on, deploy, handled, make, start

SOURCE, SUM = (0, 0), (1, 0)


def pipeline() -> SnapshotPipeline:
    infos = {SOURCE: SubtaskInfo(SOURCE, source=True), SUM: SubtaskInfo(SUM, barriers=True)}
    return SnapshotPipeline(0, EXACTLY_ONCE, infos, set())


# ---------------------------------------------------------------------- the worker's pipeline
def test_a_savepoints_snapshots_go_to_its_own_directory_and_its_commit_is_not_confirmed():
    snapshots = pipeline()
    target = SavepointTarget("/sp/savepoint-1")
    assert snapshots.on_trigger(4, target) == [EmitBarrier(SOURCE, 4, target), Capture(SOURCE, 4, savepoint=target)]
    assert not snapshots.halted  # the job goes on
    assert snapshots.on_trigger(5) == [EmitBarrier(SOURCE, 5), Capture(SOURCE, 5)]  # a checkpoint: no target


def test_a_savepoints_barrier_that_overtakes_its_trigger_still_makes_a_savepoint_and_carries_it_on():
    """The barrier travels from another worker, the trigger from the JobMaster: the barrier may come
    first. It carries the target, so the subtask it aligns writes a savepoint (self-contained, in
    the savepoint's directory), not an ordinary checkpoint, and forwards the target downstream."""
    snapshots = pipeline()
    target = SavepointTarget("/sp/savepoint-7")
    out = snapshots.on_aligned(SubtaskAligned(SUM, 7, 0.01, savepoint=target))
    assert EmitBarrier(SUM, 7, target) in out
    assert Capture(SUM, 7, 0.01, savepoint=target) in out
    assert snapshots.on_trigger(7, target)[-1] == Capture(SOURCE, 7, savepoint=target)  # the trigger comes late
    # without the target on the barrier, the same overtaking barrier took an ordinary checkpoint
    assert Capture(SUM, 8, 0.01) in pipeline().on_aligned(SubtaskAligned(SUM, 8, 0.01))


def test_a_stop_savepoint_halts_the_sources_confirms_its_commit_and_an_abort_resumes_them():
    snapshots = pipeline()
    snapshots.on_trigger(3, SavepointTarget("/sp/a", stop=True))
    assert snapshots.halted == {3}  # nothing after its barrier
    assert snapshots.on_complete(3, savepoint=True) == [ReachPoint("before_commit", 3), NotifyComplete(3, True),
                                                         Send(Committed(3, 0))]
    assert snapshots.halted == {3}  # the job ends: the sources stay halted
    snapshots.on_trigger(4, SavepointTarget("/sp/b", stop=True))
    snapshots.on_abort(4)
    assert 4 not in snapshots.halted


# ---------------------------------------------------------------------- the coordinator
def complete(coordinator, checkpoint_id: int, now: float) -> list:
    """Every subtask acks; the metadata is written as the driver does; what is broadcast and done."""
    outbox = []
    for worker in range(2):
        outbox += coordinator.on_ack(ack(checkpoint_id, worker), now)[1]
    out = []
    for item in outbox:
        if isinstance(item, WriteCheckpoint):
            item.storage.write_metadata(item.checkpoint_id, item.metadata)
            out += coordinator.on_written(item.checkpoint_id, now)
        else:
            out.append(item)
    return out


def test_a_savepoint_is_written_to_its_directory_and_is_neither_retained_nor_restored_after_failures(tmp_path):
    coordinator = coordinator_on(tmp_path, max_concurrent=2)
    coordinator.job_id = "job-1"
    coordinator.trigger(0.0, 0.0)  # checkpoint 1, still pending when the savepoint completes
    location = str(tmp_path / "savepoints" / "savepoint-a")
    checkpoint_id, messages = coordinator.trigger(1.0, 1.0, SavepointTarget(location))
    assert messages == [TriggerCheckpoint(2, SavepointTarget(location))]
    out = complete(coordinator, 2, 2.0)
    assert [type(o) for o in out] == [RecordStats]  # no CheckpointComplete: the job goes on, nothing commits
    assert coordinator.latest_completed is None and 1 in coordinator.pending  # supersedes nothing
    storage, restored_id = resolve_restore_path(location)  # restorable from its own directory
    assert isinstance(storage, SavepointStorage) and restored_id == 2
    assert storage.read_metadata(2)["savepoint"] == {"format": "canonical", "job_id": "job-1", "stop": False,
                                                          "layout": 2}
    assert not (tmp_path / "job" / "chk-2").exists()


def test_a_failed_savepoint_is_not_one_of_the_jobs_checkpoint_failures(tmp_path):
    coordinator = coordinator_on(tmp_path, tolerable_failures=0)
    location = str(tmp_path / "sp")
    coordinator.trigger(0.0, 0.0, SavepointTarget(location))
    tolerable, outbox = coordinator.on_decline(Decline(1, 0, "disk full"), 1.0)
    assert tolerable and coordinator.consecutive_failures == 0
    assert outbox[0] == CheckpointAbort(1) and DiscardCheckpoint(SavepointStorage(location), 1, ()).checkpoint_id == 1
    assert coordinator.aborted_savepoints == {1: "declined by worker 0: disk full"}


# ---------------------------------------------------------------------- the JobMaster's machine
def running(tmp_path, restart=None, **options):
    coordinator = coordinator_on(tmp_path, interval=100.0, **options)
    machine = make(coordinator=coordinator, restart=restart)
    deploy(machine)
    start(machine)
    return machine, coordinator


def request(tmp_path, name: str, **options) -> SavepointRequest:
    return SavepointRequest(name, str(tmp_path / name), **options)


def test_a_savepoint_request_is_answered_when_its_metadata_is_written(tmp_path):
    machine, _ = running(tmp_path)
    asked = request(tmp_path, "r1")
    [trigger] = handled(machine, SavepointRequested(asked, 3.0, 3.0))
    assert trigger == Broadcast(TriggerCheckpoint(1, SavepointTarget(asked.location)), ATTEMPT_0)
    again = handled(machine, SavepointRequested(request(tmp_path, "r2"), 3.1, 3.1))
    assert again[0].error.startswith("a savepoint is in progress")  # one at a time
    handled(machine, WorkerMessage(0, conn(0), ack(1, 0), 3.5, 3.5))
    out = handled(machine, WorkerMessage(1, conn(1), ack(1, 1), 3.5, 3.5))
    assert out == [SavepointDone("r1", asked.location)]
    assert machine.status == JobStatus.RUNNING


def test_a_savepoint_is_refused_while_the_job_does_not_run(tmp_path):
    coordinator = coordinator_on(tmp_path)
    machine = make(coordinator=coordinator)
    [done] = machine.handle(SavepointRequested(request(tmp_path, "r1"), 1.0, 1.0))
    assert done.location is None and "is deploying" in done.error


def test_a_savepoint_needs_checkpoint_barriers(tmp_path):
    machine = make()
    deploy(machine)
    start(machine)
    [done] = machine.handle(SavepointRequested(request(tmp_path, "r1"), 3.0, 3.0))
    assert "enable_checkpointing" in done.error


def test_stop_with_savepoint_commits_and_ends_the_job_once_every_worker_confirmed(tmp_path):
    machine, coordinator = running(tmp_path)
    asked = request(tmp_path, "stop", stop=True)
    handled(machine, SavepointRequested(asked, 3.0, 3.0))
    assert coordinator.paused  # no periodic checkpoint after the stop
    handled(machine, WorkerMessage(0, conn(0), ack(1, 0), 3.5, 3.5))
    out = handled(machine, WorkerMessage(1, conn(1), ack(1, 1), 3.5, 3.5))
    assert out == [Broadcast(CheckpointComplete(1, savepoint=True), ATTEMPT_0), SavepointDone("stop", asked.location)]
    assert handled(machine, WorkerMessage(0, conn(0), Committed(1, 0), 3.6, 3.6)) == []
    assert handled(machine, WorkerMessage(1, conn(1), Committed(1, 1), 3.6, 3.6)) == [
        Broadcast(Shutdown(), ATTEMPT_0)]
    assert machine.status == JobStatus.FINISHING


def test_a_failed_stop_savepoint_leaves_the_job_running(tmp_path):
    machine, coordinator = running(tmp_path)
    handled(machine, SavepointRequested(request(tmp_path, "stop", stop=True), 3.0, 3.0))
    out = handled(machine, WorkerMessage(0, conn(0), Decline(1, 0, "disk full"), 3.5, 3.5))
    assert out[0] == Broadcast(CheckpointAbort(1), ATTEMPT_0)
    assert out[-1].error.endswith("declined by worker 0: disk full; the job goes on")
    assert not coordinator.paused and machine.kind.final_checkpoint is None and machine.status == JobStatus.RUNNING


def test_stop_with_drain_ends_the_sources_then_takes_the_savepoint_as_the_final_checkpoint(tmp_path):
    machine, _ = running(tmp_path)
    asked = request(tmp_path, "drain", stop=True, drain=True)
    assert handled(machine, SavepointRequested(asked, 3.0, 3.0)) == [Broadcast(EndSources(), ATTEMPT_0)]
    handled(machine, WorkerMessage(0, conn(0), Finished({}), 4.0, 4.0))
    [trigger] = handled(machine, WorkerMessage(1, conn(1), Finished({}), 4.0, 4.0))
    assert trigger == Broadcast(TriggerCheckpoint(1, SavepointTarget(asked.location, stop=True)), ATTEMPT_0)
    handled(machine, WorkerMessage(0, conn(0), ack(1, 0), 4.5, 4.5))
    out = handled(machine, WorkerMessage(1, conn(1), ack(1, 1), 4.5, 4.5))
    assert SavepointDone("drain", asked.location) in out
    handled(machine, WorkerMessage(0, conn(0), Committed(1, 0), 4.6, 4.6))
    handled(machine, WorkerMessage(1, conn(1), Committed(1, 1), 4.6, 4.6))
    assert machine.status == JobStatus.FINISHING


@pytest.mark.parametrize("what", ["timeout", "failure"])
def test_a_savepoint_in_progress_fails_when_its_checkpoint_times_out_or_the_attempt_fails(tmp_path, what):
    machine, _ = running(tmp_path, restart=FixedDelayRestart(1, 0.0), timeout=2.0)
    handled(machine, SavepointRequested(request(tmp_path, "r1"), 3.0, 3.0))
    if what == "timeout":
        out = handled(machine, TimePassed(5.5, 5.5))
        assert any(isinstance(o, SavepointDone) and "timed out" in o.error for o in out)
    else:
        from epochal.messages import Failed
        handled(machine, WorkerMessage(0, conn(0), Failed("internal", "boom", 0), 3.2, 3.2))
        out = handled(machine, TimePassed(4.0, 4.0))  # the grace period is over: the attempt restarts
        assert any(isinstance(o, SavepointDone) and "job attempt 0 failed" in o.error for o in out)


def test_a_request_status_says_whether_it_was_taken_up_or_who_refused_it(tmp_path):
    from epochal.control.savepoints import check_writable, new_request

    taken = new_request("job", str(tmp_path), "canonical", stop=False, drain=False)
    assert not taken.wait_decided(0) and taken.refused_by is None
    taken.decide()
    assert taken.wait_decided(0) and taken.refused_by == ""  # in progress
    taken.end(taken.location, None)
    taken.decide("job")  # a later decision changes nothing
    assert taken.refused_by == "" and taken.as_dict()["status"] == "COMPLETED"

    refused = new_request("job", str(tmp_path), "canonical", stop=False, drain=False)
    refused.end(None, "a savepoint is in progress")
    refused.decide()
    assert refused.refused_by == "job" and refused.status == "FAILED"

    blocked = tmp_path / "a-file"
    blocked.write_text("x")
    bad = new_request("job", str(blocked), "canonical", stop=False, drain=False)
    assert "cannot write the savepoint" in check_writable(bad.location)
