"""The rows of one read: which columns each kind of state has, their types, and Arrow batches.

============  =====================================================================
kind          columns
============  =====================================================================
``keyed``     ``key``, ``value``, ``key_group`` (int)
keyed window  ``key``, ``namespace`` (the window), ``value``, ``key_group``: one row per key and
              window, for the states whose value per key is ``{window: value}``
              (:func:`~epochal.state.dataframes.snapshot_view.is_window_state`)
``timers``    ``key``, ``domain`` (``event_time`` / ``processing_time``), ``timestamp``, ``key_group``
``operator``  ``subtask`` (int), ``name``, ``mode`` (``split`` / ``union``), ``position`` (int), ``value``
============  =====================================================================

``key``, ``namespace``, ``value`` and ``timestamp`` are typed from a sample
(:mod:`epochal.state.dataframes.values`); the rest are fixed. A split is a key-group range
(:meth:`~epochal.state.dataframes.snapshot_view.SnapshotView.splits`); of operator state, one
old subtask. Rows are produced column-wise into Arrow record batches of at most
:data:`BATCH_ROWS` rows.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from epochal.state.dataframes import values as V
from epochal.state.dataframes.snapshot_view import ReadPlan, StateDataFrameError, is_window_state

BATCH_ROWS = 65_536
_DOMAINS = {0: "event_time", 1: "processing_time"}

Columns = dict[str, list[Any]]


def column_names(plan: ReadPlan) -> list[str]:
    """The columns of ``plan``'s rows, in order."""
    if plan.kind == "operator":
        return ["subtask", "name", "mode", "position", "value"]
    if plan.kind == "timers":
        return ["key", "domain", "timestamp", "key_group"]
    if plan.state is not None and is_window_state(plan.state):
        return ["key", "namespace", "value", "key_group"]
    return ["key", "value", "key_group"]


_FIXED = {"key_group": T.IntegerType(), "subtask": T.IntegerType(), "position": T.IntegerType(),
          "name": T.StringType(), "mode": T.StringType(), "domain": T.StringType()}
_INFERRED = ("key", "namespace", "value", "timestamp")


def columns_of(plan: ReadPlan, split: range | int) -> Iterator[Columns]:
    """``plan``'s data in ``split`` (a key-group range; of operator state, an old subtask's
    index), as chunks of columns (at most about :data:`BATCH_ROWS` rows each)."""
    names = column_names(plan)
    chunk: Columns = {name: [] for name in names}
    for part in _parts(plan, split):
        for name in names:
            chunk[name].extend(part[name])
        if len(chunk[names[0]]) >= BATCH_ROWS:
            yield chunk
            chunk = {name: [] for name in names}
    if chunk[names[0]]:
        yield chunk


def _parts(plan: ReadPlan, split: range | int) -> Iterator[Columns]:
    if plan.kind == "operator":
        assert isinstance(split, int)
        yield from _operator_parts(plan, split)
        return
    assert isinstance(split, range) and plan.state is not None
    window = plan.kind == "keyed" and is_window_state(plan.state)
    keys: list[Any]
    spaces: list[Any]
    values: list[Any]
    for group, states in plan.source().keyed_groups(plan.uid, split, names=frozenset({plan.state})):
        entries = states.get(plan.state)
        if not entries:
            continue
        if plan.kind == "timers":
            keys, domains, stamps = [], [], []
            for key, timers in entries.items():
                for code, timestamp in timers:
                    keys.append(key)
                    domains.append(_DOMAINS.get(code, str(code)))
                    stamps.append(timestamp)
            yield {"key": keys, "domain": domains, "timestamp": stamps, "key_group": [group] * len(keys)}
        elif window:
            keys, spaces, values = [], [], []
            for key, windows in entries.items():
                if not isinstance(windows, dict):  # not per window after all: the whole value, no namespace
                    keys.append(key)
                    spaces.append(None)
                    values.append(windows)
                    continue
                for space, value in windows.items():
                    keys.append(key)
                    spaces.append(space)
                    values.append(value)
            yield {"key": keys, "namespace": spaces, "value": values, "key_group": [group] * len(keys)}
        else:
            yield {"key": list(entries), "value": list(entries.values()), "key_group": [group] * len(entries)}


