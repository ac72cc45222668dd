"""State as Spark DataFrames (issue 37) against real jobs on Spark: the final checkpoint of a
keyed job on each backend (heap, incremental heap chains, RocksDB) read as DataFrames equals an
oracle of the job's state (a keyed sum, count windows with their windows as namespace, timers, the
source's operator state); a savepoint bootstrapped from a DataFrame and restored at parallelism 3
gives the oracle's output; a modified one (a state replaced, an operator removed, a uid changed)
too; and bad input fails with one clear error."""

from __future__ import annotations

import collections
import json
import os

import pytest

import epochal
from epochal.connectors.source_reader import SourceReader
from epochal.state.storage import METADATA

N = 6_000
KEYS = 97


def record(i: int) -> tuple[str, int]:
    return (f"k{i % KEYS}", i)


def oracle_sums() -> dict[str, int]:
    sums: dict[str, int] = collections.Counter()
    for i in range(N):
        key, value = record(i)
        sums[key] += value
    return dict(sums)


def oracle_windows(size: int = 50, slide: int = 20) -> dict[tuple[str, int], int]:
    """Count windows of ``size`` records every ``slide`` summing 1 per record: the windows not
    yet full at the end, ``(key, first position) -> records in it``."""
    counts = collections.Counter(record(i)[0] for i in range(N))
    return {(key, first): total - first for key, total in counts.items()
            for first in range(0, total, slide) if total - first < size}


FAR = 4_000_000_000.0  # a processing time no test reaches: the timers stay in the final checkpoint


class FarTimers(epochal.KeyedProcessFunction):
    """Registers, per key, a processing-time timer at ``FAR`` + the key's number."""

    def process_element(self, value, ctx):
        ctx.timer_service().register_processing_time_timer(FAR + int(value[0][1:]))
        return ()


def keyed_job(env: epochal.Environment) -> None:
    events = env.from_generator(record, count=N, rate=6_000).uid("source")
    events.key_by(lambda r: r[0]).sum(lambda r: r[1]).uid("sum").discard()
    events.key_by(lambda r: r[0]).count_window(50, 20).sum(lambda r: 1).uid("windows").discard()
    events.key_by(lambda r: r[0]).process(FarTimers()).uid("timers").discard()


def handle_of(path: str, uid: str) -> dict:
    with open(os.path.join(path, METADATA)) as source:
        return json.loads(json.load(source)["body"])["operators"][uid]["subtasks"]["0"]["keyed"]


@pytest.mark.parametrize("backend", ["heap", "incremental", "rocksdb"])
def test_the_dataframe_reader_on_each_backends_checkpoint_equals_the_oracle(make_env, spark, tmp_path, backend):
    env = make_env(2)
    env.enable_checkpointing(0.2, storage=str(tmp_path / "chk"))
    if backend == "rocksdb":
        env.set_state_backend("rocksdb", local_dir=str(tmp_path / "rocksdb"))
    else:
        env.set_state_backend(incremental=backend == "incremental")
    keyed_job(env)
    env.execute(f"state-df-{backend}")
    path = epochal.latest_checkpoint(str(tmp_path / "chk"), f"state-df-{backend}")
    keyed = handle_of(path, "sum")
    if backend == "incremental":
        assert "chain" in keyed
    if backend == "rocksdb":
        assert keyed["format"] == "rocksdb"

    sums = epochal.read_state(spark, path, "sum", "aggregate")
    assert sums.schema.simpleString() == "struct<key:string,value:bigint,key_group:int>"
    assert sums.rdd.getNumPartitions() >= 8  # split by key group: Spark reads them in parallel
    assert sums.count() == KEYS
    assert {r.key: r.value for r in sums.collect()} == oracle_sums()

    windows = epochal.read_state(spark, path, "windows", "window-contents")
    assert windows.columns == ["key", "namespace", "value", "key_group"]
    assert {(r.key, r.namespace): r.value for r in windows.collect()} == oracle_windows()

    timers = epochal.read_state(spark, path, "timers", kind="timers").collect()
    assert sorted((r.key, r.domain, r.timestamp) for r in timers) == sorted(
        (f"k{k}", "processing_time", FAR + k) for k in range(KEYS))

    positions = epochal.read_state(spark, path, "source", kind="operator").collect()  # the source's offsets
    assert {r.subtask for r in positions} == {0, 1} and {r.name for r in positions} == {SourceReader.POSITIONS}
    assert sorted(tuple(r.value) for r in positions) == [("generator-0", N), ("generator-1", N + 1)]

    metadata = {(r.uid, r.state_name): r for r in epochal.read_state_metadata(spark, path).collect()}
    assert metadata[("sum", "aggregate")].kind == "keyed" and metadata[("source", None)].kind == "operator"
    assert metadata[("windows", "window-contents")].operator_bytes > 0
    entries = metadata[("sum", "aggregate")].state_entries  # keys per state: exact on the heap,
    assert entries == KEYS if backend != "rocksdb" else entries >= KEYS  # RocksDB's estimate
    assert metadata[("source", None)].state_entries is None


