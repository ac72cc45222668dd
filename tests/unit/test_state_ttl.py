"""State time-to-live (epochal.state.ttl, Flink's StateTtlConfig) on every keyed state kind: expiry,
refresh by write and (on_read_and_write) by read, visibility of expired values, cleanup on access,
incremental and in snapshots, restore keeping timestamps. No Spark: time comes from an injected clock."""

from __future__ import annotations

import math
import pickle
from datetime import timedelta

import pytest

from epochal.errors import PlanError
from epochal.plan.keygroups import key_group_of, key_group_range
from epochal.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.keyed import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    TtlValueState,
    ValueState,
)
from epochal.state.ttl import UPDATE_TYPES, VISIBILITIES, StateTtlConfig, drop_expired, set_clock
from tests.unit.test_state import Average
from tests.unit.test_state_backend import ViewBackend

T0 = 1_700_000_000.0
TTL = 10.0


class ManualClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now

    def at(self, offset: float) -> None:
        """Set the time to ``T0 + offset``."""
        self.now = T0 + offset


@pytest.fixture
def clock():
    manual = ManualClock()
    previous = set_clock(manual)
    yield manual
    set_clock(previous)




def config(update_type="on_create_and_write", visibility="never_return_expired", **kwargs):
    return StateTtlConfig(TTL, update_type=update_type, visibility=visibility, **kwargs)


def backend_with(descriptor, backend_type=HeapKeyedStateBackend, key="k"):
    backend = backend_type(128, range(128))
    state = backend.get_state(descriptor)
    backend.set_current_key(key)
    return backend, state


def stored(backend, name, key="k"):
    """What the backend holds for ``key`` (absent: None)."""
    backend.set_current_key(key)
    return backend.owned_table(name)[backend.current_group].get(key)


both_updates = pytest.mark.parametrize("update_type", UPDATE_TYPES)
both_visibilities = pytest.mark.parametrize("visibility", VISIBILITIES)


@pytest.fixture(params=["heap", "views", "rocksdb"])
def backend_type(request):
    """Makes backends of one kind, ``(max_parallelism, key_groups) -> backend``: the heap, a
    backend whose groups are views (as RocksDB's), and RocksDB itself (``make_rocksdb``)."""
    if request.param == "rocksdb":
        make_rocksdb = request.getfixturevalue("make_rocksdb")
        return lambda max_parallelism, key_groups: make_rocksdb(key_groups, max_parallelism=max_parallelism)
    return HeapKeyedStateBackend if request.param == "heap" else ViewBackend


# -- value-like states ------------------------------------------------------------------------


@both_visibilities
@both_updates
def test_value_expires_after_ttl_and_is_removed_when_read(clock, update_type, visibility, backend_type):
    backend, state = backend_with(ValueStateDescriptor("v", default=-1, ttl=config(update_type, visibility)),
                                  backend_type)
    state.update(5)
    assert stored(backend, "v") == (5, T0)
    clock.at(TTL - 0.001)
    assert state.value() == 5  # under on_read_and_write this read renews it
    renewed = update_type == "on_read_and_write"
    clock.at(TTL)  # expired exactly at timestamp + ttl (Flink: timestamp + ttl <= now)
    if renewed:
        assert state.value() == 5
        clock.at(2 * TTL - 0.001)
        assert stored(backend, "v") is not None
        clock.at(2 * TTL)  # expires ttl after the last read
    backend.set_current_key("k")
    if visibility == "return_expired_if_not_cleaned_up":
        assert state.value() == 5  # still stored: returned once, and removed by this read
    assert state.value() == -1
    assert stored(backend, "v") is None and backend.entry_count() == 0


@both_visibilities
@both_updates
def test_value_write_renews_the_ttl(clock, update_type, visibility):
    _, state = backend_with(ValueStateDescriptor("v", ttl=config(update_type, visibility)))
    state.update(1)
    clock.at(8)
    state.update(2)
    clock.at(17.999)
    assert state.value() == 2
    if update_type == "on_create_and_write":
        clock.at(18)
        assert state.value() == (2 if visibility == "return_expired_if_not_cleaned_up" else None)
        assert state.value() is None


