"""Operators reach keyed state only through the KeyedStateBackend interface.

``ViewBackend`` keeps all state in one flat store and hands out *views* whose values are
copies (as a RocksDB backend deserialises them): an operator that touched backend internals,
or changed a value in place without writing it back, would give different results here than on
the heap backend. Every built-in keyed operator and every state type runs on both.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest

from epochal.api.functions import ProcessFunction, RuntimeContext, as_process_function
from epochal.plan.keygroups import key_group_range
from epochal.runtime.operators.aggregates import (
    CountAggregate,
    FoldAggregate,
    ReduceAggregate,
    emit_key_value,
    emit_value,
)
from epochal.runtime.operators.base import KeyedReduceOperator
from epochal.runtime.operators.inband import NO_WATERMARK
from epochal.runtime.operators.process import ProcessOperator
from epochal.runtime.windows.time_windows import TumblingWindowOperator
from epochal.state.backend import KeyedStateBackend
from epochal.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.operator_state import OperatorStateStore

MAX_P = 16


class _GroupView(MutableMapping):
    def __init__(self, store: dict, name: str, group: int) -> None:
        self.store, self.name, self.group = store, name, group

    def __getitem__(self, key: Any) -> Any:
        return pickle.loads(self.store[(self.name, self.group, key)])  # a copy, as from disk

    def __setitem__(self, key: Any, value: Any) -> None:
        self.store[(self.name, self.group, key)] = pickle.dumps(value)

    def __delitem__(self, key: Any) -> None:
        del self.store[(self.name, self.group, key)]

    def _keys(self) -> list[Any]:
        return [k for (n, g, k) in self.store if n == self.name and g == self.group]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


class ViewBackend(KeyedStateBackend):
    """Keyed state in one flat store of pickled values; no ``tables``, views only."""

    def __init__(self, max_parallelism: int, key_groups: range) -> None:
        super().__init__(max_parallelism, key_groups)
        self._store: dict[tuple[str, int, Any], bytes] = {}

    def owned_table(self, name: str) -> dict[int, MutableMapping[Any, Any]]:
        return {group: _GroupView(self._store, name, group) for group in self.key_groups}

    def capture(self) -> dict[int, dict[str, dict[Any, Any]]]:
        out: dict[int, dict[str, dict[Any, Any]]] = {}
        for (name, group, key), blob in self._store.items():
            out.setdefault(group, {}).setdefault(name, {})[key] = pickle.loads(blob)
        return out

    def restore_group(self, group: int, states: dict[str, dict[Any, Any]]) -> None:
        for name, entries in states.items():
            for key, value in entries.items():
                self._store[(name, group, key)] = pickle.dumps(value)

    def entry_count(self) -> int:
        return len(self._store)


def open_operator(operator, backend_type, index=0, parallelism=1, restore=None):
    groups = key_group_range(index, parallelism, MAX_P)
    backend = backend_type(MAX_P, groups)
    for group, states in (restore or {}).items():
        if group in groups:
            backend.restore_group(group, states)
    context = RuntimeContext(operator_name="op", operator_uid="op", subtask_index=index, parallelism=parallelism,
                             max_parallelism=MAX_P, key_groups=groups, keyed_state=backend,
                             operator_state=OperatorStateStore())
    operator.name = "op"
    operator.open(context, lambda payload: None)
    return operator, backend


RECORDS = [(f"k{i % 7}", i) for i in range(200)]


def key(record):
    return record[0]


def run(make_operator, backend_type, batches=(RECORDS[:90], RECORDS[90:])):
    operator, backend = open_operator(make_operator(), backend_type)
    out = []
    for batch in batches:
        out.extend(operator.process_batch(list(batch)))
    out.extend(operator.on_watermark(10**9) if hasattr(operator, "on_watermark") else [])
    out.extend(operator.end_input())
    return out, backend.capture()


class EveryStateType(ProcessFunction):
    def open(self, context):
        self.value = ValueStateDescriptor("value", default=0)
        self.items = ListStateDescriptor("items")
        self.index = MapStateDescriptor("index")
        self.largest = ReducingStateDescriptor("largest", reduce_fn=max)
        self.mean = AggregatingStateDescriptor("mean", aggregate_function=Mean())

    def process_element(self, record, ctx):
        value = ctx.get_state(self.value)
        value.update(value.value() + 1)
        items = ctx.get_state(self.items)
        items.add(record[1])
        index = ctx.get_state(self.index)
        index.put(record[1] % 3, record[1])
        if record[1] % 5 == 0:
            index.remove(0)
        largest = ctx.get_state(self.largest)
        largest.add(record[1])
        mean = ctx.get_state(self.mean)
        mean.add(record[1])
        yield (ctx.current_key, value.value(), len(items.get()), sorted(index.items()), largest.get(), mean.get())


class Mean:
    def create_accumulator(self):
        return [0, 0]

    def add(self, value, accumulator):
        accumulator[0] += value  # changed in place: the state object must write it back
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]


OPERATORS = {
    "count": lambda: KeyedReduceOperator(key, CountAggregate(), emit_key_value),
    "reduce": lambda: KeyedReduceOperator(key, ReduceAggregate(lambda a, b: (a[0], a[1] + b[1])), emit_value),
    "sum": lambda: KeyedReduceOperator(key, FoldAggregate(lambda r: r[1], lambda a, b: a + b), emit_key_value),
    "window": lambda: TumblingWindowOperator(key, lambda r: r[1], 50, CountAggregate()),
    "window-reduce": lambda: TumblingWindowOperator(key, lambda r: r[1], 50,
                                                    FoldAggregate(lambda r: r[1], lambda a, b: a + b)),
    "process": lambda: ProcessOperator(as_process_function(EveryStateType()), key),
}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operators_give_the_same_output_and_state_on_any_backend(name):
    heap_out, heap_state = run(OPERATORS[name], HeapKeyedStateBackend)
    view_out, view_state = run(OPERATORS[name], ViewBackend)
    assert heap_out, "the operator produced nothing: the test would prove nothing"
    assert view_out == heap_out
    assert view_state == heap_state


def test_window_state_restores_into_another_backend_and_parallelism():
    operator, backend = open_operator(OPERATORS["window"](), HeapKeyedStateBackend)
    operator.process_batch(RECORDS[:120])
    snapshot = backend.capture()
    assert operator.watermark == NO_WATERMARK
    fired = []
    for index in range(2):  # rescaled to 2 subtasks, each restoring the groups it owns
        restored, _ = open_operator(OPERATORS["window"](), ViewBackend, index, 2, restore=snapshot)
        restored.process_batch([r for r in RECORDS[120:] if r[0] in _owned_keys(index, 2)])
        fired.extend(restored.end_input())
    reference, _ = run(OPERATORS["window"], HeapKeyedStateBackend)
    assert sorted(fired) == sorted(reference)


def _owned_keys(index, parallelism):
    from epochal.plan.keygroups import key_group_of

    groups = key_group_range(index, parallelism, MAX_P)
    return {k for k, _ in RECORDS if key_group_of(k, MAX_P) in groups}


@pytest.mark.parametrize("backend_type", [HeapKeyedStateBackend, ViewBackend])
def test_every_state_type_matches_a_plain_python_oracle(backend_type):
    out, _ = run(OPERATORS["process"], backend_type)
    counts: dict = {}
    items: dict = {}
    index: dict = {}
    largest: dict = {}
    totals: dict = {}
    expected = []
    for k, v in RECORDS:
        counts[k] = counts.get(k, 0) + 1
        items.setdefault(k, []).append(v)
        index.setdefault(k, {})[v % 3] = v
        if v % 5 == 0:
            index[k].pop(0, None)
        largest[k] = max(largest.get(k, v), v)
        total, n = totals.get(k, (0, 0))
        totals[k] = (total + v, n + 1)
        expected.append((k, counts[k], len(items[k]), sorted(index[k].items()), largest[k],
                         totals[k][0] / totals[k][1]))
    assert out == expected
