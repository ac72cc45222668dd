"""What user code of the general window operator sees: :class:`WindowContext` (the context of
triggers and of window functions), per-window keyed state, :class:`ProcessWindowFunction`, and
how accumulators of merging windows combine (:func:`merge_of`).

Per-window state (``ctx.get_partitioned_state(descriptor)``, ``ctx.window_state()``) is managed
keyed state of the operator: the table ``"window-state:<descriptor name>"`` maps a key to
``{window: value}``, so checkpoints hold it and a rescaled restore moves it with its key group.
Every write replaces the key's dict by a changed copy (the values are never changed in place), so
a snapshot that shares the old dict stays as it was, on every backend.
"""

from __future__ import annotations

import operator as _op
from collections.abc import Callable, Iterable
from typing import Any

from epochal.runtime.operators.aggregates import (
    MISSING,
    CountAggregate,
    FieldAggregate,
    FoldAggregate,
    ReduceAggregate,
    get_field,
    replace_field,
)
from epochal.runtime.operators.functions import RuntimeContext, tag_id
from epochal.runtime.operators.timers import EVENT_TIME, PROCESSING_TIME
from epochal.runtime.windows.time_windows import FunctionAggregate

#: Prefix of the tables of per-window state (a name users cannot pick by accident for global state).
WINDOW_STATE_PREFIX = "window-state:"


