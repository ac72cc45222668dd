"""Batch streams from and to the columnar formats without Spark: Parquet files, Delta tables and
DataFrame snapshots read as record batches (``batches=True``) give the row sources' data, at the
row sources' splits and positions (a split restored mid-file continues at the checkpointed row),
with their schema known when planned; the Parquet and Delta sinks write record batches as they
are, by the same two-phase commit as rows."""

from __future__ import annotations

import datetime
import pickle
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from epochal import BatchStream, Environment, PlanError
from epochal.connectors.base import SinkContext, Source, SourceSplit
from epochal.connectors.dataframe_source import DataFrameSource
from epochal.connectors.delta import DeltaSink, DeltaSource
from epochal.connectors.files import ParquetFileSink, ParquetFileSource
from epochal.connectors.parquet_split import BATCH_ROWS
from epochal.errors import SinkError, SourceError


def orders(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "user": [f"u{i % 7}" for i in ids],
                     "amount": [float(i % 13) for i in ids],
                     "day": [datetime.date(2024, 1, 1 + i % 5) for i in ids]})


def write_files(directory: Any) -> pa.Table:
    """Two Parquet files: one of small row groups (gathered into batches), one of a large row
    group (cut into batches) with an empty row group in between; returns all their rows."""
    directory.mkdir()
    first, second = orders(0, 2_500), orders(2_500, 3_100)
    pq.write_table(first, directory / "a.parquet", row_group_size=300)
    with pq.ParquetWriter(directory / "b.parquet", second.schema) as writer:
        writer.write_table(second.slice(0, 2_000))
        writer.write_table(second.slice(0, 0))
        writer.write_table(second.slice(2_000))
    assert pq.ParquetFile(directory / "b.parquet").metadata.num_row_groups == 3
    return pa.concat_tables([first, second])


def splits_of(source: Source, parallelism: int = 2) -> list[SourceSplit]:
    """The source's splits as a worker gets them (pickled on the driver)."""
    return pickle.loads(pickle.dumps(source.create_splits(parallelism)))


def drain(split: SourceSplit, limit: int | None = None) -> list[Any]:
    """What ``split`` reads (at most ``limit`` reads), as the runtime calls it."""
    out: list[Any] = []
    reads = 0
    while limit is None or reads < limit:
        got = split.read_batch(100)
        if got is None:
            break
        out.extend(got)
        reads += 1
    return out


def read_batches(source: Source) -> list[pa.RecordBatch]:
    out: list[pa.RecordBatch] = []
    for split in splits_of(source):
        split.open()
        out.extend(drain(split))
        split.close()
    return out


def read_rows(source: Source) -> list[Any]:
    out: list[Any] = []
    for split in splits_of(source):
        split.open()
        out.extend(drain(split))
        split.close()
    return out


def as_rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return pa.Table.from_batches(batches).to_pylist() if batches else []


# ------------------------------------------------------------------------------------- Parquet


def test_parquet_batches_are_the_row_sources_rows_in_batches_of_batch_rows(tmp_path) -> None:
    expected = write_files(tmp_path / "in")
    batches = read_batches(ParquetFileSource(str(tmp_path / "in"), batches=True, batch_rows=1_000))
    assert all(type(b) is pa.RecordBatch for b in batches)
    # a.parquet: 2,500 rows of row groups of 300 -> 1,000 + 1,000 + 500; b.parquet: 2,000 | (empty) | 1,100
    assert [b.num_rows for b in batches] == [1_000, 1_000, 500, 1_000, 1_000, 1_000, 100]
    assert as_rows(batches) == read_rows(ParquetFileSource(str(tmp_path / "in"))) == expected.to_pylist()
    assert all(b.schema.metadata is None for b in batches)
    default = read_batches(ParquetFileSource(str(tmp_path / "in"), batches=True))
    assert [b.num_rows for b in default] == [2_500, 3_100] and BATCH_ROWS == 65_536


def test_parquet_batches_select_columns_in_order(tmp_path) -> None:
    write_files(tmp_path / "in")
    source = ParquetFileSource(str(tmp_path / "in"), columns=["amount", "id"], batches=True)
    batches = read_batches(source)
    assert source.batch_schema() == batches[0].schema == pa.schema([("amount", pa.float64()), ("id", pa.int64())])
    rows = read_rows(ParquetFileSource(str(tmp_path / "in"), columns=["amount", "id"], as_dicts=False))
    assert [tuple(r.values()) for r in as_rows(batches)] == rows


