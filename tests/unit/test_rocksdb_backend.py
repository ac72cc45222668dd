"""The RocksDB keyed-state backend: same behaviour as the heap backend, plus local checkpoints,
key-group range reads, ingestion (rescaling) and range deletion. No Spark."""

from __future__ import annotations

import os
import pickle
import random
from typing import Any

import pytest

from epochal.api.functions import RuntimeContext
from epochal.plan.keygroups import key_group_of, key_group_range
from epochal.runtime.operators.aggregates import CountAggregate, FoldAggregate, emit_key_value
from epochal.runtime.operators.base import KeyedReduceOperator
from epochal.runtime.windows.time_windows import TumblingWindowOperator
from epochal.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.operator_state import OperatorStateStore
from epochal.state.rocksdb.backend import RocksDBKeyedStateBackend
from epochal.state.rocksdb.keys import RangeKeyCursor, group_prefix
from epochal.state.rocksdb.reads import read_key_groups

MAX_P = 128
KEYS: list[Any] = ["a", "b", "ü", "", 0, 7, -3, 2**70, b"raw", None, ("t", 1), ("t", ("nested", 2.5))]


class Mean:
    def create_accumulator(self):
        return [0, 0]

    def add(self, value, accumulator):
        accumulator[0] += value  # in place: the state object must write it back
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]


DESCRIPTORS = {
    "value": ValueStateDescriptor("v", default=-1),
    "list": ListStateDescriptor("l"),
    "reducing": ReducingStateDescriptor("r", reduce_fn=lambda a, b: a + b),
    "aggregating": AggregatingStateDescriptor("g", aggregate_function=Mean()),
    "map": MapStateDescriptor("m"),
}


def _operations(kind: str, state: Any, rng: random.Random) -> Any:
    """One random operation on ``state``; returns what it read (compared across backends)."""
    n = rng.randrange(100)
    choice = rng.randrange(10)
    if choice == 0:
        return state.clear()
    if kind == "value":
        return state.update(n) if choice < 6 else state.value()
    if kind == "list":
        if choice < 5:
            return state.add(n)
        if choice == 5:
            return state.add_all([n, n + 1])
        return state.update([n]) if choice == 6 else state.get()
    if kind in ("reducing", "aggregating"):
        return state.add(n) if choice < 6 else state.get()
    user_key = n % 5
    if choice < 5:
        return state.put(user_key, {"n": n})
    if choice == 5:
        return state.remove(user_key)
    if choice == 6:
        return (state.get(user_key), state.contains(user_key), state.is_empty())
    return (sorted(state.items()), sorted(state.keys()))


@pytest.mark.parametrize("kind", sorted(DESCRIPTORS))
def test_every_state_type_behaves_like_the_heap_backend(kind, make_rocksdb):
    heap = HeapKeyedStateBackend(MAX_P, range(MAX_P))
    rocks = make_rocksdb()
    results: dict[str, list[Any]] = {}
    for name, backend in (("heap", heap), ("rocksdb", rocks)):
        rng = random.Random(42)
        state = backend.get_state(DESCRIPTORS[kind])
        reads = results[name] = []
        for _ in range(3000):
            backend.set_current_key(rng.choice(KEYS))
            reads.append(_operations(kind, state, rng))
    assert results["rocksdb"] == results["heap"]
    assert any(r not in (None, -1, [], ()) for r in results["heap"]), "the sequence read nothing"
    assert rocks.capture() == heap.capture()
    assert rocks.entry_count() == heap.entry_count() > 0


def _open(operator: Any, backend: Any) -> Any:
    context = RuntimeContext(operator_name="op", operator_uid="op", subtask_index=0, parallelism=1,
                             max_parallelism=MAX_P, key_groups=backend.key_groups, keyed_state=backend,
                             operator_state=OperatorStateStore())
    operator.name = "op"
    operator.open(context, lambda payload: None)
    return operator


