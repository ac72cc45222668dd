"""Source progress where the source knows its size in a unit of its own: a text file source's
splits report the bytes read of their files' sizes at submit (through a real ``SourceReader``
over real files, restored positions included), and the driver sums a source vertex's subtasks
once each reported, and shares the job's progress between records and such units."""

from __future__ import annotations

from epochal.connectors.files import TextFileSource
from epochal.connectors.source_reader import SourceReader
from epochal.control.source_progress import SourceProgress, SourceVertex, job_share, vertex_progress
from epochal.rest.outline import EdgeOutline, JobOutline, VertexOutline


def test_a_text_file_sources_reader_reports_bytes_read_of_its_files_sizes(tmp_path):
    (tmp_path / "a.txt").write_text("".join(f"line {i}\n" for i in range(1000)))
    (tmp_path / "b.txt").write_text("x\n" * 500)
    source = TextFileSource(str(tmp_path))
    assert source.progress_unit == "bytes"
    splits = source.create_splits(1)
    total = (tmp_path / "a.txt").stat().st_size + 1000
    reader = SourceReader(splits, source)
    assert reader.progress() == (0, total)
    read = len(reader.read(100))
    assert read == 100 and reader.progress() == (sum(len(f"line {i}\n") for i in range(100)), total)
    while reader.read(300) is not None:
        pass
    assert reader.progress() == (total, total)
    reader.close()
    # a restored reader counts from the restored offsets, before and after its splits open
    restored = SourceReader(source.create_splits(1), source)
    restored.restore([(str(tmp_path / "a.txt"), 70), (str(tmp_path / "b.txt"), 10)])
    assert restored.progress() == (80, total)
    assert restored.read(1) == ["line 10"]  # byte 70: after ten lines of 7 bytes
    assert restored.progress() == (70 + len("line 10\n") + 10, total)
    restored.close()


def test_a_source_vertex_counts_once_every_subtask_reported_and_the_job_share_follows():
    source = SourceVertex(0, 2, "bytes")
    one = {0: {"subtasks": {"0/0": {"source_progress": (30, 100)}}}}
    assert vertex_progress(source, one) is None  # subtask 1 not heard from yet
    both = {**one, 1: {"subtasks": {"0/1": {"source_progress": (20, 100)}, "1/1": {}}}}
    assert vertex_progress(source, both) == SourceProgress(0, "bytes", 50, 200)
    assert job_share(0, None, (source,), both) == 0.25
    assert job_share(10, 40, (), {}) == 0.25  # records known: the records read of them
    assert job_share(10, None, (), {}) is None
    assert SourceProgress(0, "bytes", 0, 0).share == 1.0  # empty files: nothing left to read


def test_the_outline_offers_its_sources_only_when_every_source_vertex_knows_its_size():
    files = VertexOutline(0, "Source: text", 2, progress_unit="bytes")
    generator = VertexOutline(1, "Source: generator", 1)
    sink = VertexOutline(2, "Sink", 2)
    assert JobOutline("dataflow", 2, (files, sink), (EdgeOutline(0, 2, "forward"),)).progress_sources() == \
        (SourceVertex(0, 2, "bytes"),)
    mixed = JobOutline("dataflow", 2, (files, generator, sink), (EdgeOutline(0, 2, "hash"), EdgeOutline(1, 2, "hash")))
    assert mixed.progress_sources() == ()