@pytest.mark.parametrize("reads_before", [1, 2, 3, 5])
def test_a_parquet_batch_split_restored_from_its_position_continues_exactly(tmp_path, reads_before) -> None:
    write_files(tmp_path / "in")
    source = ParquetFileSource(str(tmp_path / "in"), batches=True, batch_rows=700)
    for index, split in enumerate(splits_of(source)):
        whole = as_rows(drain(splits_of(source)[index]))
        before = drain(split, reads_before)
        position = split.position()  # what a checkpoint stores: the next row
        split.close()
        restored = splits_of(source)[index]  # a new attempt's split, sought to the checkpoint's position
        restored.seek(pickle.loads(pickle.dumps(position)))
        after = drain(restored)
        assert as_rows(before) + as_rows(after) == whole


def test_a_restore_at_a_row_inside_a_row_group_starts_there_and_gathers_on(tmp_path) -> None:
    write_files(tmp_path / "in")
    source = ParquetFileSource(str(tmp_path / "in"), batches=True, batch_rows=1_000)
    split = next(s for s in splits_of(source) if s.split_id.endswith("b.parquet"))
    split.seek((0, 1_234))  # a position a run with other batch_rows may have checkpointed
    batches = drain(split)
    assert [b.num_rows for b in batches] == [1_000, 866]  # 766 + 234 of the group after the empty one
    assert batches[0]["id"][0].as_py() == 2_500 + 1_234
    assert split.position() == (3, 0)


def test_parquet_batch_schema_is_the_footers_and_mistakes_are_plan_errors(tmp_path) -> None:
    write_files(tmp_path / "in")
    path = str(tmp_path / "in")
    schema = ParquetFileSource(path, batches=True).batch_schema()
    assert schema == read_batches(ParquetFileSource(path, batches=True))[0].schema and schema.metadata is None
    assert ParquetFileSource(path).batch_schema() is None
    with pytest.raises(PlanError, match=r"no column 'nope' in .*a\.parquet \(its columns: id, user, amount, day\)"):
        ParquetFileSource(path, columns=["id", "nope"], batches=True).batch_schema()
    for bad in (0, -5, 2.5, True):
        with pytest.raises(PlanError, match="batch_rows must be a whole number > 0"):
            ParquetFileSource(path, batches=True, batch_rows=bad)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.parquet").write_text("not parquet")
    with pytest.raises(SourceError, match=r"cannot read the schema of .*x\.parquet"):
        ParquetFileSource(str(tmp_path / "junk"), batches=True).batch_schema()


def test_read_parquet_batches_plans_a_batch_stream_checked_against_the_files(tmp_path) -> None:
    write_files(tmp_path / "in")
    env = Environment(2)
    stream = env.read_parquet(str(tmp_path / "in"), batches=True)
    assert isinstance(stream, BatchStream) and stream.schema.names == ["id", "user", "amount", "day"]
    assert not isinstance(env.read_parquet(str(tmp_path / "in")), BatchStream)
    with pytest.raises(PlanError, match=r"key_by: the batches have no column 'missing' \(they have id, user"):
        stream.key_by("missing")
    with pytest.raises(PlanError, match=r"aggregate 't' reads column 'nope'"):
        stream.key_by("user").agg(t=("nope", "sum"))
    with pytest.raises(PlanError, match=r"sum does not apply to column 'day'"):
        stream.key_by("user").agg(t=("day", "sum"))
    stream.key_by("user").agg(total=("amount", "sum"), n=("id", "count")).sink_to(
        ParquetFileSink(str(tmp_path / "out")))
    assert "Aggregate" in env.plan().describe()


# ----------------------------------------------------------------------------------- Delta Lake


def write_delta(path: str) -> pa.Table:
    """A partitioned Delta table of three versions, the last adding a column (older files lack
    it); returns its rows (the missing column null)."""
    first, second = orders(0, 1_500), orders(1_500, 900)
    write_deltalake(path, first, partition_by=["user"])
    write_deltalake(path, second, mode="append")
    third = orders(2_400, 300).append_column("note", pa.array([f"n{i}" for i in range(300)]))
    write_deltalake(path, third, mode="append", schema_mode="merge")
    nulls = pa.nulls(2_400, pa.string())
    return pa.concat_tables([pa.concat_tables([first, second]).append_column("note", nulls), third])


def by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