def test_reads_renew_only_with_on_read_and_write(clock):
    backend = HeapKeyedStateBackend(128, range(128))
    write_only = backend.get_state(ValueStateDescriptor("w", ttl=config("on_create_and_write")))
    read_too = backend.get_state(ValueStateDescriptor("r", ttl=config("on_read_and_write")))
    backend.set_current_key("k")
    write_only.update("a")
    read_too.update("a")
    for t in (5, 9.5):
        clock.at(t)
        assert (write_only.value(), read_too.value()) == ("a", "a")
    clock.at(12)
    assert (write_only.value(), read_too.value()) == (None, "a")
    assert stored(backend, "r") == ("a", T0 + 12)


@both_visibilities
@both_updates
def test_reducing_state_expires_and_restarts_from_the_next_value(clock, update_type, visibility):
    backend, total = backend_with(ReducingStateDescriptor("r", reduce_fn=lambda a, b: a + b,
                                                          ttl=config(update_type, visibility)))
    total.add(1)
    clock.at(5)
    total.add(2)  # a write: renews
    assert stored(backend, "r") == (3, T0 + 5)
    clock.at(15)
    total.add(10)
    # an expired value still stored counts when it is visible (Flink's TtlReduceFunction)
    assert total.get() == (13 if visibility == "return_expired_if_not_cleaned_up" else 10)
    clock.at(30)
    if visibility == "return_expired_if_not_cleaned_up":
        assert total.get() is not None
    assert total.get() is None and backend.entry_count() == 0


@both_visibilities
@both_updates
def test_aggregating_state_expires_and_starts_a_new_accumulator(clock, update_type, visibility):
    _, avg = backend_with(AggregatingStateDescriptor("a", aggregate_function=Average(),
                                                     ttl=config(update_type, visibility)))
    avg.add(2)
    avg.add(4)
    clock.at(9)
    assert avg.get() == 3.0  # under on_read_and_write this read renews it
    clock.at(10)
    avg.add(10)
    kept = visibility == "return_expired_if_not_cleaned_up" or update_type == "on_read_and_write"
    assert avg.get() == (16 / 3 if kept else 10.0)
    clock.at(25)
    if visibility == "return_expired_if_not_cleaned_up":
        assert avg.get() is not None
    assert avg.get() is None


# -- list state: elements expire one by one -----------------------------------------------------


@both_visibilities
def test_list_elements_expire_one_by_one(clock, visibility, backend_type):
    backend, items = backend_with(ListStateDescriptor("l", ttl=config("on_create_and_write", visibility)),
                                  backend_type)
    for t, value in ((0, "a"), (4, "b"), (8, "c")):
        clock.at(t)
        items.add(value)
    clock.at(9)
    assert items.get() == ["a", "b", "c"]
    see_expired = visibility == "return_expired_if_not_cleaned_up"
    clock.at(10)
    assert items.get() == (["a", "b", "c"] if see_expired else ["b", "c"])
    assert items.get() == ["b", "c"]  # "a" was removed by the read before
    assert stored(backend, "l") == [("b", T0 + 4), ("c", T0 + 8)]
    clock.at(14)
    assert items.get() == (["b", "c"] if see_expired else ["c"])
    clock.at(18)
    assert items.get() == (["c"] if see_expired else [])
    assert items.get() == [] and stored(backend, "l") is None


@both_updates
def test_list_add_drops_expired_elements_and_update_stamps_all(clock, update_type):
    backend, items = backend_with(ListStateDescriptor("l", ttl=config(update_type)))
    items.add_all([1, 2])
    clock.at(6)
    items.add(3)
    clock.at(11)
    items.add(4)  # 1 and 2 expired at 10: dropped by the add
    assert stored(backend, "l") == [(3, T0 + 6), (4, T0 + 11)]
    items.update([7, 8])
    assert stored(backend, "l") == [(7, T0 + 11), (8, T0 + 11)]
    clock.at(20.999)
    assert items.get() == [7, 8]
    clock.at(21)
    assert items.get() == ([7, 8] if update_type == "on_read_and_write" else [])


def test_list_read_renews_every_live_element_with_on_read_and_write(clock):
    backend, items = backend_with(ListStateDescriptor("l", ttl=config("on_read_and_write")))
    items.add("a")
    clock.at(5)
    items.add("b")
    clock.at(9)
    assert items.get() == ["a", "b"]
    assert stored(backend, "l") == [("a", T0 + 9), ("b", T0 + 9)]
    clock.at(18)
    assert items.get() == ["a", "b"]


