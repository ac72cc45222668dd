"""Keyed state objects (Value/List/Reducing/Aggregating/Map), on any backend.

The state objects work on any :class:`~epochal.state.backend.KeyedStateBackend`: they read and
write the current key's entry in ``backend.owned_table(name)[current group]`` and write a value
back after changing it, so a backend whose tables are views (RocksDB) sees every change.

The backends: :mod:`epochal.state.heap.backend` (Python dicts) and :mod:`epochal.state.rocksdb.backend`.

A descriptor with a TTL config gets the Ttl* subclass of its state object (:mod:`epochal.state.ttl`:
values stored as ``(value, timestamp)`` tuples, expired ones invisible and removed on access);
``get_state`` picks it once, so state without TTL runs exactly the plain code.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any, Protocol

from epochal.errors import PlanError
from epochal.state.copy_on_write import ATOMS, SharedValues, store_untracked
from epochal.state.descriptors import (
    AggregatingStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from epochal.state.ttl import CLOCK, IncrementalCleanup

#: What TtlAccess reads return for "no visible value" (None may be a stored value).
ABSENT: Any = object()


class KeyScope(Protocol):
    """What the state objects use of their backend (a
    :class:`~epochal.state.backend.KeyedStateBackend`, which creates them in ``get_state``): the
    current key and its group, each state's tables, which value objects a snapshot's copy shares
    (:mod:`epochal.state.copy_on_write`), and the states' incremental TTL cleanups."""

    current_key: Any
    current_group: int
    shared: SharedValues
    ttl_cleanups: dict[str, IncrementalCleanup]

    def owned_table(self, name: str) -> MutableMapping[int, MutableMapping[Any, Any]]:
        """State ``name`` as ``{key group: {key: value}}`` with an entry for every owned group."""
        ...


class _BoundState:
    __slots__ = ("backend", "groups", "name")

    def __init__(self, backend: KeyScope, descriptor: StateDescriptor) -> None:
        self.backend = backend
        self.groups = backend.owned_table(descriptor.name)
        self.name = descriptor.name

    def _entries(self) -> MutableMapping[Any, Any]:
        return self.groups[self.backend.current_group]

    def _unowned(self, key: Any, value: Any) -> bool:
        """Whether ``value``, stored for ``key``, may be shared with a snapshot's copy and change
        in place (:mod:`epochal.state.copy_on_write`): then user code gets :meth:`_private`'s copy.
        Called when something is shared (``backend.shared``, a dict's truth: while nothing is, the
        only cost of an access). Inlined in ``ValueState.value`` and the reducing and aggregating
        ``add``: a call more cost 50 ns an access of a shared value there (measured)."""
        return type(value) not in ATOMS and (copied := self.backend.shared.get(self.name)) is not None \
            and key not in copied

    def _private(self, entries: MutableMapping[Any, Any], key: Any, value: Any, elements: bool = False) -> Any:
        """``value``, stored for ``key`` in ``entries``, as user code may change it in place:
        itself, or a copy put in its place (:meth:`~epochal.state.copy_on_write.SharedValues.private`)."""
        owned = self.backend.shared.private(self.name, key, value, elements)
        if owned is not value:
            store_untracked(entries, key, owned)
        return owned

    def clear(self) -> None:
        """Remove the current key's state."""
        self._entries().pop(self.backend.current_key, None)


class ValueState(_BoundState):
    """One value for the current key."""

    __slots__ = ("default",)

    def __init__(self, backend: KeyScope, descriptor: ValueStateDescriptor) -> None:
        super().__init__(backend, descriptor)
        self.default = descriptor.default

    def value(self) -> Any:
        entries = self._entries()
        key = self.backend.current_key
        found = entries.get(key, ABSENT)
        if found is ABSENT:
            return self.default
        if (shared := self.backend.shared) and type(found) not in ATOMS \
                and (copied := shared.get(self.name)) is not None and key not in copied:
            return self._private(entries, key, found)
        return found

    def update(self, value: Any) -> None:
        self._entries()[self.backend.current_key] = value


class ListState(_BoundState):
    """A list for the current key."""

    def get(self) -> list[Any]:
        entries = self._entries()
        key = self.backend.current_key
        found = entries.get(key, ())
        if found and self.backend.shared:
            found = self._private(entries, key, found, elements=True)
        return list(found)

    def add(self, value: Any) -> None:
        self.add_all([value])

    def add_all(self, values: list[Any]) -> None:
        entries = self._entries()
        key = self.backend.current_key
        current = entries.get(key)
        if current is None:
            current = []
        current.extend(values)
        entries[key] = current  # written back: a view-based backend sees the change

    def update(self, values: list[Any]) -> None:
        self._entries()[self.backend.current_key] = list(values)


