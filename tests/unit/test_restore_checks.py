"""Restore checks on the driver, without Spark: state no operator claims, state files that are
missing or damaged, file names for any uid, the metadata naming each operator."""

from __future__ import annotations

import os

import pytest

from epochal.config import CheckpointConfig
from epochal.control.checkpoint_files import CheckpointFiles
from epochal.dataflow.checkpointing.coordinator import CheckpointCoordinator
from epochal.dataflow.checkpointing.messages import Ack
from epochal.dataflow.checkpointing.restore import check_restore
from epochal.errors import PlanError
from epochal.state.snapshot import RestoreSource, file_stem, materialize
from epochal.state.storage import CheckpointError, CheckpointStorage


def metadata_with(*uids, names=True):
    operators = {}
    for uid in uids:
        kind = uid.split("-")[0].split(":")[0]
        entry = {"vertex": 0, "parallelism": 2, "subtasks": {"0": {"keyed": {"file": f"{uid}-0.keyed"}},
                                                              "1": {"keyed": {"file": f"{uid}-1.keyed"}}}}
        if names:
            entry.update(name=kind.title(), operation=kind)
        operators[uid] = entry
    return {"checkpoint_id": 3, "max_parallelism": 128, "operators": operators}


def test_state_that_every_operator_claims_restores():
    job = {"source-0": {"name": "Source", "operation": "source"}, "sum-0": {"name": "Sum", "operation": "sum"},
           "map-0": {"name": "Map", "operation": "map"}}
    assert check_restore(metadata_with("source-0", "sum-0"), "/c/chk-3", job) == []


def test_unclaimed_state_fails_naming_every_piece_and_suggesting_a_uid():
    job = {"source-0": {"name": "Source", "operation": "source"}, "sum:totals": {"name": "totals", "operation": "sum"}}
    with pytest.raises(PlanError) as info:
        check_restore(metadata_with("source-0", "sum-0", "window-0"), "/c/chk-3", job)
    message = str(info.value)
    first = message.splitlines()[0]
    assert first.startswith("cannot restore checkpoint /c/chk-3: it holds state of 2 operators")
    assert "'sum-0'" in first and "'window-0'" in first
    assert "uid 'sum-0': keyed state of operator 'Sum' (sum), 2 subtask(s)" in message
    assert "'totals' (uid 'sum:totals') restore nothing" in message and ".uid('sum-0')" in message
    assert "allow_non_restored_state=True" in message


def test_allow_non_restored_state_returns_what_is_skipped():
    job = {"source-0": {"name": "Source", "operation": "source"}}
    skipped = check_restore(metadata_with("source-0", "sum-0"), "/c/chk-3", job, allow_non_restored_state=True)
    assert skipped == [{"uid": "sum-0", "name": "Sum", "operation": "sum", "state": "keyed state", "subtasks": 2}]


def test_checkpoints_without_names_still_name_the_uid():
    with pytest.raises(PlanError, match=r"uid 'sum-2': keyed state of an operator"):
        check_restore(metadata_with("sum-2", names=False), "/c/chk-3", {})


def test_metadata_records_each_operators_name_and_operation(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "job"))
    coordinator = CheckpointCoordinator(
        CheckpointConfig(interval=1.0, storage=str(tmp_path)), storage, "job", subtasks={(0, 0): "v"},
        vertex_parallelism={0: 1}, max_parallelism=128,
        operators={"sum:totals": {"name": "totals", "operation": "sum"}})
    checkpoint_id, _ = coordinator.trigger(0.0, 0.0)
    handles = materialize(storage, checkpoint_id, 0, {"sum:totals": {"keyed": {5: {"sum": {"a": 1}}}}})
    stats = {"bytes": 1, "alignment_s": 0, "sync_s": 0, "async_s": 0}
    _, [write] = coordinator.on_ack(Ack(checkpoint_id, vertex=0, subtask=0, worker=0, handles=handles, stats=stats),
                                    0.1)
    assert CheckpointFiles().write(write) is None  # as the JobMaster's driver does
    entry = storage.read_metadata(checkpoint_id)["operators"]["sum:totals"]
    assert (entry["name"], entry["operation"]) == ("totals", "sum")
    assert entry["subtasks"]["0"]["keyed"]["file"] == f"{file_stem('sum:totals')}-0.keyed"
    restored = dict(RestoreSource(storage, checkpoint_id, storage.read_metadata(checkpoint_id))
                    .keyed_groups("sum:totals", range(128)))
    assert restored == {5: {"sum": {"a": 1}}}


def test_file_names_are_safe_for_any_uid_and_distinct():
    assert file_stem("sum-0") == "sum-0"
    assert file_stem("collatz-body") == "collatz-body"
    odd = [file_stem(u) for u in ("sum:totals", "sum/totals", "sum totals", "sum_totals")]
    assert len(set(odd)) == 4
    assert all("/" not in name and ":" not in name and " " not in name for name in odd)


def write_checkpoint(storage, checkpoint_id):
    handles = materialize(storage, checkpoint_id, 0, {"sum-0": {"keyed": {1: {"s": {"a": 1}}, 2: {"s": {"b": 2}}},
                                                               "operator": {"l": ("split", [1, 2])}}})
    metadata = {"checkpoint_id": checkpoint_id, "max_parallelism": 128,
                "operators": {"sum-0": {"vertex": 0, "parallelism": 1, "name": "Sum", "operation": "sum",
                                        "subtasks": {"0": handles["sum-0"]}}}}
    storage.write_metadata(checkpoint_id, metadata)
    return metadata


def test_verify_files_accepts_an_intact_checkpoint_and_catches_a_truncated_file(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "job"))
    write_checkpoint(storage, 4)
    metadata = write_checkpoint(storage, 5)
    storage.verify_files(5, metadata)
    victim = os.path.join(storage.checkpoint_path(5), "sum-0-0.keyed")
    with open(victim, "r+b") as out:
        out.truncate(os.path.getsize(victim) - 1)
    with pytest.raises(CheckpointError) as info:
        storage.verify_files(5, metadata)
    lines = str(info.value).splitlines()
    assert lines[0].startswith(f"checkpoint state file {victim} is damaged")
    assert info.value.path == victim
    assert f"restore_from='{storage.checkpoint_path(4)}'" in lines[-1]
    storage.verify_files(5, metadata, uids={"other"})  # only the state that will be read is checked


def test_verify_files_catches_a_missing_file_and_says_when_nothing_older_is_retained(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "job"))
    metadata = write_checkpoint(storage, 1)
    victim = os.path.join(storage.checkpoint_path(1), "sum-0-0.operator")
    os.remove(victim)
    with pytest.raises(CheckpointError, match=rf"{victim} is missing") as info:
        storage.verify_files(1, metadata)
    assert "No earlier completed checkpoint is retained" in str(info.value)
    assert "retained=N" in str(info.value)


def test_a_corrupt_byte_names_the_full_path_when_read(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "job"))
    metadata = write_checkpoint(storage, 1)
    victim = os.path.join(storage.checkpoint_path(1), "sum-0-0.keyed")
    data = bytearray(open(victim, "rb").read())
    data[-1] ^= 0xFF
    open(victim, "wb").write(bytes(data))
    storage.verify_files(1, metadata)  # same size: only the checksum can tell
    with pytest.raises(CheckpointError, match=rf"{victim} is corrupt") as info:
        list(RestoreSource(storage, 1, metadata).keyed_groups("sum-0", range(128)))
    assert info.value.path == victim
