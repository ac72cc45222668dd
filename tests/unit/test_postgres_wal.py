"""The PostgreSQL backend's write-ahead log (epochal.state.postgres.wal), without a database:
reads through its layers newest first (this epoch, then each epoch not yet committed, memory
before spill), a barrier's freeze, the spill past the memory budget (this epoch's and the frozen
epochs' changes), the savepoint's and a key group's views oldest first, and the removal of the
spills."""

from __future__ import annotations

import threading

from epochal.state.postgres.epochs import EpochLog
from epochal.state.postgres.spill import MISS, SpillDirectory
from epochal.state.postgres.wal import WriteAheadLog

SLOT = (1, 5)


def make(tmp_path, memory_bytes=1_000):
    log = EpochLog(sequential=True)
    wal = WriteAheadLog(log, threading.Condition(), memory_bytes)
    wal.directory = SpillDirectory(str(tmp_path), "op-0-8")
    return wal


def visible(wal, stored_key):
    """What a view reads after this epoch's log in memory (as GroupView does)."""
    entries = wal.of(*SLOT)
    if stored_key in entries:
        return entries[stored_key]
    if wal.spilled:
        return wal.spilled_read(SLOT, stored_key)
    for changes in wal.pending:
        value = changes.get(SLOT, {}).get(stored_key, MISS)
        if value is not MISS:
            return value
    return MISS


def test_a_frozen_epoch_is_read_after_this_epochs_log_and_its_memory_counts_against_the_room(tmp_path):
    wal = make(tmp_path)
    entries = wal.of(*SLOT)
    assert wal.of(*SLOT) is entries  # the views hold this dict for the log's life
    entries.update({b"a": b"1", b"b": b"1"})
    wal.bytes = 300
    wal.freeze(1)
    assert entries == {} and wal.bytes == 0 and wal.room == 700 and not wal.spilled
    assert [epoch.changes for epoch in wal.log.epochs] == [{SLOT: {b"a": b"1", b"b": b"1"}}]
    entries[b"a"] = None  # removed in this epoch
    assert visible(wal, b"a") is None and visible(wal, b"b") == b"1" and visible(wal, b"c") is MISS
    assert [dict(e) for e in wal.group_changes(*SLOT)] == [{b"a": b"1", b"b": b"1"}]  # not this epoch's memory
    assert wal.overlays() == [{SLOT: {b"a": b"1", b"b": b"1"}}, {SLOT: {b"a": None}}]


def test_the_spill_moves_every_change_in_memory_to_its_epochs_spill_and_reads_see_the_same(tmp_path):
    wal = make(tmp_path)
    wal.of(*SLOT).update({b"a": b"1", b"b": b"1", b"c": b"1"})
    wal.freeze(1)
    wal.of(*SLOT).update({b"a": b"2", b"d": b"2"})
    assert wal.spill() == 5 and wal.spilled_entries == 5
    assert wal.spilled and wal.bytes == 0 and wal.room == 1_000
    assert wal.of(*SLOT) == {} and wal.log.epochs[0].changes == {} and wal.log.epochs[0].spill is not None
    wal.of(*SLOT)[b"b"] = None
    wal.freeze(2)  # this epoch's spill goes with it
    wal.of(*SLOT)[b"c"] = b"3"
    expected = {b"a": b"2", b"b": None, b"c": b"3", b"d": b"2"}
    assert {key: visible(wal, key) for key in expected} == expected
    assert visible(wal, b"zz") is MISS
    merged: dict[bytes, bytes | None] = {}
    for changes in wal.group_changes(*SLOT):  # oldest first, then this epoch's memory
        merged.update(changes)
    merged.update(wal.of(*SLOT))
    assert merged == expected
    merged = {}
    for overlay in wal.overlays():
        merged.update(overlay.get(SLOT, {}))
    assert merged == expected
    spills = tmp_path / SpillDirectory.BASE
    assert len(list(next(spills.iterdir()).iterdir())) == 2  # one spill per epoch
    wal.remove_spills()
    assert list(spills.iterdir()) == []


def test_a_committed_epoch_leaves_the_layers_at_the_refresh(tmp_path):
    wal = make(tmp_path)
    wal.of(*SLOT)[b"a"] = b"1"
    wal.bytes = 400
    wal.freeze(1)
    assert visible(wal, b"a") == b"1" and wal.room == 600
    wal.log.prepared(wal.log.plan(1), "gid-1")  # the upload
    epoch = wal.log.epochs[0]
    assert wal.log.completed(1) == (["gid-1"], [epoch])
    wal.refresh()
    assert visible(wal, b"a") is MISS and wal.pending == [] and wal.layers == [] and wal.room == 1_000
