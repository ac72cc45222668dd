"""Savepoints on Spark (papers/001 §3.3.1): an unbounded keyed job with an exactly-once sink is
savepointed while it runs, stopped with a savepoint, restored at another parallelism, on another
state backend, into an edited job, and from a moved savepoint directory; the union of every run's
committed output is each key's running sums exactly once (nothing lost, nothing repeated)."""

from __future__ import annotations

import collections
import json
import os
import shutil
import time

import pytest

import epochal
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from epochal.state.inspect import format_savepoint_info
from epochal.state.storage import METADATA, state_files

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = 5


def gen(i):
    return (f"k{i % KEYS}", 1)


def keyed_job(env, out, rate=2000, extra_map=False):
    stream = env.from_generator(gen, count=None, rate=rate).uid("source")
    if extra_map:  # the upgrade: one more operator before the keyed sum
        stream = stream.map(lambda kv: (kv[0], kv[1])).uid("added-map")
    (stream.key_by(lambda kv: kv[0]).sum(lambda kv: kv[1]).uid("sum")
     .sink_to(ExactlyOnceFileSink(str(out), format=lambda kv: f"{kv[0]} {kv[1]}")).uid("sink"))


def committed_sums(out) -> dict[str, list[int]]:
    sums: dict[str, list[int]] = collections.defaultdict(list)
    for line in read_committed_lines(str(out)):
        key, total = line.split()
        sums[key].append(int(total))
    return sums