def test_delta_batches_are_the_row_sources_rows_with_partition_columns(tmp_path) -> None:
    table = str(tmp_path / "t")
    expected = write_delta(table)
    source = DeltaSource(table, batches=True, batch_rows=100)
    batches = read_batches(source)
    assert all(type(b) is pa.RecordBatch and 0 < b.num_rows <= 100 for b in batches)
    schema = source.batch_schema()
    assert all(b.schema == schema for b in batches)
    assert schema.names == ["id", "amount", "day", "user", "note"]  # the table's order: partition columns last
    rows = read_rows(DeltaSource(table))
    assert by_id(as_rows(batches)) == by_id(rows) == by_id(expected.to_pylist())
    assert len(batches) > len(DeltaSource(table).create_splits(2))  # several batches per data file


def test_delta_batches_select_columns_and_unknown_ones_are_plan_errors(tmp_path) -> None:
    table = str(tmp_path / "t")
    write_delta(table)
    source = DeltaSource(table, columns=["user", "id"], batches=True, version=0)
    batches = read_batches(source)
    assert source.batch_schema() == batches[0].schema
    assert source.batch_schema().names == ["user", "id"]
    assert sorted(tuple(r.values()) for r in as_rows(batches)) == sorted(
        read_rows(DeltaSource(table, columns=["user", "id"], as_dicts=False, version=0)))
    with pytest.raises(PlanError, match=r"column 'nope' is not in the Delta table"):
        DeltaSource(table, columns=["nope"], batches=True).batch_schema()
    with pytest.raises(PlanError, match=r"batch_rows must be a whole number > 0"):
        DeltaSource(table, batches=True, batch_rows=0)
    env = Environment(2)
    stream = env.from_source(DeltaSource(table, batches=True))
    assert isinstance(stream, BatchStream)
    with pytest.raises(PlanError, match=r"no column 'customer'"):
        stream.key_by("customer")


def test_a_delta_batch_split_restored_from_its_position_continues_exactly(tmp_path) -> None:
    table = str(tmp_path / "t")
    write_deltalake(table, orders(0, 2_000))
    source = DeltaSource(table, batches=True, batch_rows=300)
    [split] = splits_of(source)
    before = drain(split, 3)
    position = split.position()
    assert position == (0, 900)
    [restored] = splits_of(source)
    restored.seek(position)
    assert as_rows(before) + as_rows(drain(restored)) == orders(0, 2_000).to_pylist()


def test_following_a_delta_table_as_batches_from_a_position(tmp_path) -> None:
    table = str(tmp_path / "t")
    write_deltalake(table, orders(0, 10))
    splits = DeltaSource(table, follow=True, poll_interval=0.0, batches=True).create_splits(2)

    def ids() -> list[int]:
        got: list[int] = []
        for split in splits:
            while batch := split.read_batch(10):
                got.extend(i for b in batch for i in b["id"].to_pylist())
        return sorted(got)

    assert ids() == list(range(10))
    positions = [s.position() for s in splits]
    write_deltalake(table, orders(10, 5), mode="append")
    assert ids() == list(range(10, 15))
    for split, position in zip(splits, positions, strict=True):
        split.seek(position)
    assert ids() == list(range(10, 15))


# ------------------------------------------------------------------------------- DataFrame snapshot


def test_a_dataframe_snapshot_as_batches_is_what_arrow_reads(tmp_path) -> None:
    expected = write_files(tmp_path / "snap")
    source = DataFrameSource(str(tmp_path / "snap"), "{}", batches=True, batch_rows=2_000)
    batches = read_batches(source)
    assert source.produces_batches and source.batch_schema() == batches[0].schema
    assert [b.num_rows for b in batches] == [2_000, 500, 2_000, 1_100]
    assert as_rows(batches) == expected.to_pylist()
    assert DataFrameSource(str(tmp_path / "snap"), "{}").batch_schema() is None


# ------------------------------------------------------------------------------------------ sinks


def sink_context(subtask: int = 0, attempt: int = 0) -> SinkContext:
    return SinkContext("sink", subtask, 1, lambda payload: None, attempt=attempt, checkpointing=True,
                       job_name="job", job_id="job1", operator_uid="sink-1")