OPERATORS = {
    "count": lambda: KeyedReduceOperator(lambda r: r[0], CountAggregate(), emit_key_value),
    "window-sum": lambda: TumblingWindowOperator(lambda r: r[0], lambda r: r[1], 50,
                                                 FoldAggregate(lambda r: r[1], lambda a, b: a + b)),
}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_built_in_operators_give_the_same_output_and_state(name, make_rocksdb):
    records = [(f"k{i % 11}", i) for i in range(300)]
    outputs, states = [], []
    for backend in (HeapKeyedStateBackend(MAX_P, range(MAX_P)), make_rocksdb()):
        operator = _open(OPERATORS[name](), backend)
        out = operator.process_batch(records[:150]) + operator.process_batch(records[150:])
        states.append(backend.capture())
        out += operator.end_input()
        outputs.append(out)
    assert outputs[0] and outputs[1] == outputs[0]
    assert states[1] == states[0]


def test_owned_table_views(make_rocksdb):
    backend = make_rocksdb(range(10, 20))
    table = backend.owned_table("t")
    assert table is backend.owned_table("t")  # cached
    assert sorted(table) == list(range(10, 20))
    view = table[12]
    assert len(view) == 0 and list(view) == [] and "x" not in view
    view["x"] = [1]
    view[("k", "k")] = {"a": 1}
    view[3] = None  # None is a value like any other
    assert view["x"] == [1] and view.get("missing", "d") == "d" and view.get(3, "d") is None
    assert "x" in view and 3 in view and len(view) == 3
    view["x"].append(2)  # a copy: invisible until written back
    assert view["x"] == [1]
    assert view.pop("x") == [1] and view.pop("x", "gone") == "gone"
    with pytest.raises(KeyError):
        view.pop("x")
    with pytest.raises(KeyError):
        del view["x"]
    with pytest.raises(KeyError):
        view["x"]
    del view[3]
    assert dict(view.items()) == {("k", "k"): {"a": 1}} and list(view.values()) == [{"a": 1}]
    for key in view:  # changing a view while iterating it is allowed (the scan reads a snapshot)
        view[key + ("more",)] = 1
    assert len(view) == 2 and len(table[13]) == 0
    assert backend.capture() == {12: {"t": {("k", "k"): {"a": 1}, ("k", "k", "more"): 1}}}
    view.clear()
    assert backend.capture() == {} and backend.entry_count() == 0
    with pytest.raises(KeyError):
        table[20]  # not owned


def test_the_ttl_cleanup_cursor_reads_the_owned_key_range_in_chunks_and_restarts_rounds(make_rocksdb):
    """The incremental TTL cleanup's cursor on RocksDB: chunks of at most ``chunk`` stored keys,
    together every key of the owned groups once and in key order (none of other groups in the same
    column family, no empty group visited), then ``None`` for the round's end, then a new round."""
    backend = make_rocksdb(range(32, 64))
    table = backend.owned_table("v")
    keys = [k for k in range(400) if 32 <= key_group_of(k, MAX_P) < 64][:40]
    for key in keys:
        table[key_group_of(key, MAX_P)][key] = key * 10
    column_family = backend._column_family("v")
    column_family.put(group_prefix(5) + b"outside", b"x")  # e.g. left by a rescaled restore
    column_family.put(group_prefix(64) + b"outside", b"x")
    cursor = RangeKeyCursor(column_family, range(32, 64), chunk=7)

    def one_round() -> list[bytes]:
        seen: list[bytes] = []
        while (taken := cursor.next_keys()) is not None:
            entries, chunk = taken
            assert 0 < len(chunk) <= 7
            for stored in chunk:
                key = pickle.loads(stored[2:])
                assert int.from_bytes(stored[:2], "big") == key_group_of(key, MAX_P)
                assert entries.get(stored) == key * 10
            seen += chunk
        return seen

    first = one_round()
    assert first == sorted(first) and sorted(pickle.loads(k[2:]) for k in first) == sorted(keys)
    new_key = next(k for k in range(400, 800) if key_group_of(k, MAX_P) == 40)
    table[40][new_key] = new_key * 10
    second = one_round()  # the next round starts over and sees the key added since
    assert len(second) == 41 and set(first) < set(second)
    entries, [stored, *_] = cursor.next_keys()
    del entries[stored]
    entries[stored + b"x"] = 1  # (a key that is not a pickle: only StoredKeys writes it)
    assert entries.get(stored) is None and column_family.get(stored) is None and entries[stored + b"x"] == 1
    assert RangeKeyCursor(column_family, range(70, 80)).next_keys() is None  # nothing there: a round ends at once


