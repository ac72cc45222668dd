"""DeltaSink and DeltaSource against real Delta tables (``deltalake``), without Spark: two-phase
commit through the transaction log, the transaction check on restore (and why it is needed),
other writers on the same table, schemas, partitions, and reading versions and new commits."""

from __future__ import annotations

import datetime
import json
import pickle

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from epochal.connectors.base import SinkContext
from epochal.connectors.delta import DeltaSink, DeltaSource
from epochal.errors import PlanError, SinkError, SourceError


def context(subtask=0, parallelism=1, attempt=0, restored=None):
    return SinkContext("delta", subtask, parallelism, lambda payload: None, attempt=attempt, checkpointing=True,
                       job_name="job", job_id="job1", operator_uid="sink-1", restored_checkpoint=restored)


def rows(path):
    return sorted(DeltaTable(str(path)).to_pyarrow_table().to_pylist(), key=lambda r: sorted(r.items(), key=str))


def read_all(source, parallelism=2):
    out = []
    for split in pickle.loads(pickle.dumps(source.create_splits(parallelism))):
        split.open()
        while True:
            batch = split.read_batch(4)
            if not batch:
                break
            out.extend(batch)
        split.close()
    return out


def added_rows(path):
    """Rows of every data file any commit added (what a reader of the table's changes gets)."""
    total = 0
    log = path / "_delta_log"
    for name in sorted(log.glob("*.json")):
        for line in name.read_text().splitlines():
            add = json.loads(line).get("add")
            if add and add["dataChange"]:
                total += json.loads(add["stats"])["numRecords"]
    return total


def test_pre_committed_files_are_invisible_until_commit_and_a_restored_commit_is_skipped(tmp_path):
    table = tmp_path / "t"
    sink = DeltaSink(str(table))
    writer = sink.create_writer(context())
    writer.write_batch([{"k": "a", "n": 1}, {"k": "b", "n": 2}])
    committable = writer.pre_commit(1)
    assert not DeltaTable.is_deltatable(str(table))  # data files exist, no commit yet
    writer.commit([committable])
    assert rows(table) == [{"k": "a", "n": 1}, {"k": "b", "n": 2}]
    assert DeltaTable(str(table)).transaction_version(committable.app_id) == 1
    version = DeltaTable(str(table)).version()
    restored = sink.create_writer(context(attempt=1, restored=1))
    restored.commit([committable])  # the sink operator commits the restored checkpoint's committables again
    assert DeltaTable(str(table)).version() == version  # skipped: the table has (app_id, 1)
    writer.write_batch([{"k": "c", "n": 3}])
    writer.close()  # the open epoch is aborted: never visible
    assert rows(table) == [{"k": "a", "n": 1}, {"k": "b", "n": 2}]


class UncheckedDeltaSink(DeltaSink):
    skip_committed = False


@pytest.mark.parametrize("sink_class", [DeltaSink, UncheckedDeltaSink], ids=["checked", "unchecked"])
def test_the_transaction_check_is_needed_when_a_compaction_ran_between_commit_and_restore(tmp_path, sink_class):
    """Re-adding the same files in a new version is what a restore without the check does:
    readers of the table's changes get the rows twice, and once a compaction rewrote those files
    (removing the originals) the snapshot holds them twice too."""
    table = tmp_path / "t"
    writer = sink_class(str(table)).create_writer(context())
    committables = []
    for checkpoint in (1, 2):
        writer.write_batch([{"n": checkpoint * 10 + i} for i in range(5)])
        committables.append(writer.pre_commit(checkpoint))
        writer.commit([committables[-1]])
    DeltaTable(str(table)).optimize.compact()  # another writer: rewrites both files into one
    assert len(rows(table)) == 10
    sink_class(str(table)).create_writer(context(attempt=1, restored=2)).commit([committables[-1]])
    if sink_class is DeltaSink:
        assert len(rows(table)) == 10 and added_rows(table) == 10
    else:
        assert len(rows(table)) == 15  # duplicates in the snapshot
        assert added_rows(table) == 15  # and in the changes


def test_other_writers_committing_in_between_do_not_break_the_commit(tmp_path):
    table = tmp_path / "t"
    sink = DeltaSink(str(table), schema=pa.schema([("n", pa.int64())]))
    writers = [sink.create_writer(context(i, 2)) for i in range(2)]
    pending = []
    for i, writer in enumerate(writers):
        writer.write_batch([{"n": i}])
        pending.append(writer.pre_commit(1))
    write_deltalake(str(table), pa.table({"n": pa.array([100], pa.int64())}), mode="append")  # a batch job
    writers[0].commit([pending[0]])
    write_deltalake(str(table), pa.table({"n": pa.array([101], pa.int64())}), mode="append")
    writers[1].commit([pending[1]])
    assert sorted(r["n"] for r in rows(table)) == [0, 1, 100, 101]


def test_a_schema_change_by_another_writer_fails_the_commit_clearly(tmp_path):
    table = tmp_path / "t"
    writer = DeltaSink(str(table)).create_writer(context())
    writer.write_batch([{"n": 1}])
    writer.commit([writer.pre_commit(1)])
    writer.write_batch([{"n": 2}])
    committable = writer.pre_commit(2)
    write_deltalake(str(table), pa.table({"n": ["x"]}), mode="overwrite", schema_mode="overwrite")
    with pytest.raises(SinkError, match="field 'n' is int64, the table has string"):
        writer.commit([committable])
    assert rows(table) == [{"n": "x"}]