class ReducingState(_BoundState):
    """A value for the current key, reduced with every added value."""

    __slots__ = ("reduce_fn",)

    def __init__(self, backend: KeyScope, descriptor: ReducingStateDescriptor) -> None:
        super().__init__(backend, descriptor)
        if descriptor.reduce_fn is None:
            raise PlanError(f"ReducingStateDescriptor '{descriptor.name}' needs a reduce_fn")
        self.reduce_fn = descriptor.reduce_fn

    def get(self) -> Any:
        entries = self._entries()
        key = self.backend.current_key
        found = entries.get(key)
        return self._private(entries, key, found) if self.backend.shared and self._unowned(key, found) else found

    def add(self, value: Any) -> None:
        entries = self._entries()
        key = self.backend.current_key
        if key not in entries:
            entries[key] = value
            return
        old = entries[key]
        if (shared := self.backend.shared) and type(old) not in ATOMS \
                and (copied := shared.get(self.name)) is not None and key not in copied:
            old = shared.private(self.name, key, old)  # reduce_fn may change it in place
        entries[key] = self.reduce_fn(old, value)


class AggregatingState(_BoundState):
    """An accumulator for the current key, folded with an AggregateFunction."""

    __slots__ = ("function",)

    def __init__(self, backend: KeyScope, descriptor: AggregatingStateDescriptor) -> None:
        super().__init__(backend, descriptor)
        if descriptor.aggregate_function is None:
            raise PlanError(f"AggregatingStateDescriptor '{descriptor.name}' needs an aggregate_function")
        self.function = descriptor.aggregate_function

    def get(self) -> Any:
        entries = self._entries()
        key = self.backend.current_key
        if key not in entries:
            return None
        accumulator = entries[key]
        if self.backend.shared and self._unowned(key, accumulator):  # get_result may hand it out
            accumulator = self._private(entries, key, accumulator)
        return self.function.get_result(accumulator)

    def add(self, value: Any) -> None:
        entries = self._entries()
        key = self.backend.current_key
        if key in entries:
            accumulator = entries[key]
            if (shared := self.backend.shared) and type(accumulator) not in ATOMS \
                    and (copied := shared.get(self.name)) is not None and key not in copied:
                accumulator = shared.private(self.name, key, accumulator)  # add may change it in place
        else:
            accumulator = self.function.create_accumulator()
        entries[key] = self.function.add(value, accumulator)


class MapState(_BoundState):
    """A dict for the current key."""

    def _map(self) -> dict[Any, Any] | None:
        return self._entries().get(self.backend.current_key)

    def get(self, user_key: Any, default: Any = None) -> Any:
        found = self._map()
        if found is None or user_key not in found:
            return default
        value = found[user_key]
        return self._private_entry(found, user_key, value) \
            if self.backend.shared and self._unowned((self.backend.current_key, user_key), value) else value

    def _private_entry(self, found: dict[Any, Any], user_key: Any, value: Any) -> Any:
        """The map's ``value`` for ``user_key``, private (``_private``; a capture copies the
        current key's dict, so its entries are what it may share)."""
        owned = self.backend.shared.private(self.name, (self.backend.current_key, user_key), value)
        if owned is not value:
            found[user_key] = owned
        return owned

    def put(self, user_key: Any, value: Any) -> None:
        entries = self._entries()
        key = self.backend.current_key
        found = entries.get(key)
        if found is None:
            found = {}
        found[user_key] = value
        entries[key] = found  # written back: a view-based backend sees the change

    def contains(self, user_key: Any) -> bool:
        found = self._map()
        return found is not None and user_key in found

    def remove(self, user_key: Any) -> None:
        entries = self._entries()
        key = self.backend.current_key
        found = entries.get(key)
        if found is not None and user_key in found:
            del found[user_key]
            entries[key] = found

    def items(self) -> Iterator[tuple[Any, Any]]:
        found = self._map() or {}
        if found and self.backend.shared:
            return iter([(k, self._private_entry(found, k, v)) for k, v in list(found.items())])
        return iter(list(found.items()))

    def keys(self) -> Iterator[Any]:
        return iter(list(self._map() or {}))

    def is_empty(self) -> bool:
        return not self._map()


STATE_TYPES: dict[str, type[_BoundState]] = {"value": ValueState, "list": ListState, "reducing": ReducingState,
                                             "aggregating": AggregatingState, "map": MapState}