def test_equal_tuple_keys_share_an_entry_whatever_their_parts_identity(make_rocksdb):
    view = make_rocksdb().owned_table("t")[0]
    part = "".join(["a", "b"])
    view[(part, part)] = 1  # one string object twice: plain pickle would memoise the second
    view[("".join(["a", "b"]), "".join(["a", "b"]))] = 2
    assert list(view.items()) == [(("ab", "ab"), 2)]
    view[1.0] = "float"  # documented: equal but differently pickled keys are distinct here
    assert view.get(1) is None and len(view) == 2


def test_state_named_default_and_restore_group(make_rocksdb):
    backend = make_rocksdb(range(0, 64))
    backend.restore_group(5, {"default": {"k": 1}, "other": {"k": [2], ("t", 1): 3}})
    backend.owned_table("other")[5]["stale"] = 0
    backend.restore_group(5, {"other": {"k": [4]}})  # replaces the group's entries of "other"
    assert backend.capture() == {5: {"default": {"k": 1}, "other": {"k": [4]}}}
    assert backend.owned_table("default")[5]["k"] == 1
    with pytest.raises(ValueError):
        backend.restore_group(64, {"other": {"k": 1}})


def _fill(backend: RocksDBKeyedStateBackend, keys: range, tag: str = "v") -> dict[Any, Any]:
    """Writes ``key -> (tag, key)`` into states "a" (every key) and "b" (even keys)."""
    written = {}
    a, b = backend.owned_table("a"), backend.owned_table("b")
    for key in keys:
        group = key_group_of(key, MAX_P)
        if group in backend.key_groups:
            a[group][key] = (tag, key)
            if key % 2 == 0:
                b[group][key] = [key]
            written[key] = group
    return written


def test_local_checkpoint_is_isolated_from_later_changes(make_rocksdb, tmp_path):
    backend = make_rocksdb()
    _fill(backend, range(1000))
    before = backend.capture()
    files = backend.local_checkpoint(str(tmp_path / "chk"))
    assert "CURRENT" in files and any(f.endswith(".sst") for f in files)
    assert sorted(os.listdir(tmp_path / "chk")) == files
    _fill(backend, range(500, 1500), tag="new")
    backend.owned_table("a")[key_group_of(0, MAX_P)].clear()
    assert backend.capture() != before
    assert dict(read_key_groups(str(tmp_path / "chk"), range(MAX_P))) == before
    with pytest.raises(Exception):  # noqa: B017 - RocksDB refuses an existing directory
        backend.local_checkpoint(str(tmp_path / "chk"))


def test_read_key_groups_returns_exactly_the_groups_asked(make_rocksdb, tmp_path):
    backend = make_rocksdb()
    _fill(backend, range(2000))
    everything = backend.capture()
    backend.local_checkpoint(str(tmp_path / "chk"))
    part = list(read_key_groups(str(tmp_path / "chk"), range(30, 70)))
    assert [g for g, _ in part] == sorted(g for g in everything if 30 <= g < 70)
    assert dict(part) == {g: s for g, s in everything.items() if 30 <= g < 70}
    assert list(read_key_groups(str(tmp_path / "chk"), range(5, 5))) == []


