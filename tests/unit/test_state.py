"""Keyed state per key group, snapshot capture isolation, operator state redistribution, storage checksums."""

from __future__ import annotations

import pytest

from epochal.plan.keygroups import key_group_of, key_group_range
from epochal.state.checkpoint_dirs import resolve_restore_path
from epochal.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.operator_state import OperatorStateStore, redistribute
from epochal.state.storage import CheckpointError, CheckpointStorage


class Average:
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]


def test_state_types_are_scoped_to_the_current_key():
    backend = HeapKeyedStateBackend(128, range(128))
    value = backend.get_state(ValueStateDescriptor("v", default=0))
    items = backend.get_state(ListStateDescriptor("l"))
    total = backend.get_state(ReducingStateDescriptor("r", reduce_fn=lambda a, b: a + b))
    avg = backend.get_state(AggregatingStateDescriptor("a", aggregate_function=Average()))
    mapping = backend.get_state(MapStateDescriptor("m"))
    for key, n in (("x", 1), ("y", 10), ("x", 3)):
        backend.set_current_key(key)
        value.update(value.value() + n)
        items.add(n)
        total.add(n)
        avg.add(n)
        mapping.put(n, key)
    backend.set_current_key("x")
    assert (value.value(), items.get(), total.get(), avg.get()) == (4, [1, 3], 4, 2.0)
    assert dict(mapping.items()) == {1: "x", 3: "x"} and mapping.contains(3) and not mapping.contains(10)
    backend.set_current_key("y")
    assert (value.value(), items.get(), total.get()) == (10, [10], 10)
    value.clear()
    assert value.value() == 0
    backend.set_current_key("nobody")
    assert (value.value(), items.get(), total.get(), avg.get(), mapping.is_empty()) == (0, [], None, None, True)


def test_state_name_cannot_change_kind():
    backend = HeapKeyedStateBackend(128, range(128))
    backend.get_state(ValueStateDescriptor("s"))
    with pytest.raises(Exception, match="declared as value state"):
        backend.get_state(ListStateDescriptor("s"))


def test_capture_is_isolated_from_later_updates_and_grouped_by_key_group():
    backend = HeapKeyedStateBackend(16, range(16))
    value = backend.get_state(ValueStateDescriptor("v"))
    items = backend.get_state(ListStateDescriptor("l"))
    for key in range(50):
        backend.set_current_key(key)
        value.update(key)
        items.add(key)
    captured = backend.capture()
    for key in range(50):
        backend.set_current_key(key)
        value.update(-1)
        items.add(-1)  # mutates the live list in place
    for group, states in captured.items():
        for key, v in states["v"].items():
            assert key_group_of(key, 16) == group and v == key
        for key, lst in states["l"].items():
            assert lst == [key]


def test_restore_with_another_parallelism_takes_only_owned_groups():
    old = HeapKeyedStateBackend(32, range(32))
    state = old.get_state(ValueStateDescriptor("count"))
    for key in range(200):
        old.set_current_key(f"k{key}")
        state.update(key)
    captured = old.capture()
    restored = {}
    for index in range(3):
        new = HeapKeyedStateBackend(32, key_group_range(index, 3, 32))
        for group in new.key_groups:
            if group in captured:
                new.restore_group(group, captured[group])
        new_state = new.get_state(ValueStateDescriptor("count"))
        for key in range(200):
            if key_group_of(f"k{key}", 32) in new.key_groups:
                new.set_current_key(f"k{key}")
                restored[key] = new_state.value()
    assert restored == {k: k for k in range(200)}


def test_operator_state_even_split_and_union():
    old = []
    for index in range(2):
        store = OperatorStateStore()
        store.get_list_state("offsets").extend([f"s{index}-{i}" for i in range(3)])
        store.get_list_state("config", mode="union").append(f"c{index}")
        old.append(store.capture())
    parts = [redistribute(old, i, 3) for i in range(3)]
    assert sum((p["offsets"] for p in parts), []) == ["s0-0", "s0-1", "s0-2", "s1-0", "s1-1", "s1-2"]
    assert [len(p["offsets"]) for p in parts] == [2, 2, 2]
    assert all(p["config"] == ["c0", "c1"] for p in parts)


def test_storage_round_trip_checksums_and_clear_errors(tmp_path):
    storage = CheckpointStorage(f"file://{tmp_path}/job")
    handle = storage.write_file(1, "op-0.operator", b"hello state")
    assert storage.read_file(1, handle) == b"hello state"
    assert storage.latest() is None  # no metadata yet: not a completed checkpoint
    storage.write_metadata(1, {"checkpoint_id": 1, "handle": handle})
    assert storage.completed() == [1]
    assert storage.read_metadata(1)["handle"] == handle

    path = tmp_path / "job" / "chk-1" / "op-0.operator"
    path.write_bytes(b"hellO state")
    with pytest.raises(CheckpointError, match=r"op-0.operator is corrupt"):
        storage.read_file(1, handle)
    path.unlink()
    with pytest.raises(CheckpointError, match=r"op-0.operator is missing"):
        storage.read_file(1, handle)

    metadata = tmp_path / "job" / "chk-1" / "_metadata"
    metadata.write_text(metadata.read_text().replace("checkpoint_id", "checkpoint_iD"))
    with pytest.raises(CheckpointError, match=r"chk-1/_metadata is corrupt"):
        resolve_restore_path(str(tmp_path / "job" / "chk-1"))
    with pytest.raises(CheckpointError, match=r"chk-7/_metadata does not exist"):
        resolve_restore_path(str(tmp_path / "job" / "chk-7"))
    with pytest.raises(CheckpointError, match="no completed checkpoint"):
        resolve_restore_path(str(tmp_path / "empty"))
