"""The PostgreSQL backend's spilled write-ahead log (epochal.state.postgres.spill), without a
database: the RocksDB spill of an epoch (lookups, a later spill replacing an earlier one,
removals, key-group scans, removal of its files), the merged stream an upload writes (newest
wins, key-group order), and the sweep of a killed worker's spill directories."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from epochal.config import StateBackendConfig
from epochal.errors import PlanError
from epochal.state.postgres.spill import MISS, DiskSpill, SpillDirectory, entry_key, merge, sorted_changes


def test_a_spill_answers_lookups_and_a_later_spill_of_a_key_replaces_the_earlier(tmp_path):
    spill = DiskSpill(str(tmp_path / "e1"))
    assert spill.add({(1, 5): {b"a": b"1", b"b": b"1"}, (2, 5): {b"a": b"x"}}) == 3
    assert spill.add({(1, 5): {b"a": b"2", b"b": None}, (1, 7): {b"c": b"3"}}) == 3
    assert spill.get((1, 5), b"a") == b"2"
    assert spill.get((1, 5), b"b") is None  # removed: stored as the empty value
    assert spill.get((2, 5), b"a") == b"x"
    assert spill.get((1, 5), b"zz") is MISS and spill.get((3, 5), b"a") is MISS
    assert dict(spill.group(1, 5)) == {b"a": b"2", b"b": None}
    assert dict(spill.group(1, 7)) == {b"c": b"3"} and dict(spill.group(1, 6)) == {}
    assert spill.changes() == {(1, 5): {b"a": b"2", b"b": None}, (2, 5): {b"a": b"x"}, (1, 7): {b"c": b"3"}}
    keys = [key for key, _ in spill.entries()]
    assert keys == sorted(keys) and len(keys) == 4
    assert spill.entries_written == 6
    spill.remove()
    assert not os.path.exists(tmp_path / "e1")
    assert spill.get((1, 5), b"a") is MISS and list(spill.entries()) == []
    spill.remove()  # idempotent


def test_entry_keys_sort_by_key_group_then_key_and_decode_back():
    changes = {(2, 300): {b"k": b"v"}, (1, 3): {b"b": None, b"a": b"1"}, (1, 300): {b"a": b"2"}}
    entries = sorted_changes(changes)
    assert [e[0] for e in entries] == [entry_key(3, b"a", 1), entry_key(3, b"b", 1), entry_key(300, b"a", 1),
                                       entry_key(300, b"k", 2)]
    assert list(merge([(changes, None)])) == [(3, b"a", 1, b"1"), (3, b"b", 1, None), (300, b"a", 1, b"2"),
                                              (300, b"k", 2, b"v")]


def test_the_merge_of_epochs_in_memory_and_on_disk_takes_each_keys_newest_value(tmp_path):
    older = DiskSpill(str(tmp_path / "older"))
    older.add({(1, 0): {b"a": b"old", b"b": b"old", b"c": b"old"}})
    newer = DiskSpill(str(tmp_path / "newer"))
    newer.add({(1, 0): {b"b": b"spilled", b"d": None}})
    layers = [  # newest first: the newer epoch's memory, its spill, then the older epoch
        ({(1, 0): {b"c": b"memory"}}, newer),
        ({(1, 0): {b"a": b"older memory"}}, older),
    ]
    assert list(merge(layers)) == [(0, b"a", 1, b"older memory"), (0, b"b", 1, b"spilled"),
                                   (0, b"c", 1, b"memory"), (0, b"d", 1, None)]
    older.remove()
    newer.remove()


def test_the_sweep_removes_the_spill_directories_of_processes_that_are_gone(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = SpillDirectory(str(tmp_path), "op-0-64")
    os.makedirs(dead.base)
    dead_path = os.path.join(dead.base, f"op-0-64-p{int(gone.stdout)}-abc")
    os.makedirs(os.path.join(dead_path, "epoch1"))
    mine = SpillDirectory(str(tmp_path), "op-64-128")
    spill = mine.new_spill()
    spill.add({(1, 70): {b"a": b"1"}})
    assert SpillDirectory(str(tmp_path), "other").sweep() == [os.path.basename(dead_path)]
    assert not os.path.exists(dead_path)
    assert spill.get((1, 70), b"a") == b"1"  # a live process's spill stays
    spill.remove()
    mine.remove()
    assert os.listdir(mine.base) == []


def test_the_budget_is_an_option_of_the_postgres_backend():
    assert StateBackendConfig(kind="postgres", dsn="host=db").wal_memory_bytes == 256 << 20
    assert StateBackendConfig(kind="postgres", dsn="host=db", wal_memory_bytes=0).wal_memory_bytes == 0
    with pytest.raises(PlanError, match="wal_memory_bytes"):
        StateBackendConfig(kind="postgres", dsn="host=db", wal_memory_bytes=-1)
