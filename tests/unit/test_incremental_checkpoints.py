"""Incremental checkpoints of the heap backend (state/incremental.py, state/heap/backend.py) without Spark:
only changed keys are written, chains build on completed checkpoints only, a restore at another
parallelism reads each old subtask's chain for the groups it owns, and retention never deletes a
shared file a retained checkpoint references."""

from __future__ import annotations

import random

import pytest

from epochal.api.functions import RuntimeContext
from epochal.control.checkpoint_files import shared_files_of
from epochal.plan.keygroups import key_group_of, key_group_range
from epochal.runtime.operators.aggregates import (
    CountAggregate,
    FoldAggregate,
    ReduceAggregate,
    emit_key_value,
    emit_value,
)
from epochal.runtime.operators.base import KeyedReduceOperator
from epochal.state.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.incremental import DELETED, BatchLog, SnapshotPlan, TrackedDict
from epochal.state.operator_state import OperatorStateStore
from epochal.state.storage import CheckpointStorage
from tests.unit.snapshot_helpers import CheckpointHistory, metadata, write_checkpoint
from tests.unit.snapshot_helpers import restored as snapshot_restored

MAX_P = 16
UID = "sum-1"


def test_a_tracked_dict_records_every_write_and_removal():
    d = TrackedDict({"a": 1, "b": 2})
    assert d.dirty == set()
    d["c"] = 3
    del d["a"]
    d.pop("b")
    d.pop("zz", None)
    d.setdefault("e", 5)
    d.setdefault("e", 6)  # present: not a change
    d.update({"f": 6}, g=7)
    d |= {"h": 8}
    assert d.dirty == {"a", "b", "c", "e", "f", "g", "h", "zz"}
    d.take_changes()
    d.clear()
    assert d.dirty == {"c", "e", "f", "g", "h"} and d == {}
    assert type(__import__("pickle").loads(__import__("pickle").dumps(TrackedDict(x=1)))) is dict


def test_a_tracked_dicts_change_log_stays_bounded_without_checkpoints_and_loses_no_key():
    """The log is a list with duplicates; left untaken (no checkpoints) it is compacted to the
    distinct keys before it holds more than 8 entries per entry (plus a constant)."""
    d = TrackedDict()
    rng = random.Random(3)
    written = set()
    for i in range(200_000):
        key = rng.randrange(1_000)
        written.add(key)
        if i % 7 == 0:
            d.pop(key, None)
        else:
            d[key] = i
        assert len(d.changes) <= 8 * 1_000 + 4096 + 1
    assert d.dirty == written and len(d.changes) < 200_000
    assert d.take_changes() and d.changes == [] and d.dirty == set()


def test_a_batch_log_sorts_keys_into_groups_and_stays_bounded():
    table = {0: {}, 1: {}}
    log = BatchLog(table)
    log(["a", "b", "a"], [0, 1, 0])
    log(["c"], [1])
    plan = SnapshotPlan(2, False, changed={"s": (*log.pieces, (["d", "a"], 0))})
    assert plan.changed_keys() == {"s": {0: {"a", "d"}, 1: {"b", "c"}}}
    assert len(log.take()) == 2 and log.pieces == [] and log.logged == 0
    rng = random.Random(5)
    written: dict[int, set] = {0: set(), 1: set()}
    for _ in range(3_000):  # no checkpoint takes it: compaction keeps it near the distinct keys
        keys = [rng.randrange(500) for _ in range(10)]
        groups = [k % 2 for k in keys]
        log(keys, groups)
        for k, g in zip(keys, groups, strict=True):
            table[g][k] = 1
            written[g].add(k)
        assert log.logged <= 8 * 500 + 4096 + 10
    got = SnapshotPlan(3, False, changed={"s": tuple(log.pieces)}).changed_keys()["s"]
    assert got == written


class Subtask:
    """One operator subtask's keyed state as the runtime drives it: barrier, write, ack, complete."""

    def __init__(self, index: int, parallelism: int, storage: CheckpointStorage, full_every: int = 8) -> None:
        self.index = index
        self.backend = HeapKeyedStateBackend(MAX_P, key_group_range(index, parallelism, MAX_P), True, full_every)
        self.storage = storage
        self.value = self.backend.get_state(ValueStateDescriptor("v"))
        self.items = self.backend.get_state(ListStateDescriptor("l"))
        self.map = self.backend.get_state(MapStateDescriptor("m"))

    def owns(self, key) -> bool:
        return key_group_of(key, MAX_P) in self.backend.key_groups

    def put(self, key, value) -> None:
        self.backend.set_current_key(key)
        self.value.update(value)
        self.items.add(value)
        self.map.put(value % 3, value)

    def remove(self, key) -> None:
        self.backend.set_current_key(key)
        self.value.clear()
        self.items.clear()
        self.map.clear()

    def checkpoint(self, checkpoint_id: int):
        return write_checkpoint(self.backend, self.storage, checkpoint_id, self.index, UID)


