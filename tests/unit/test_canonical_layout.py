"""The canonical savepoint layout (state/canonical.py) without Spark: RocksDB writes its stored bytes
(``{state name: (key bytes, value bytes)}`` per key group) and the heap its pickled dicts, every
backend restores either (RocksDB writes the bytes back as they are, the heap decodes them), the
bytes are the same whichever backend held the state, layout-1 savepoints are still read, and what
a later epochal wrote is refused."""

from __future__ import annotations

import pickle

import pytest

from epochal.config import ROCKSDB, StateBackendConfig
from epochal.plan.keygroups import key_group_of, key_group_range
from epochal.state.backends import create_backend
from epochal.state.canonical import ENCODING, LAYOUT, decode_states, encode_states
from epochal.state.descriptors import ValueStateDescriptor
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.rocksdb.keys import END, START
from epochal.state.rocksdict_scans import scan
from epochal.state.snapshot import RestoreSource, materialize
from epochal.state.storage import CheckpointError, CheckpointStorage
from tests.unit.snapshot_helpers import metadata

MAX_P = 16
UID = "agg"


class Point:  # a value class plain pickle writes by reference
    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and other.x == self.x

    def __hash__(self) -> int:
        return hash(self.x)


KEYS = ["a", 7, ("t", 1), 2.5, None, b"raw", ("nested", ("x", 2))]


def entries() -> dict:
    out: dict = {key: {"n": i, "p": "x" * i} for i, key in enumerate(KEYS)}
    out.update({f"k{i}": i for i in range(200)})
    return out


def filled(backend, state: dict | None):
    """``backend`` with state ``v`` = ``state``'s entries of the key groups it owns."""
    value = backend.get_state(ValueStateDescriptor("v"))
    for key, item in (state or {}).items():
        if key_group_of(key, MAX_P) in backend.key_groups:
            backend.set_current_key(key)
            value.update(item)
    return backend


def heap(groups: range, state: dict | None = None) -> HeapKeyedStateBackend:
    return filled(HeapKeyedStateBackend(MAX_P, groups), state)


def rocksdb(tmp_path, name: str, groups: range, state: dict | None = None):
    config = StateBackendConfig(ROCKSDB, local_dir=str(tmp_path / "local"))
    return filled(create_backend(config, MAX_P, groups, name), state)


def savepoint(backend, storage: CheckpointStorage, subtask: int, checkpoint_id: int = 3) -> dict:
    """A canonical savepoint of ``backend`` as the runtime takes one: plan at the barrier, copy, write."""
    plan = backend.begin_savepoint(checkpoint_id, native=False)
    return materialize(storage, checkpoint_id, subtask, {UID: {"keyed": backend.capture_snapshot(plan)}}).get(UID, {})


def stored_bytes(backend) -> dict[bytes, bytes]:
    return dict(scan(backend._cfs["v"], START, END))


def test_encode_decode_round_trip_with_every_key_kind_and_a_by_value_fallback():
    state = {"v": entries(), "empty": {}, "fn": {"f": Point(3), "g": (lambda: 4)}}
    stored = encode_states(state)
    assert set(stored) == {"v", "fn"}  # states without entries are left out
    keys, values = stored["v"]
    assert len(keys) == len(values) == len(state["v"]) and all(type(b) is bytes for b in keys + values)
    back = decode_states(stored)
    assert back["v"] == state["v"] and back["fn"]["f"] == Point(3) and back["fn"]["g"]() == 4
    assert decode_states(stored, names={"fn"}).keys() == {"fn"}


def test_rocksdb_writes_stored_bytes_and_the_heap_pickled_dicts(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "sp"))
    handle = savepoint(rocksdb(tmp_path, "s", range(MAX_P), entries()), storage, 0)["keyed"]
    assert handle["encoding"] == ENCODING
    blob = pickle.loads(storage.read_file(3, handle, *handle["groups"][next(iter(handle["groups"]))]))
    keys, values = blob["v"]
    assert len(keys) == len(values) and all(type(b) is bytes for b in keys + values)
    # the DataFrame reader's path: decoded, one state by name
    read = RestoreSource(storage, 3, metadata(UID, {0: {"keyed": handle}})).keyed_groups(
        UID, range(MAX_P), names=frozenset({"v"}))
    assert {key: value for _, states in read for key, value in states["v"].items()} == entries()
    handle = savepoint(heap(range(MAX_P), entries()), storage, 1)["keyed"]
    assert "encoding" not in handle  # the objects encoding: one pickle of {name: {key: value}} per group
    blob = pickle.loads(storage.read_file(3, handle, *handle["groups"][next(iter(handle["groups"]))]))
    assert all(type(entries) is dict for entries in blob.values())


