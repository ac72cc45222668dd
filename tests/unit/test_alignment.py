"""Alignment buffers: arrival order kept across memory and disk, budget accounting, spill limit."""

from __future__ import annotations

import os
import threading

from epochal.dataflow.checkpointing.alignment import UNPICKLABLE_CHARGE, AlignmentBuffer, AlignmentSpill


def batch(i: int, size: int = 100) -> list[tuple[int, str]]:
    return [(i, "x" * size)]


def test_within_the_memory_budget_nothing_touches_disk(tmp_path):
    spill = AlignmentSpill(memory_bytes=1 << 20, directory=str(tmp_path))
    buffer = AlignmentBuffer(spill)
    for i in range(10):
        buffer.add(True, batch(i))
    assert spill.on_disk == 0 and spill.in_memory > 0
    assert [buffer.pop() for _ in range(10)] == [(True, batch(i)) for i in range(10)]
    assert spill.buffered == 0 and spill.entries == 0


def test_beyond_the_budget_items_spill_and_come_back_in_arrival_order(tmp_path):
    spill = AlignmentSpill(memory_bytes=500, directory=str(tmp_path))
    a, b = AlignmentBuffer(spill), AlignmentBuffer(spill)
    for i in range(20):
        a.add(True, batch(i))
        b.add(i % 5 != 4, batch(100 + i) if i % 5 != 4 else ("event", i))
    assert spill.in_memory <= 500
    assert spill.on_disk > 0 and spill.spilled_total == spill.on_disk
    assert a.bytes_spilled > 0
    assert [a.pop() for _ in range(20)] == [(True, batch(i)) for i in range(20)]
    assert [b.pop() for _ in range(20)] == [
        (True, batch(100 + i)) if i % 5 != 4 else (False, ("event", i)) for i in range(20)]
    assert spill.buffered == 0


def test_the_spill_file_is_anonymous_and_truncated_once_empty(tmp_path):
    spill = AlignmentSpill(memory_bytes=0, directory=str(tmp_path))
    buffer = AlignmentBuffer(spill)
    buffer.add(True, batch(1, 10_000))
    assert os.listdir(tmp_path) == []  # unlinked: a crashed worker leaves nothing behind
    assert os.fstat(spill._file.fileno()).st_size > 10_000
    buffer.pop()
    assert os.fstat(spill._file.fileno()).st_size == 0
    spill.close()


def test_over_limit_and_statistics(tmp_path):
    spill = AlignmentSpill(memory_bytes=1000, max_bytes=5000, directory=str(tmp_path))
    buffer = AlignmentBuffer(spill)
    while not spill.over_limit:
        buffer.add(True, batch(0, 500))
    buffered, spilled = buffer.reset_stats()
    assert buffered > 5000 and 0 < spilled < buffered
    assert buffer.reset_stats() == (0, 0)
    assert AlignmentSpill(0, None).over_limit is False


def test_unpicklable_records_stay_in_memory_as_objects(tmp_path):
    spill = AlignmentSpill(memory_bytes=0, directory=str(tmp_path))
    buffer = AlignmentBuffer(spill)
    lock = threading.Lock()
    buffer.add(True, [lock])
    assert spill.in_memory == UNPICKLABLE_CHARGE and spill.on_disk == 0
    assert buffer.pop() == (True, [lock])
    assert spill.buffered == 0
