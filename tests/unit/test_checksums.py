"""CRC-32 of checkpoint files (epochal.state.checksums): zlib's values, whichever way computes them,
so that snapshots written by earlier code still verify (tests/unit/data/crc32-before-isal/)."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from epochal.state.snapshot import RestoreSource
from epochal.state.storage import CheckpointError, CheckpointStorage, SavepointStorage

DATA = pathlib.Path(__file__).parent / "data" / "crc32-before-isal"
#: The keyed state the fixtures hold (operator "op"; written as tests/unit/data/crc32-before-isal/README.md says)
ROUNDS = [{"op": {
    "words": {f"user-{i}": "v" * (i * 37 % 200) + str(i) for i in range(12)},
    "counts": {(i, f"k{i}"): i * 1000003 for i in range(6)},
    "maps": {i: {f"m{j}": j * 1.5 for j in range(i)} for i in range(1, 5)},
}}]
#: The operator state the fixtures hold, per subtask
LISTS = {"op": {"offsets": ("split", [("p0", 10), ("p1", 20)])}}
MAX_PARALLELISM = 16


def _restored(storage: CheckpointStorage, checkpoint_id: int) -> tuple[dict, list]:
    """Every key group's state (each CRC verified as it is read) and each subtask's operator lists."""
    metadata = storage.read_metadata(checkpoint_id)  # its checksum verified
    source = RestoreSource(storage, checkpoint_id, metadata)
    states: dict = {}
    for _, by_name in source.keyed_groups("op", range(MAX_PARALLELISM)):
        for name, entries in by_name.items():
            states.setdefault(name, {}).update(entries)
    lists = [source.operator_lists("op", index, 2) for index in range(2)]
    return states, lists


def _expected_lists() -> list:
    items = LISTS["op"]["offsets"][1]
    return [{"offsets": items}, {"offsets": items}]  # two subtasks wrote the list each; split in two


def test_a_canonical_rocksdb_savepoint_written_by_the_old_crc_code_still_verifies(tmp_path):
    copy = tmp_path / "savepoint"
    shutil.copytree(DATA / "rocksdb-canonical-savepoint", copy)
    states, lists = _restored(SavepointStorage(str(copy)), 1)
    assert states == ROUNDS[0]["op"]
    assert lists == _expected_lists()


def test_a_heap_checkpoint_written_by_the_old_crc_code_still_verifies(tmp_path):
    copy = tmp_path / "checkpoints"
    shutil.copytree(DATA / "heap-checkpoint", copy)
    states, lists = _restored(CheckpointStorage(str(copy)), 1)
    assert states == ROUNDS[0]["op"]
    assert lists == _expected_lists()


def test_the_fixtures_crcs_are_checked_a_flipped_byte_is_refused(tmp_path):
    copy = tmp_path / "savepoint"
    shutil.copytree(DATA / "rocksdb-canonical-savepoint", copy)
    keyed = copy / "op-1.keyed"
    data = bytearray(keyed.read_bytes())
    data[len(data) // 2] ^= 0x01
    keyed.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        _restored(SavepointStorage(str(copy)), 1)
