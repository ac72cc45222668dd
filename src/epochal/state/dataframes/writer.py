"""Writing savepoints from data: bootstrap one from DataFrames, or modify an existing one.

:class:`SavepointWriter` (``epochal.SavepointWriter``) writes a new savepoint directory in the
canonical format (``docs/savepoints.md``), which a job restores with ``restore_from`` at any
parallelism and on any state backend::

    (epochal.SavepointWriter.new(max_parallelism=128)           # the job's max_parallelism
        .with_keyed_state("sum", "aggregate", df)                 # df: (key, value) rows
        .write("/data/savepoints/bootstrapped"))

    (epochal.SavepointWriter.from_existing("/data/savepoints/savepoint-1a2b-3")
        .with_keyed_state("sum", "aggregate", fixed)              # replaces that state of 'sum'
        .remove_operator("old-dedup")
        .change_uid("Map:parse", "parse")
        .write("/data/savepoints/fixed"))

The base may be any checkpoint or savepoint ``restore_from`` accepts (every backend's format);
every operator of the result is written anew, so the result is self-contained and canonical.
Each subtask of each operator is one Spark task (when there is a DataFrame or a ``spark``
session): it reads its key-group range of the base (if any), takes the rows of the DataFrames
whose keys fall in that range (shuffled to it by key group), and writes one file; the driver
writes the metadata last. Without Spark (``data`` as a list of pairs) it runs in this process.

Contract: a key's value is the Python object the operator's state holds (the built-in
aggregations keep their running value; a ``ValueState`` its value; a ``MapState`` a dict).
Struct columns become tuples, maps dicts, arrays lists; a binary column read as pickles
(``epochal.encoding: pickle`` in its metadata, or ``value_format="pickle"``) is unpickled.
Several rows of one key: the last one read wins. The keys must be of the type and value the
job's key selector produces (they are hashed into key groups as the job does).
"""

from __future__ import annotations

import functools
import os
import pickle
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from epochal.plan.keygroups import key_group_of, key_group_range
from epochal.state.canonical import LAYOUT
from epochal.state.dataframes.snapshot_view import SnapshotView, StateDataFrameError
from epochal.state.snapshot import RestoreSource, materialize
from epochal.state.storage import SavepointStorage, open_filesystem, storage_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: what a task writes a routed entry as: (state name, key, value)
Entry = tuple[str, Any, Any]


@dataclass
class _StateInput:
    """One state to write: a DataFrame or pairs, and how to read them."""

    name: str
    data: Any
    state_type: str
    key_column: str | None
    value_column: str | None
    value_format: str


@dataclass
class _OperatorOut:
    """One operator of the result: written from the base's ``base_uid`` (if any) and ``inputs``."""

    uid: str
    base_uid: str | None
    parallelism: int
    inputs: list[_StateInput] = field(default_factory=list)


@dataclass(frozen=True)
class _Task:
    """One Spark task: subtask ``index`` of operator ``uid`` of the result."""

    uid: str
    base_uid: str | None
    index: int
    parallelism: int
    dropped: frozenset[str]
    states: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _Target:
    """Where the tasks read and write: shipped to every task."""

    path: str
    max_parallelism: int
    base_uri: str | None
    base_checkpoint: int
    base_metadata: dict[str, Any] | None

    def base(self) -> RestoreSource | None:
        if self.base_uri is None or self.base_metadata is None:
            return None
        return RestoreSource(storage_of(self.base_uri, self.base_metadata), self.base_checkpoint, self.base_metadata)