def _operator_parts(plan: ReadPlan, index: int) -> Iterator[Columns]:
    source = plan.source()
    handle = plan.metadata["operators"][plan.uid]["subtasks"].get(str(index), {}).get("operator")
    if handle is None:
        return
    lists = pickle.loads(source.storage.read_file(plan.checkpoint_id, handle))
    for name, (mode, items) in sorted(lists.items()):
        if plan.state is not None and name != plan.state:
            continue
        yield {"subtask": [index] * len(items), "name": [name] * len(items), "mode": [mode] * len(items),
               "position": list(range(len(items))), "value": list(items)}


def operator_splits(plan: ReadPlan) -> list[int]:
    """The old subtasks of ``plan``'s operator with operator state (a split each)."""
    subtasks = plan.metadata["operators"][plan.uid]["subtasks"]
    return sorted(int(i) for i, handle in subtasks.items() if "operator" in handle)


def sample(plan: ReadPlan, splits: list[Any], size: int = V.SAMPLE) -> Columns:
    """About ``size`` rows of ``plan`` to infer types from, spread over the splits: of each, its
    first key groups with state (or operator lists) until it gave its share, so values that
    differ by subtask or key range are seen without reading much of the state."""
    names = column_names(plan)
    found: Columns = {name: [] for name in names}
    quota = max(1, size // max(1, len(splits)))
    for split in splits:
        taken = 0
        for part in _parts(plan, split):
            for name in names:
                found[name].extend(part[name][:quota - taken])
            taken += min(len(part[names[0]]), quota - taken)
            if taken >= quota:
                break
    return found


def schema_of(plan: ReadPlan, rows: Columns, value_format: str = "auto", key_format: str = "auto") -> T.StructType:
    """The schema of ``plan``'s rows: fixed columns, and the others inferred from ``rows`` (a
    sample); ``value_format`` / ``key_format`` ``pickle``: that column as pickles whatever it holds."""
    fields = []
    for name in column_names(plan):
        if name in _FIXED:
            fields.append(T.StructField(name, _FIXED[name], nullable=True))
            continue
        form = key_format if name == "key" else value_format if name == "value" else "auto"
        field = V.column_type(rows.get(name, []), form)
        fields.append(T.StructField(name, field.dataType, True, field.metadata))
    return T.StructType(fields)


def batches(plan: ReadPlan, split: range | int, schema: T.StructType) -> Iterator[pa.RecordBatch]:
    """``plan``'s rows in ``split`` as Arrow record batches of ``schema``; a value that does not
    fit its column fails with a :class:`StateDataFrameError` that says what to do."""
    fields = list(schema.fields)  # the columns of column_names(plan) the schema names, in its order
    types = [V.arrow_type(f.dataType) for f in fields]
    preparers = [V.preparer(f) for f in fields]
    arrow_schema = pa.schema([pa.field(f.name, t) for f, t in zip(fields, types, strict=True)])
    for chunk in columns_of(plan, split):
        arrays = []
        for field, kind, prepare in zip(fields, types, preparers, strict=True):
            data = chunk[field.name]
            try:
                arrays.append(pa.array(data if prepare is None else prepare(data), type=kind))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as error:
                raise StateDataFrameError(_misfit(plan, field, data, error)) from error
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _misfit(plan: ReadPlan, field: T.StructField, data: list[Any], error: Exception) -> str:
    example = next((v for v in data if not _fits(v, field.dataType)), None)
    shown = f" (e.g. {example!r:.80} of type {type(example).__name__})" if example is not None else ""
    option = "keyFormat" if field.name == "key" else "valueFormat"
    state = f"{plan.kind} state {plan.state!r}" if plan.state else f"{plan.kind} state"
    return (f"a {field.name} of {state} of operator {plan.uid!r} does not fit the "
            f"column type {field.dataType.simpleString()} inferred from a sample of the state{shown}: {error}. "
            f"Give the schema yourself (spark.read.format('epochal-state').schema('key string, value double, "
            f"key_group int')) or read the {field.name}s as pickles (option('{option}', 'pickle'), decoded with "
            "epochal.decode_state_value)")


def _fits(value: Any, kind: T.DataType) -> bool:
    try:
        return V.merge_types(V._type_of(value), kind) == kind
    except V.Unsupported:
        return False