def restored_job(env: epochal.Environment, uid: str) -> epochal.CollectedStream:
    """One record of value 1 per key: each key's first output is its restored sum + 1."""
    return (env.from_collection([(f"k{k}", 1) for k in range(KEYS)])
            .key_by(lambda r: r[0]).sum(lambda r: r[1]).uid(uid).collect())


def test_a_bootstrapped_savepoint_restored_at_parallelism_3_gives_the_oracles_output(make_env, spark, tmp_path):
    oracle = oracle_sums()
    frame = spark.createDataFrame(sorted(oracle.items()), "key string, value long").repartition(3)
    path = (epochal.SavepointWriter.new(max_parallelism=128)
            .with_keyed_state("sum", "aggregate", frame, parallelism=2)
            .with_keyed_state("extra", "aggregate", [("k0", "x")])
            .write(str(tmp_path / "bootstrapped")))
    info = epochal.savepoint_info(path)
    assert info["type"] == "savepoint" and info["operators"]["sum"]["parallelism"] == 2
    assert {r.key: r.value for r in epochal.read_state(spark, path, "sum", "aggregate").collect()} == oracle
    assert info["operators"]["sum"]["entries"] == {"aggregate": len(oracle)}

    env = make_env(3)
    output = restored_job(env, "sum")
    env.execute("bootstrapped", restore_from=path, allow_non_restored_state=True)
    assert sorted(output.get()) == sorted((key, total + 1) for key, total in oracle.items())

    # modify: replace the state (from a DataFrame read back and changed), drop 'extra', rename 'sum'
    halved = epochal.read_state(spark, path, "sum", "aggregate").selectExpr("key", "value div 2 AS value")
    modified = (epochal.SavepointWriter.from_existing(path)
                .with_keyed_state("sum", "aggregate", halved)
                .remove_operator("extra")
                .change_uid("sum", "total")
                .write(str(tmp_path / "modified")))
    assert sorted(epochal.savepoint_info(modified)["operators"]) == ["total"]
    env = make_env(3)
    output = restored_job(env, "total")
    env.execute("modified", restore_from=modified)  # nothing left unclaimed: no allow_non_restored_state
    assert sorted(output.get()) == sorted((key, total // 2 + 1) for key, total in oracle.items())


def test_bad_input_fails_with_one_clear_error(spark, tmp_path):
    path = (epochal.SavepointWriter.new(max_parallelism=16)
            .with_keyed_state("sum", "aggregate", [("a", 1)]).write(str(tmp_path / "sp")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(epochal.StateDataFrameError, match="is not a checkpoint or savepoint"):
        epochal.read_state(spark, str(tmp_path / "empty"), "sum", "aggregate")
    with pytest.raises(epochal.StateDataFrameError, match="no state of an operator with uid 'summ'"):
        epochal.read_state(spark, path, "summ", "aggregate")
    with pytest.raises(epochal.StateDataFrameError, match="no keyed state named 'agg'.*'aggregate'"):
        epochal.read_state(spark, path, "sum", "agg")
    with pytest.raises(epochal.StateDataFrameError, match="is not a checkpoint or savepoint"):
        epochal.read_state_metadata(spark, str(tmp_path / "empty"))
    # through spark.read.format the same sentence is inside Spark's error
    with pytest.raises(Exception, match="no keyed state named 'agg'"):
        spark.read.format("epochal-state").option("uid", "sum").option("stateName", "agg").load(path).count()