def test_rescale_two_to_three_subtasks_by_ingestion(make_rocksdb, tmp_path):
    expected: dict[int, int] = {}
    checkpoints = []
    for index in range(2):
        old = make_rocksdb(key_group_range(index, 2, MAX_P), f"old{index}")
        expected.update(_fill(old, range(5000)))
        checkpoints.append(str(tmp_path / f"chk{index}"))
        old.local_checkpoint(checkpoints[-1])
    assert len(expected) == 5000
    found: dict[int, int] = {}
    for index in range(3):
        groups = key_group_range(index, 3, MAX_P)
        new = make_rocksdb(groups, f"new{index}")
        ingested = sum(new.ingest_key_groups(chk, range(MAX_P)) for chk in checkpoints)
        a, b = new.owned_table("a"), new.owned_table("b")
        for key, group in expected.items():
            if group in groups:
                assert a[group][key] == ("v", key) and b[group].get(key) == ([key] if key % 2 == 0 else None)
                found[key] = index
        captured = new.capture()
        assert set(captured) <= set(groups)  # nothing outside the owned groups was loaded
        assert ingested == new.entry_count() == sum(len(e) for s in captured.values() for e in s.values())
    assert len(found) == len(expected)  # every key in exactly one new subtask (the one owning its group)


def test_delete_key_groups_outside_and_restore_from_a_checkpoint(make_rocksdb, tmp_path):
    backend = make_rocksdb()
    _fill(backend, range(3000))
    everything = backend.capture()
    backend.local_checkpoint(str(tmp_path / "chk"))
    backend.delete_key_groups_outside(range(40, 90))
    assert backend.capture() == {g: s for g, s in everything.items() if 40 <= g < 90}
    backend.delete_key_groups_outside(range(0))
    assert backend.capture() == {} and backend.entry_count() == 0
    restored = make_rocksdb(range(0, 64), "restored", restore_from=str(tmp_path / "chk"))
    assert restored.capture() == {g: s for g, s in everything.items() if g < 64}
    restored.owned_table("a")[0]["new"] = 1  # the copy is writable; the checkpoint is untouched
    assert dict(read_key_groups(str(tmp_path / "chk"), range(MAX_P))) == everything


def test_a_subtask_adopts_a_checkpoint_that_holds_all_its_groups(make_rocksdb, tmp_path):
    """A restore at the same parallelism (or from fewer, larger subtasks): the predecessor's
    checkpoint becomes the database as it is, without the groups the subtask does not own."""
    old = make_rocksdb(range(0, 96), "old")
    _fill(old, range(3000))
    everything = old.capture()
    old.local_checkpoint(str(tmp_path / "chk"))
    new = make_rocksdb(range(32, 64), "new")
    new.adopt_checkpoint(str(tmp_path / "chk"))
    owned = {g: s for g, s in everything.items() if 32 <= g < 64}
    assert owned and new.capture() == owned
    assert new.entry_count() == sum(len(e) for s in owned.values() for e in s.values())
    group = next(iter(owned))
    new.owned_table("a")[group]["later"] = 1  # writable; the checkpoint is untouched
    assert dict(read_key_groups(str(tmp_path / "chk"), range(MAX_P))) == everything
    with pytest.raises(RuntimeError, match="before its state is used"):
        new.adopt_checkpoint(str(tmp_path / "chk"))


def test_a_scan_keeps_its_read_options_alive(make_rocksdb):
    """rocksdict iterators read their upper bound from ReadOptions they do not keep alive: a scan
    whose options (and bound) were dropped stopped after a random number of entries."""
    from epochal.state.rocksdb.keys import group_prefix
    from epochal.state.rocksdict_scans import scan, scan_keys

    backend = make_rocksdb()
    table = backend.owned_table("s")
    for i in range(20_000):
        table[i % MAX_P][i] = b"v" * 100
    cf = backend._cfs["s"]
    expected = sum(1 for i in range(20_000) if i % MAX_P < 64)
    for _ in range(3):
        assert sum(1 for _ in scan(cf, group_prefix(0), group_prefix(64))) == expected
        assert sum(1 for _ in scan_keys(cf, group_prefix(0), group_prefix(64))) == expected