class SavepointWriter:
    """Bootstraps a savepoint (:meth:`new`) or modifies one (:meth:`from_existing`); nothing is
    written before :meth:`write`, which writes a new directory and never changes the base."""

    def __init__(self, max_parallelism: int = 128, base: SnapshotView | None = None) -> None:
        if isinstance(max_parallelism, bool) or not isinstance(max_parallelism, int) \
                or not 1 <= max_parallelism <= 32768:
            raise StateDataFrameError(f"max_parallelism must be an int in 1..32768 (the job's; default 128), "
                                      f"got {max_parallelism!r}")
        self.max_parallelism = max_parallelism
        self.base = base
        self._removed: set[str] = set()
        self._renamed: dict[str, str] = {}  # new uid -> base uid
        self._states: dict[str, dict[str, _StateInput]] = {}
        self._parallelism: dict[str, int] = {}

    @classmethod
    def new(cls, max_parallelism: int = 128) -> SavepointWriter:
        """A savepoint with no operator yet, for a job of ``max_parallelism`` key groups."""
        return cls(max_parallelism)

    @classmethod
    def from_existing(cls, path: str) -> SavepointWriter:
        """The checkpoint or savepoint at ``path`` (what ``restore_from`` accepts) as the base:
        every operator is kept unless changed."""
        view = SnapshotView(path)
        return cls(view.max_parallelism, view)

    # ------------------------------------------------------------------ what to write
    def _base_uids(self) -> set[str]:
        return set(self.base.operators) if self.base is not None else set()

    def uids(self) -> list[str]:
        """The operators the result will hold state of."""
        kept = (self._base_uids() - self._removed - set(self._renamed.values())) | set(self._renamed)
        return sorted(kept | set(self._states))

    def _base_of(self, uid: str) -> str | None:
        if uid in self._renamed:
            return self._renamed[uid]
        if uid in self._base_uids() and uid not in self._removed and uid not in self._renamed.values():
            return uid
        return None

    def with_keyed_state(self, uid: str, state_name: str, data: DataFrame | Iterable[tuple[Any, Any]], *,
                         state_type: str = "value", parallelism: int | None = None, key_column: str | None = None,
                         value_column: str | None = None, value_format: str = "auto") -> SavepointWriter:
        """Operator ``uid``'s keyed state ``state_name`` becomes ``data``: a DataFrame of (key,
        value) rows (columns ``key_column`` / ``value_column``, default ``key`` and ``value`` or
        else the first two) or an iterable of ``(key, value)`` pairs. The operator's other states
        in the base are kept. ``state_type`` is recorded for ``savepoint_info`` (``value``,
        ``list``, ``map``, ...). ``parallelism``: how many subtasks (and files) a new operator's
        state is written as (default: the DataFrame's Spark default parallelism, at most
        ``max_parallelism``); a job restores it at any parallelism. ``value_format="pickle"``:
        the value column holds pickles."""
        if not isinstance(uid, str) or not uid or not isinstance(state_name, str) or not state_name:
            raise StateDataFrameError(f"an operator uid and a state name are needed, got {uid!r} and {state_name!r}")
        if value_format not in ("auto", "pickle"):
            raise StateDataFrameError(f"value_format must be 'auto' or 'pickle', not {value_format!r}")
        if parallelism is not None and (isinstance(parallelism, bool) or not isinstance(parallelism, int)
                                        or not 1 <= parallelism <= self.max_parallelism):
            raise StateDataFrameError(f"parallelism must be an int in 1..{self.max_parallelism} (max_parallelism), "
                                      f"got {parallelism!r}")
        if not _is_dataframe(data) and not isinstance(data, Iterable):
            raise StateDataFrameError(f"data must be a DataFrame of (key, value) rows or an iterable of (key, value) "
                                      f"pairs, got {type(data).__name__}")
        rows: Any = data if _is_dataframe(data) else list(data)  # type: ignore[arg-type]
        self._states.setdefault(uid, {})[state_name] = _StateInput(
            state_name, rows, state_type, key_column, value_column, value_format)
        if parallelism is not None:
            self._parallelism[uid] = parallelism
        return self

    def remove_operator(self, uid: str) -> SavepointWriter:
        """Leave operator ``uid``'s state out (a job that no longer has it then restores without
        ``allow_non_restored_state``)."""
        self._require(uid)
        self._removed.add(uid)
        self._states.pop(uid, None)
        return self

    def change_uid(self, old: str, new: str) -> SavepointWriter:
        """Operator ``old``'s state becomes operator ``new``'s (a job whose operator got another
        uid restores it)."""
        self._require(old)
        if new in self.uids() and new != old:
            raise StateDataFrameError(f"cannot give operator {old!r} the uid {new!r}: the savepoint already holds "
                                      f"an operator with it (remove_operator({new!r}) first)")
        self._renamed[new] = self._renamed.pop(old, old)
        if old in self._states:
            self._states[new] = self._states.pop(old)
        return self

    def _require(self, uid: str) -> None:
        if uid not in self.uids() or self._base_of(uid) is None:
            held = ", ".join(repr(u) for u in self.uids()) or "none"
            raise StateDataFrameError(f"the savepoint being written holds no operator with uid {uid!r} from its base; "
                                      f"its operators: {held}")

    # ------------------------------------------------------------------ writing
    def write(self, path: str, spark: SparkSession | None = None) -> str:
        """Write the savepoint into the new (or empty) directory ``path``; returns its location,
        to pass to ``restore_from``. Spark tasks write it when a state's data is a DataFrame (its
        session) or ``spark`` is given; else this process does."""
        if not self.uids():
            raise StateDataFrameError("the savepoint would hold no state: add some with with_keyed_state(...)")
        location = _fresh_directory(path, self.base)
        spark = spark or next((i.data.sparkSession for s in self._states.values() for i in s.values()
                               if _is_dataframe(i.data)), None)
        operators = self._plan(spark)
        tasks = [_Task(op.uid, op.base_uid, index, op.parallelism,
                       frozenset(i.name for i in op.inputs), self._state_types(op))
                 for op in operators for index in range(op.parallelism)]
        target = _Target(location, self.max_parallelism, self.base.storage.uri if self.base else None,
                         self.base.checkpoint_id if self.base else 0, self.base.metadata if self.base else None)
        if spark is None:
            handles = _write_locally(tasks, operators, target)
        else:
            handles = _write_with_spark(spark, tasks, operators, target)
        storage = SavepointStorage(location)
        storage.write_metadata(0, self._metadata(operators, handles))
        return storage.location(0)

    def _plan(self, spark: SparkSession | None) -> list[_OperatorOut]:
        default = min(self.max_parallelism, spark.sparkContext.defaultParallelism if spark is not None else 1)
        out = []
        for uid in self.uids():
            base_uid = self._base_of(uid)
            if base_uid is not None:
                assert self.base is not None
                entry = self.base.operators[base_uid]
                parallelism = int(entry.get("parallelism") or len(entry["subtasks"]))
            else:
                parallelism = self._parallelism.get(uid, default)
            out.append(_OperatorOut(uid, base_uid, parallelism, list(self._states.get(uid, {}).values())))
        return out

    def _state_types(self, op: _OperatorOut) -> tuple[tuple[str, str], ...]:
        types = dict(self.base.keyed_states(op.base_uid)) if self.base is not None and op.base_uid else {}
        types.update({i.name: i.state_type for i in op.inputs})
        return tuple(sorted(types.items()))

    def _metadata(self, operators: list[_OperatorOut], handles: list[tuple[str, int, dict[str, Any]]]) \
            -> dict[str, Any]:
        base = self.base.metadata if self.base is not None else {}
        entries: dict[str, Any] = {}
        for op in operators:
            known = dict(base.get("operators", {}).get(op.base_uid, {})) if op.base_uid else {}
            known.pop("subtasks", None)
            entries[op.uid] = {"vertex": known.get("vertex"), "parallelism": op.parallelism,
                               "name": known.get("name"), "operation": known.get("operation"), "subtasks": {}}
        for uid, index, handle in handles:
            if handle:
                entries[uid]["subtasks"][str(index)] = handle
        entries = {uid: entry for uid, entry in entries.items() if entry["subtasks"]}
        savepoint = dict(base.get("savepoint") or {})
        return {"checkpoint_id": int(base.get("checkpoint_id") or 1), "job": base.get("job") or "bootstrap",
                "timestamp": time.time(), "max_parallelism": self.max_parallelism,
                "split_layout": dict(base.get("split_layout") or {}), "operators": entries,
                "savepoint": {"format": "canonical", "layout": LAYOUT,
                              "job_id": savepoint.get("job_id") or f"written-{uuid.uuid4().hex[:8]}",
                              "stop": bool(savepoint.get("stop", False)), "written_by": "SavepointWriter"}}


