"""Files in, files out, through real jobs: text, CSV and Parquet with pyarrow."""

from __future__ import annotations

import re
from collections import Counter

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import epochal
from epochal.connectors.files import ParquetFileSink, TextFileSink, read_committed_lines


def test_text_files_word_count_to_text_sink(make_env, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    expected: Counter = Counter()
    for f in range(5):
        lines = [f"w{(f * 31 + i) % 50} w{i % 7} end" for i in range(2000)]
        (src / f"part-{f}.txt").write_text("\n".join(lines) + "\n")
        expected.update(w for ln in lines for w in ln.split())
    out = tmp_path / "out"
    env = make_env(2)
    counts = env.read_text(str(src)).flat_map(str.split).key_by(lambda w: w).count()
    counts.sink_to(TextFileSink(str(out), format=lambda kv: f"{kv[0]}\t{kv[1]}"))
    env.execute("text-wordcount", timeout=240)
    last = {}
    for ln in read_committed_lines(str(out)):  # committed files in name order; _pending/ skipped
        word, count = ln.split("\t")
        last[word] = int(count)
    assert last == dict(expected)


def test_checkpointed_file_sinks_commit_one_file_per_subtask_and_epoch(make_env, tmp_path):
    env = make_env(2)
    env.enable_checkpointing(0.2, storage=str(tmp_path / "checkpoints"))
    numbers = env.from_sequence(0, 3000, rate=3000)
    numbers.sink_to(TextFileSink(str(tmp_path / "txt")))
    numbers.map(lambda i: {"n": i}).sink_to(ParquetFileSink(str(tmp_path / "pq")))
    result = env.execute("checkpointed-files", timeout=240)
    assert result.completed_checkpoints >= 3
    assert sorted(map(int, read_committed_lines(str(tmp_path / "txt")))) == list(range(3000))
    assert sorted(pq.read_table(tmp_path / "pq").column("n").to_pylist()) == list(range(3000))
    for directory, extension in (("txt", "txt"), ("pq", "parquet")):
        names = [p.name for p in (tmp_path / directory).iterdir() if not p.name.startswith("_")]
        assert len(names) > 2  # several epochs per subtask, each its own committed file
        assert all(re.fullmatch(rf"part-0000[01]-\d{{6}}-[0-9a-f]{{12}}-\d{{6}}\.{extension}", n) for n in names)
        assert list((tmp_path / directory / "_pending").iterdir()) == []


def test_csv_to_parquet_and_back(make_env, tmp_path):
    table = pa.table({"user": [f"u{i % 10}" for i in range(3000)], "amount": list(range(3000))})
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    pacsv.write_csv(table.slice(0, 1500), csv_dir / "a.csv")
    pacsv.write_csv(table.slice(1500), csv_dir / "b.csv")
    parquet_dir = tmp_path / "parquet"

    env = make_env(2)
    env.read_csv(str(csv_dir)).filter(lambda r: r["amount"] % 3 == 0).sink_to(ParquetFileSink(str(parquet_dir)))
    env.execute("csv-to-parquet", timeout=240)
    written = pq.read_table(parquet_dir).to_pylist()
    assert sorted(r["amount"] for r in written) == list(range(0, 3000, 3))

    env2 = make_env(2)
    totals = env2.read_parquet(str(parquet_dir)).key_by(lambda r: r["user"]).sum(lambda r: r["amount"]).collect()
    env2.execute("parquet-sum", timeout=240)
    last = {}
    for user, total in totals.get():
        last[user] = total
    expected: Counter = Counter()
    for i in range(0, 3000, 3):
        expected[f"u{i % 10}"] += i
    assert last == dict(expected)


def test_missing_input_fails_at_submit(make_env, tmp_path):
    env = make_env(2)
    env.read_text(str(tmp_path / "does-not-exist")).collect()
    with pytest.raises(epochal.EpochalError, match="does-not-exist"):
        env.execute("missing", timeout=60)


def test_malformed_csv_fails_the_job_naming_source_and_file(make_env, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3,4,5\n6,7\n")
    env = make_env(1)
    env.read_csv(str(bad)).collect()
    with pytest.raises(epochal.JobFailedError) as info:
        env.execute("malformed", timeout=120)
    assert "bad.csv" in str(info.value)
    assert "Source: csv" in str(info.value)