def restored(storage, checkpoint_id, meta, parallelism):
    return snapshot_restored(storage, checkpoint_id, meta, UID, MAX_P, parallelism,
                             lambda index, groups: HeapKeyedStateBackend(MAX_P, groups))


def live(subtasks) -> dict:
    out = {}
    for subtask in subtasks:
        out.update(subtask.backend.capture())
    return out


@pytest.mark.parametrize("restore_parallelism", [1, 2, 3])
def test_deltas_hold_only_changed_keys_and_a_chain_restores_exactly_at_any_parallelism(tmp_path, restore_parallelism):
    storage = CheckpointStorage(str(tmp_path))
    subtasks = [Subtask(i, 2, storage) for i in range(2)]
    rng = random.Random(7)
    keys = [f"k{i}" for i in range(300)]
    for checkpoint_id in range(1, 6):
        for _ in range(40 if checkpoint_id > 1 else 600):
            key = rng.choice(keys)
            owner = next(s for s in subtasks if s.owns(key))
            owner.remove(key) if rng.random() < 0.2 else owner.put(key, rng.randrange(1000))
        handles = {}
        for subtask in subtasks:
            plan, handles[subtask.index] = subtask.checkpoint(checkpoint_id)
            assert plan.full == (checkpoint_id == 1)
            chain = handles[subtask.index]["keyed"]["chain"]
            assert len(chain) == checkpoint_id and chain[-1]["kind"] == ("full" if checkpoint_id == 1 else "delta")
            if not plan.full:  # at most the 40 keys touched since the last checkpoint, per state
                assert sum(map(len, plan.changed_keys()["v"].values())) <= 40
        for subtask in subtasks:
            subtask.backend.checkpoint_completed(checkpoint_id)
        meta = metadata(UID, handles)
        assert restored(storage, checkpoint_id, meta, restore_parallelism) == live(subtasks)


def test_every_full_every_th_checkpoint_is_full_again(tmp_path):
    subtask = Subtask(0, 1, CheckpointStorage(str(tmp_path)), full_every=3)
    kinds = []
    for checkpoint_id in range(1, 8):
        subtask.put(f"k{checkpoint_id}", checkpoint_id)
        plan, handle = subtask.checkpoint(checkpoint_id)
        subtask.backend.checkpoint_completed(checkpoint_id)
        kinds.append(len(handle["keyed"]["chain"]))
    assert kinds == [1, 2, 3, 1, 2, 3, 1]


def test_a_failed_checkpoint_never_breaks_a_chain(tmp_path):
    """Checkpoint 2 is written but never completes (declined elsewhere): checkpoint 3 builds on 1
    and carries 2's changes too."""
    storage = CheckpointStorage(str(tmp_path))
    subtask = Subtask(0, 1, storage)
    subtask.put("a", 1)
    subtask.put("b", 2)
    subtask.checkpoint(1)
    subtask.backend.checkpoint_completed(1)
    subtask.put("a", 10)
    subtask.checkpoint(2)  # fails: never completed
    subtask.remove("b")
    plan, handle = subtask.checkpoint(3)
    assert not plan.full and [f["kind"] for f in handle["keyed"]["chain"]] == ["full", "delta"]
    assert set().union(*plan.changed_keys()["v"].values()) == {"a", "b"}
    subtask.backend.checkpoint_completed(3)
    assert restored(storage, 3, metadata(UID, {0: handle}), 1) == live([subtask])


def test_deleted_keys_are_deleted_on_restore():
    backend = HeapKeyedStateBackend(MAX_P, range(MAX_P), incremental=True)
    state = backend.get_state(ValueStateDescriptor("v"))
    backend.set_current_key("x")
    state.update(1)
    backend.checkpoint_completed(1)  # nothing written for 1: nothing confirmed
    assert backend.begin_snapshot(1).full
    backend.snapshot_written(1, {"format": "chain", "chain": [{"file": "shared/f", "size": 0, "groups": {},
                                                               "kind": "full"}]})
    backend.checkpoint_completed(1)
    state.clear()
    plan = backend.begin_snapshot(2)
    capture = backend.capture_snapshot(plan)
    assert capture.data == {key_group_of("x", MAX_P): {"v": {"x": DELETED}}}