# -- map state: entries expire one by one -------------------------------------------------------


@both_visibilities
def test_map_entries_expire_one_by_one(clock, visibility, backend_type):
    backend, mapping = backend_with(MapStateDescriptor("m", ttl=config("on_create_and_write", visibility)),
                                    backend_type)
    mapping.put("a", 1)
    clock.at(4)
    mapping.put("b", 2)
    clock.at(10)
    see_expired = visibility == "return_expired_if_not_cleaned_up"
    assert mapping.get("a", "none") == (1 if see_expired else "none")
    assert mapping.get("a", "none") == "none" and not mapping.contains("a")  # removed by the get
    assert mapping.contains("b") and mapping.get("b") == 2
    assert list(mapping.keys()) == ["b"] and dict(mapping.items()) == {"b": 2} and not mapping.is_empty()
    assert stored(backend, "m") == {"b": (2, T0 + 4)}
    clock.at(14)
    assert dict(mapping.items()) == ({"b": 2} if see_expired else {})
    assert mapping.is_empty() and stored(backend, "m") is None and backend.entry_count() == 0


@both_visibilities
def test_map_expired_entries_are_hidden_from_every_accessor(clock, visibility):
    see_expired = visibility == "return_expired_if_not_cleaned_up"
    accessors = {
        "contains": lambda m: m.contains("a"),
        "keys": lambda m: "a" in list(m.keys()),
        "items": lambda m: "a" in dict(m.items()),
        "is_empty": lambda m: not m.is_empty(),
    }
    for name, sees_a in accessors.items():
        backend, mapping = backend_with(MapStateDescriptor(name, ttl=config(visibility=visibility)))
        clock.at(0)
        mapping.put("a", 1)
        clock.at(10)
        assert sees_a(mapping) is see_expired, name
        assert sees_a(mapping) is False, name  # the first access removed it
        assert stored(backend, name) is None


def test_map_reads_renew_only_the_entries_read_with_on_read_and_write(clock):
    backend, mapping = backend_with(MapStateDescriptor("m", ttl=config("on_read_and_write")))
    mapping.put("a", 1)
    mapping.put("b", 2)
    clock.at(9)
    assert mapping.get("a") == 1
    clock.at(10)
    assert dict(mapping.items()) == {"a": 1}  # b expired; a was renewed at 9, and now again at 10
    assert stored(backend, "m") == {"a": (1, T0 + 10)}
    mapping.put("c", 3)
    clock.at(19)
    assert not mapping.is_empty()  # is_empty reads no value: renews nothing
    clock.at(20)
    assert mapping.is_empty()


def test_map_remove_and_clear_work_on_stamped_entries(clock):
    backend, mapping = backend_with(MapStateDescriptor("m", ttl=config()))
    mapping.put("a", 1)
    mapping.put("b", 2)
    mapping.remove("a")
    assert dict(mapping.items()) == {"b": 2}
    mapping.clear()
    assert mapping.is_empty() and backend.entry_count() == 0


# -- incremental cleanup ------------------------------------------------------------------------


def test_incremental_cleanup_drops_expired_keys_of_other_keys_on_every_access(clock, backend_type):
    backend = backend_type(4, range(4))
    state = backend.get_state(ValueStateDescriptor("v", ttl=config(cleanup_incrementally=5)))
    for key in range(20):
        backend.set_current_key(key)
        state.update(key)
    clock.at(5)
    for key in range(20, 23):  # live keys: checked, kept
        backend.set_current_key(key)
        state.update(key)
    assert backend.entry_count() == 23
    clock.at(12)  # keys 0..19 expired, 20..22 (written at 5) live
    backend.set_current_key("other")
    counts = []
    for _ in range(8):  # 23 keys in 4 groups, 5 checked per access: one round
        state.value()
        counts.append(backend.entry_count())
    assert counts[0] <= 23 - 2 and counts == sorted(counts, reverse=True)
    assert counts[-1] == 3
    for key in range(20, 23):
        backend.set_current_key(key)
        assert state.value() == key


