"""The keyed-state backend interface: the only way operators reach keyed state.

A backend holds the keyed state of one operator subtask, partitioned by key group (papers/001
§3.1.2), for the key groups the subtask owns. Operators and user functions see it through:

* ``set_current_key(key, group)`` and ``get_state(descriptor)``: Flink-style state objects
  (Value/List/Reducing/Aggregating/Map) scoped to the current key;
* ``owned_table(name)``: for built-in operators that access state inline, a mapping from every
  owned key group to a mutable mapping ``key -> value``. Values written through it are state;
  a value read from it and mutated in place must be written back (a backend whose tables are
  views, e.g. of RocksDB, only sees assignments);
* ``batch_logged_table(name)``: the same, for an operator that logs each batch's keys itself
  (built-in keyed aggregations: an incremental backend then needs no per-write tracking);
* ``capture()`` / ``restore_group(group, states)``: the synchronous part of a snapshot
  (``{group: {state name: {key: value}}}``) and the restore of one key group.

The heap backend (:mod:`epochal.state.heap.backend`) keeps plain dicts; other backends implement the
same four methods (``owned_table``, ``capture``, ``restore_group``, ``entry_count``) and get the
state objects for free.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, MutableMapping
from typing import Any

from epochal.errors import PlanError
from epochal.plan.keygroups import key_group_of
from epochal.state.copy_on_write import SharedValues
from epochal.state.descriptors import StateDescriptor
from epochal.state.keyed import STATE_TYPES, TTL_STATE_TYPES
from epochal.state.ttl import CLOCK, IncrementalCleanup, KeyCursor, StateTtlConfig

#: key group -> key -> value, for one state name
GroupTables = MutableMapping[int, MutableMapping[Any, Any]]
#: What ``capture`` returns: key group -> state name -> key -> value (a copy)
Captured = dict[int, dict[str, dict[Any, Any]]]


class KeyedStateBackend(ABC):
    """Keyed state of one operator subtask for the key groups ``key_groups``.

    Contract: the state of a key lives in the key's group (``key_group_of(key)``); only owned
    groups are ever read or written; ``capture`` returns a copy that later changes of the live
    state do not affect (a backend whose tables hold the value objects themselves, the heap's,
    says so by :attr:`shares_values` and marks what its copies share in :attr:`shared`);
    ``restore_group`` is called only before the operator opens.
    """

    #: whether the tables hold the value objects themselves, so that a shallow copy of them
    #: shares those objects (the heap); False where every read gives a new object (RocksDB,
    #: PostgreSQL: values are unpickled)
    shares_values = False

    def __init__(self, max_parallelism: int, key_groups: range) -> None:
        self.max_parallelism = max_parallelism
        self.key_groups = key_groups
        #: state name -> state type ("value", "list", ...): one name, one type
        self.state_types: dict[str, str] = {}
        #: state name -> TTL config, for states declared with one (``capture`` reads it for
        #: snapshot cleanup, :func:`epochal.state.ttl.drop_expired`)
        self.ttl_configs: dict[str, StateTtlConfig] = {}
        #: state name -> its incremental TTL cleanup, for states whose config asks for one
        self.ttl_cleanups: dict[str, IncrementalCleanup] = {}
        #: the incremental cleanups that also step on every record (``cleanup_for_every_record``)
        self.record_cleanups: list[IncrementalCleanup] = []
        #: query name -> state name, for the states declared queryable (their descriptor's
        #: ``queryable``, or :meth:`make_queryable`): what the worker's query server answers for
        self.queryable: dict[str, str] = {}
        self.current_key: Any = None
        self.current_group = 0
        #: the states whose value objects a capture shares with the live tables (a backend that
        #: copies its tables shallowly marks them: :mod:`epochal.state.copy_on_write`); the
        #: state objects copy such a value before user code may change it in place
        self.shared = SharedValues()

    def set_current_key(self, key: Any, group: int | None = None) -> None:
        """Scope every state object to ``key`` (and its key group) until the next call.

        ``group`` may be passed when the caller already computed ``key_group_of(key)``. Operators
        call it once per record and timer, so it also takes a step of every TTL cleanup that runs
        for every record."""
        self.current_key = key
        self.current_group = key_group_of(key, self.max_parallelism) if group is None else group
        if self.record_cleanups:
            now = CLOCK.now()
            for cleanup in self.record_cleanups:
                cleanup.step(now)

    def get_state(self, descriptor: StateDescriptor) -> Any:
        """The state object for ``descriptor``; the same name must always have the same kind and
        the same TTL config (:mod:`epochal.state.ttl`). A state with TTL gets a TTL state object;
        one without keeps the plain object, which pays nothing for TTL."""
        name, ttl = descriptor.name, descriptor.ttl
        if descriptor.queryable is not None:
            self.make_queryable(descriptor.queryable, name)
        known = self.state_types.get(name)
        if known is None:
            self.state_types[name] = descriptor.state_type
            if ttl is not None:
                self._declare_ttl(name, descriptor.state_type, ttl)
        elif known != descriptor.state_type:
            raise PlanError(f"state '{name}' was declared as {known} state and now as "
                            f"{descriptor.state_type} state; use another name")
        else:
            declared = self.ttl_configs.get(name)
            if declared is not ttl and declared != ttl:
                raise PlanError(f"state '{name}' was declared with ttl={declared!r} and now with ttl={ttl!r}; "
                                f"one state name has one TTL config (use another name)")
        if ttl is None:
            return STATE_TYPES[descriptor.state_type](self, descriptor)
        return TTL_STATE_TYPES[descriptor.state_type](self, descriptor)

    def make_queryable(self, query_name: str, state_name: str) -> None:
        """Let clients outside the job read state ``state_name`` as ``query_name``."""
        if not isinstance(query_name, str) or not query_name:
            raise PlanError(f"the queryable name of state '{state_name}' must be a non-empty string, "
                            f"not {query_name!r}")
        known = self.queryable.get(query_name)
        if known is not None and known != state_name:
            raise PlanError(f"queryable name '{query_name}' is given to states '{known}' and '{state_name}' "
                            f"of one operator; a query name names one state")
        self.queryable[query_name] = state_name

    def _declare_ttl(self, name: str, state_type: str, config: StateTtlConfig) -> None:
        """Record state ``name``'s TTL config (and start its incremental cleanup if it has one)."""
        self.ttl_configs[name] = config
        if config.cleanup_incrementally:
            cleanup = IncrementalCleanup(self.owned_table(name), self.key_groups, state_type, config,
                                         self.cleanup_cursor(name))
            self.ttl_cleanups[name] = cleanup
            if config.cleanup_for_every_record:
                self.record_cleanups.append(cleanup)

    # -- snapshots. A backend whose snapshots are not a copy of ``capture()`` overrides these, or
    # -- sets ``snapshots`` (an object with ``begin``/``begin_canonical``/``written``/``completed``, see
    # -- :class:`epochal.state.rocksdb.checkpoints.RocksDBSnapshots`).
    snapshots: Any = None

    def begin_snapshot(self, checkpoint_id: int) -> Any:
        """At the barrier of checkpoint ``checkpoint_id`` (processing thread): what its snapshot
        will write (a plan), or None: a copy of all of it."""
        return None if self.snapshots is None else self.snapshots.begin(checkpoint_id)

    def begin_savepoint(self, checkpoint_id: int, native: bool) -> Any:
        """At a savepoint's barrier: None, a copy of every key group (the canonical layout every
        backend restores), or, for ``native`` where the backend has a format of its own (RocksDB's
        SST files), a plan that writes all of its files, sharing none with a checkpoint. Nothing
        of a savepoint becomes the base of a later snapshot. A backend with ``snapshots`` plans a
        canonical savepoint too (``begin_canonical``: a plan that writes the canonical layout
        off the processing thread)."""
        if self.snapshots is None:
            return None
        if native:
            return self.snapshots.begin(checkpoint_id, whole=True)
        return self.snapshots.begin_canonical(checkpoint_id)

    def capture_snapshot(self, plan: Any) -> Any:
        """What to hand to the writer for ``plan`` (from :meth:`begin_snapshot`): :meth:`capture`
        without a plan; else the plan, which writes itself (``plan.upload``)."""
        return self.capture() if plan is None else plan

    def snapshot_written(self, checkpoint_id: int, handle: dict[str, Any]) -> None:
        """The files of checkpoint ``checkpoint_id`` are written; ``handle``: its keyed-state
        handle (uploader thread, before the acknowledgement)."""
        if self.snapshots is not None:
            self.snapshots.written(checkpoint_id, handle)

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed (processing thread)."""
        if self.snapshots is not None:
            self.snapshots.completed(checkpoint_id)

    def checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` will never complete (processing thread). Local backends
        need not know: their next snapshot builds on the last completed one."""

    def prefetch(self, keys: list[Any], key_groups: list[int]) -> None:
        """A keyed operator is about to process a batch with these keys (``key_groups[i]`` is
        ``keys[i]``'s): a backend whose reads are round trips (an external database) reads them
        all now, in one. Local backends do nothing."""

    @abstractmethod
    def owned_table(self, name: str) -> GroupTables:
        """State ``name`` as ``{key group: {key: value}}`` with an entry for every owned group."""

    def cleanup_cursor(self, name: str) -> KeyCursor | None:
        """Where state ``name``'s incremental TTL cleanup takes its keys; None (the default): the
        keys of every owned group of :meth:`owned_table` in turn. A backend that lists keys more
        cheaply returns its own cursor."""
        return None

    def batch_logged_table(self, name: str) -> tuple[GroupTables, Callable[[list[Any], list[int]], None] | None]:
        """State ``name``'s :meth:`owned_table` for an operator that writes a whole batch's keys
        at a time, and a log to call once per batch, before writing, with the batch's keys and
        key groups (None: this backend needs no log). After this call only that operator may
        write state ``name``, and only keys it logged; an incremental heap backend then keeps
        the state in plain dicts (:class:`~epochal.state.incremental.BatchLog`)."""
        return self.owned_table(name), None

    @abstractmethod
    def capture(self) -> Captured:
        """Synchronous part of a snapshot: a copy of the non-empty state, per key group."""

    @abstractmethod
    def restore_group(self, group: int, states: dict[str, dict[Any, Any]]) -> None:
        """Load one key group's state (``{state name: {key: value}}``) before the operator opens."""

    def restore_stored_group(self, group: int, stored: dict[str, tuple[list[bytes], list[bytes]]]) -> None:
        """:meth:`restore_group` of a group as the canonical layout's stored bytes (``{state name:
        (key bytes, value bytes)}``, :mod:`epochal.state.canonical`): decoded here; a backend that
        stores these bytes (RocksDB) writes them as they are."""
        from epochal.state.canonical import decode_states

        self.restore_group(group, decode_states(stored))

    @abstractmethod
    def entry_count(self) -> int:
        """Number of (state name, key) entries held."""

    def state_entries(self) -> dict[str, int]:
        """Keys per state now, cheaply (a snapshot records it for the metadata view): exact where
        the backend counts its entries as it holds them, RocksDB's estimate, or ``{}`` for a
        backend that cannot tell without a scan."""
        return {}