def test_retention_keeps_every_shared_file_a_retained_checkpoint_references(tmp_path):
    """Old checkpoints are removed as new ones complete; the newest always restores, and shared
    files go once no retained chain needs them (and an aborted checkpoint's at once)."""
    storage = CheckpointStorage(str(tmp_path))
    store = CheckpointHistory(storage, retained=2)
    subtask = Subtask(0, 1, storage, full_every=3)
    for checkpoint_id in range(1, 9):
        subtask.put(f"k{checkpoint_id % 5}", checkpoint_id)
        if checkpoint_id == 5:  # aborted: its files must go, the chain must not notice
            subtask.checkpoint(5)
            store.discard(5)
            assert not [f for f in storage.shared_files() if ".c5." in f]
            continue
        _, handle = subtask.checkpoint(checkpoint_id)
        meta = metadata(UID, {0: handle})
        store.complete(checkpoint_id, meta)
        subtask.backend.checkpoint_completed(checkpoint_id)
        referenced = set().union(*(shared_files_of(storage.read_metadata(c)) for c in store.completed))
        assert set(storage.shared_files()) == referenced  # nothing unreferenced left, nothing needed gone
        assert restored(storage, checkpoint_id, storage.read_metadata(checkpoint_id), 1) == live([subtask])
    assert store.completed == [7, 8]


AGGREGATIONS = {
    "count": lambda: KeyedReduceOperator(lambda r: r[0], CountAggregate(), emit_key_value),
    "reduce": lambda: KeyedReduceOperator(lambda r: r[0], ReduceAggregate(lambda a, b: (a[0], a[1] + b[1])),
                                          emit_value),
    "sum": lambda: KeyedReduceOperator(lambda r: r[0], FoldAggregate(lambda r: r[1], lambda a, b: a + b),
                                       emit_key_value),
}


def opened_aggregation(kind, index, parallelism, restore=None):
    groups = key_group_range(index, parallelism, MAX_P)
    backend = HeapKeyedStateBackend(MAX_P, groups, incremental=True)
    for group, states in (restore or {}).items():
        if group in groups:
            backend.restore_group(group, states)
    operator = AGGREGATIONS[kind]()
    operator.name = "agg"
    operator.open(RuntimeContext(operator_name="agg", operator_uid=UID, subtask_index=index, parallelism=parallelism,
                                 max_parallelism=MAX_P, key_groups=groups, keyed_state=backend,
                                 operator_state=OperatorStateStore()), lambda payload: None)
    return operator, backend


@pytest.mark.parametrize("kind", sorted(AGGREGATIONS))
def test_built_in_aggregations_log_their_batches_and_their_deltas_restore_exactly(tmp_path, kind):
    """A keyed aggregation keeps its state in plain dicts (no per-write tracking) and logs each
    batch's keys; its deltas hold exactly the keys of the batches since the last completed
    checkpoint, also across a restore (the restored instance's groups become plain dicts too)."""
    storage = CheckpointStorage(str(tmp_path))
    rng = random.Random(11)
    operator, backend = opened_aggregation(kind, 0, 1)
    table = backend.tables["aggregate"]
    assert all(type(entries) is dict for entries in table.values())
    for checkpoint_id in range(1, 5):
        batch = [(f"k{rng.randrange(400)}", rng.randrange(10)) for _ in range(30 if checkpoint_id > 1 else 800)]
        operator.process_batch(batch[:17])
        operator.process_batch(batch[17:])
        plan, handle = write_checkpoint(backend, storage, checkpoint_id, 0, UID)
        if not plan.full:
            assert set().union(*plan.changed_keys()["aggregate"].values()) == {r[0] for r in batch}
        backend.checkpoint_completed(checkpoint_id)
        meta = metadata(UID, {0: handle})
        for parallelism in (1, 2, 3):
            assert restored(storage, checkpoint_id, meta, parallelism) == backend.capture()
    # a restored instance at parallelism 2 goes on with deltas of its own
    snapshot = backend.capture()
    operator, again = opened_aggregation(kind, 1, 2, restore=snapshot)
    assert all(type(entries) is dict for entries in again.tables["aggregate"].values())
    mine = [(f"k{i}", 1) for i in range(400) if key_group_of(f"k{i}", MAX_P) in again.key_groups][:20]
    for checkpoint_id in (10, 11):
        operator.process_batch(mine)
        plan, handle = write_checkpoint(again, storage, checkpoint_id, 1, UID)
        assert plan.full == (checkpoint_id == 10)
        if not plan.full:
            assert set().union(*plan.changed_keys()["aggregate"].values()) == {r[0] for r in mine}
        again.checkpoint_completed(checkpoint_id)
        assert restored(storage, checkpoint_id, metadata(UID, {1: handle}), 1) == again.capture()