def test_the_stored_bytes_are_the_same_whichever_backend_held_the_state(tmp_path):
    """A RocksDB restore of a heap savepoint encodes its keys as RocksDB does: the database holds
    the same bytes as one filled directly (so every key is found: ``1`` and ``("t", 1)`` alike)."""
    state = entries()
    storage = CheckpointStorage(str(tmp_path / "sp"))
    handles = {0: savepoint(heap(range(MAX_P), state), storage, 0)}
    target = rocksdb(tmp_path, "t", range(MAX_P))
    for group, stored in RestoreSource(storage, 3, metadata(UID, handles)).keyed_groups(
            UID, range(MAX_P), skip_rocksdb=True, stored=True):
        target.restore_stored_group(group, stored)
    direct = rocksdb(tmp_path, "d", range(MAX_P), state)
    assert stored_bytes(target) == stored_bytes(direct)
    target.dispose()
    direct.dispose()


@pytest.mark.parametrize("source,target,parallelism", [("heap", "rocksdb", 3), ("rocksdb", "rocksdb", 1),
                                                       ("rocksdb", "heap", 3), ("heap", "heap", 1)])
def test_every_backend_restores_every_backends_canonical_savepoint(tmp_path, source, target, parallelism):
    """Heap and RocksDB write the same bytes for the same state (keys as RocksDB encodes them, so a
    RocksDB restore writes the heap's bytes as they are and finds every key), at any parallelism."""
    state = entries()
    storage = CheckpointStorage(str(tmp_path / "sp"))
    handles = {}
    for index in range(2):
        groups = key_group_range(index, 2, MAX_P)
        backend = heap(groups, state) if source == "heap" else rocksdb(tmp_path, f"s{index}", groups, state)
        handles[index] = savepoint(backend, storage, index)
        getattr(backend, "dispose", lambda: None)()
    restore = RestoreSource(storage, 3, metadata(UID, handles))
    seen: dict = {}
    for index in range(parallelism):
        groups = key_group_range(index, parallelism, MAX_P)
        backend = heap(groups) if target == "heap" else rocksdb(tmp_path, f"t{index}", groups)
        if target == "rocksdb":  # as the runtime restores it: stored bytes, written as they are
            for group, stored in restore.keyed_groups(UID, groups, skip_rocksdb=True, stored=True):
                backend.restore_stored_group(group, stored)
        else:
            for group, states in restore.keyed_groups(UID, groups):
                backend.restore_group(group, states)
        value = backend.get_state(ValueStateDescriptor("v"))
        for key in state:
            if key_group_of(key, MAX_P) in groups:
                backend.set_current_key(key)
                seen[key] = value.value()
        getattr(backend, "dispose", lambda: None)()
    assert seen == state


def test_a_rocksdb_round_trip_copies_the_stored_bytes_without_decoding_them(tmp_path):
    state = entries()
    storage = CheckpointStorage(str(tmp_path / "sp"))
    source = rocksdb(tmp_path, "s", range(MAX_P), state)
    before = stored_bytes(source)
    handles = {0: savepoint(source, storage, 0)}
    source.dispose()
    target = rocksdb(tmp_path, "t", range(MAX_P))
    for group, stored in RestoreSource(storage, 3, metadata(UID, handles)).keyed_groups(
            UID, range(MAX_P), skip_rocksdb=True, stored=True):
        target.restore_stored_group(group, stored)
    assert stored_bytes(target) == before
    target.dispose()


def test_a_layout_1_savepoint_is_still_restored_by_every_backend(tmp_path):
    """Savepoints before layout 2 (and heap checkpoints) pickle ``{name: {key: value}}`` per group."""
    state = entries()
    storage = CheckpointStorage(str(tmp_path / "sp"))
    old = heap(range(MAX_P), state)
    handles = {0: materialize(storage, 3, 0, {UID: {"keyed": old.capture()}})[UID]}
    meta = {**metadata(UID, handles), "savepoint": {"format": "canonical", "job_id": "j", "stop": False}}
    restore = RestoreSource(storage, 3, meta)
    decoded = {g: s for g, s in restore.keyed_groups(UID, range(MAX_P))}
    assert decoded == old.capture()
    target = rocksdb(tmp_path, "t", range(MAX_P))
    for group, stored in restore.keyed_groups(UID, range(MAX_P), skip_rocksdb=True, stored=True):
        target.restore_stored_group(group, stored)
    value = target.get_state(ValueStateDescriptor("v"))
    for key, item in state.items():
        target.set_current_key(key)
        assert value.value() == item
    target.dispose()


def test_what_a_later_epochal_wrote_is_refused_with_a_clear_message(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "sp"))
    handles = {0: savepoint(heap(range(MAX_P), entries()), storage, 0)}
    meta = metadata(UID, handles)
    later = {**meta, "savepoint": {"format": "canonical", "layout": LAYOUT + 1}}
    with pytest.raises(CheckpointError, match=f"canonical layout {LAYOUT + 1}, written by a later epochal"):
        RestoreSource(storage, 3, later)
    handles[0]["keyed"]["encoding"] = "arrow-v9"
    with pytest.raises(CheckpointError, match="encoded as 'arrow-v9', which this version of epochal cannot read"):
        list(RestoreSource(storage, 3, meta).keyed_groups(UID, range(MAX_P)))
