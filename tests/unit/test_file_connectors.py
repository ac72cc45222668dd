"""File sources and sinks: reading, batching, position/seek round trips, errors, writing."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from epochal.connectors.base import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    GUARANTEES,
    NO_OUTPUT,
    Sink,
    SinkContext,
    Source,
    SourceSplit,
)
from epochal.connectors.files import (
    PENDING_DIR,
    CsvFileSource,
    ExactlyOnceFileSink,
    ParquetFileSink,
    ParquetFileSource,
    TextFileSink,
    TextFileSource,
    cleanup_pending,
    read_committed_lines,
)
from epochal.connectors.memory import CollectSink, DiscardSink, PrintSink
from epochal.errors import PlanError, SourceError


def read_all(split: SourceSplit, batch: int = 1000) -> list[Any]:
    out: list[Any] = []
    split.open()
    try:
        while (records := split.read_batch(batch)) is not None:
            out.extend(records)
    finally:
        split.close()
    return out


def read_source(source: Source) -> list[Any]:
    splits = pickle.loads(pickle.dumps(source)).create_splits(2)
    return [r for s in splits for r in read_all(pickle.loads(pickle.dumps(s)))]


def read_in_batches(split: SourceSplit, sizes: list[int]) -> list[Any]:
    out: list[Any] = []
    split.open()
    i = 0
    while (records := split.read_batch(sizes[i % len(sizes)])) is not None:
        assert len(records) <= sizes[i % len(sizes)]
        out.extend(records)
        i += 1
    split.close()
    return out


def check_seek_round_trip(source: Source, ks: list[int]) -> None:
    """Read k records, take the position, resume in a pickled copy: the halves form the whole."""
    for split in source.create_splits(1):
        full = read_all(pickle.loads(pickle.dumps(split)))
        for k in sorted({*ks, 0, len(full), max(len(full) - 1, 0)}):
            if k > len(full):
                continue
            first = pickle.loads(pickle.dumps(split))
            first.open()
            head: list[Any] = []
            while len(head) < k:
                head.extend(first.read_batch(min(3, k - len(head))) or [])
            position = first.position()
            first.close()
            resumed = pickle.loads(pickle.dumps(split))
            resumed.open()
            resumed.seek(pickle.loads(pickle.dumps(position)))
            tail: list[Any] = []
            while (records := resumed.read_batch(7)) is not None:
                tail.extend(records)
            resumed.close()
            assert head + tail == full, (split.split_id, k)

            # Also: a split pickled while open resumes after open() + seek() the same way.
            live = pickle.loads(pickle.dumps(split))
            live.open()
            got = 0
            while got < k:
                got += len(live.read_batch(min(5, k - got)) or [])
            copy = pickle.loads(pickle.dumps(live))
            live.close()
            copy.open()
            copy.seek(position)
            assert read_rest(copy) == tail, (split.split_id, k)


def read_rest(split: SourceSplit) -> list[Any]:
    out: list[Any] = []
    while (records := split.read_batch(4)) is not None:
        out.extend(records)
    split.close()
    return out


def angle(record: Any) -> str:
    return f"<{record}>"


def context(index: int, parallelism: int = 2) -> SinkContext:
    return SinkContext("sink", index, parallelism, send_to_driver=lambda payload: None)


# ------------------------------------------------------------------------------------------ text


@pytest.fixture
def text_dir(tmp_path: Path) -> tuple[Path, list[list[str]]]:
    d = tmp_path / "text"
    d.mkdir()
    contents = [
        [f"line {i} é" for i in range(25)],
        ["", "after empty", "  spaced  ", "last without newline"],
        [],
    ]
    (d / "a.txt").write_bytes("".join(f"{line}\n" for line in contents[0]).encode())
    (d / "b.txt").write_bytes(("\r\n".join(contents[1])).encode())
    (d / "c.txt").write_bytes(b"")
    (d / "_SUCCESS").write_bytes(b"ignored\n")
    (d / ".hidden").write_bytes(b"ignored\n")
    return d, contents


def test_text_reads_all_files(text_dir: tuple[Path, list[list[str]]]) -> None:
    d, contents = text_dir
    source = TextFileSource(str(d))
    splits = source.create_splits(4)
    assert [Path(s.split_id).name for s in splits] == ["a.txt", "b.txt", "c.txt"]
    assert read_source(source) == [line for c in contents for line in c]
    assert read_source(TextFileSource(f"file://{d}")) == [line for c in contents for line in c]
    assert read_source(TextFileSource(str(d / "*.txt"))) == [line for c in contents for line in c]
    assert read_source(TextFileSource(str(d / "b.txt"))) == contents[1]


def test_text_batches_of_various_sizes(text_dir: tuple[Path, list[list[str]]]) -> None:
    d, contents = text_dir
    for split, expected in zip(TextFileSource(str(d)).create_splits(1), contents, strict=True):
        for sizes in ([1], [2, 5], [3, 1, 100], [1000]):
            assert read_in_batches(pickle.loads(pickle.dumps(split)), sizes) == expected


def test_text_long_lines_cross_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import epochal.connectors.files.text_source as files

    monkeypatch.setattr(files, "_TEXT_CHUNK", 7)
    lines = ["x" * 20, "", "ab", "ü" * 9, "tail"]
    (tmp_path / "f.txt").write_bytes("\r\n".join(lines).encode() + b"\n")
    source = TextFileSource(str(tmp_path / "f.txt"))
    assert read_source(source) == lines
    check_seek_round_trip(source, [1, 2, 3])


def test_text_seek_round_trip(text_dir: tuple[Path, list[list[str]]]) -> None:
    check_seek_round_trip(TextFileSource(str(text_dir[0])), [1, 2, 3, 10, 24])


def test_text_position_is_byte_offset(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"ab\r\ncd\nef")
    (split,) = TextFileSource(str(tmp_path / "f.txt")).create_splits(1)
    split.open()
    assert split.position() == 0
    assert split.read_batch(1) == ["ab"]
    assert split.position() == 4
    assert split.read_batch(5) == ["cd", "ef"]
    assert split.position() == 9
    assert split.read_batch(5) is None
    split.seek(4)
    assert split.read_batch(1) == ["cd"]
    split.close()


def test_text_missing_path(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(SourceError, match="nope"):
        TextFileSource(missing).create_splits(1)
    with pytest.raises(SourceError, match="nope"):
        TextFileSource(missing + "/*.txt").create_splits(1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="empty"):
        TextFileSource(str(tmp_path / "empty")).create_splits(1)


def test_text_invalid_bytes_and_bad_encoding(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(SourceError, match=r"f\.txt.*byte 3"):
        read_source(TextFileSource(str(tmp_path / "f.txt")))
    assert read_source(TextFileSource(str(tmp_path / "f.txt"), encoding="latin-1")) == ["ok", "ÿþ"]
    with pytest.raises(PlanError):
        TextFileSource(str(tmp_path), encoding="utf-16")
    with pytest.raises(PlanError):
        TextFileSource(str(tmp_path), encoding="no-such-codec")


# ------------------------------------------------------------------------------------------- csv


@pytest.fixture
def csv_dir(tmp_path: Path) -> tuple[Path, list[list[dict[str, Any]]]]:
    d = tmp_path / "csv"
    d.mkdir()
    rows1 = [{"id": i, "name": f"n{i}", "score": i / 2} for i in range(40)]
    rows2 = [{"id": 100, "name": "with, comma", "score": None}, {"id": 101, "name": 'q"uote', "score": 1.5}]
    body = "".join(f"{r['id']},{r['name']},{r['score']}\n" for r in rows1)
    (d / "1.csv").write_text("id,name,score\n" + body)
    (d / "2.csv").write_text('id,name,score\n100,"with, comma",\n101,"q""uote",1.5\n')
    (d / "3.csv").write_text("id,name,score\n")
    return d, [rows1, rows2, []]


def test_csv_reads_all_files(csv_dir: tuple[Path, list[list[dict[str, Any]]]]) -> None:
    d, contents = csv_dir
    assert read_source(CsvFileSource(str(d))) == [r for c in contents for r in c]
    tuples = read_source(CsvFileSource(str(d / "*.csv"), as_dicts=False))
    assert tuples == [(r["id"], r["name"], r["score"]) for c in contents for r in c]


def test_csv_header_options(tmp_path: Path) -> None:
    (tmp_path / "h.csv").write_text("a;b\n1;x\n2;y\n")
    (tmp_path / "n.csv").write_text("1;x\n2;y\n")
    (tmp_path / "e.csv").write_text("")
    src = CsvFileSource(str(tmp_path / "h.csv"), column_names=["k", "v"], delimiter=";")
    assert read_source(src) == [{"k": 1, "v": "x"}, {"k": 2, "v": "y"}]
    src = CsvFileSource(str(tmp_path / "n.csv"), has_header=False, column_names=["k", "v"], delimiter=";")
    assert read_source(src) == [{"k": 1, "v": "x"}, {"k": 2, "v": "y"}]
    src = CsvFileSource(str(tmp_path / "n.csv"), has_header=False, as_dicts=False, delimiter=";")
    assert read_source(src) == [(1, "x"), (2, "y")]
    assert read_source(CsvFileSource(str(tmp_path / "e.csv"))) == []
    with pytest.raises(PlanError):
        CsvFileSource(str(tmp_path), delimiter=";;")


def test_csv_batches_of_various_sizes(csv_dir: tuple[Path, list[list[dict[str, Any]]]]) -> None:
    d, contents = csv_dir
    for split, expected in zip(CsvFileSource(str(d)).create_splits(1), contents, strict=True):
        for sizes in ([1], [2, 5], [3, 1, 100], [1000]):
            assert read_in_batches(pickle.loads(pickle.dumps(split)), sizes) == expected


def test_csv_seek_round_trip(csv_dir: tuple[Path, list[list[dict[str, Any]]]]) -> None:
    check_seek_round_trip(CsvFileSource(str(csv_dir[0])), [1, 2, 5, 17, 39])


def test_csv_seek_across_record_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Many small blocks: seeking must skip whole record batches and slice into the last one.
    import epochal.connectors.files.table_sources as files

    monkeypatch.setattr(files, "_CSV_BLOCK_SIZE", 4096)
    lines = "".join(f"{i},{'v' * 30}{i}\n" for i in range(3000))
    (tmp_path / "big.csv").write_text("a,b\n" + lines)
    source = CsvFileSource(str(tmp_path / "big.csv"), as_dicts=False)
    check_seek_round_trip(source, [1, 999, 1500, 2999])
    (split,) = source.create_splits(1)
    split.open()
    assert len(split.read_batch(3000)) == 3000
    split.seek(2500)
    assert split.read_batch(1) == [(2500, "v" * 30 + "2500")]
    split.seek(10)  # backwards: re-opens
    assert split.read_batch(1) == [(10, "v" * 30 + "10")]
    split.seek(20)  # forwards from an open position
    assert split.read_batch(1) == [(20, "v" * 30 + "20")]
    with pytest.raises(SourceError, match="big.csv"):
        split.seek(5000)
    split.close()


def test_csv_missing_path(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="missing.csv"):
        CsvFileSource(str(tmp_path / "missing.csv")).create_splits(1)


def test_csv_malformed_row_raises(tmp_path: Path) -> None:
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n3\n4,5\n")
    with pytest.raises(SourceError, match=r"bad\.csv.*Expected 2 columns, got 1"):
        read_source(CsvFileSource(str(tmp_path / "bad.csv")))
    # A bad row far into the file (in a later block) is reported too, not dropped.
    good = "".join(f"{i},{i}\n" for i in range(200_000))
    (tmp_path / "late.csv").write_text("a,b\n" + good + "1,2,3\n")
    with pytest.raises(SourceError, match=r"late\.csv.*Expected 2 columns, got 3"):
        read_source(CsvFileSource(str(tmp_path / "late.csv")))


# --------------------------------------------------------------------------------------- parquet


@pytest.fixture
def parquet_dir(tmp_path: Path) -> tuple[Path, list[list[dict[str, Any]]]]:
    d = tmp_path / "pq"
    d.mkdir()
    rows1 = [{"id": i, "name": f"n{i}", "tags": [i, i + 1]} for i in range(50)]
    rows2 = [{"id": 1000 + i, "name": None, "tags": []} for i in range(7)]
    pq.write_table(pa.Table.from_pylist(rows1), d / "a.parquet", row_group_size=8)
    pq.write_table(pa.Table.from_pylist(rows2), d / "b.parquet")
    pq.write_table(pa.Table.from_pylist(rows1).slice(0, 0), d / "c.parquet")
    return d, [rows1, rows2, []]


def test_parquet_reads_all_files(parquet_dir: tuple[Path, list[list[dict[str, Any]]]]) -> None:
    d, contents = parquet_dir
    assert read_source(ParquetFileSource(str(d))) == [r for c in contents for r in c]
    got = read_source(ParquetFileSource(f"file://{d}", columns=["name", "id"], as_dicts=False))
    assert got == [(r["name"], r["id"]) for c in contents for r in c]


def test_parquet_batches_of_various_sizes(parquet_dir: tuple[Path, list[list[dict[str, Any]]]]) -> None:
    d, contents = parquet_dir
    for split, expected in zip(ParquetFileSource(str(d)).create_splits(1), contents, strict=True):
        for sizes in ([1], [2, 5], [3, 1, 100], [1000]):
            assert read_in_batches(pickle.loads(pickle.dumps(split)), sizes) == expected


def test_parquet_seek_round_trip(parquet_dir: tuple[Path, list[list[dict[str, Any]]]]) -> None:
    check_seek_round_trip(ParquetFileSource(str(parquet_dir[0])), [1, 7, 8, 9, 16, 33, 49])


def test_parquet_position_is_row_group_and_offset(
    parquet_dir: tuple[Path, list[list[dict[str, Any]]]],
) -> None:
    (split, _, _) = ParquetFileSource(str(parquet_dir[0])).create_splits(1)
    split.open()
    assert split.position() == (0, 0)
    split.read_batch(11)
    assert split.position() == (1, 3)
    split.seek((4, 2))
    assert split.read_batch(1)[0]["id"] == 34
    with pytest.raises(SourceError):
        split.seek((99, 0))
    split.close()


def test_parquet_missing_and_corrupt(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="nothing.parquet"):
        ParquetFileSource(str(tmp_path / "nothing.parquet")).create_splits(1)
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(SourceError, match="junk.parquet"):
        read_source(ParquetFileSource(str(tmp_path / "junk.parquet")))


# ------------------------------------------------------------------------------------------ sinks

PART = re.compile(r"part-(\d{5})-(\d{6})-([0-9a-f]{12})-(\d{6})\.(txt|parquet)")


def finish(writer: Any, checkpoint_id: int = 0) -> None:
    """What the sink operator does at the end of input without checkpointing."""
    writer.flush()
    committable = writer.pre_commit(checkpoint_id)
    writer.commit([] if committable is None else [committable])
    writer.close()


def visible(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith(("_", ".")))


def pending(directory: Path) -> list[str]:
    return sorted(p.name for p in (directory / PENDING_DIR).iterdir())


def test_text_sink_two_subtasks(tmp_path: Path) -> None:
    out = tmp_path / "out" / "nested"
    sink = pickle.loads(pickle.dumps(TextFileSink(str(out), format=angle)))
    writers = [sink.create_writer(context(i, 3)) for i in range(3)]
    writers[0].write_batch([1, 2])
    writers[1].write_batch(["a"])
    writers[0].write_batch([3])
    writers[1].write_batch([])
    for w in writers:
        finish(w)
    names = visible(out)
    assert [PART.fullmatch(n).group(1, 2, 4, 5) for n in names] == [  # type: ignore[union-attr]
        ("00000", "000000", "000001", "txt"), ("00001", "000000", "000001", "txt")]  # subtask 2: no records, no file
    assert (out / names[0]).read_text() == "<1>\n<2>\n<3>\n"
    assert (out / names[1]).read_text() == "<a>\n"
    assert read_source(TextFileSource(str(out))) == ["<1>", "<2>", "<3>", "<a>"]
    assert pending(out) == []


def test_text_sink_uri_relative_path_and_bad_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = TextFileSink(f"file://{tmp_path}/u")
    w = sink.create_writer(context(3, 4))
    w.write_batch(["x", ("y", 1)])
    finish(w)
    assert [(tmp_path / "u" / n).read_text() for n in visible(tmp_path / "u")] == ["x\n('y', 1)\n"]
    monkeypatch.chdir(tmp_path)
    assert TextFileSink("rel").directory == str(tmp_path / "rel")  # resolved on the driver, not on executors
    with pytest.raises(PlanError):
        TextFileSink("")
    with pytest.raises(PlanError):
        TextFileSink(str(tmp_path), format="not callable")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="encoding"):
        TextFileSink(str(tmp_path), encoding="no-such-codec")


def test_text_two_phase_commit_per_epoch(tmp_path: Path) -> None:
    out = tmp_path / "out"
    w = TextFileSink(str(out)).create_writer(context(1))
    w.write_batch([1, 2])
    assert visible(out) == [] and len(pending(out)) == 1  # in progress: invisible
    first = w.pre_commit(7)
    assert pickle.loads(pickle.dumps(first)) == first  # kept in checkpointed operator state
    assert w.pre_commit(8) is None  # an epoch without records: no file
    w.write_batch([3])
    second = w.pre_commit(9)
    assert visible(out) == [] and len(pending(out)) == 2  # pre-committed: still invisible
    w.commit([first])
    assert read_committed_lines(str(out)) == ["1", "2"]
    w.commit([first, second])  # committing again (after a restore) is harmless
    w.commit([first, second])
    assert read_committed_lines(str(out)) == ["1", "2", "3"]
    names = visible(out)
    assert [PART.fullmatch(n).group(1, 2, 4) for n in names] == [  # type: ignore[union-attr]
        ("00001", "000007", "000001"), ("00001", "000009", "000002")]
    assert pending(out) == []
    w.close()


def test_text_restored_committables_commit_from_a_new_writer(tmp_path: Path) -> None:
    sink = TextFileSink(str(tmp_path / "out"))
    old = sink.create_writer(context(0))
    old.write_batch(["kept"])
    committable = pickle.loads(pickle.dumps(old.pre_commit(3)))
    old.write_batch(["after the checkpoint"])  # the attempt dies here: never committed
    # (a killed worker does not even close; the in-progress file stays hidden in _pending)
    new = sink.create_writer(context(0))  # the restarted attempt's writer restores the committable
    new.commit([committable])
    new.commit([committable])
    assert read_committed_lines(str(tmp_path / "out")) == ["kept"]
    assert len(pending(tmp_path / "out")) == 1
    assert cleanup_pending(str(tmp_path / "out")) == 1
    new.write_batch(["next"])
    finish(new, 4)
    assert read_committed_lines(str(tmp_path / "out")) == ["kept", "next"]
    assert len({PART.fullmatch(n).group(3) for n in visible(tmp_path / "out")}) == 2  # type: ignore[union-attr]


def test_text_abort_leaves_nothing_visible(tmp_path: Path) -> None:
    out = tmp_path / "out"
    w = TextFileSink(str(out)).create_writer(context(0))
    w.write_batch(["a"])
    done = w.pre_commit(1)
    w.write_batch(["b"])
    w.close()  # a failure: the open epoch is aborted, its file removed
    assert visible(out) == [] and len(pending(out)) == 1  # only the pre-committed file waits
    assert read_committed_lines(str(out)) == []
    gone = done._replace(pending=done.pending + ".missing")
    with pytest.raises(RuntimeError, match="is gone and it was never committed"):
        w.commit([gone])


def test_exactly_once_file_sink_is_the_text_sink(tmp_path: Path) -> None:
    sink = ExactlyOnceFileSink(str(tmp_path / "out"), format=angle)
    assert isinstance(sink, TextFileSink) and sink.guarantee == EXACTLY_ONCE
    w = pickle.loads(pickle.dumps(sink)).create_writer(context(0))
    w.write_batch([1])
    finish(w, 2)
    assert read_committed_lines(str(tmp_path / "out")) == ["<1>"]


def test_sink_guarantees() -> None:
    class Plain(Sink):
        def create_writer(self, context: SinkContext) -> Any:
            raise NotImplementedError

    assert TextFileSink.guarantee == ParquetFileSink.guarantee == CollectSink.guarantee == EXACTLY_ONCE
    assert PrintSink.guarantee == Plain.guarantee == AT_LEAST_ONCE
    assert DiscardSink.guarantee == NO_OUTPUT
    assert {EXACTLY_ONCE, AT_LEAST_ONCE, NO_OUTPUT} == set(GUARANTEES)


def test_parquet_sink_inferred_schema(tmp_path: Path) -> None:
    out = tmp_path / "pq-out"
    sink = pickle.loads(pickle.dumps(ParquetFileSink(str(out))))
    writers = [sink.create_writer(context(i)) for i in range(2)]
    rows = [{"id": i, "name": f"n{i}"} for i in range(10)]
    writers[0].write_batch(rows[:4])
    writers[0].write_batch(rows[4:6])
    finish(writers[0])
    finish(writers[1])  # nothing written: no file
    names = visible(out)
    assert len(names) == 1 and PART.fullmatch(names[0]).group(1, 5) == ("00000", "parquet")  # type: ignore[union-attr]
    assert pq.ParquetFile(out / names[0]).num_row_groups == 2
    assert read_source(ParquetFileSource(str(out))) == rows[:6]
    assert pq.read_table(out).to_pylist() == rows[:6]  # pyarrow datasets skip _pending too


def test_parquet_epochs_are_readable_files_once_pre_committed(tmp_path: Path) -> None:
    out = tmp_path / "pq"
    w = ParquetFileSink(str(out)).create_writer(context(0))
    w.write_batch([{"n": 1}, {"n": 2}])
    first = w.pre_commit(1)
    assert pq.read_table(first.pending).to_pylist() == [{"n": 1}, {"n": 2}]  # footer written, synced
    w.write_batch([{"n": 3}])
    with pytest.raises((pa.ArrowException, TypeError, ValueError), match="cannot write records"):
        w.write_batch([{"n": "not an int"}])  # the schema inferred from the first batch holds
    second = w.pre_commit(2)
    w.write_batch([{"n": 4}])
    w.close()  # aborts the open epoch
    assert visible(out) == []
    w.commit([first, second])
    w.commit([second])
    assert pq.read_table(out).to_pylist() == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert [PART.fullmatch(n).group(2) for n in visible(out)] == ["000001", "000002"]  # type: ignore[union-attr]
    assert pending(out) == []


def test_parquet_sink_schema_and_tuples(tmp_path: Path) -> None:
    out = tmp_path / "pq-schema"
    schema = pa.schema([("id", pa.int32()), ("name", pa.string())])
    sink = pickle.loads(pickle.dumps(ParquetFileSink(str(out), schema=schema)))
    writers = [sink.create_writer(context(i)) for i in range(3)]
    writers[0].write_batch([(1, "a"), (2, "b")])
    writers[1].write_batch([{"id": 3, "name": "c"}, {"id": 4}])
    for w in writers:
        finish(w)
    names = visible(out)
    assert [PART.fullmatch(n).group(1) for n in names] == ["00000", "00001"]  # type: ignore[union-attr]
    assert all(pq.read_schema(out / n) == schema for n in names)
    got = read_source(ParquetFileSource(str(out), as_dicts=False))
    assert got == [(1, "a"), (2, "b"), (3, "c"), (4, None)]

    bad = sink.create_writer(context(5, 6))
    with pytest.raises(ValueError, match="has 3 fields, the schema has 2"):
        bad.write_batch([(1, "a", "extra")])
    bad.close()
    with pytest.raises(PlanError):
        ParquetFileSink(str(out), schema={"id": "int"})  # type: ignore[arg-type]
    no_schema = ParquetFileSink(str(tmp_path / "x")).create_writer(context(0))
    with pytest.raises(TypeError, match="schema"):
        no_schema.write_batch([(1, 2)])
    no_schema.close()
