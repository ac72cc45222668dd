"""Copy-on-write of heap state values (state/copy_on_write.py): what a capture (a thread's full or
incremental snapshot) or a ``read_committed`` view copied keeps the values of its moment when user
code then changes the live value objects in place, on every state kind, with and without TTL;
values that cannot change are never copied, others once per key and capture, and nothing is
copied where nothing is shared (no capture, a forked snapshot, RocksDB). No Spark."""

from __future__ import annotations

import pickle

import pytest

from epochal.config import ROCKSDB, StateBackendConfig
from epochal.dataflow.queries.shown import views_of
from epochal.state.backends import create_backend
from epochal.state.copy_on_write import SharedValues, frozen
from epochal.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.ttl import StateTtlConfig

MAXP = 128
KEY = "k"


class InPlaceCount:
    """``add`` changes its list accumulator in place and returns it (the protocol allows it)."""

    def create_accumulator(self):
        return [0]

    def add(self, value, accumulator):
        accumulator[0] += value
        return accumulator

    def get_result(self, accumulator):
        return accumulator[0]

    def merge(self, a, b):
        return [a[0] + b[0]]


def append_in_place(a, b):
    a.append(b)
    return a


def _bump_value(state):
    seen = state.value()
    seen["n"] += 1
    state.update(seen)


def _bump_list(state):
    items = state.get()
    items[0]["n"] += 1
    state.update(items)


def _bump_map(state):
    found = state.get("a")
    found.append(2)
    state.put("a", found)
    for _, value in state.items():
        value.append(3)


#: kind -> (descriptor factory, the first write, the change in place, what the state reads after
#: both, as the live value; the captured one must read as after the first write only)
KINDS = {
    "value": (lambda ttl: ValueStateDescriptor("s", ttl=ttl), lambda s: s.update({"n": 1}), _bump_value,
              lambda s: s.value()),
    "aggregating": (lambda ttl: AggregatingStateDescriptor("s", aggregate_function=InPlaceCount(), ttl=ttl),
                    lambda s: s.add(1), lambda s: s.add(5), lambda s: s.get()),
    "reducing": (lambda ttl: ReducingStateDescriptor("s", reduce_fn=append_in_place, ttl=ttl),
                 lambda s: s.add([1]), lambda s: s.add(2), lambda s: s.get()),
    "list": (lambda ttl: ListStateDescriptor("s", ttl=ttl), lambda s: s.add({"n": 1}), _bump_list,
             lambda s: s.get()),
    "map": (lambda ttl: MapStateDescriptor("s", ttl=ttl), lambda s: s.put("a", [1]), _bump_map,
            lambda s: dict(s.items())),
}
AFTER = {"value": {"n": 2}, "aggregating": 6, "reducing": [1, 2], "list": [{"n": 2}], "map": {"a": [1, 2, 3]}}


def _written(kind: str, ttl: bool, **backend_options):
    make, first, _, _ = KINDS[kind]
    backend = HeapKeyedStateBackend(MAXP, range(MAXP), **backend_options)
    state = backend.get_state(make(StateTtlConfig(3600) if ttl else None))
    backend.set_current_key(KEY)
    first(state)
    return backend, state


def _captured(backend) -> dict:
    """The captured state of the key as the snapshot's writer would serialise it (no timestamps)."""
    captured = backend.capture()
    return pickle.loads(pickle.dumps(captured))


def _stored_of(groups: dict) -> object:
    """The key's stored value in ``{group: {state: {key: value}}}``, without TTL timestamps."""
    (states,) = groups.values()
    return states["s"][KEY]


def _plain(kind: str, stored: object, ttl: bool) -> object:
    if not ttl:
        return stored
    if kind == "list":
        return [element for element, _ in stored]
    if kind == "map":
        return {user_key: value for user_key, (value, _) in stored.items()}
    return stored[0]