def test_incremental_cleanup_passes_empty_key_groups_cheaply_and_starts_new_rounds(clock):
    backend, state = backend_with(ValueStateDescriptor("v", ttl=config(cleanup_incrementally=4)))
    cleanup = backend.ttl_cleanups["v"]
    state.update(1)  # one key in 128 groups
    clock.at(10)
    backend.set_current_key("other")
    accesses = 0
    while backend.entry_count():
        state.value()  # each access passes at most 4 groups
        accesses += 1
    assert accesses == key_group_of("k", 128) // 4  # 4 groups per access; the update passed the first 4
    backend.set_current_key("k")
    state.update(2)
    clock.at(20)
    backend.set_current_key("other")
    for _ in range(128 // 4 + 2):  # the next round finds the new key
        state.value()
    assert backend.entry_count() == 0 and cleanup.step(T0 + 20) == 0


def test_incremental_cleanup_keeps_live_list_elements_and_map_entries(clock):
    backend = HeapKeyedStateBackend(8, range(8))
    items = backend.get_state(ListStateDescriptor("l", ttl=config(cleanup_incrementally=100)))
    mapping = backend.get_state(MapStateDescriptor("m", ttl=config(cleanup_incrementally=100)))
    for key in range(10):
        backend.set_current_key(key)
        items.add("old")
        mapping.put("old", 1)
    clock.at(5)
    for key in range(5):
        backend.set_current_key(key)
        items.add("new")
        mapping.put("new", 2)
    clock.at(10)
    backend.set_current_key("someone else")
    items.get()
    mapping.is_empty()
    table_l, table_m = backend.owned_table("l"), backend.owned_table("m")
    left_l = {k: v for entries in table_l.values() for k, v in entries.items()}
    left_m = {k: v for entries in table_m.values() for k, v in entries.items()}
    assert left_l == {k: [("new", T0 + 5)] for k in range(5)}
    assert left_m == {k: {"new": (2, T0 + 5)} for k in range(5)}


def test_without_incremental_cleanup_other_keys_stay_until_touched(clock):
    backend, state = backend_with(ValueStateDescriptor("v", ttl=config()))
    for key in range(20):
        backend.set_current_key(key)
        state.update(key)
    clock.at(100)
    backend.set_current_key("other")
    for _ in range(10):
        state.value()
    assert backend.entry_count() == 20 and backend.ttl_cleanups == {}


@pytest.mark.parametrize("every_record", [True, False])
def test_cleanup_for_every_record_sweeps_a_state_the_records_never_touch(clock, backend_type, every_record):
    """Flink's ``cleanupIncrementally(n, true)``: records of other keys that do not touch the TTL
    state (here: they only set the key, as an operator does per record) still sweep it; without
    the flag the expired keys stay until the state itself is accessed."""
    backend = backend_type(4, range(4))
    ttl = config(cleanup_incrementally=5, cleanup_for_every_record=every_record)
    state = backend.get_state(MapStateDescriptor("sessions", ttl=ttl))
    for key in range(20):
        backend.set_current_key(key)
        state.put("login", key)
    clock.at(TTL + 1)  # every session expired; nothing will read them again
    for record in range(8):  # records keyed by others, which use no TTL state (23 keys / 5 per record)
        backend.set_current_key(f"click-{record}")
    assert backend.entry_count() == (0 if every_record else 20)
    assert list(backend.record_cleanups) == ([backend.ttl_cleanups["sessions"]] if every_record else [])


# -- snapshots and restore ----------------------------------------------------------------------


def _fill_every_kind(backend, ttl_config):
    value = backend.get_state(ValueStateDescriptor("v", ttl=ttl_config))
    items = backend.get_state(ListStateDescriptor("l", ttl=ttl_config))
    mapping = backend.get_state(MapStateDescriptor("m", ttl=ttl_config))
    total = backend.get_state(ReducingStateDescriptor("r", reduce_fn=max, ttl=ttl_config))
    return value, items, mapping, total


def _flat(captured, name):
    return {k: v for states in captured.values() for k, v in states.get(name, {}).items()}


@pytest.mark.parametrize("cleanup_in_snapshot", [True, False])
def test_capture_leaves_out_expired_values_only_with_cleanup_in_snapshot(clock, cleanup_in_snapshot):
    backend = HeapKeyedStateBackend(16, range(16))
    value, items, mapping, total = _fill_every_kind(backend, config(cleanup_in_snapshot=cleanup_in_snapshot))
    for key in ("old", "both"):
        backend.set_current_key(key)
        value.update(1)
        items.add("x")
        mapping.put("x", 1)
        total.add(1)
    clock.at(6)
    for key in ("new", "both"):
        backend.set_current_key(key)
        value.update(2)
        items.add("y")
        mapping.put("y", 2)
        total.add(2)
    clock.at(12)  # what was written at 0 has expired
    captured = backend.capture()
    assert backend.entry_count() == 12  # the live state is left alone
    if cleanup_in_snapshot:
        assert _flat(captured, "v") == {"new": (2, T0 + 6), "both": (2, T0 + 6)}
        assert _flat(captured, "l") == {"new": [("y", T0 + 6)], "both": [("y", T0 + 6)]}
        assert _flat(captured, "m") == {"new": {"y": (2, T0 + 6)}, "both": {"y": (2, T0 + 6)}}
        assert set(_flat(captured, "r")) == {"new", "both"}
    else:
        assert set(_flat(captured, "v")) == set(_flat(captured, "r")) == {"old", "new", "both"}
        assert _flat(captured, "l")["both"] == [("x", T0), ("y", T0 + 6)]
        assert _flat(captured, "m")["both"] == {"x": (1, T0), "y": (2, T0 + 6)}
    backend.set_current_key("both")
    items.add("z")  # in place on the live list: the captured copy must not change
    mapping.put("z", 3)
    assert len(_flat(captured, "l")["both"]) == (1 if cleanup_in_snapshot else 2)
    assert "z" not in _flat(captured, "m")["both"]


def test_a_group_with_only_expired_values_is_left_out_of_the_snapshot(clock):
    backend, value = backend_with(ValueStateDescriptor("v", ttl=config()))
    value.update(1)
    clock.at(10)
    assert backend.capture() == {}


@pytest.mark.parametrize("update_type", UPDATE_TYPES)
def test_restore_keeps_timestamps_so_values_expire_at_the_same_wall_clock_time(clock, update_type):
    old = HeapKeyedStateBackend(32, range(32))
    value, items, mapping, _ = _fill_every_kind(old, config(update_type))
    for key in range(20):
        old.set_current_key(key)
        value.update(key)
        items.add(key)
        mapping.put("k", key)
    clock.at(4)
    captured = pickle.loads(pickle.dumps(old.capture()))  # as the snapshot files carry it
    clock.at(7)
    for index in range(2):  # restored with another parallelism
        new = HeapKeyedStateBackend(32, key_group_range(index, 2, 32))
        for group in new.key_groups:
            if group in captured:
                new.restore_group(group, captured[group])
        clock.at(7)
        value, items, mapping, _ = _fill_every_kind(new, config(update_type))
        owned = [k for k in range(20) if key_group_of(k, 32) in new.key_groups]
        assert owned and all(stored(new, "v", k) == (k, T0) for k in owned)
        clock.at(9.999)
        for key in owned:
            new.set_current_key(key)
            assert (value.value(), items.get(), mapping.get("k")) == (key, [key], key)
        clock.at(10 if update_type == "on_create_and_write" else 20)  # reads at 9.999 renewed
        for key in owned:
            new.set_current_key(key)
            assert (value.value(), items.get(), mapping.get("k")) == (None, [], None)
        assert new.entry_count() == 0


def test_drop_expired_is_a_helper_any_backend_can_use(clock):
    entries = {"a": [(1, T0), (2, T0 + 5)], "b": [(3, T0)], "c": []}
    kept = drop_expired(entries, "list", config(), T0 + 10)
    assert kept == {"a": [(2, T0 + 5)]} and kept["a"] is not entries["a"]
    assert len(entries["a"]) == 2  # unchanged
    assert drop_expired({"x": (0, T0 + 1)}, "value", config(), T0 + 11) == {}
    assert drop_expired({"x": (0, T0 + 1)}, "value", config(), T0 + 10.9) == {"x": (0, T0 + 1)}
    assert drop_expired({"x": {"u": (0, T0 + 1)}}, "map", config(), T0 + 11) == {}


# -- no TTL: exactly as before; configuration errors --------------------------------------------


def test_states_without_ttl_are_the_plain_objects_and_store_plain_values(clock):
    backend = HeapKeyedStateBackend(128, range(128))
    value = backend.get_state(ValueStateDescriptor("v", 0))  # positional default still works
    items = backend.get_state(ListStateDescriptor("l"))
    mapping = backend.get_state(MapStateDescriptor("m"))
    total = backend.get_state(ReducingStateDescriptor("r", max))
    avg = backend.get_state(AggregatingStateDescriptor("a", Average()))
    assert [type(s) for s in (value, items, mapping, total, avg)] == [ValueState, ListState, MapState,
                                                                      ReducingState, AggregatingState]
    backend.set_current_key("k")
    value.update(value.value() + 1)
    items.add(1)
    mapping.put("u", 1)
    total.add(3)
    avg.add(4)
    clock.at(10**9)
    assert (value.value(), items.get(), dict(mapping.items()), total.get(), avg.get()) == (1, [1], {"u": 1}, 3, 4.0)
    assert (stored(backend, "v"), stored(backend, "l"), stored(backend, "m")) == (1, [1], {"u": 1})
    assert backend.ttl_configs == {} and backend.ttl_cleanups == {}
    assert _flat(backend.capture(), "v") == {"k": 1}


def test_one_state_name_has_one_ttl_config(clock):
    backend = HeapKeyedStateBackend(128, range(128))
    first = backend.get_state(ValueStateDescriptor("v", ttl=StateTtlConfig(5)))
    assert isinstance(first, TtlValueState) and backend.ttl_configs == {"v": StateTtlConfig(5)}
    backend.get_state(ValueStateDescriptor("v", ttl=StateTtlConfig(5.0)))  # an equal config: fine
    with pytest.raises(PlanError, match="declared with ttl="):
        backend.get_state(ValueStateDescriptor("v", ttl=StateTtlConfig(6)))
    with pytest.raises(PlanError, match="declared with ttl="):
        backend.get_state(ValueStateDescriptor("v"))
    backend.get_state(ListStateDescriptor("plain"))
    with pytest.raises(PlanError, match="declared with ttl=None"):
        backend.get_state(ListStateDescriptor("plain", ttl=StateTtlConfig(5)))


def test_config_accepts_seconds_and_timedelta_and_has_flinks_defaults():
    assert StateTtlConfig(timedelta(minutes=2)).ttl == 120.0
    default = StateTtlConfig(1)
    assert (default.update_type, default.visibility, default.cleanup_in_snapshot, default.cleanup_incrementally,
            default.cleanup_for_every_record) == ("on_create_and_write", "never_return_expired", True, 0, False)
    assert not default.refresh_on_read and not default.return_expired
    assert pickle.loads(pickle.dumps(ValueStateDescriptor("v", ttl=default))).ttl == default


@pytest.mark.parametrize("kwargs, message", [
    ({"ttl": 0}, "ttl must be a finite number of seconds > 0"),
    ({"ttl": -1.5}, "ttl must be a finite number of seconds > 0"),
    ({"ttl": math.nan}, "ttl must be"),
    ({"ttl": math.inf}, "ttl must be"),
    ({"ttl": "10"}, "ttl must be"),
    ({"ttl": True}, "ttl must be"),
    ({"ttl": timedelta(0)}, "ttl must be"),
    ({"ttl": 1, "update_type": "OnReadAndWrite"}, "update_type must be one of on_create_and_write"),
    ({"ttl": 1, "visibility": "always"}, "visibility must be one of never_return_expired"),
    ({"ttl": 1, "cleanup_in_snapshot": "yes"}, "cleanup_in_snapshot must be a bool"),
    ({"ttl": 1, "cleanup_incrementally": -1}, "cleanup_incrementally must be an int >= 0"),
    ({"ttl": 1, "cleanup_incrementally": 2.5}, "cleanup_incrementally must be an int >= 0"),
    ({"ttl": 1, "cleanup_for_every_record": 1}, "cleanup_for_every_record must be a bool"),
    ({"ttl": 1, "cleanup_for_every_record": True}, "cleanup_for_every_record needs cleanup_incrementally > 0"),
])
def test_invalid_config_gives_a_clear_error(kwargs, message):
    with pytest.raises(PlanError, match=message):
        StateTtlConfig(**kwargs)
