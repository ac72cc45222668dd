"""State descriptors: a name and a state type, declared by a function and created through its context.

The name identifies the state inside its operator (together with the operator's uid, across
restores), so it must be stable across versions of a job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from epochal.state.ttl import StateTtlConfig


class AggregateFunction(Protocol):
    """Incremental aggregation (Flink's AggregateFunction), for :class:`AggregatingStateDescriptor`
    and window aggregates.

    ``add`` returns the new accumulator (it may change and return the one given); ``merge``
    combines two accumulators of the same key (windows that merge, partial aggregates), and is
    needed by window aggregates only; ``get_result`` does not change the accumulator."""

    def create_accumulator(self) -> Any: ...

    def add(self, value: Any, accumulator: Any) -> Any: ...

    def get_result(self, accumulator: Any) -> Any: ...

    def merge(self, a: Any, b: Any) -> Any: ...


@dataclass(frozen=True)
class StateDescriptor:
    """Base of all descriptors: ``name`` is unique within an operator.

    ``ttl`` (keyword only, every state type): a :class:`~epochal.state.ttl.StateTtlConfig` makes the
    state's values expire (:mod:`epochal.state.ttl`); ``None`` (default): they never do. One state
    name has one TTL config within a backend.

    ``queryable`` (keyword only): the name under which clients outside the job read this state
    while the job runs (:class:`epochal.QueryableStateClient`, ``epochal query``; papers/001
    §4.3, Flink's ``setQueryable``); ``None`` (default): it cannot be queried. A query name is
    unique within a job."""

    name: str
    ttl: StateTtlConfig | None = field(default=None, kw_only=True)
    queryable: str | None = field(default=None, kw_only=True)

    #: "value" | "list" | "reducing" | "aggregating" | "map": decides how snapshots copy values.
    state_type = "value"


@dataclass(frozen=True)
class ValueStateDescriptor(StateDescriptor):
    """One value per key; ``default`` is returned while none is set."""

    default: Any = None
    state_type = "value"


@dataclass(frozen=True)
class ListStateDescriptor(StateDescriptor):
    """A list per key that supports appending."""

    state_type = "list"


@dataclass(frozen=True)
class ReducingStateDescriptor(StateDescriptor):
    """One value per key, combined with ``reduce_fn(old, new)`` on every add."""

    reduce_fn: Callable[[Any, Any], Any] | None = None
    state_type = "reducing"


@dataclass(frozen=True)
class AggregatingStateDescriptor(StateDescriptor):
    """An accumulator per key, updated by an :class:`AggregateFunction` on every add."""

    aggregate_function: Any = None
    state_type = "aggregating"


@dataclass(frozen=True)
class MapStateDescriptor(StateDescriptor):
    """A map per key: put/get single entries without (de)serialising the whole map."""

    state_type = "map"