def wait_for_output(out, at_least: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.isdir(out) and len(read_committed_lines(str(out))) >= at_least:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {at_least} committed records after {timeout} s")


def self_contained(path: str) -> None:
    """Every file a savepoint's metadata names is inside its directory."""
    with open(os.path.join(path, METADATA)) as source:
        metadata = json.loads(json.load(source)["body"])
    assert metadata["savepoint"]["format"] == "canonical"
    for operator in metadata["operators"].values():
        for handle in operator["subtasks"].values():
            for part in ("keyed", "operator"):
                for file in state_files(handle[part]) if part in handle else ():
                    assert os.path.isfile(os.path.join(path, file["file"])), file


def test_savepoint_stop_and_restore_across_parallelism_backend_edits_and_moves(make_env, tmp_path):
    out = tmp_path / "out"
    savepoints = str(tmp_path / "savepoints")

    # run 1: heap, parallelism 2: a savepoint while it runs (it goes on), then stop at one
    env = make_env(2)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
    keyed_job(env, out)
    client = env.execute_async("savepoints-1")
    wait_for_output(out, 200)
    running = client.trigger_savepoint(savepoints, timeout=60)
    assert os.path.isdir(running) and not client.status.is_terminal
    self_contained(running)
    info = epochal.savepoint_info(running)
    assert (info["type"], info["job"], info["format"]) == ("savepoint", "savepoints-1", "canonical")
    summed = info["operators"]["sum"]
    assert summed["parallelism"] == 2 and summed["states"] and summed["bytes"] > 0
    assert 0 < summed["key_groups_with_state"] <= KEYS
    assert "uid 'sum'" in format_savepoint_info(info)
    time.sleep(1.0)
    stopped = client.stop_with_savepoint(savepoints, timeout=90)
    assert client.status is epochal.JobStatus.FINISHED
    client.result(timeout=10)
    self_contained(stopped)
    after_run_1 = committed_sums(out)

    # run 2: restore at parallelism 3, on RocksDB, into an edited job (an added map)
    env = make_env(3)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
    env.set_state_backend("rocksdb", local_dir=str(tmp_path / "rocksdb"))
    keyed_job(env, out, extra_map=True)
    client = env.execute_async("savepoints-2", restore_from=stopped)
    wait_for_output(out, sum(map(len, after_run_1.values())) + 300)
    stopped_2 = client.stop_with_savepoint(savepoints, timeout=90)

    # run 3: from the savepoint moved elsewhere, parallelism 1, incremental heap, drained at the end
    moved = str(tmp_path / "moved" / "sp")
    shutil.move(stopped_2, moved)
    env = make_env(1)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
    env.set_state_backend(incremental=True)
    keyed_job(env, out, extra_map=True)
    client = env.execute_async("savepoints-3", restore_from=moved)
    wait_for_output(out, sum(map(len, committed_sums(out).values())) + 300)
    assert epochal.savepoint_info(client.checkpoint_path)["type"] == "checkpoint"
    with pytest.raises(epochal.PlanError, match="not a savepoint"):  # a checkpoint is the job's
        epochal.dispose_savepoint(client.checkpoint_path)
    client.stop_with_savepoint(savepoints, drain=True, timeout=90)
    assert epochal.dispose_savepoint(running) and not os.path.exists(running)

    sums = committed_sums(out)
    assert sorted(sums) == [f"k{k}" for k in range(KEYS)]
    for key, totals in sums.items():  # each key's running sums, each once, none missing
        assert sorted(totals) == list(range(1, len(totals) + 1)), key
        assert len(totals) > len(after_run_1[key]), f"{key}: runs 2 and 3 added nothing"


def test_a_savepoint_to_an_unwritable_directory_fails_at_once_and_the_job_goes_on(make_env, tmp_path):
    env = make_env(2)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
    keyed_job(env, tmp_path / "out", rate=500)
    client = env.execute_async("savepoints-bad-target")
    try:
        client.wait_until_running()
        blocked = tmp_path / "not-a-dir"
        blocked.write_text("a file")
        started = time.monotonic()
        with pytest.raises(epochal.SavepointError, match="cannot write the savepoint"):
            client.trigger_savepoint(str(blocked), timeout=30)
        assert time.monotonic() - started < 5 and not client.status.is_terminal
        path = client.trigger_savepoint(str(tmp_path / "savepoints"), timeout=60)  # a good one still works
        assert os.path.isfile(os.path.join(path, METADATA))
    finally:
        client.cancel(timeout=60)


def test_graph_and_cec_jobs_refuse_savepoints_with_one_clear_error(make_env, tmp_path):
    env = make_env(2)
    env.enable_cec(log_dir=str(tmp_path / "cec"))
    env.from_generator(gen, count=None, rate=200).key_by(lambda kv: kv[0]).count_window(10).sum(
        lambda kv: kv[1]).discard()
    client = env.execute_async("cec-savepoint")
    try:
        client.wait_until_running()
        with pytest.raises(epochal.SavepointError, match="CEC and CRB jobs take no savepoints"):
            client.trigger_savepoint(str(tmp_path / "sp"), timeout=30)
    finally:
        client.cancel(timeout=60)


def test_a_fork_restored_from_a_running_jobs_savepoint_may_not_write_its_sink(make_env, tmp_path, monkeypatch):
    """Forking (papers/001 §3.3): a second job restored from the savepoint of a job that still runs
    is refused its exactly-once sink directory, with nothing written; given a directory of its own it
    runs. Without the claim, the fork repeats the first job's output."""
    out = tmp_path / "out"
    env = make_env(2)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
    keyed_job(env, out, rate=1000)
    origin = env.execute_async("origin")
    try:
        wait_for_output(out, 100)
        savepoint = origin.trigger_savepoint(str(tmp_path / "savepoints"), timeout=60)

        fork_env = make_env(2)
        fork_env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
        keyed_job(fork_env, out)
        started = time.monotonic()
        with pytest.raises(epochal.SinkInUseError, match="being written by job 'origin'"):
            fork_env.execute_async("fork", restore_from=savepoint)
        assert time.monotonic() - started < 30 and not origin.status.is_terminal

        apart = make_env(2)  # a fork of its own output goes ahead
        apart.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
        keyed_job(apart, tmp_path / "fork-out")
        fork = apart.execute_async("fork-apart", restore_from=savepoint)
        wait_for_output(tmp_path / "fork-out", 50)
        fork.cancel(timeout=60)
        assert not repeated(committed_sums(out))  # the origin's output: each running sum once

        # the claim is what keeps them apart: without it the fork writes the origin's sink again
        monkeypatch.setattr("epochal.control.sink_claims.SinkClaims.acquire", lambda self: None)
        unguarded = make_env(2)
        unguarded.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
        keyed_job(unguarded, out)
        fork = unguarded.execute_async("fork-unguarded", restore_from=savepoint)
        deadline = time.monotonic() + 60
        while not repeated(committed_sums(out)) and time.monotonic() < deadline:
            time.sleep(0.2)
        fork.cancel(timeout=60)
    finally:
        origin.cancel(timeout=60)
    assert repeated(committed_sums(out)), "the unguarded fork repeated nothing"


def repeated(sums: dict[str, list[int]]) -> bool:
    return any(len(totals) != len(set(totals)) for totals in sums.values())


def test_a_loop_stopped_at_a_savepoint_resumes_its_in_flight_records(make_env, tmp_path):
    """Loops (papers/000 §4.3): records in transit around the loop at the stop savepoint's barrier
    are in its back-edge log, so the job restored from it (at another parallelism) finishes every
    origin exactly once."""
    from tests.chaos.test_loops import ORACLE, collatz_job

    out = tmp_path / "out"
    env = make_env(2)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    collatz_job(env, out)
    client = env.execute_async("loop-savepoint")
    wait_for_output(out, 2000)
    stopped = client.stop_with_savepoint(str(tmp_path / "savepoints"), timeout=90)
    [entry] = [c for c in client.checkpoint_stats() if c.get("savepoint") == stopped]
    assert entry["loop_log_records"] > 0, "nothing was in transit around the loop at the savepoint"
    assert len(read_committed_lines(str(out))) < len(ORACLE)

    env = make_env(3)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    collatz_job(env, out)
    env.execute("loop-restored", restore_from=stopped)
    assert collections.Counter(read_committed_lines(str(out))) == ORACLE


WINDOW_KEYS, WINDOW = 12, 1200  # 100 records per key and window; key i % 12 comes from one source subtask


def windowed_job(env, out) -> None:
    (env.from_generator(lambda i: (f"k{i % WINDOW_KEYS}", i), count=None, rate=6000).uid("source")
     .with_watermarks(lambda r: r[1])
     .key_by(lambda r: r[0]).window(WINDOW, timestamp=lambda r: r[1]).count().uid("windows")
     .sink_to(ExactlyOnceFileSink(str(out), format=lambda w: f"{w[0]} {w[1]} {w[2]}")).uid("sink"))


def test_event_time_windows_stopped_restored_and_drained_each_result_once(make_env, tmp_path):
    """A windowed job savepointed while running, stopped, restored at parallelism 3 and stopped
    with drain=True: the maximum watermark fires every open window, so each key's windows are
    contiguous from 0, each once, full but for the last (whose records the sources had read)."""
    out, savepoints = tmp_path / "out", str(tmp_path / "savepoints")
    env = make_env(2)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
    windowed_job(env, out)
    client = env.execute_async("windows-1")
    wait_for_output(out, 3 * WINDOW_KEYS)
    client.trigger_savepoint(savepoints, timeout=60)
    stopped = client.stop_with_savepoint(savepoints, timeout=90)

    env = make_env(3)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
    windowed_job(env, out)
    client = env.execute_async("windows-2", restore_from=stopped)
    wait_for_output(out, len(read_committed_lines(str(out))) + 3 * WINDOW_KEYS)
    client.stop_with_savepoint(savepoints, drain=True, timeout=90)

    windows: dict[str, dict[int, int]] = collections.defaultdict(dict)
    for line in read_committed_lines(str(out)):
        key, start, count = line.split()
        assert int(start) not in windows[key], f"window {key} {start} emitted twice"
        windows[key][int(start)] = int(count)
    assert sorted(windows) == sorted(f"k{k}" for k in range(WINDOW_KEYS))
    for key, counts in windows.items():
        starts = sorted(counts)
        assert starts == list(range(0, starts[-1] + 1, WINDOW)), f"{key}: a window is missing"
        assert all(counts[s] == WINDOW // WINDOW_KEYS for s in starts[:-1]), key  # nothing lost or repeated
        assert 0 < counts[starts[-1]] <= WINDOW // WINDOW_KEYS, key  # the last, fired by the drain