@pytest.mark.parametrize("ttl", [False, True], ids=["plain", "ttl"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_thread_snapshot_keeps_its_barrier_values_when_user_code_changes_them_in_place(kind, ttl):
    backend, state = _written(kind, ttl)
    before = _plain(kind, _stored_of(_captured(backend)), ttl)
    captured = backend.capture()  # serialised later, while the job goes on
    KINDS[kind][2](state)
    assert _plain(kind, _stored_of(pickle.loads(pickle.dumps(captured))), ttl) == before
    assert KINDS[kind][3](state) == AFTER[kind]


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_incremental_snapshot_keeps_its_barrier_values(kind):
    backend, state = _written(kind, False, incremental=True)
    backend.capture_snapshot(backend.begin_snapshot(1))  # the chain's first: full
    backend.snapshot_written(1, {"chain": [{"file": "1"}]})
    backend.checkpoint_completed(1)
    KINDS[kind][1](state)  # the key changes: the next checkpoint is a delta holding it
    plan = backend.begin_snapshot(2)
    assert not plan.full
    delta = backend.capture_snapshot(plan)
    before = pickle.loads(pickle.dumps(delta.data))
    KINDS[kind][2](state)
    assert pickle.loads(pickle.dumps(delta.data)) == before


@pytest.mark.parametrize("ttl", [False, True], ids=["plain", "ttl"])
@pytest.mark.parametrize("kind", ["value", "aggregating", "reducing", "list", "map"])
def test_a_committed_view_keeps_its_barrier_values(kind, ttl):
    backend, state = _written(kind, ttl)
    backend.make_queryable("q", "s")
    view = views_of(backend)["q"]
    before = pickle.loads(pickle.dumps(view))
    KINDS[kind][2](state)
    assert pickle.loads(pickle.dumps(view)) == before
    assert KINDS[kind][3](state) == AFTER[kind]


def test_a_changed_value_is_copied_once_per_capture_and_put_in_the_live_table():
    backend, state = _written("value", False)
    stored = backend.tables["s"][backend.current_group][KEY]
    assert state.value() is stored  # nothing captured yet: the object itself
    backend.capture()
    first = state.value()
    assert first is not stored and first == stored
    assert backend.tables["s"][backend.current_group][KEY] is first
    assert state.value() is first  # once per capture
    backend.capture()
    assert state.value() is not first


def test_values_that_cannot_change_in_place_are_never_copied():
    backend = HeapKeyedStateBackend(MAXP, range(MAXP))
    state = backend.get_state(ValueStateDescriptor("s"))
    values = [7, "text", b"raw", 2.5, None, (1, "a", None), frozenset({1, 2})]
    for i, value in enumerate(values):
        backend.set_current_key(i)
        state.update(value)
    backend.capture()
    for i, value in enumerate(values):
        backend.set_current_key(i)
        assert state.value() is value
    assert frozen((1, "a")) and not frozen((1, [2])) and not frozen([1]) and not frozen({"a": 1})


def test_a_tuple_holding_a_list_is_copied():
    backend = HeapKeyedStateBackend(MAXP, range(MAXP))
    state = backend.get_state(ValueStateDescriptor("s"))
    backend.set_current_key(KEY)
    state.update((1, [2]))
    captured = backend.capture()
    state.value()[1].append(3)
    assert _stored_of(captured) == (1, [2])


def test_the_private_copy_is_no_change_for_an_incremental_checkpoint():
    """Reading a value a capture shares copies it into the live table, which is not a change of
    the state: the next incremental checkpoint holds only keys really written."""
    backend, state = _written("value", False, incremental=True)
    backend.capture_snapshot(backend.begin_snapshot(1))
    backend.snapshot_written(1, {"chain": [{"file": "1"}]})
    backend.checkpoint_completed(1)
    assert state.value() == {"n": 1}  # copied: the first capture shares it
    plan = backend.begin_snapshot(2)
    assert plan.changed_keys() == {} or not any(plan.changed_keys().get("s", {}).values())


def test_nothing_is_copied_without_a_capture_that_shares_values(tmp_path):
    """A forked snapshot captures in its child (the worker's backend never calls ``capture``), and
    RocksDB's values are unpickled on every read: neither shares value objects."""
    backend, state = _written("value", False)
    backend.begin_snapshot(1)  # the fork's barrier: the plan only
    assert not backend.shared
    assert state.value() is backend.tables["s"][backend.current_group][KEY]
    rocksdb = create_backend(StateBackendConfig(ROCKSDB, local_dir=str(tmp_path / "db")), MAXP, range(MAXP), "op")
    try:
        value = rocksdb.get_state(ValueStateDescriptor("s", queryable="q"))
        rocksdb.set_current_key(KEY)
        value.update({"n": 1})
        rocksdb.capture()
        views_of(rocksdb)
        assert not rocksdb.shares_values and not rocksdb.shared
    finally:
        rocksdb.dispose()


def test_shared_values_contract():
    shared = SharedValues()
    assert not shared
    value = {"n": 1}
    assert shared.private("s", KEY, value) is value  # not shared
    shared.share(["s"])
    assert shared
    copied = shared.private("s", KEY, value)
    assert copied == value and copied is not value
    assert shared.private("s", KEY, copied) is copied  # the key's copy is its own from now on
    assert shared.private("s", "other", [1, 2], elements=True) == [1, 2]  # elements that cannot change
    nested = [{"n": 1}]
    assert shared.private("s", "third", nested, elements=True) is not nested
