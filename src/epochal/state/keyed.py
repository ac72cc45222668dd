"""Keyed state objects (Value/List/Reducing/Aggregating/Map) and the heap backend.

The state objects work on any :class:`~epochal.state.backend.KeyedStateBackend`: they read and
write the current key's entry in ``backend.owned_table(name)[current group]`` and write a value
back after changing it, so a backend whose tables are views (RocksDB) sees every change.

The heap backend keeps ``tables[state name][key group][key] = value`` in Python dicts. Keeping
key groups apart is what lets a snapshot be written per key group and a restore with another
parallelism read only the groups it owns (papers/001 §3.1.2). Snapshots have a cheap
synchronous part, :meth:`HeapKeyedStateBackend.capture` (shallow copies of the per-group dicts;
lists and maps, the only values state objects change in place, are copied one level deeper), and
an asynchronous part done by the caller on another thread (serialising what was captured), while
records keep updating the live tables.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from epochal.errors import PlanError
from epochal.state.backend import Captured, KeyedStateBackend
from epochal.state.descriptors import (
    AggregatingStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)

#: name -> key group -> key -> value
Tables = dict[str, dict[int, dict[Any, Any]]]


class _BoundState:
    __slots__ = ("backend", "groups")

    def __init__(self, backend: KeyedStateBackend, descriptor: StateDescriptor) -> None:
        self.backend = backend
        self.groups = backend.owned_table(descriptor.name)

    def _entries(self) -> MutableMapping[Any, Any]:
        return self.groups[self.backend.current_group]

    def clear(self) -> None:
        """Remove the current key's state."""
        self._entries().pop(self.backend.current_key, None)


class ValueState(_BoundState):
    """One value for the current key."""

    __slots__ = ("default",)

    def __init__(self, backend: KeyedStateBackend, descriptor: ValueStateDescriptor) -> None:
        super().__init__(backend, descriptor)
        self.default = descriptor.default

    def value(self) -> Any:
        return self._entries().get(self.backend.current_key, self.default)

    def update(self, value: Any) -> None:
        self._entries()[self.backend.current_key] = value


class ListState(_BoundState):
    """A list for the current key."""

    def get(self) -> list[Any]:
        return list(self._entries().get(self.backend.current_key, ()))

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

    def __init__(self, backend: KeyedStateBackend, descriptor: ReducingStateDescriptor) -> None:
        super().__init__(backend, descriptor)
        if descriptor.reduce_fn is None:
            raise PlanError(f"ReducingStateDescriptor '{descriptor.name}' needs a reduce_fn")
        self.reduce_fn = descriptor.reduce_fn

    def get(self) -> Any:
        return self._entries().get(self.backend.current_key)

    def add(self, value: Any) -> None:
        entries = self._entries()
        key = self.backend.current_key
        entries[key] = self.reduce_fn(entries[key], value) if key in entries else value


class AggregatingState(_BoundState):
    """An accumulator for the current key, folded with an AggregateFunction."""

    __slots__ = ("function",)

    def __init__(self, backend: KeyedStateBackend, descriptor: AggregatingStateDescriptor) -> None:
        super().__init__(backend, descriptor)
        if descriptor.aggregate_function is None:
            raise PlanError(f"AggregatingStateDescriptor '{descriptor.name}' needs an aggregate_function")
        self.function = descriptor.aggregate_function

    def get(self) -> Any:
        entries = self._entries()
        key = self.backend.current_key
        return self.function.get_result(entries[key]) if key in entries else None

    def add(self, value: Any) -> None:
        entries = self._entries()
        key = self.backend.current_key
        accumulator = entries[key] if key in entries else self.function.create_accumulator()
        entries[key] = self.function.add(value, accumulator)


class MapState(_BoundState):
    """A dict for the current key."""

    def _map(self) -> dict[Any, Any] | None:
        return self._entries().get(self.backend.current_key)

    def get(self, user_key: Any, default: Any = None) -> Any:
        found = self._map()
        return default if found is None else found.get(user_key, default)

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
        return iter(list((self._map() or {}).items()))

    def keys(self) -> Iterator[Any]:
        return iter(list(self._map() or {}))

    def is_empty(self) -> bool:
        return not self._map()


STATE_TYPES: dict[str, type[_BoundState]] = {"value": ValueState, "list": ListState, "reducing": ReducingState,
                                             "aggregating": AggregatingState, "map": MapState}
_DEEP_KINDS = {"list": list, "map": dict}


class HeapKeyedStateBackend(KeyedStateBackend):
    """Keyed state of one operator subtask, kept in Python dicts, partitioned by key group."""

    def __init__(self, max_parallelism: int, key_groups: range) -> None:
        super().__init__(max_parallelism, key_groups)
        self.tables: Tables = {}

    def capture(self) -> Captured:
        """Synchronous part of a snapshot: a copy per key group, ``{group: {name: {key: value}}}``.

        After it returns the live tables may change freely; the copy is serialised later.
        """
        by_group: Captured = {}
        for name, groups in self.tables.items():
            deep = _DEEP_KINDS.get(self.kinds.get(name, "value"))
            for group, entries in groups.items():
                if not entries:
                    continue
                copied = {k: deep(v) for k, v in entries.items()} if deep else entries.copy()
                by_group.setdefault(group, {})[name] = copied
        return by_group

    def owned_table(self, name: str) -> dict[int, dict[Any, Any]]:  # type: ignore[override]
        """State ``name``'s table with a dict for every key group this subtask owns, so that
        operators accessing state inline (built-in aggregations, windows) index it by key group
        without a missing-group check per record. Empty groups are left out of snapshots."""
        table = self.tables.get(name)
        if table is None or len(table) < len(self.key_groups):  # once per name: it is on hot paths
            table = self.tables.setdefault(name, {})
            for group in self.key_groups:
                table.setdefault(group, {})
        return table

    def restore_group(self, group: int, states: dict[str, dict[Any, Any]]) -> None:
        """Load one key group's state (only groups this subtask owns are ever passed)."""
        for name, entries in states.items():
            self.tables.setdefault(name, {})[group] = dict(entries)

    def entry_count(self) -> int:
        return sum(len(e) for groups in self.tables.values() for e in groups.values())
