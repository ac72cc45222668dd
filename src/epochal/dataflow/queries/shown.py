"""What a query shows of a subtask's keyed state: the values of states with a TTL without their
timestamps (expired ones not at all), and the views of every queryable state that
``read_committed`` queries are answered from (:mod:`epochal.dataflow.queries.committed`).
Functions of a backend's tables and a time (a RocksDB backend's views are of a local checkpoint
that it makes; a PostgreSQL backend's read the database)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from epochal.dataflow.queries.committed import Views
from epochal.state.ttl import CLOCK, SINGLE_VALUE_TYPES, unexpired

#: what :func:`visible` shows of an expired value: nothing
GONE = object()
_DEEP = {"list": list, "map": dict}


def visible(stored: Any, state_type: str, horizon: float) -> Any:
    """What a state with TTL shows of ``stored`` (values kept with their timestamps) when what was
    last updated at or before ``horizon`` has expired: the value, list or map without timestamps,
    or ``GONE``."""
    live = unexpired(stored, state_type, horizon)
    if live is None:
        return GONE
    if state_type in SINGLE_VALUE_TYPES:
        return live[0]
    if state_type == "list":
        return [element[0] for element in live]
    return {key: entry[0] for key, entry in live.items()}


def views_of(backend: Any, captured: dict[int, dict[str, dict[Any, Any]]] | None = None) -> Views:
    """The queryable states of ``backend`` as ``{query name: {group: {key: value}}}``, as they are
    now and as no operator changes them: ``captured`` (a full heap snapshot's copy, ``{group:
    {state: {key: value}}}``) shared where given; otherwise copied from the backend's tables
    (lists and maps one level deeper, as a snapshot copies them). A backend with
    ``committed_views`` gives read-only views instead: RocksDB of a local checkpoint (made in
    milliseconds, whatever the state's size), PostgreSQL of the rows it committed (which are, once
    the query server promotes the view, those of the view's checkpoint). States with TTL are
    copied and shown as of now: without their timestamps, without what has expired. A copy shares
    the live value objects: the backend's state objects copy them before user code may change
    them in place (:mod:`epochal.state.copy_on_write`), so the view keeps its checkpoint's."""
    views: Views = {}
    groups: dict[int, Mapping[Any, Any]]
    now = CLOCK.now()
    checkpointed = getattr(backend, "committed_views", None)  # RocksDB, PostgreSQL: not a copy
    if checkpointed is not None:
        plain = {query: state for query, state in backend.queryable.items() if state not in backend.ttl_configs}
        if plain:
            views.update(checkpointed(plain))
    for query_name, state_name in backend.queryable.items():
        if query_name in views:
            continue
        ttl = backend.ttl_configs.get(state_name)
        if ttl is not None:
            state_type, horizon = backend.state_types[state_name], now - ttl.ttl
            groups = {}
            for group, entries in backend.owned_table(state_name).items():
                shown = {k: visible(v, state_type, horizon) for k, v in entries.items()}
                shown = {k: v for k, v in shown.items() if v is not GONE}
                if shown:
                    groups[group] = shown
            views[query_name] = groups
            continue
        if captured is not None:
            views[query_name] = {group: states[state_name] for group, states in captured.items()
                                 if state_name in states}
            continue
        deep = _DEEP.get(backend.state_types.get(state_name, "value"))
        groups = {}
        for group, entries in backend.owned_table(state_name).items():
            if entries:
                groups[group] = {k: deep(v) for k, v in entries.items()} if deep else dict(entries.items())
        views[query_name] = groups
    if backend.shares_values:  # the copies hold the live value objects: from now on user code
        backend.shared.share(backend.queryable.values())  # gets private copies of them
    return views
