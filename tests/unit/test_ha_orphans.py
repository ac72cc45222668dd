"""A new leader deletes the checkpoint directories its deposed predecessors left (never
completed), and nothing else: not a completed checkpoint the HA store names, not one a kept
checkpoint's chain reads, not a savepoint, not one of its own ids (epochal.control.ha.orphans)."""

from __future__ import annotations

import os

from epochal.control.ha.orphans import discard_orphans, orphaned_checkpoints
from epochal.control.ha.records import CheckpointPointer
from epochal.state.storage import CheckpointStorage, SavepointStorage
from tests.unit.test_ha_fencing import A, B, lead


def test_the_decision_keeps_completed_referenced_and_own_ids():
    pointer = CheckpointPointer("run", (4, 5))
    assert orphaned_checkpoints([1, 2, 3, 4, 5, 6, 7], pointer) == [1, 2, 3, 6, 7]
    assert orphaned_checkpoints([1, 2, 3, 4, 5, 6, 7], pointer, referenced=[2, 3]) == [1, 6, 7]
    assert orphaned_checkpoints([4, 5, 6, 7, 40], pointer, below=40) == [6, 7]  # 40: the new leader's
    assert orphaned_checkpoints([2, 3], None) == [2, 3]  # nothing completed yet: none is kept
    assert orphaned_checkpoints([], pointer) == []


def test_a_new_leader_deletes_what_its_predecessor_left_and_keeps_the_rest(tmp_path):
    from epochal.control.ha.files import FileHaServices

    run = CheckpointStorage(str(tmp_path / "run"))
    for checkpoint_id, completed in ((3, True), (4, True), (5, False), (6, True)):
        run.write_file(checkpoint_id, "op-0.keyed", b"state")
        if completed:
            run.write_metadata(checkpoint_id, {"operators": {}, "job": "j"})
    run.write_shared("op-0.c5.sst", b"only checkpoint 5 wrote this")
    savepoint = SavepointStorage(str(tmp_path / "run" / "savepoint-1"))
    savepoint.write_metadata(0, {"operators": {}, "job": "j", "checkpoint_id": 2})
    services = FileHaServices(str(tmp_path / "ha"), "job")
    old = lead(services, A)
    for checkpoint_id in range(3, 7):  # the old leader started 3 to 6 (took their ids)
        assert old.reserve(checkpoint_id) is None
    services.publish_checkpoint(old.epoch, CheckpointPointer(run.uri, (3, 4)))  # 6: its metadata, refused
    new = lead(FileHaServices(str(tmp_path / "ha"), "job"), B)
    assert discard_orphans(run, new, new.pointer, below=new.first_id) == [5, 6]
    assert run.checkpoint_dirs() == [3, 4] and run.shared_files() == []
    assert os.path.exists(f"{savepoint.root}/_metadata")  # a savepoint is never a checkpoint directory
    assert discard_orphans(savepoint, new, None) == []
    # the deposed leader may no longer delete anything
    run.write_file(7, "op-0.keyed", b"state")
    assert discard_orphans(run, old, new.pointer) == [] and run.checkpoint_dirs() == [3, 4, 7]