def _is_dataframe(data: Any) -> bool:
    return type(data).__name__ == "DataFrame" and hasattr(data, "sparkSession")


def _fresh_directory(path: str, base: SnapshotView | None) -> str:
    if not isinstance(path, str) or not path:
        raise StateDataFrameError(f"write(path) needs the directory of the new savepoint, got {path!r}")
    location = path.rstrip("/") if "://" in path else os.path.abspath(path)
    if base is not None and location.rstrip("/") == base.location.rstrip("/"):
        raise StateDataFrameError(f"write the modified savepoint to a new directory, not over its base {path}")
    fs, root = open_filesystem(location)
    import pyarrow.fs as pafs

    info = fs.get_file_info(root)
    if info.type == pafs.FileType.File or (
            info.type == pafs.FileType.Directory and fs.get_file_info(pafs.FileSelector(root))):
        raise StateDataFrameError(f"{path} exists and is not an empty directory: a savepoint is written to a new "
                                  "directory")
    fs.create_dir(root, recursive=True)
    return location


# ---------------------------------------------------------------------- the tasks
def _task_numbers(tasks: list[_Task]) -> dict[tuple[str, int], int]:
    """``(uid, subtask index) -> task number`` (a Spark partition's index)."""
    return {(t.uid, t.index): n for n, t in enumerate(tasks)}


def _route(offset: int, parallelism: int, max_parallelism: int, name: str, pickled: tuple[bool, bool],
           pairs: Iterable[Any]) -> Iterator[tuple[int, Entry]]:
    """``(task number, (state name, key, value))`` of each pair: the task of the subtask whose
    key-group range holds the key's group."""
    from epochal.state.dataframes.values import to_python

    for pair in pairs:
        key, value = to_python(pair[0], pickled[0]), to_python(pair[1], pickled[1])
        group = key_group_of(key, max_parallelism)
        yield offset + group * parallelism // max_parallelism, (name, key, value)