def test_the_parquet_sink_writes_record_batches_as_they_are_by_two_phase_commit(tmp_path) -> None:
    out = tmp_path / "out"
    writer = ParquetFileSink(str(out)).create_writer(sink_context())
    data = orders(0, 1_000)
    writer.write_batch(data.to_batches(max_chunksize=400))
    writer.write_batch([pa.RecordBatch.from_pylist([], schema=data.schema)])
    committable = writer.pre_commit(1)
    assert not list(out.glob("*.parquet"))  # pre-committed under _pending/: invisible
    writer.commit([committable])
    writer.commit([committable])  # a restored attempt commits again: harmless
    assert pq.read_table(out).to_pylist() == data.to_pylist()
    writer.write_batch([pa.RecordBatch.from_pylist([], schema=data.schema)])  # only empty batches: no file
    assert writer.pre_commit(2) is None
    writer.write_batch(data.to_batches())
    writer.close()  # an aborted epoch: never visible
    assert pq.read_table(out).num_rows == 1_000 and not list((out / "_pending").iterdir())


def test_the_parquet_sink_selects_and_casts_batches_to_its_schema(tmp_path) -> None:
    schema = pa.schema([pa.field("user", pa.large_string()), pa.field("id", pa.int64(), nullable=False)])
    writer = ParquetFileSink(str(tmp_path / "out"), schema=schema).create_writer(sink_context())
    writer.write_batch(orders(0, 10).to_batches())
    writer.commit([writer.pre_commit(1)])
    written = pq.read_table(tmp_path / "out")
    assert written.schema == schema and written["id"].to_pylist() == list(range(10))
    with pytest.raises(ValueError, match=r"have no column 'user'"):
        writer.write_batch([pa.record_batch({"id": [1]})])
    with pytest.raises(ValueError, match=r"column 'id' of the record batches .* has 1 null"):
        writer.write_batch([pa.record_batch({"id": pa.array([1, None], pa.int64()), "user": ["a", "b"]})])
    writer.close()


def delta_rows(path: Any) -> list[dict[str, Any]]:
    return by_id(DeltaTable(str(path)).to_pyarrow_table().to_pylist())


def test_the_delta_sink_writes_record_batches_partitioned_exactly_once(tmp_path) -> None:
    table = tmp_path / "t"
    sink = DeltaSink(str(table), partition_by=["user"])
    writer = sink.create_writer(sink_context())
    data = orders(0, 2_000)
    writer.write_batch(data.to_batches(max_chunksize=700))
    writer.write_batch([pa.RecordBatch.from_pylist([], schema=data.schema)])
    committable = writer.pre_commit(1)
    assert not DeltaTable.is_deltatable(str(table))  # data files, no commit yet
    writer.commit([committable])
    assert DeltaTable(str(table)).metadata().partition_columns == ["user"]
    assert len(committable.adds) == 7  # one data file per partition value
    assert delta_rows(table) == by_id(data.to_pylist())
    version = DeltaTable(str(table)).version()
    sink.create_writer(sink_context(attempt=1)).commit([committable])  # a restore's repeated commit
    assert DeltaTable(str(table)).version() == version
    # later batches: other column order, types to cast; read back by the source too
    more = orders(2_000, 50).combine_chunks().to_batches()[0]
    reordered = pa.record_batch({"day": more["day"], "amount": more["amount"], "user": more["user"],
                                 "id": pa.array(more["id"].to_pylist(), pa.int32())})
    with pytest.raises(SinkError, match=r"have a column 'extra' the schema does not have"):
        writer.write_batch([reordered.append_column("extra", pa.array([1] * 50))])  # as a dict's extra field
    writer.write_batch([reordered])
    writer.commit([writer.pre_commit(2)])
    expected = by_id(orders(0, 2_050).to_pylist())
    assert delta_rows(table) == expected
    assert by_id(as_rows(read_batches(DeltaSource(str(table), batches=True)))) == expected
    with pytest.raises(SinkError, match=r"have no column 'amount'"):
        writer.write_batch([pa.record_batch({"id": [1], "user": ["u"], "day": [datetime.date(2024, 1, 1)]})])
    writer.close()


def test_a_new_delta_table_from_batches_takes_their_schema(tmp_path) -> None:
    table = tmp_path / "t"
    writer = DeltaSink(str(table), partition_by=["day"]).create_writer(sink_context())
    with pytest.raises(SinkError, match=r"partition column 'day' is not a field of record batches with columns id"):
        writer.write_batch([pa.record_batch({"id": [1]})])
    writer.write_batch(orders(0, 100).to_batches())
    writer.commit([writer.pre_commit(1)])
    assert delta_rows(table) == by_id(orders(0, 100).to_pylist())
    adds = pa.table(DeltaTable(str(table)).get_add_actions(flatten=False)).to_pylist()
    assert len({a["path"].split("/")[0] for a in adds}) == 5
