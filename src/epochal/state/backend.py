"""The keyed-state backend interface: the only way operators reach keyed state.

A backend holds the keyed state of one operator subtask, partitioned by key group (papers/001
§3.1.2), for the key groups the subtask owns. Operators and user functions see it through:

* ``set_current_key(key, group)`` and ``get_state(descriptor)``: Flink-style state objects
  (Value/List/Reducing/Aggregating/Map) scoped to the current key;
* ``owned_table(name)``: for built-in operators that access state inline, a mapping from every
  owned key group to a mutable mapping ``key -> value``. Values written through it are state;
  a value read from it and mutated in place must be written back (a backend whose tables are
  views, e.g. of RocksDB, only sees assignments);
* ``capture()`` / ``restore_group(group, states)``: the synchronous part of a snapshot
  (``{group: {state name: {key: value}}}``) and the restore of one key group.

The heap backend (:mod:`epochal.state.keyed`) keeps plain dicts; other backends implement the
same four methods (``owned_table``, ``capture``, ``restore_group``, ``entry_count``) and get the
state objects for free.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import MutableMapping
from typing import Any

from epochal.errors import PlanError
from epochal.plan.keygroups import key_group_of
from epochal.state.descriptors import StateDescriptor

#: key group -> key -> value, for one state name
GroupTables = MutableMapping[int, MutableMapping[Any, Any]]
#: What ``capture`` returns: key group -> state name -> key -> value (a copy)
Captured = dict[int, dict[str, dict[Any, Any]]]


class KeyedStateBackend(ABC):
    """Keyed state of one operator subtask for the key groups ``key_groups``.

    Contract: the state of a key lives in the key's group (``key_group_of(key)``); only owned
    groups are ever read or written; ``capture`` returns a copy that later changes of the live
    state do not affect; ``restore_group`` is called only before the operator opens.
    """

    def __init__(self, max_parallelism: int, key_groups: range) -> None:
        self.max_parallelism = max_parallelism
        self.key_groups = key_groups
        #: state name -> kind ("value", "list", ...): one name, one kind
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
        from epochal.state.keyed import STATE_TYPES

        known = self.kinds.get(descriptor.name)
        if known is not None and known != descriptor.kind:
            raise PlanError(f"state '{descriptor.name}' was declared as {known} state and now as "
                            f"{descriptor.kind} state; use another name")
        self.kinds[descriptor.name] = descriptor.kind
        return STATE_TYPES[descriptor.kind](self, descriptor)

    @abstractmethod
    def owned_table(self, name: str) -> GroupTables:
        """State ``name`` as ``{key group: {key: value}}`` with an entry for every owned group."""

    @abstractmethod
    def capture(self) -> Captured:
        """Synchronous part of a snapshot: a copy of the non-empty state, per key group."""

    @abstractmethod
    def restore_group(self, group: int, states: dict[str, dict[Any, Any]]) -> None:
        """Load one key group's state (``{state name: {key: value}}``) before the operator opens."""

    @abstractmethod
    def entry_count(self) -> int:
        """Number of (state name, key) entries held."""
