"""Fencing of a leader's checkpoint I/O (epochal.control.ha.fencing), of its coordinator's ids and
commits, and of its workers' sink commits (epochal.state.fencing), on real file-based HA services."""

from __future__ import annotations

from epochal.control.checkpoint_files import (
    CheckpointFiles,
    DeleteCheckpoints,
    DiscardCheckpoint,
    ReserveCheckpointId,
    WriteCheckpoint,
)
from epochal.control.ha.driver import ElectionDriver
from epochal.control.ha.election import ElectionTimings, Role
from epochal.control.ha.fencing import Leadership
from epochal.control.ha.files import FileHaServices
from epochal.control.ha.records import DriverInfo
from epochal.dataflow.checkpointing.messages import CheckpointAbort, CheckpointComplete, TriggerCheckpoint
from epochal.state.fencing import LeaderFence
from epochal.state.storage import CheckpointStorage
from tests.unit.test_checkpoint_coordination import SUBTASKS, ack, make, on_ack

A = DriverInfo("a", "h", 1, 1.0)
B = DriverInfo("b", "h", 2, 2.0)


def lead(services: FileHaServices, me: DriverInfo, retained: int = 2) -> Leadership:
    """``me`` claims the job (as its election would) and takes the leadership up."""
    epoch = services.claim(services.observe(), me)
    assert epoch is not None
    election = ElectionDriver(services, me, ElectionTimings())
    election.machine.role, election.machine.epoch = Role.LEADER, epoch  # what its Elected left
    return Leadership(services, election, epoch, retained)


def write(files: CheckpointFiles, storage: CheckpointStorage, checkpoint_id: int) -> str | None:
    storage.fs.create_dir(f"{storage.root}/chk-{checkpoint_id}", recursive=True)
    return files.write(WriteCheckpoint(storage, checkpoint_id, {"operators": {}, "job": "j"}))


def test_a_checkpoint_completes_only_through_the_fenced_pointer_and_a_deposed_leader_is_refused(tmp_path):
    services = FileHaServices(str(tmp_path / "ha"), "job")
    storage = CheckpointStorage(str(tmp_path / "run"))
    old = lead(services, A)
    assert (old.first_id, services.checkpoint_counter()) == (1, 1)  # nothing reserved ahead
    files = CheckpointFiles(old)
    for checkpoint_id in (1, 2, 3):
        assert files.reserve(checkpoint_id) is None
        assert write(files, storage, checkpoint_id) is None
    assert services.latest_checkpoints().ids == (2, 3)  # the retained ones, the latest last

    new = lead(FileHaServices(str(tmp_path / "ha"), "job"), B)  # another driver takes over
    assert new.pointer.ids == (2, 3) and new.first_id == 4  # right after the old leader's last id
    error = write(files, storage, 4)
    assert error is not None and "refused (fencing)" in error
    assert old.election.machine.role is Role.DEPOSED  # the refusal deposed the old leader
    assert services.latest_checkpoints().ids == (2, 3)
    files.discard(DiscardCheckpoint(storage, 2, ()))
    files.delete(DeleteCheckpoints(storage, (3,), ()))
    assert storage.fs.get_file_info(f"{storage.root}/chk-2").type.name == "Directory"  # deletions refused
    assert storage.fs.get_file_info(f"{storage.root}/chk-3").type.name == "Directory"
    assert CheckpointFiles(new).write(WriteCheckpoint(storage, new.first_id, {"operators": {}})) is None
    assert services.latest_checkpoints().ids == (3, new.first_id)


def test_the_counter_is_exact_and_never_repeats_an_id_a_deposed_leader_started(tmp_path):
    """Each id is taken from the store before its trigger reaches a worker: a new leader goes on
    right after the last id started (Flink's exact CheckpointIDCounter, no block skipped), past one
    that never completed, and a deposed leader can start no id at all."""
    services = FileHaServices(str(tmp_path / "ha"), "job")
    storage = CheckpointStorage(str(tmp_path / "run"))
    old = lead(services, A)
    files = CheckpointFiles(old)
    for checkpoint_id in (1, 2):
        assert files.reserve(checkpoint_id) is None and write(files, storage, checkpoint_id) is None
    assert files.reserve(3) is None  # started (a 2PC sink may have begun transaction 3), never completed
    assert services.checkpoint_counter() == 4 and services.latest_checkpoints().latest == 2
    new = lead(FileHaServices(str(tmp_path / "ha"), "job"), B)
    assert new.first_id == 4  # not 3 (started by the old leader), not 21 (a block)
    refused = files.reserve(4)
    assert refused is not None and "starting checkpoint 4 was refused" in refused
    assert CheckpointFiles(new).reserve(4) is None and services.checkpoint_counter() == 5
    third = lead(FileHaServices(str(tmp_path / "ha"), "job"), A)
    assert third.first_id == 5
    assert CheckpointFiles().reserve(7) is None  # without high availability nothing is asked


def test_the_coordinator_stamps_the_leader_epoch_on_every_commit(tmp_path):
    services = FileHaServices(str(tmp_path / "ha"), "job")
    leadership = lead(services, A)
    coordinator = make(tmp_path)
    leadership.attach(coordinator)
    checkpoint_id, messages = coordinator.trigger(0.0, 0.0)
    assert messages == [ReserveCheckpointId(checkpoint_id)]  # the HA store's id first, then the trigger
    assert coordinator.on_reserved(checkpoint_id, None) == [TriggerCheckpoint(checkpoint_id, None)]
    out = []
    for vertex, subtask in SUBTASKS:
        out += on_ack(coordinator, ack(checkpoint_id, vertex, subtask), 1.0)[1]
    assert CheckpointComplete(checkpoint_id, leader_epoch=leadership.epoch) in out


def test_a_checkpoint_whose_id_is_refused_is_never_triggered_and_times_out(tmp_path):
    """A deposed leader (or one that cannot reach the HA store) sends no trigger: no worker sees
    the id, and the checkpoint times out as a counted failure, as before the reservation was an
    instruction of the pure machine."""
    leadership = lead(FileHaServices(str(tmp_path / "ha"), "job"), A)
    coordinator = make(tmp_path)
    leadership.attach(coordinator)
    checkpoint_id, messages = coordinator.trigger(0.0, 0.0)
    assert messages == [ReserveCheckpointId(checkpoint_id)]
    assert coordinator.on_reserved(checkpoint_id, "starting checkpoint 1 was refused") == []
    assert checkpoint_id in coordinator.pending
    tolerable, aborts = coordinator.check_timeouts(coordinator.config.timeout + 1.0)
    assert not tolerable and CheckpointAbort(checkpoint_id) in aborts
    assert coordinator.on_reserved(checkpoint_id, None) == []  # a late answer for an aborted one


def test_workers_admit_only_the_newest_leader(tmp_path):
    fence = LeaderFence(str(tmp_path / "run"))
    assert fence.newest() == 0 and fence.admits(1)
    fence.raise_to(1)
    fence.raise_to(3)
    fence.raise_to(2)  # a slow leader writing late never lowers the fence
    assert fence.newest() == 3
    assert fence.admits(3) and not fence.admits(2)