class TtlAccess:
    """TTL access shared by the TTL state objects (:mod:`epochal.state.ttl`): what they store is
    :data:`~epochal.state.ttl.TtlValue` tuples ``(value, timestamp)`` (per element for lists, per
    user key for maps).

    Every access reads the clock once (:meth:`_now`, which also advances the state's incremental
    cleanup), removes the expired values it finds, returns them only under
    ``return_expired_if_not_cleaned_up`` and renews live values it reads under
    ``on_read_and_write``. Mixed into the TTL state objects below, which ``get_state`` picks for
    descriptors with a TTL: states without one keep the plain classes."""

    __slots__ = ()
    #: the slots of every TTL state object (declared by each concrete class: one layout per base)
    SLOTS = ("ttl", "refresh_on_read", "return_expired", "cleanup")
    backend: KeyScope
    groups: Any
    name: str
    ttl: float
    refresh_on_read: bool
    return_expired: bool
    cleanup: IncrementalCleanup | None

    def __init__(self, backend: KeyScope, descriptor: Any) -> None:
        # the state class after this mixin in the MRO; the slots are the concrete TTL classes'
        super().__init__(backend, descriptor)  # type: ignore[call-arg]
        settings = ttl_settings(backend, descriptor)
        self.ttl, self.refresh_on_read, self.return_expired, self.cleanup = settings  # type: ignore[misc]

    def _now(self) -> float:
        now = CLOCK.now()
        if self.cleanup is not None:
            self.cleanup.step(now)
        return now

    def _read(self, entries: MutableMapping[Any, Any], key: Any, now: float) -> Any:
        """The current key's value, or ABSENT; removes it if expired, renews it on read if asked."""
        found = entries.get(key)
        if found is None:
            return ABSENT
        value = found[0]
        if self.backend.shared:  # a private copy where a snapshot's copy may share it
            value = self.backend.shared.private(self.name, key, value)
        if found[1] <= now - self.ttl:
            del entries[key]
            return value if self.return_expired else ABSENT
        if self.refresh_on_read:
            entries[key] = (value, now)
        elif value is not found[0]:
            store_untracked(entries, key, (value, found[1]))
        return value

    def _base(self, entries: MutableMapping[Any, Any], key: Any, now: float) -> Any:
        """What a write that combines (reduce, aggregate) starts from: the stored value unless it
        expired (an expired one still counts under return_expired_if_not_cleaned_up), or ABSENT;
        private (the caller stores what it combines it into)."""
        found = entries.get(key)
        if found is None or (found[1] <= now - self.ttl and not self.return_expired):
            return ABSENT
        return self.backend.shared.private(self.name, key, found[0]) if self.backend.shared else found[0]


def ttl_settings(backend: KeyScope,
                 descriptor: StateDescriptor) -> tuple[float, bool, bool, IncrementalCleanup | None]:
    """What a TTL state object keeps (its :data:`TtlAccess.SLOTS`), from its descriptor and backend."""
    config = descriptor.ttl
    if config is None:
        raise PlanError(f"state '{descriptor.name}' has no TTL config")
    return config.ttl, config.refresh_on_read, config.return_expired, backend.ttl_cleanups.get(descriptor.name)


def store_map(entries: MutableMapping[Any, Any], key: Any, found: dict[Any, Any]) -> None:
    """Write a map state's dict back for ``key``, or remove the key when the dict is empty."""
    if found:
        entries[key] = found
    else:
        del entries[key]


class TtlValueState(TtlAccess, ValueState):
    """ValueState with TTL: ``value()`` returns ``default`` for an expired value."""

    __slots__ = TtlAccess.SLOTS

    def value(self) -> Any:
        now = self._now()
        found = self._read(self._entries(), self.backend.current_key, now)
        return self.default if found is ABSENT else found

    def update(self, value: Any) -> None:
        now = self._now()
        self._entries()[self.backend.current_key] = (value, now)


class TtlReducingState(TtlAccess, ReducingState):
    """ReducingState with TTL: an expired value is not reduced with the next one (unless visible)."""

    __slots__ = TtlAccess.SLOTS

    def get(self) -> Any:
        now = self._now()
        found = self._read(self._entries(), self.backend.current_key, now)
        return None if found is ABSENT else found

    def add(self, value: Any) -> None:
        now = self._now()
        entries = self._entries()
        key = self.backend.current_key
        old = self._base(entries, key, now)
        entries[key] = (value if old is ABSENT else self.reduce_fn(old, value), now)


class TtlAggregatingState(TtlAccess, AggregatingState):
    """AggregatingState with TTL: an expired accumulator is replaced by a new one (unless visible)."""

    __slots__ = TtlAccess.SLOTS

    def get(self) -> Any:
        now = self._now()
        found = self._read(self._entries(), self.backend.current_key, now)
        return None if found is ABSENT else self.function.get_result(found)

    def add(self, value: Any) -> None:
        now = self._now()
        entries = self._entries()
        key = self.backend.current_key
        accumulator = self._base(entries, key, now)
        if accumulator is ABSENT:
            accumulator = self.function.create_accumulator()
        entries[key] = (self.function.add(value, accumulator), now)


