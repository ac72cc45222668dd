"""CRC-32 of checkpoint files (epochal.state.checksums): zlib's values, whichever way computes them,
so that snapshots written by earlier code still verify (tests/unit/data/crc32-before-isal/)."""

from __future__ import annotations

import os
import pathlib
import random
import shutil
import subprocess
import sys
import zlib

import pytest

from epochal.state import checksums
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


@pytest.mark.parametrize("fixture, storage", [("rocksdb-canonical-savepoint", SavepointStorage),
                                               ("heap-checkpoint", CheckpointStorage)])
def test_a_snapshot_written_by_the_old_crc_code_still_verifies(tmp_path, fixture, storage):
    """A canonical RocksDB savepoint and a heap checkpoint, both written before the CRC came from a library."""
    copy = tmp_path / fixture
    shutil.copytree(DATA / fixture, copy)
    states, lists = _restored(storage(str(copy)), 1)
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


def test_the_library_computes_zlibs_crc_from_any_value_offset_and_length():
    assert checksums.way() == "isal"  # a dependency: installed wherever epochal is
    data = os.urandom(70_001)
    pieces = [(start, start + n) for start in (0, 1, 5, 8, 13) for n in [*range(0, 200), 1000, 4095, 65_537]]
    for start, end in [*pieces, (0, 70_001)]:
        piece = memoryview(data)[start:end]
        for value in (0, 1, 0x12345678, 0xFFFFFFFF):
            assert checksums.crc32(piece, value) == zlib.crc32(piece, value)


def test_a_crc_continued_over_chunks_is_the_whole_ones():
    """What a streamed write does (direct_io, CheckpointStorage.link_file): each chunk's CRC
    continued from the previous ones'."""
    rng = random.Random(56)
    data = rng.randbytes(3 << 20)
    view = memoryview(data)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randrange(1, 40)))
        value = 0
        for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
            value = checksums.crc32(view[start:end], value)
        assert value == zlib.crc32(data)


def test_without_the_library_python_zlib_computes_the_same_values():
    code = ("import sys; sys.modules['isal'] = None; import os, zlib; from epochal.state import checksums; "
            "data = os.urandom(100_000); "
            "assert checksums.crc32(data) == zlib.crc32(data) and checksums.crc32(data, 7) == zlib.crc32(data, 7); "
            "print(checksums.way())")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "zlib"
