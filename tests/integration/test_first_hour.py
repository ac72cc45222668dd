"""A new user's first hour, on real Spark (issue "What a new user trips over"): an event-time
window without with_watermarks fires, restore_from takes a job's directory, a restart is logged
as it happens, a collect() handle reads a running job, checkpoints keep their interval behind a
slow operator, and the README's fault-tolerance snippet runs as written."""

from __future__ import annotations

import logging
import pathlib
import re
import time

import pytest

import epochal
from epochal import FixedDelayRestart, JobFailedError
from epochal.connectors.files import read_committed_lines

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"{what} not within {timeout:g} s")


def event(i):
    return (i % 5, 1, i)  # (key, value, event time)


def test_a_window_without_with_watermarks_fires_on_an_unbounded_stream_and_get_reads_it_while_it_runs(make_env):
    env = make_env(2)
    windows = env.from_generator(event).key_by(lambda e: e[0]).window(1000, timestamp=lambda e: e[2]).sum(1).collect()
    assert "made by window(1000) from its timestamp=" in env.plan().describe()
    client = env.execute_async("window without watermarks")
    try:
        fired = wait_for(lambda: windows.get(), 60, "a fired window")  # (the job: 0 results, ever)
    finally:
        client.cancel()
    key, start, first = fired[0]
    assert start % 1000 == 0 and first[1] >= 1  # the window's first record, its value summed
    assert {r[1] for r in windows.get()} >= {start}


def counts(i):
    return f"k{i % 4}"


def test_restore_from_a_jobs_directory_takes_its_newest_checkpoint_and_says_which(make_env, tmp_path, caplog):
    storage = str(tmp_path / "checkpoints")
    first = make_env(2)
    first.enable_checkpointing(0.3, storage=storage)
    first.from_generator(counts, rate=2000).key_by(lambda k: k).count().collect()
    client = first.execute_async("counting")
    try:
        wait_for(lambda: sum(c["status"] == "completed" for c in client.checkpoint_stats()) >= 2, 90, "2 checkpoints")
    finally:
        client.cancel()
    latest = epochal.latest_checkpoint(storage, "counting")
    assert latest.startswith(client.checkpoint_path + "/chk-")

    second = make_env(3)  # rescaled, and restored from the job's directory alone
    second.enable_checkpointing(0.3, storage=storage)
    handle = second.from_generator(counts, rate=2000).key_by(lambda k: k).count().collect()
    with caplog.at_level(logging.WARNING, logger="epochal"):
        client = second.execute_async("counting", restore_from=f"{storage}/counting")
    try:
        restored = wait_for(lambda: handle.get(), 90, "a restored count")
    finally:
        client.cancel()
    assert f"restoring {latest} (the newest completed checkpoint of the 1 run(s) of the job under " \
           f"{storage}/counting)" in caplog.text
    assert min(count for _, count in restored) > 1  # counting went on from the checkpoint's state


def fails_on_eleven(value):
    if value == 11:
        raise ZeroDivisionError("eleven")
    return value


def test_each_restart_is_logged_as_it_happens_with_the_users_error(make_env, caplog):
    env = make_env(2)
    env.enable_checkpointing(0.5)
    env.set_restart_strategy(FixedDelayRestart(attempts=2, delay=1.5))
    env.from_sequence(0, 100).map(fails_on_eleven).collect()
    with caplog.at_level(logging.WARNING, logger="epochal"):
        with pytest.raises(JobFailedError, match="after 2 restarts"):
            env.execute("failing")
    failed_at = time.time()
    lines = [r for r in caplog.records if "restarts in" in r.getMessage()]
    assert [r.getMessage().split(" after ")[0] for r in lines] == [
        "job 'failing' restarts in 1.5s (restart 1; fixed delay (2 attempts, 1.5 s apart))",
        "job 'failing' restarts in 1.5s (restart 2; fixed delay (2 attempts, 1.5 s apart))"]
    assert re.search(r"after attempt 0 failed: operator 'Map' \(worker \d\) raised ZeroDivisionError: eleven on "
                     r"record 11$", lines[0].getMessage())
    assert lines[0].created < failed_at - 2.5  # as it happened, not when the strategy gave up


def slow(record):
    time.sleep(0.002)
    return record


@pytest.mark.slow
@pytest.mark.parametrize("batch_time", [None, 0.1], ids=["count-only", "timed"])
def test_checkpoints_keep_their_interval_behind_a_slow_operator_only_with_timed_batches(make_env, batch_time):
    env = make_env(2, batch_time=batch_time)
    env.enable_checkpointing(0.5)
    env.from_generator(lambda i: i).rebalance().map(slow).discard()
    client = env.execute_async(f"slow operator {batch_time}")
    try:
        time.sleep(14)
        stats = client.checkpoint_stats()
    finally:
        client.cancel()
    ends = sorted(c["trigger_time"] + c["duration_s"] for c in stats if c["status"] == "completed")
    ends = [end for end in ends if end > ends[0] + 2] if ends else []  # (start-up and the first batches left out)
    gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)] or [float("inf")]
    if batch_time is None:  # 8 credits of 1,024 records at 2 ms each in front of every barrier
        assert len(ends) <= 4 or max(gaps) > 2.5, gaps
    else:
        assert len(gaps) >= 6 and max(gaps) < 0.5 + 1.0, gaps  # (generous: this machine is shared)


def test_the_readme_fault_tolerance_snippet_runs_as_written(spark, tmp_path, monkeypatch, capsys):
    text = README.read_text()
    section = text[text.index("## Fault tolerance"):]
    start = section.index("```python\n") + len("```python\n")
    snippet = section[start:section.index("\n```", start)]
    assert "env = epochal.Environment(" in snippet and "stream = " in snippet
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet, "README.md (Fault tolerance)", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    assert "JobResult(job 'totals'" in printed and "100,000 records" in printed
    totals = read_committed_lines(str(tmp_path / "totals-out"))
    assert len(totals) == 100_000  # the restored run replayed nothing: no line twice
