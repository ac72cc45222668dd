"""Two inputs: ``connect`` (Flink's ConnectedStreams) and the broadcast state pattern.

::

    alerts = (orders.key_by(lambda o: o.user)
              .connect(payments.key_by(lambda p: p.user))
              .process(MatchOrdersAndPayments()))          # a CoProcessFunction with timers

    rules = control.broadcast(MapStateDescriptor("rules"))
    checked = events.key_by(lambda e: e.kind).connect(rules).process(ApplyRules())

Both are managed state through every checkpoint mode and rescaled restore: keyed state and
timers of a keyed connection by key group, broadcast state as union operator state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from epochal.api.fields import check_callable
from epochal.errors import PlanError
from epochal.runtime.operators.co_process import (
    BroadcastProcessFunction,
    BroadcastProcessOperator,
    CoMapFunction,
    CoProcessFunction,
    CoProcessOperator,
)

if TYPE_CHECKING:
    from epochal.api.datastream import DataStream


def _check_function(function: Any, call: str, kind: str, methods: tuple[str, ...]) -> None:
    """A PlanError unless ``function`` is an object (not a class) with every method of ``kind``."""
    if isinstance(function, type):
        raise PlanError(f"process() takes a {kind} object, got the class {function.__name__}: "
                        f"pass {function.__name__}(...)")
    for method in methods:
        if not callable(getattr(function, method, None)):
            raise PlanError(f"{call} takes a {kind} with {method}(value, ctx); {type(function).__name__} has none")


class BroadcastStream:
    """A stream every subtask of the operator it is connected to receives whole, with the
    broadcast states it fills (``stream.broadcast(descriptor, ...)``); only ``connect`` it."""

    def __init__(self, stream: DataStream, descriptors: list[Any]) -> None:
        self.stream = stream
        self.descriptors = descriptors


class ConnectedStreams:
    """Two streams processed by one operator (``first.connect(second)``); keyed when both are
    (``key_by`` on each before connecting, or :meth:`key_by` here)."""

    def __init__(self, first: DataStream, second: DataStream) -> None:
        if first.env is not second.env:
            raise PlanError("connect() needs streams of the same Environment")
        self.first = first
        self.second = second
        self.key1 = first._key_selector()
        self.key2 = second._key_selector()
        if (self.key1 is None) != (self.key2 is None):
            raise PlanError("connect(): either both streams are keyed or neither is; key_by() the other one too, "
                            "or call connected.key_by(key1, key2)")

    def key_by(self, key1: Callable[[Any], Any], key2: Callable[[Any], Any]) -> ConnectedStreams:
        """Key both inputs: records whose keys are equal share keyed state and timers."""
        return ConnectedStreams(self.first.key_by(key1), self.second.key_by(key2))

    def process(self, function: CoProcessFunction) -> DataStream:
        """Run a :class:`CoProcessFunction` (with keyed state and timers when keyed)."""
        _check_function(function, "connect(...).process()", "CoProcessFunction",
                        ("process_element1", "process_element2"))
        operator = CoProcessOperator(function, self.key1, self.key2)
        name = "KeyedCoProcess" if self.key1 is not None else "CoProcess"
        return self._add("co_process", name, operator, [function, self.key1, self.key2])

    def map(self, fn1: Callable[[Any], Any], fn2: Callable[[Any], Any]) -> DataStream:
        """One output record per record of either input: ``fn1`` for the first, ``fn2`` for the second."""
        check_callable(fn1, "map")
        check_callable(fn2, "map")
        return self._add("co_map", "CoMap", CoProcessOperator(CoMapFunction(fn1, fn2, False), self.key1, self.key2),
                         [fn1, fn2])

    def flat_map(self, fn1: Callable[[Any], Iterable[Any]], fn2: Callable[[Any], Iterable[Any]]) -> DataStream:
        """Any number of output records per record of either input."""
        check_callable(fn1, "flat_map")
        check_callable(fn2, "flat_map")
        return self._add("co_flat_map", "CoFlatMap",
                         CoProcessOperator(CoMapFunction(fn1, fn2, True), self.key1, self.key2), [fn1, fn2])

    def _add(self, operation: str, name: str, operator: Any, functions: list[Any]) -> DataStream:
        return self.first._add(operation, name, operator, [f for f in functions if f is not None],
                               inputs=[self.first.node.id, self.second.node.id])


class BroadcastConnectedStream:
    """A stream connected with a :class:`BroadcastStream` (``stream.connect(broadcast_stream)``)."""

    def __init__(self, first: DataStream, broadcast: BroadcastStream) -> None:
        if first.env is not broadcast.stream.env:
            raise PlanError("connect() needs streams of the same Environment")
        self.first = first
        self.broadcast = broadcast

    def process(self, function: BroadcastProcessFunction) -> DataStream:
        """Run a :class:`BroadcastProcessFunction` (``KeyedBroadcastProcessFunction`` on a keyed
        stream: keyed state and timers in ``process_element``)."""
        _check_function(function, "connect(broadcast).process()", "BroadcastProcessFunction",
                        ("process_element", "process_broadcast_element"))
        key = self.first._key_selector()
        operator = BroadcastProcessOperator(function, key, self.broadcast.descriptors)
        name = "KeyedBroadcastProcess" if key is not None else "BroadcastProcess"
        return self.first._add("broadcast_process", name, operator, [f for f in (function, key) if f is not None],
                               inputs=[self.first.node.id, self.broadcast.stream.node.id])