def write_subtask(task: _Task, target: _Target, entries: Iterable[Entry]) -> tuple[str, int, dict[str, Any]]:
    """Write subtask ``task.index`` of operator ``task.uid``: the base's state of its key groups
    (but the states being replaced) and its operator state, with ``entries`` over them; returns
    ``(uid, index, handle)`` (an empty handle: nothing to write)."""
    owned = key_group_range(task.index, task.parallelism, target.max_parallelism)
    groups: dict[int, dict[str, dict[Any, Any]]] = {}
    operator: dict[str, Any] = {}
    base = target.base()
    if base is not None and task.base_uid is not None:
        for group, states in base.keyed_groups(task.base_uid, owned):
            kept = {name: entries for name, entries in states.items() if name not in task.dropped}
            if kept:
                groups[group] = kept
        handle = base.metadata["operators"][task.base_uid]["subtasks"].get(str(task.index), {}).get("operator")
        if handle is not None:
            operator = pickle.loads(base.storage.read_file(base.checkpoint_id, handle))
    for name, key, value in entries:
        group = key_group_of(key, target.max_parallelism)
        groups.setdefault(group, {}).setdefault(name, {})[key] = value
    storage = SavepointStorage(target.path)
    states = dict(task.states)
    counts = {name: sum(len(by_group.get(name, ())) for by_group in groups.values()) for name in states}
    handles = materialize(storage, 0, task.index, {task.uid: {"keyed": groups, "operator": operator,
                                                              "states": states, "entries": counts}})
    return task.uid, task.index, handles.get(task.uid, {})


def _write_partition(tasks: list[_Task], target: _Target, number: int,
                     routed: Iterator[tuple[int, Entry | None]]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    entries = (entry for _, entry in routed if entry is not None)
    yield write_subtask(tasks[number], target, entries)


def _pickled(data: Any, item: _StateInput) -> tuple[bool, bool, str, str]:
    """Whether the key and value columns hold pickles, and their names."""
    from epochal.state.dataframes.values import is_pickled

    names = data.columns
    if len(names) < 2 and (item.key_column is None or item.value_column is None):
        raise StateDataFrameError(f"state {item.name!r}: the DataFrame needs a key and a value column, it has "
                                  f"{', '.join(names) or 'none'}")
    key = item.key_column or ("key" if "key" in names else names[0])
    value = item.value_column or ("value" if "value" in names else names[1])
    for column in (key, value):
        if column not in names:
            raise StateDataFrameError(f"state {item.name!r}: the DataFrame has no column {column!r}; its columns: "
                                      f"{', '.join(names)}")
    schema = data.schema
    return is_pickled(schema[key]), item.value_format == "pickle" or is_pickled(schema[value]), key, value


def _write_with_spark(spark: SparkSession, tasks: list[_Task], operators: list[_OperatorOut],
                      target: _Target) -> list[tuple[str, int, dict[str, Any]]]:
    context = spark.sparkContext
    numbers = _task_numbers(tasks)
    parts: list[Any] = [context.parallelize([(n, None) for n in range(len(tasks))], len(tasks))]
    for op in operators:
        offset = numbers[(op.uid, 0)]
        for item in op.inputs:
            if _is_dataframe(item.data):
                key_pickled, value_pickled, key, value = _pickled(item.data, item)
                rdd = item.data.select(key, value).rdd
                pickled = (key_pickled, value_pickled)
            else:
                rdd = context.parallelize(item.data)
                pickled = (False, item.value_format == "pickle")
            route: Callable[[Iterable[Any]], Iterator[tuple[int, Entry]]] = functools.partial(
                _route, offset, op.parallelism, target.max_parallelism, item.name, pickled)
            parts.append(rdd.mapPartitions(route))
    routed = context.union(parts).partitionBy(len(tasks), _identity)
    return routed.mapPartitionsWithIndex(functools.partial(_write_partition, tasks, target)).collect()


def _identity(number: int) -> int:
    return number


def _write_locally(tasks: list[_Task], operators: list[_OperatorOut],
                   target: _Target) -> list[tuple[str, int, dict[str, Any]]]:
    numbers = _task_numbers(tasks)
    routed: dict[int, list[Entry]] = {n: [] for n in range(len(tasks))}
    for op in operators:
        for item in op.inputs:
            if _is_dataframe(item.data):  # (write() passes a session when there is a DataFrame)
                raise StateDataFrameError("a DataFrame's state is written by Spark tasks: pass spark=")
            for number, entry in _route(numbers[(op.uid, 0)], op.parallelism, target.max_parallelism, item.name,
                                        (False, item.value_format == "pickle"), item.data):
                routed[number].append(entry)
    return [write_subtask(task, target, routed[n]) for n, task in enumerate(tasks)]