class TtlListState(TtlAccess, ListState):
    """ListState with TTL per element: ``get`` leaves out (and removes) expired elements, ``add``
    removes them when the oldest element has expired (elements are stamped in order)."""

    __slots__ = TtlAccess.SLOTS

    def get(self) -> list[Any]:
        now = self._now()
        entries = self._entries()
        key = self.backend.current_key
        found = entries.get(key)
        if not found:
            return []
        if self.backend.shared:
            found = self._private(entries, key, found, elements=True)
        horizon = now - self.ttl
        live = [e for e in found if e[1] > horizon]
        result = [e[0] for e in (found if self.return_expired else live)]
        if self.refresh_on_read:
            live = [(e[0], now) for e in live]
        elif len(live) == len(found):
            return result
        if live:
            entries[key] = live
        else:
            del entries[key]
        return result

    def add_all(self, values: list[Any]) -> None:
        now = self._now()
        entries = self._entries()
        key = self.backend.current_key
        found = entries.get(key)
        if found is None:
            found = []
        elif found and found[0][1] <= now - self.ttl:
            horizon = now - self.ttl
            found = [e for e in found if e[1] > horizon]
        found.extend([(v, now) for v in values])
        entries[key] = found

    def update(self, values: list[Any]) -> None:
        now = self._now()
        self._entries()[self.backend.current_key] = [(v, now) for v in values]


class TtlMapState(TtlAccess, MapState):
    """MapState with TTL per user key: expired entries are invisible to get/contains/items/keys/
    is_empty and removed by the access that finds them; ``put`` stamps its entry."""

    __slots__ = TtlAccess.SLOTS

    def _lookup(self, user_key: Any) -> Any:
        now = self._now()
        entries = self._entries()
        key = self.backend.current_key
        found = entries.get(key)
        if found is None:
            return ABSENT
        item = found.get(user_key)
        if item is None:
            return ABSENT
        if self.backend.shared:
            item = self._private_item(found, key, user_key, item)
        if item[1] <= now - self.ttl:
            del found[user_key]
            store_map(entries, key, found)
            return item[0] if self.return_expired else ABSENT
        if self.refresh_on_read:
            found[user_key] = (item[0], now)
            entries[key] = found
        return item[0]

    def _private_item(self, found: dict[Any, Any], key: Any, user_key: Any, item: Any) -> Any:
        """``item`` (``(value, timestamp)`` of ``user_key`` in ``key``'s map ``found``), its value
        private (:meth:`_private`), put in its place if copied."""
        value = self.backend.shared.private(self.name, (key, user_key), item[0])
        if value is not item[0]:
            item = found[user_key] = (value, item[1])
        return item

    def _scan(self, refresh: bool) -> list[tuple[Any, Any]]:
        """The visible ``(user key, value)`` pairs; removes expired entries, renews if ``refresh``."""
        now = self._now()
        entries = self._entries()
        key = self.backend.current_key
        found = entries.get(key)
        if not found:
            return []
        if self.backend.shared:
            for user_key, item in list(found.items()):
                self._private_item(found, key, user_key, item)
        horizon = now - self.ttl
        live = {k: e for k, e in found.items() if e[1] > horizon}
        result = [(k, e[0]) for k, e in (found if self.return_expired else live).items()]
        if refresh:
            live = {k: (e[0], now) for k, e in live.items()}
        elif len(live) == len(found):
            return result
        store_map(entries, key, live)
        return result

    def get(self, user_key: Any, default: Any = None) -> Any:
        found = self._lookup(user_key)
        return default if found is ABSENT else found

    def put(self, user_key: Any, value: Any) -> None:
        now = self._now()
        entries = self._entries()
        key = self.backend.current_key
        found = entries.get(key)
        if found is None:
            found = {}
        found[user_key] = (value, now)
        entries[key] = found

    def contains(self, user_key: Any) -> bool:
        return self._lookup(user_key) is not ABSENT

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(self._scan(self.refresh_on_read))

    def keys(self) -> Iterator[Any]:
        return iter([k for k, _ in self._scan(self.refresh_on_read)])

    def is_empty(self) -> bool:
        """Whether no entry is visible (reads no value: renews nothing)."""
        return not self._scan(False)


TTL_STATE_TYPES: dict[str, type[_BoundState]] = {"value": TtlValueState, "list": TtlListState,
                                                 "reducing": TtlReducingState, "aggregating": TtlAggregatingState,
                                                 "map": TtlMapState}