def test_close_releases_the_database_and_dispose_removes_it(tmp_path):
    directory = str(tmp_path / "db")
    backend = RocksDBKeyedStateBackend(MAX_P, range(MAX_P), directory)
    view = backend.owned_table("t")[0]
    view["k"] = 1
    backend.close()
    backend.close()
    again = RocksDBKeyedStateBackend(MAX_P, range(MAX_P), directory)  # wipes and reopens: lock released
    assert again.capture() == {}
    again.dispose()
    assert not os.path.exists(directory)


@pytest.mark.slow
def test_more_state_than_write_buffer_and_block_cache(make_rocksdb):
    backend = make_rocksdb(write_buffer_bytes=1 << 20, block_cache_bytes=1 << 20)
    table = backend.owned_table("big")
    count = 50_000  # (CI time: 50 MB are as far out of 2 MB of buffer and cache as 200 MB were)
    # Incompressible values, independent per key: slices of one blob would share 1023 bytes with their
    # neighbours, which LZ4 finds within a block, so the size on disk would depend on the block layout.
    values = [os.urandom(1024) for _ in range(count)]
    for i in range(count):
        table[key_group_of(i, MAX_P)][i] = values[i]
    on_disk = sum(e.stat().st_size for e in os.scandir(backend.directory) if e.name.endswith(".sst"))
    assert on_disk > 40 << 20, on_disk  # out of core: far more than the write buffer and the block cache
    rng = random.Random(1)
    for i in rng.sample(range(count), 10_000):
        assert table[key_group_of(i, MAX_P)][i] == values[i]
    assert backend.entry_count() == count
    assert sum(len(table[g]) for g in range(MAX_P)) == count


def _compressions(checkpoint: str) -> set[str]:
    """The ``compression`` settings the checkpoint's OPTIONS file records per column family."""
    [name] = [f for f in os.listdir(checkpoint) if f.startswith("OPTIONS-")]
    with open(os.path.join(checkpoint, name)) as options:
        return {line.split("=", 1)[1].strip() for line in options if line.strip().startswith("compression=")}


def test_blocks_are_lz4_and_a_checkpoint_written_with_snappy_still_restores(make_rocksdb, tmp_path, monkeypatch):
    """LZ4 is the backend's compression (cheaper to read than RocksDB's default Snappy, see
    docs/savepoints.md); checkpoints of versions that wrote Snappy restore and read as before."""
    from rocksdict import DBCompressionType

    from epochal.state.rocksdb import backend as rocksdb
    from epochal.state.rocksdb import native as rocksdb_native

    current = make_rocksdb(name="lz4")
    _fill(current, range(500))
    current.local_checkpoint(str(tmp_path / "lz4-chk"))
    assert _compressions(str(tmp_path / "lz4-chk")) == {"kLZ4Compression"}
    with monkeypatch.context() as patch:  # as epochal wrote it before
        patch.setattr(rocksdb, "DBCompressionType", type("Snappy", (), {"lz4": staticmethod(DBCompressionType.snappy)}))
        older = make_rocksdb(name="snappy")
    _fill(older, range(3000))
    everything = older.capture()
    older.local_checkpoint(str(tmp_path / "chk"))
    assert _compressions(str(tmp_path / "chk")) == {"kSnappyCompression"}
    restored = make_rocksdb(range(0, 64), "restored", restore_from=str(tmp_path / "chk"))
    assert restored.capture() == {g: s for g, s in everything.items() if g < 64}
    assert dict(read_key_groups(str(tmp_path / "chk"), range(MAX_P))) == everything
    if rocksdb_native.unavailable_reason() is None:  # the canonical savepoint's reader too
        from epochal.state.rocksdb.reads import read_stored_groups

        native = {group: pickle.loads(data[offset:offset + length])
                  for data, spans in rocksdb_native.read_chunks(str(tmp_path / "chk"), range(MAX_P))
                  for group, offset, length, _ in spans}
        assert native and native == {group: dict(stored) for group, stored in
                                     read_stored_groups(str(tmp_path / "chk"), range(MAX_P))}
