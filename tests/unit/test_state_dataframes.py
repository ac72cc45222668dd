"""State as DataFrames without Spark: the rows a read yields from every backend's checkpoints
(heap, incremental heap chains, RocksDB, canonical savepoints), their Spark types, the errors
that list what a snapshot holds, and savepoints written by SavepointWriter (bootstrap, replace,
remove, change a uid) restored as a job restores them."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from epochal.plan.keygroups import key_group_of, key_group_range
from epochal.runtime.windows.assigners import TimeWindow
from epochal.state.dataframes import rows as R
from epochal.state.dataframes import values as V
from epochal.state.dataframes.snapshot_view import SnapshotView, StateDataFrameError
from epochal.state.dataframes.writer import SavepointWriter
from epochal.state.snapshot import RestoreSource
from epochal.state.storage import METADATA
from tests.unit.state_snapshots import end_state, write_checkpoints


class Point:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, Point) and other.x == self.x


ROUNDS = [
    {"counter": {"count": {f"k{i}": i for i in range(300)}, "pairs": {f"k{i}": (i, f"v{i}") for i in range(50)}},
     "windows": {"window-contents": {f"w{i}": {TimeWindow(0, 10): i, TimeWindow(10, 20): i * 2} for i in range(20)}}},
    {"counter": {"count": {**{f"k{i}": None for i in range(0, 300, 7)}, "k1": 1000, "new": -5}}},
    {"counter": {"count": {"k2": 2000}}},
]


def read_all(path: str, uid: str, state: str | None, kind: str = "keyed", **formats) -> tuple[dict, object]:
    view = SnapshotView(path)
    plan = view.plan(uid, kind, state)
    splits = R.operator_splits(plan) if kind == "operator" else view.splits(uid)
    schema = R.schema_of(plan, R.sample(plan, splits), **formats)
    out: dict = {name: [] for name in schema.names}
    for split in splits:
        for batch in R.batches(plan, split, schema):
            for name, column in batch.to_pydict().items():
                out[name].extend(column)
    return out, schema


@pytest.mark.parametrize("backend", ["heap", "incremental", "rocksdb"])
def test_the_reader_on_each_backends_checkpoints_equals_the_state(tmp_path, backend):
    path = write_checkpoints(str(tmp_path), backend, ROUNDS)
    oracle = end_state(ROUNDS)
    if backend == "incremental":  # chk-3 is a chain: a full file and deltas
        with open(os.path.join(path, METADATA)) as source:
            handle = json.loads(json.load(source)["body"])["operators"]["counter"]["subtasks"]["0"]["keyed"]
        assert [link["kind"] for link in handle["chain"]] == ["full", "delta", "delta"]
    rows, schema = read_all(path, "counter", "count")
    assert schema.simpleString() == "struct<key:string,value:bigint,key_group:int>"
    assert dict(zip(rows["key"], rows["value"], strict=True)) == oracle["counter"]["count"]
    assert len(rows["key"]) == len(oracle["counter"]["count"])  # each key once
    assert rows["key_group"] == [key_group_of(k, 16) for k in rows["key"]]
    pairs, schema = read_all(path, "counter", "pairs")
    assert schema["value"].dataType.simpleString() == "struct<_1:bigint,_2:string>"
    got = {k: tuple(v.values()) for k, v in zip(pairs["key"], pairs["value"], strict=True)}
    assert got == oracle["counter"]["pairs"]


@pytest.mark.parametrize(("backend", "form"), [("heap", "canonical"), ("rocksdb", "canonical"), ("rocksdb", "native")])
def test_the_reader_on_savepoints_equals_the_state(tmp_path, backend, form):
    path = write_checkpoints(str(tmp_path), backend, ROUNDS, savepoint=form)
    view = SnapshotView(path)
    assert view.is_savepoint and view.metadata["savepoint"]["format"] == form
    keyed = view.operators["counter"]["subtasks"]["0"]["keyed"]
    assert (keyed.get("format") == "rocksdb") == (form == "native")
    rows, _ = read_all(path, "counter", "count")
    assert dict(zip(rows["key"], rows["value"], strict=True)) == end_state(ROUNDS)["counter"]["count"]


def test_window_state_has_one_row_per_key_and_window_with_the_window_as_namespace(tmp_path):
    path = write_checkpoints(str(tmp_path), "heap", ROUNDS)
    rows, schema = read_all(path, "windows", "window-contents")
    assert schema.names == ["key", "namespace", "value", "key_group"]
    assert schema["namespace"].dataType.simpleString() == "struct<start:bigint,end:bigint>"
    got = {(k, (w["start"], w["end"])): v
           for k, w, v in zip(rows["key"], rows["namespace"], rows["value"], strict=True)}
    assert got == {(f"w{i}", w): v for i in range(20) for w, v in (((0, 10), i), ((10, 20), i * 2))}


def test_values_without_a_spark_type_come_out_as_pickles_with_a_decoder(tmp_path):
    rounds = [{"op": {"objects": {f"k{i}": Point(i) for i in range(10)}, "mixed": {"a": 1, "b": "x"}}}]
    path = write_checkpoints(str(tmp_path), "heap", rounds)
    rows, schema = read_all(path, "op", "objects")
    assert V.is_pickled(schema["value"])
    decoded = {k: V.decode_value(v) for k, v in zip(rows["key"], rows["value"], strict=True)}
    assert decoded == rounds[0]["op"]["objects"]
    rows, schema = read_all(path, "op", "mixed")  # an int and a str: no one Spark type
    assert V.is_pickled(schema["value"]) and sorted(map(V.decode_value, rows["value"]), key=str) == [1, "x"]
    rows, schema = read_all(path, "op", "mixed", key_format="pickle")
    assert sorted(map(pickle.loads, rows["key"])) == ["a", "b"]


def test_inferred_types():
    from pyspark.sql import types as T

    assert V.infer_type([1, 2.5]) == T.DoubleType()
    assert V.infer_type([{"a": [1, 2]}, {"b": []}]) == T.MapType(T.StringType(), T.ArrayType(T.LongType()))
    assert V.infer_type([True]) == T.BooleanType()
    with pytest.raises(V.Unsupported):
        V.infer_type([1 << 70])
    assert V.to_python(T.Row(a=1, b=T.Row(c=bytearray(b"x")))) == (1, (b"x",))


def test_a_value_that_does_not_fit_the_sampled_type_says_what_to_do(tmp_path):
    rounds = [{"op": {"s": {**{f"k{i}": i for i in range(50)}, "zz-late": "text"}}}]
    path = write_checkpoints(str(tmp_path), "heap", rounds)
    view = SnapshotView(path)
    plan = view.plan("op", "keyed", "s")
    schema = R.schema_of(plan, {"key": ["a"], "value": [1]})  # as if the sample held ints only
    with pytest.raises(StateDataFrameError, match="valueFormat.*pickle"):
        for split in view.splits("op"):
            list(R.batches(plan, split, schema))


def test_timers_and_operator_state(tmp_path):
    rounds = [{"proc": {"__timers__": {"a": {(0, 100): None, (1, 5.5): None}, "b": {(0, 7): None}},
                        "total": {"a": 1}}}]
    path = write_checkpoints(str(tmp_path), "rocksdb", rounds,
                             operator_state={"proc": {"buffer": ("split", [1, 2, 3]), "positions": ("union", ["p"])}})
    rows, schema = read_all(path, "proc", None, kind="timers")
    assert schema.names == ["key", "domain", "timestamp", "key_group"]
    assert sorted(zip(rows["key"], rows["domain"], rows["timestamp"], strict=True)) == [
        ("a", "event_time", 100.0), ("a", "processing_time", 5.5), ("b", "event_time", 7.0)]
    rows, schema = read_all(path, "proc", None, kind="operator")
    assert schema.names == ["subtask", "name", "mode", "position", "value"]
    assert V.is_pickled(schema["value"])  # ints and a str
    values = [V.decode_value(v) for v in rows["value"]]
    assert sorted(zip(rows["subtask"], rows["name"], values, strict=True), key=str) == sorted(
        [(s, "buffer", v) for s in (0, 1) for v in (1, 2, 3)] + [(s, "positions", "p") for s in (0, 1)], key=str)
    rows, schema = read_all(path, "proc", "buffer", kind="operator")
    assert set(rows["name"]) == {"buffer"} and rows["value"] == [1, 2, 3, 1, 2, 3]


def test_bad_input_names_what_there_is(tmp_path):
    path = write_checkpoints(str(tmp_path / "chk"), "heap", ROUNDS)
    with pytest.raises(StateDataFrameError, match="(?s)is not a checkpoint or savepoint.*Pass a savepoint directory"):
        SnapshotView(str(tmp_path / "nothing-here"))
    view = SnapshotView(path)
    with pytest.raises(StateDataFrameError, match=r"(?s)no state of an operator with uid .nope..*uid .counter.: count"):
        view.plan("nope", "keyed", "count")
    with pytest.raises(StateDataFrameError, match=r"no keyed state named 'cnt'.*'count', 'pairs'"):
        view.plan("counter", "keyed", "cnt")
    with pytest.raises(StateDataFrameError, match="stateName"):
        view.plan("counter", "keyed", None)
    with pytest.raises(StateDataFrameError, match="has no timers"):
        view.plan("counter", "timers", None)
    with pytest.raises(StateDataFrameError, match="kind must be"):
        view.plan("counter", "values", "count")


def test_splits_cover_every_key_group_once_inside_old_subtask_ranges(tmp_path):
    view = SnapshotView(write_checkpoints(str(tmp_path), "heap", ROUNDS, parallelism=3, max_parallelism=16))
    splits = view.splits("counter", partitions=7)
    assert [g for s in splits for g in s] == list(range(16))
    owners = [key_group_range(i, 3, 16) for i in range(3)]
    assert all(any(set(s) <= set(o) for o in owners) for s in splits)


def restored(path: str, uid: str, parallelism: int) -> dict:
    """What a job at ``parallelism`` restores of ``uid``: state name -> key -> value."""
    view = SnapshotView(path)
    source = RestoreSource(view.storage, view.checkpoint_id, view.metadata)
    out: dict = {}
    for index in range(parallelism):
        for _, states in source.keyed_groups(uid, key_group_range(index, parallelism, view.max_parallelism)):
            for name, entries in states.items():
                out.setdefault(name, {}).update(entries)
    return out


def test_a_bootstrapped_savepoint_restores_its_state_at_any_parallelism(tmp_path):
    pairs = [(f"k{i}", i * 10) for i in range(500)]
    path = (SavepointWriter.new(max_parallelism=32)
            .with_keyed_state("sum", "aggregate", pairs, parallelism=4)
            .write(str(tmp_path / "sp")))
    for parallelism in (1, 3, 32):
        assert restored(path, "sum", parallelism) == {"aggregate": dict(pairs)}
    view = SnapshotView(path)
    assert view.is_savepoint and view.max_parallelism == 32 and view.keyed_states("sum") == {"aggregate": "value"}
    assert len(view.operators["sum"]["subtasks"]) == 4
    with pytest.raises(StateDataFrameError, match="not an empty directory"):
        SavepointWriter.new(32).with_keyed_state("sum", "aggregate", pairs).write(path)


@pytest.mark.parametrize("backend", ["heap", "incremental", "rocksdb"])
def test_modify_replaces_removes_and_renames_operators(tmp_path, backend):
    base = write_checkpoints(str(tmp_path / "chk"), backend, ROUNDS,
                             operator_state={"counter": {"buffer": ("split", ["x"])}})
    oracle = end_state(ROUNDS)
    fixed = [("k1", -1), ("fresh", 5)]
    path = (SavepointWriter.from_existing(base)
            .with_keyed_state("counter", "count", fixed)
            .change_uid("windows", "windows-v2")
            .write(str(tmp_path / "modified")))
    state = restored(path, "counter", 3)
    assert state == {"count": dict(fixed), "pairs": oracle["counter"]["pairs"]}  # the other state kept
    assert restored(path, "windows-v2", 2) == oracle["windows"]
    view = SnapshotView(path)
    assert sorted(view.operators) == ["counter", "windows-v2"] and view.has_operator_state("counter")
    rows, _ = read_all(path, "counter", "buffer", kind="operator")
    assert rows["value"] == ["x", "x"]
    removed = SavepointWriter.from_existing(path).remove_operator("windows-v2").write(str(tmp_path / "removed"))
    assert sorted(SnapshotView(removed).operators) == ["counter"]
    with pytest.raises(StateDataFrameError, match="holds no operator with uid 'nope'"):
        SavepointWriter.from_existing(path).remove_operator("nope")
    with pytest.raises(StateDataFrameError, match="already holds an operator"):
        SavepointWriter.from_existing(path).change_uid("counter", "windows-v2")
    with pytest.raises(StateDataFrameError, match="new directory, not over its base"):
        SavepointWriter.from_existing(path).remove_operator("counter").write(path)


def test_the_data_source_options_are_checked_and_plan_the_read(tmp_path):
    from epochal.state.dataframes.reader import StateDataSource, StateReader, StateReadOptions, metadata_rows

    path = write_checkpoints(str(tmp_path), "heap", ROUNDS)
    options = {"path": path, "uid": "counter", "statename": "count", "partitions": "5"}  # Spark lower-cases keys
    source = StateDataSource(options)
    schema = source.schema()
    reader = StateReader(StateReadOptions.parse(options), schema)
    assert len(reader.partitions()) >= 5
    rows = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    assert {r["key"]: r["value"] for r in rows} == end_state(ROUNDS)["counter"]["count"]
    for bad, message in (({"kind": "values"}, "kind must be"), ({"partitions": "0"}, "positive integer"),
                         ({"valueFormat": "json"}, "'auto' or 'pickle'")):
        with pytest.raises(StateDataFrameError, match=message):
            StateReadOptions.parse({**options, **bad})
    kinds = {(r[0], r[4], r[5]) for r in metadata_rows(path)}
    assert kinds == {("counter", "keyed", "count"), ("counter", "keyed", "pairs"),
                     ("windows", "keyed", "window-contents")}


def test_pickled_values_are_written_back_as_the_objects(tmp_path):
    pickles = [(f"k{i}", pickle.dumps(Point(i))) for i in range(5)]
    path = (SavepointWriter.new(max_parallelism=8)
            .with_keyed_state("op", "points", pickles, value_format="pickle", state_type="value")
            .write(str(tmp_path / "sp")))
    assert restored(path, "op", 2) == {"points": {f"k{i}": Point(i) for i in range(5)}}
    with pytest.raises(StateDataFrameError, match="max_parallelism must be"):
        SavepointWriter.new(max_parallelism=0)
    with pytest.raises(StateDataFrameError, match="parallelism must be"):
        SavepointWriter.new(8).with_keyed_state("op", "s", [], parallelism=9)
    with pytest.raises(StateDataFrameError, match="would hold no state"):
        SavepointWriter.new(8).write(str(tmp_path / "empty"))
