"""The heap keyed state backend: state per state name, per key group, per key.

Layout: ``tables[state name][key group][key] = value``. Every record on a keyed operator sets
the current key (and so its key group) once; state objects read and write the entry of that
key. Keeping key groups apart is what lets a snapshot be written per key group and a restore
with another parallelism read only the groups it owns (papers/001 §3.1.2).

Snapshots have a cheap synchronous part, :meth:`HeapKeyedStateBackend.capture` (shallow copies
of the per-group dicts; lists and maps, the only values state objects mutate in place, are
copied one level deeper), and an asynchronous part done by the caller on another thread
(serialising what was captured), while records keep updating the live tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from epochal.errors import PlanError
from epochal.plan.keygroups import key_group_of
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

    def __init__(self, backend: HeapKeyedStateBackend, name: str) -> None:
        self.backend = backend
        self.groups = backend.tables.setdefault(name, {})

    def _entries(self) -> dict[Any, Any]:
        groups = self.groups
        group = self.backend.current_group
        entries = groups.get(group)
        if entries is None:
            entries = groups[group] = {}
        return entries

    def clear(self) -> None:
        """Remove the current key's state."""
        self._entries().pop(self.backend.current_key, None)


class ValueState(_BoundState):
    """One value for the current key."""

    __slots__ = ("default",)

    def __init__(self, backend: HeapKeyedStateBackend, descriptor: ValueStateDescriptor) -> None:
        super().__init__(backend, descriptor.name)
        self.default = descriptor.default

    def value(self) -> Any:
        entries = self.groups.get(self.backend.current_group)
        if entries is None:
            return self.default
        return entries.get(self.backend.current_key, self.default)

    def update(self, value: Any) -> None:
        self._entries()[self.backend.current_key] = value


class ListState(_BoundState):
    """A list for the current key."""

    def get(self) -> list[Any]:
        return list(self._entries().get(self.backend.current_key, ()))

    def add(self, value: Any) -> None:
        self._entries().setdefault(self.backend.current_key, []).append(value)

    def add_all(self, values: list[Any]) -> None:
        self._entries().setdefault(self.backend.current_key, []).extend(values)

    def update(self, values: list[Any]) -> None:
        self._entries()[self.backend.current_key] = list(values)


class ReducingState(_BoundState):
    """A value for the current key, reduced with every added value."""

    __slots__ = ("reduce_fn",)

    def __init__(self, backend: HeapKeyedStateBackend, descriptor: ReducingStateDescriptor) -> None:
        super().__init__(backend, descriptor.name)
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

    def __init__(self, backend: HeapKeyedStateBackend, descriptor: AggregatingStateDescriptor) -> None:
        super().__init__(backend, descriptor.name)
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

    def _map(self, create: bool) -> dict[Any, Any] | None:
        entries = self._entries()
        key = self.backend.current_key
        found = entries.get(key)
        if found is None and create:
            found = entries[key] = {}
        return found

    def get(self, user_key: Any, default: Any = None) -> Any:
        found = self._map(False)
        return default if found is None else found.get(user_key, default)

    def put(self, user_key: Any, value: Any) -> None:
        self._map(True)[user_key] = value  # type: ignore[index]

    def contains(self, user_key: Any) -> bool:
        found = self._map(False)
        return found is not None and user_key in found

    def remove(self, user_key: Any) -> None:
        found = self._map(False)
        if found is not None:
            found.pop(user_key, None)

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list((self._map(False) or {}).items()))

    def keys(self) -> Iterator[Any]:
        return iter(list(self._map(False) or {}))

    def is_empty(self) -> bool:
        return not self._map(False)


_STATE_TYPES = {"value": ValueState, "list": ListState, "reducing": ReducingState,
                "aggregating": AggregatingState, "map": MapState}
_DEEP_KINDS = {"list": list, "map": dict}


class HeapKeyedStateBackend:
    """Keyed state of one operator subtask, kept in Python dicts, partitioned by key group."""

    def __init__(self, max_parallelism: int, key_groups: range) -> None:
        self.max_parallelism = max_parallelism
        self.key_groups = key_groups
        self.tables: Tables = {}
        self.kinds: dict[str, str] = {}
        self.current_key: Any = None
        self.current_group = 0

    def set_current_key(self, key: Any, group: int | None = None) -> None:
        """Scope every state object to ``key`` (and its key group) until the next call.

        ``group`` may be passed when the caller already computed ``key_group_of(key)``."""
        self.current_key = key
        self.current_group = key_group_of(key, self.max_parallelism) if group is None else group

    def get_state(self, descriptor: StateDescriptor) -> Any:
        """The state object for ``descriptor``; the same name must always have the same kind."""
        known = self.kinds.get(descriptor.name)
        if known is not None and known != descriptor.kind:
            raise PlanError(f"state '{descriptor.name}' was declared as {known} state and now as "
                            f"{descriptor.kind} state; use another name")
        self.kinds[descriptor.name] = descriptor.kind
        state_type = _STATE_TYPES[descriptor.kind]
        if descriptor.kind in ("list", "map"):
            return state_type(self, descriptor.name)
        return state_type(self, descriptor)

    def capture(self) -> dict[int, dict[str, dict[Any, Any]]]:
        """Synchronous part of a snapshot: a copy per key group, ``{group: {name: {key: value}}}``.

        After it returns the live tables may change freely; the copy is serialised later.
        """
        by_group: dict[int, dict[str, dict[Any, Any]]] = {}
        for name, groups in self.tables.items():
            deep = _DEEP_KINDS.get(self.kinds.get(name, "value"))
            for group, entries in groups.items():
                if not entries:
                    continue
                copied = {k: deep(v) for k, v in entries.items()} if deep else entries.copy()
                by_group.setdefault(group, {})[name] = copied
        return by_group

    def owned_table(self, name: str) -> dict[int, dict[Any, Any]]:
        """State ``name``'s table with a dict for every key group this subtask owns, so that
        operators accessing state inline (built-in aggregations, windows) index it by key group
        without a missing-group check per record. Empty groups are left out of snapshots."""
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