class WindowContext:
    """The context of a trigger (Flink's ``TriggerContext``/``OnMergeContext``) and of a window
    function (``ProcessWindowFunction.Context``), scoped to one key and one window.

    For triggers: ``register_event_time_timer(t)``, ``register_processing_time_timer(t)``, their
    ``delete_...``, ``get_partitioned_state(descriptor)`` (state of this key and window),
    ``merge_partitioned_state(descriptor)`` (in ``on_merge``). For window functions: ``window()``,
    ``window_state()`` / ``global_state()`` (stores with ``get_state(descriptor)``: per key and
    window / per key) and ``output(tag, value)`` (a side output). Both: ``current_key``,
    ``current_watermark()`` and ``current_processing_time()`` (seconds, the operator's clock).
    """

    __slots__ = ("operator", "current_key", "group", "current_window", "merged")

    def __init__(self, operator: Any) -> None:
        self.operator = operator
        self.current_key: Any = None
        #: the key group of ``current_key``
        self.group = 0
        self.current_window: Any = None
        #: in ``on_merge``: the windows merged into ``current_window``
        self.merged: list[Any] = []

    def window(self) -> Any:
        return self.current_window

    def get_current_key(self) -> Any:
        return self.current_key

    def current_watermark(self) -> Any:
        """The operator's event time (``-inf`` before the first watermark, ``inf`` at the end)."""
        return self.operator.watermark

    def current_processing_time(self) -> float:
        return self.operator.clock()

    def register_event_time_timer(self, time: Any) -> None:
        """Call the trigger's ``on_event_time(time, window)`` once the watermark reaches ``time``."""
        self.operator.register_timer(EVENT_TIME, time, self.current_key, self.group, self.current_window)

    def delete_event_time_timer(self, time: Any) -> None:
        self.operator.delete_timer(EVENT_TIME, time, self.current_key, self.group, self.current_window)

    def register_processing_time_timer(self, time: float) -> None:
        """Call the trigger's ``on_processing_time(time, window)`` once the clock reaches ``time``."""
        self.operator.register_timer(PROCESSING_TIME, time, self.current_key, self.group, self.current_window)

    def delete_processing_time_timer(self, time: float) -> None:
        self.operator.delete_timer(PROCESSING_TIME, time, self.current_key, self.group, self.current_window)

    def get_partitioned_state(self, descriptor: Any) -> Any:
        """State of the current key and window for a Value/List/Reducing/AggregatingStateDescriptor."""
        return self.operator.window_state(descriptor)

    def merge_partitioned_state(self, descriptor: Any) -> None:
        """In ``on_merge``: combine the state of the merged windows into the current window (list:
        concatenated, reducing: ``reduce_fn``, aggregating: ``merge``); theirs is removed."""
        self.operator.window_state(descriptor).merge_from(self.merged)

    def window_state(self) -> StateStore:
        """Per-window state of the window function (not for merging windows, as in Flink)."""
        if self.operator.assigner.merging:
            raise RuntimeError("per-window state is not available for merging (session) windows")
        return StateStore(self.operator.window_state)

    def global_state(self) -> StateStore:
        """Keyed state of the current key, shared by all its windows."""
        return StateStore(self.operator.backend.get_state)

    def output(self, tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``tag`` (an OutputTag)."""
        self.operator.side.append((tag_id(tag, "output()"), value))


class StateStore:
    """``get_state(descriptor)`` of ``context.window_state()`` / ``context.global_state()``."""

    __slots__ = ("get_state",)

    def __init__(self, get_state: Callable[[Any], Any]) -> None:
        self.get_state = get_state


class _WindowState:
    """State of one name for the key and window of ``scope`` (a WindowContext)."""

    __slots__ = ("groups", "scope", "descriptor")

    def __init__(self, groups: Any, scope: WindowContext, descriptor: Any) -> None:
        self.groups = groups
        self.scope = scope
        self.descriptor = descriptor

    def _read(self, window: Any = None) -> Any:
        scope = self.scope
        values = self.groups[scope.group].get(scope.current_key)
        return MISSING if values is None else values.get(scope.current_window if window is None else window, MISSING)

    def _write(self, value: Any) -> None:
        scope = self.scope
        entries = self.groups[scope.group]
        values = entries.get(scope.current_key)
        values = {} if values is None else dict(values)
        values[scope.current_window] = value
        entries[scope.current_key] = values

    def clear(self) -> None:
        scope = self.scope
        drop_window(self.groups, scope.group, scope.current_key, scope.current_window)

    def _combine(self, a: Any, b: Any) -> Any:
        raise TypeError(f"{type(self.descriptor).__name__} '{self.descriptor.name}' cannot merge: "
                        "use list, reducing or aggregating state")

    def merge_from(self, sources: list[Any]) -> None:
        """Fold the values of windows ``sources`` into the current window's, and drop theirs."""
        merged = self._read()
        for window in sources:
            value = self._read(window)
            if value is not MISSING:
                merged = value if merged is MISSING else self._combine(merged, value)
                drop_window(self.groups, self.scope.group, self.scope.current_key, window)
        if merged is not MISSING:
            self._write(merged)


def drop_window(groups: Any, group: int, key: Any, window: Any) -> None:
    """Remove ``window``'s value of ``key`` from a per-window table (a changed copy is written)."""
    entries = groups[group]
    values = entries.get(key)
    if values is None or window not in values:
        return
    values = dict(values)
    del values[window]
    if values:
        entries[key] = values
    else:
        del entries[key]


class WindowValueState(_WindowState):
    def value(self) -> Any:
        found = self._read()
        return self.descriptor.default if found is MISSING else found

    def update(self, value: Any) -> None:
        self._write(value)


class WindowListState(_WindowState):
    def get(self) -> list[Any]:
        found = self._read()
        return [] if found is MISSING else list(found)

    def add(self, value: Any) -> None:
        self.add_all([value])

    def add_all(self, values: list[Any]) -> None:
        found = self._read()
        self._write((() if found is MISSING else found) + tuple(values))

    def update(self, values: list[Any]) -> None:
        self._write(tuple(values))

    def _combine(self, a: Any, b: Any) -> Any:
        return a + b


class WindowReducingState(_WindowState):
    def get(self) -> Any:
        found = self._read()
        return None if found is MISSING else found

    def add(self, value: Any) -> None:
        found = self._read()
        self._write(value if found is MISSING else self.descriptor.reduce_fn(found, value))

    def _combine(self, a: Any, b: Any) -> Any:
        return self.descriptor.reduce_fn(a, b)


class WindowAggregatingState(_WindowState):
    def get(self) -> Any:
        found = self._read()
        return None if found is MISSING else self.descriptor.aggregate_function.get_result(found)

    def add(self, value: Any) -> None:
        function = self.descriptor.aggregate_function
        found = self._read()
        self._write(function.add(value, function.create_accumulator() if found is MISSING else found))

    def _combine(self, a: Any, b: Any) -> Any:
        return self.descriptor.aggregate_function.merge(a, b)


#: state type -> per-window state class
WINDOW_STATE_TYPES: dict[str, type[_WindowState]] = {
    "value": WindowValueState, "list": WindowListState, "reducing": WindowReducingState,
    "aggregating": WindowAggregatingState}


class ProcessWindowFunction:
    """A function over a window's contents (Flink's ``ProcessWindowFunction``).

    :meth:`process` is called per firing with the key, the context (``context.window()``, the
    clocks, state, side outputs) and the elements: all records of the window in arrival order
    for ``process(fn)``, or a one-element list holding the aggregate for ``reduce(fn,
    window_function)`` / ``aggregate(agg, window_function)``. It returns (or yields) the records
    to emit, or None. The elements list must not be changed. :meth:`clear` is called when the
    window is cleaned up (delete its ``window_state()`` there).
    """

    def open(self, context: RuntimeContext) -> None:
        """Called once per subtask before the first record."""

    def process(self, key: Any, context: WindowContext, elements: list[Any]) -> Iterable[Any] | None:
        raise NotImplementedError

    def clear(self, context: WindowContext) -> None:
        """The window ``context.window()`` is cleaned up."""

    def close(self) -> None:
        """Called once when the subtask ends, also after a failure."""


class _CallableWindowFunction(ProcessWindowFunction):
    """Adapts ``fn(key, context, elements) -> iterable | None``."""

    def __init__(self, fn: Callable[[Any, WindowContext, list[Any]], Iterable[Any] | None]) -> None:
        self.fn = fn

    def process(self, key: Any, context: WindowContext, elements: list[Any]) -> Iterable[Any] | None:
        return self.fn(key, context, elements)


def as_window_function(fn: Any) -> ProcessWindowFunction:
    """A ProcessWindowFunction as is, or a plain ``fn(key, context, elements)`` adapted."""
    if isinstance(fn, ProcessWindowFunction):
        return fn
    if isinstance(fn, type) or not callable(fn):
        raise TypeError(f"takes a ProcessWindowFunction object or a function (key, context, elements) -> "
                        f"iterable, got {fn!r}")
    return _CallableWindowFunction(fn)


class FieldMerge:
    """Merges two accumulators of ``sum/min/max(field)``: the first record, its field combined."""

    def __init__(self, field: str | int, combine: Callable[[Any, Any], Any]) -> None:
        self.field = field
        self.combine = combine

    def __call__(self, a: Any, b: Any) -> Any:
        field = self.field
        return replace_field(a, field, self.combine(get_field(a, field), get_field(b, field)))


def merge_of(aggregate: Any) -> Callable[[Any, Any], Any] | None:
    """How two accumulators of ``aggregate`` (a rolling aggregate or a FunctionAggregate) combine
    into one when windows merge (the earlier window's first); None if it cannot."""
    cls = type(aggregate)
    if cls is ReduceAggregate:
        return aggregate.fn  # re-reduce the two partial results
    if cls is CountAggregate:
        return _op.add
    if cls is FoldAggregate:
        return aggregate.combine
    if cls is FieldAggregate:
        return FieldMerge(aggregate.field, aggregate.combine)
    if cls is FunctionAggregate:
        return aggregate.function.merge
    merge = getattr(aggregate, "merge", None)
    return merge if callable(merge) else None
