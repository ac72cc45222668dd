"""Two-input operators: ``connect`` with a :class:`CoProcessFunction`, and the broadcast state
pattern (Flink's ``CoProcessOperator``, ``KeyedCoProcessOperator`` and
``Co/KeyedBroadcastProcessOperator``).

A connected stream's two inputs arrive in batches on the operator's first and second input
(``process_batch`` / ``process_batch2``); the operator's event time is the minimum of both
inputs' watermarks (the subtask's, as for any operator with several input channels). When both
inputs are keyed (``a.key_by(f).connect(b.key_by(g))``), both key selectors must give equal keys
for records that belong together: they share keyed state and timers, scoped to the current key.

Broadcast state: ``main.connect(rules.broadcast(descriptor))`` sends every record of ``rules``
to every subtask, where :meth:`BroadcastProcessFunction.process_broadcast_element` may change
the broadcast state (a dict per :class:`MapStateDescriptor`); ``process_element`` reads it but
may not change it, so every subtask holds the same broadcast state. It is operator state in
checkpoints (list state in ``union`` mode: a restore at any parallelism gives every subtask the
whole state).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from epochal.runtime.operators.functions import ProcessContext, RuntimeContext
from epochal.runtime.operators.process import ProcessOperator
from epochal.state.copy_on_write import frozen


class CoProcessFunction:
    """A function over two connected streams (Flink's ``CoProcessFunction``; on two keyed
    streams also its ``KeyedCoProcessFunction``: keyed state and timers of the current key).

    Each ``process_element*`` returns (or yields) the records to emit, or None.
    """

    def open(self, context: RuntimeContext) -> None:
        """Called once per subtask before the first record."""

    def process_element1(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        """A record of the first stream."""
        raise NotImplementedError

    def process_element2(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        """A record of the second stream."""
        raise NotImplementedError

    def on_timer(self, timestamp: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        """A timer of ``ctx.current_key`` fired (keyed connected streams only)."""
        return None

    def close(self) -> None:
        """Called once when the subtask ends, also after a failure."""


class CoMapFunction(CoProcessFunction):
    """``connected.map(fn1, fn2)`` / ``flat_map(fn1, fn2)``: one function per input."""

    def __init__(self, fn1: Callable[[Any], Any], fn2: Callable[[Any], Any], flat: bool) -> None:
        self.fn1, self.fn2, self.flat = fn1, fn2, flat

    def process_element1(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        return self.fn1(value) if self.flat else (self.fn1(value),)

    def process_element2(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        return self.fn2(value) if self.flat else (self.fn2(value),)


class CoProcessOperator(ProcessOperator):
    """Runs a :class:`CoProcessFunction`; ``key_selector``/``key_selector2`` key the inputs (both
    or neither)."""

    input_count = 2

    def __init__(self, function: Any, key_selector: Callable[[Any], Any] | None = None,
                 key_selector2: Callable[[Any], Any] | None = None) -> None:
        super().__init__(function, key_selector)
        self.key_selector2 = key_selector2

    def process_batch(self, batch: list[Any]) -> list[Any]:
        return self._run(batch, self.function.process_element1, self.key_selector)

    def process_batch2(self, batch: list[Any]) -> list[Any]:
        return self._run(batch, self.function.process_element2, self.key_selector2)


class BroadcastState:
    """One broadcast state (a dict, Flink's ``BroadcastState``); read-only where it is handed to
    ``process_element``."""

    __slots__ = ("name", "entries", "writable")

    def __init__(self, name: str, entries: dict[Any, Any], writable: bool) -> None:
        self.name, self.entries, self.writable = name, entries, writable

    def _check(self) -> None:
        if not self.writable:
            raise RuntimeError(f"broadcast state '{self.name}' is read-only in process_element: change it in "
                               "process_broadcast_element, so that every subtask sees the same changes")

    def get(self, key: Any, default: Any = None) -> Any:
        return self.entries.get(key, default)

    def contains(self, key: Any) -> bool:
        return key in self.entries

    __contains__ = contains

    def __getitem__(self, key: Any) -> Any:
        return self.entries[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def keys(self) -> Iterable[Any]:
        return list(self.entries)

    def values(self) -> Iterable[Any]:
        return list(self.entries.values())

    def items(self) -> Iterable[tuple[Any, Any]]:
        return list(self.entries.items())

    def put(self, key: Any, value: Any) -> None:
        self._check()
        self.entries[key] = value

    __setitem__ = put

    def put_all(self, entries: dict[Any, Any]) -> None:
        self._check()
        self.entries.update(entries)

    def remove(self, key: Any) -> None:
        self._check()
        self.entries.pop(key, None)

    def clear(self) -> None:
        self._check()
        self.entries.clear()


class BroadcastContext(ProcessContext):
    """The context of the broadcast pattern's functions: a :class:`ProcessContext` with
    ``get_broadcast_state(descriptor)`` (writable only in ``process_broadcast_element``) and, in
    ``process_broadcast_element`` on a keyed stream, ``apply_to_keyed_state``."""

    __slots__ = ("operator", "writable")

    def __init__(self, runtime: RuntimeContext, side: list[tuple[str, Any]], operator: BroadcastProcessOperator,
                 timers: bool, writable: bool) -> None:
        super().__init__(runtime, side, operator if timers else None)
        self.operator = operator
        self.writable = writable

    def get_broadcast_state(self, descriptor: Any) -> BroadcastState:
        return BroadcastState(descriptor.name, self.operator.state_of(descriptor), self.writable)

    def apply_to_keyed_state(self, descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        """``function(key, state)`` for every key of this subtask that has state ``descriptor``
        (Flink's ``applyToKeyedState``), with the key set as the current key."""
        if not self.writable or self.operator.backend is None:
            raise RuntimeError("apply_to_keyed_state() works in process_broadcast_element of a keyed stream")
        self.operator.apply_to_keyed_state(descriptor, function)


class BroadcastProcessFunction:
    """The broadcast state pattern (Flink's ``BroadcastProcessFunction``; on a keyed main
    stream its ``KeyedBroadcastProcessFunction``, with keyed state and timers in
    ``process_element`` and ``on_timer``)."""

    def open(self, context: RuntimeContext) -> None:
        """Called once per subtask before the first record."""

    def process_element(self, value: Any, ctx: BroadcastContext) -> Iterable[Any] | None:
        """A record of the main stream; the broadcast state is read-only here."""
        raise NotImplementedError

    def process_broadcast_element(self, value: Any, ctx: BroadcastContext) -> Iterable[Any] | None:
        """A record of the broadcast stream (every subtask gets each one); may change the
        broadcast state. Must act the same on every subtask."""
        raise NotImplementedError

    def on_timer(self, timestamp: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        """A timer of ``ctx.current_key`` fired (keyed main stream only)."""
        return None

    def close(self) -> None:
        """Called once when the subtask ends, also after a failure."""


KeyedBroadcastProcessFunction = BroadcastProcessFunction


class BroadcastProcessOperator(ProcessOperator):
    """Runs a :class:`BroadcastProcessFunction`: the main stream on the first input (keyed by
    ``key_selector`` or not), the broadcast stream on the second; ``descriptors`` name the
    broadcast states."""

    input_count = 2
    STATE = "broadcast-state"

    def __init__(self, function: BroadcastProcessFunction, key_selector: Callable[[Any], Any] | None,
                 descriptors: list[Any]) -> None:
        super().__init__(function, key_selector)
        self.descriptors = list(descriptors)
        self.states: dict[str, dict[Any, Any]] = {}
        self.stored: list[Any] = []
        self.broadcast_ctx: BroadcastContext | None = None

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        self.stored = context.get_list_state(self.STATE, "union")
        self.states = {d.name: {} for d in self.descriptors}
        for name, key, value in self.stored:  # a union restore: every old subtask's (equal) copy
            self.states.setdefault(name, {})[key] = value
        super().open(context, send_to_driver)
        self.ctx = BroadcastContext(context, self.side, self, self.timers is not None, writable=False)
        self.broadcast_ctx = BroadcastContext(context, self.side, self, False, writable=True)

    def state_of(self, descriptor: Any) -> dict[Any, Any]:
        if descriptor.name not in self.states:
            declared = ", ".join(repr(d.name) for d in self.descriptors) or "none"
            raise KeyError(f"no broadcast state '{descriptor.name}': broadcast(...) declared {declared}")
        return self.states[descriptor.name]

    def process_batch2(self, batch: list[Any]) -> list[Any]:
        ctx = self.broadcast_ctx
        assert ctx is not None
        process = self.function.process_broadcast_element
        out: list[Any] = []
        for record in batch:
            produced = process(record, ctx)
            if produced is not None:
                out.extend(produced)
        return out

    def apply_to_keyed_state(self, descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        backend = self.backend
        state = backend.get_state(descriptor)
        for group, entries in backend.owned_table(descriptor.name).items():
            for key in list(entries):
                backend.set_current_key(key, group)
                function(key, state)

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        # a value process_broadcast_element may change in place later is copied: a snapshot
        # written by a thread serialises the list after the barrier (broadcast states are small)
        self.stored[:] = [(name, key, value if frozen(value) else copy.deepcopy(value))
                          for name, entries in self.states.items() for key, value in entries.items()]