def test_records_that_do_not_fit_name_the_field(tmp_path):
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"k": ["a"], "n": pa.array([1], pa.int32())}))
    writer = DeltaSink(str(table)).create_writer(context())
    with pytest.raises(SinkError, match=r"field 'n' \(int32\) of record \{'k': 'b', 'n': 'x'\}"):
        writer.write_batch([{"k": "a", "n": 2}, {"k": "b", "n": "x"}])
    with pytest.raises(SinkError, match="field 'extra' is not in the schema"):
        writer.write_batch([{"k": "a", "n": 2, "extra": 1}])
    with pytest.raises(PlanError, match="field 'n' is int64, the table has int32"):
        DeltaSink(str(table), schema=pa.schema([("k", pa.string()), ("n", pa.int64())]))
    with pytest.raises(PlanError, match="partitioned by"):
        DeltaSink(str(table), partition_by=["k"])
    with pytest.raises(SinkError, match="cannot infer the type of field 'x'"):
        DeltaSink(str(tmp_path / "new")).create_writer(context()).write_batch([{"x": None}])


def test_a_path_that_is_not_a_delta_table_is_refused(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "data.csv").write_text("a,b\n")
    with pytest.raises(PlanError, match="is not a Delta table"):
        DeltaSink(str(tmp_path / "plain"))
    with pytest.raises(SourceError, match="is not a Delta table"):
        DeltaSource(str(tmp_path / "plain")).create_splits(2)
    with pytest.raises(SourceError, match="no Delta table"):
        DeltaSource(str(tmp_path / "missing")).create_splits(2)


def test_partitioned_append_round_trips_through_the_source(tmp_path):
    table = tmp_path / "t"
    sink = DeltaSink(str(table), partition_by=["day", "tag"])
    writer = sink.create_writer(context())
    day = datetime.date(2024, 5, 1)
    records = [{"day": day, "tag": tag, "n": i} for i, tag in enumerate(["a b", "x:y", None, "a b"])]
    writer.write_batch(records)
    writer.commit([writer.pre_commit(1)])
    table_meta = DeltaTable(str(table)).metadata()
    assert table_meta.partition_columns == ["day", "tag"]
    key = lambda r: r["n"]  # noqa: E731
    assert sorted(rows(table), key=key) == records
    assert sorted(read_all(DeltaSource(str(table))), key=key) == records


def test_the_source_reads_a_version_or_a_timestamp_split_by_file(tmp_path):
    table = str(tmp_path / "t")
    for i in range(3):
        write_deltalake(table, pa.table({"n": [i * 10, i * 10 + 1]}), mode="append")
    assert len(DeltaSource(table).create_splits(2)) == 3
    assert sorted(r["n"] for r in read_all(DeltaSource(table, version=1))) == [0, 1, 10, 11]
    first_commit = DeltaTable(table).history()[-1]["timestamp"]
    when = datetime.datetime.fromtimestamp(first_commit / 1000, datetime.UTC)
    assert sorted(r["n"] for r in read_all(DeltaSource(table, timestamp=when))) == [0, 1]
    assert read_all(DeltaSource(table, version=0, columns=["n"], as_dicts=False)) == [(0,), (1,)]
    with pytest.raises(SourceError, match="has no version 9"):
        DeltaSource(table, version=9).create_splits(1)


def test_following_reads_new_versions_from_a_position(tmp_path):
    table = str(tmp_path / "t")
    write_deltalake(table, pa.table({"n": [0, 1]}))
    splits = DeltaSource(table, follow=True, poll_interval=0.0).create_splits(2)
    assert not DeltaSource(table, follow=True).bounded

    def drain():
        got = []
        for split in splits:
            while batch := split.read_batch(10):
                got.extend(r["n"] for r in batch)
        return sorted(got)

    assert drain() == [0, 1]
    positions = [s.position() for s in splits]
    write_deltalake(table, pa.table({"n": [2, 3]}), mode="append")
    DeltaTable(table).optimize.compact()  # rearranges, adds nothing new to read
    write_deltalake(table, pa.table({"n": [4]}), mode="append")
    assert drain() == [2, 3, 4]
    for split, position in zip(splits, positions, strict=True):
        split.seek(position)  # a restore: read again from the checkpointed positions
    assert drain() == [2, 3, 4]
    DeltaTable(table).delete("n = 0")
    with pytest.raises(SourceError, match="removes or changes rows"):
        drain()


def test_a_delta_sink_claims_its_table_unless_several_jobs_may_append(tmp_path):
    from epochal.control.sink_claims import SinkClaims

    table = str(tmp_path / "table")
    assert DeltaSink(table).claim_location() == table
    assert DeltaSink(table, exclusive=False).claim_location() is None
    claims = SinkClaims("job00001", "writer", {table: "DeltaSink"})
    claims.acquire()
    DeltaSink(table)  # a directory holding only the claim is still free for a new table
    claims.release()
