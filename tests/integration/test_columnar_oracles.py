"""Batch streams in whole jobs on Spark against oracles of every row and every state value, no
kills (issue 57; the kills are tests/chaos/test_columnar.py's, the shorter checks of the same
features test_columnar_jobs.py's): row and batch operators in one job against an oracle of every
running row; a batch aggregation and a row keyed reduce on the same keys (int, str, bytes, two
columns) put each key in the same key group, and the state DataFrame reader reads the batch aggregation's
accumulators; its queryable state answers the accumulator tuples while the job runs; a job
stopped with a savepoint is read by the state reader and restored at parallelism 3, where the
aggregation continues exactly; event-time windows of batches stopped at parallelism 2, restored
at 3 and drained fire each window once, whole.

Where an oracle of every running row is wanted, every key's rows come from one source split (the
generator's split ``j`` of ``p`` reads indices ``j, j + p, ...``, in order): its running
aggregates after ``n`` rows are then those of its first ``n`` records.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import epochal
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from epochal.plan.keygroups import key_group_of
from epochal.state.snapshot import RestoreSource
from epochal.state.storage import CheckpointStorage
from tests.queryable_jobs import checkpoint_values

pytestmark = [pytest.mark.integration, pytest.mark.slow]


# ------------------------------------------------------------------ rows and batches in one job
USERS = 6  # at parallelism 2 user i % 6 comes from split i % 2 only: its records arrive in order
PURCHASES = 3_000
SCHEMA = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("bucket", pa.int64())])


def purchase(i: int) -> tuple[str, int, int]:
    return (f"u{i % USERS}", i, i % 5)


def prefix_aggregates() -> dict[str, list[tuple[Any, ...]]]:
    """Per user, the row ``agg`` emits after each of its records (amounts tripled, bucket 0 left
    out): ``(user, total, n, lo, hi, avg, first, last)``."""
    seen: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    rows: dict[str, list[tuple[Any, ...]]] = collections.defaultdict(list)
    for i in range(PURCHASES):
        user, amount, bucket = purchase(i)
        if bucket == 0:
            continue
        seen[user].append((amount * 3, bucket))
        amounts = [a for a, _ in seen[user]]
        total, n = sum(amounts), len(amounts)
        rows[user].append((user, total, n, min(amounts), max(amounts), total / n, seen[user][0][1], bucket))
    return rows


def test_row_and_batch_operators_in_one_job_give_the_oracles_rows(make_env, tmp_path):
    """rows -> map -> to_batches -> filter_batches -> key_by(column).agg -> rows() -> row filter,
    key_by, reduce (final results); beside it the same aggregation on the row path alone."""
    env = make_env(2)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    purchases = env.from_generator(purchase, count=PURCHASES).uid("purchases").map(
        lambda r: (r[0], r[1] * 3, r[2])).uid("tripled")
    totals = (purchases.to_batches(SCHEMA, max_rows=7).uid("batches")
              .filter_batches(lambda b: pc.not_equal(b["bucket"], 0)).uid("no-zero")
              .key_by("user").agg(total=("amount", "sum"), n=("amount", "count"), lo=("amount", "min"),
                                  hi=("amount", "max"), avg=("amount", "mean"), first=("bucket", "first"),
                                  last=("bucket", "last")).uid("totals")
              .rows().uid("rows"))
    every = totals.collect()
    finals = (totals.filter(lambda r: r[2] > 0).key_by(lambda r: r[0])
              .reduce(lambda a, b: a if a[2] >= b[2] else b).uid("latest").final_results().collect())
    on_rows = (purchases.filter(lambda r: r[2] != 0).key_by(lambda r: r[0])
               .reduce(lambda a, b: (a[0], a[1] + b[1], a[2])).uid("row-sums").final_results().collect())
    env.execute("rows-and-batches")

    oracle = prefix_aggregates()
    by_user: dict[str, list[tuple[Any, ...]]] = collections.defaultdict(list)
    for row in every.get():
        by_user[row[0]].append(tuple(row))
    assert sorted(by_user) == sorted(oracle)
    for user, rows in by_user.items():
        counts = [row[2] for row in rows]
        assert len(set(counts)) == len(counts) and max(counts) == len(oracle[user]), user  # none twice, to the end
        for row in rows:
            assert row == oracle[user][row[2] - 1], f"{user}: {row} is not its running aggregates"
    assert sorted(tuple(r) for r in finals.get()) == sorted(rows[-1] for rows in oracle.values())
    assert sorted(on_rows.get()) == sorted((user, rows[-1][1], rows[-1][6]) for user, rows in oracle.items())


# ------------------------------------------------------------------ key groups and the state reader
MIXED = 400
MIXED_KEYS = 9


def mixed(i: int) -> pa.RecordBatch:
    """Batch ``i``: key number ``(i + m) % 9`` in row ``m`` (each once) as an int, a str, bytes and
    a pair of columns; ``v = i``."""
    numbers = [(i + m) % MIXED_KEYS for m in range(4)]
    return pa.RecordBatch.from_pydict({
        "i": pa.array([n * 7 - 20 for n in numbers], pa.int64()),
        "s": pa.array([f"ключ-{n}" for n in numbers], pa.string()),
        "b": pa.array([b"\xff\x00" + bytes([n]) for n in numbers], pa.binary()),
        "p": pa.array([f"p{n % 2}" for n in numbers], pa.string()),
        "q": pa.array([n // 2 for n in numbers], pa.int32()),
        "v": pa.array([i] * len(numbers), pa.int64()),
    })


KEY_COLUMNS = {"int": ["i"], "str": ["s"], "bytes": ["b"], "pair": ["p", "q"]}
POSITIONS = {"i": 0, "s": 1, "b": 2, "p": 3, "q": 4}


def key_of(row: tuple[Any, ...], columns: list[str]) -> Any:
    values = tuple(row[POSITIONS[c]] for c in columns)
    return values[0] if len(values) == 1 else values


def mixed_oracle(columns: list[str]) -> dict[Any, tuple[int, int]]:
    accumulators: dict[Any, tuple[int, int]] = {}
    for i in range(MIXED):
        for row in zip(*mixed(i).to_pydict().values(), strict=True):
            n, total = accumulators.get(key_of(row, columns), (0, 0))
            accumulators[key_of(row, columns)] = (n + 1, total + row[5])
    return accumulators


def placement(path: str, uid: str, state: str) -> dict[Any, int]:
    """Key -> the key group keyed state ``state`` of ``uid`` keeps it in, in the checkpoint at
    ``path`` (read as a restore reads it)."""
    root, name = os.path.split(path.rstrip("/"))
    checkpoint_id = int(name.rsplit("-", 1)[1])
    storage = CheckpointStorage(root)
    source = RestoreSource(storage, checkpoint_id, storage.read_metadata(checkpoint_id))
    return {key: group for group, states in source.keyed_groups(uid, range(128)) for key in states.get(state, {})}


def read_keyed(spark: Any, path: str, uid: str, state: str) -> dict[Any, tuple[Any, int]]:
    """Key -> (value, key group) of keyed state ``state`` of ``uid`` in the snapshot at ``path``."""
    frame = epochal.read_state(spark, path, uid, state, value_format="pickle", key_format="pickle")
    return {epochal.decode_state_value(r.key): (epochal.decode_state_value(r.value), r.key_group)
            for r in frame.collect()}


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_batch_aggregation_and_a_row_reduce_put_each_key_in_the_same_key_group(make_env, spark, tmp_path,
                                                                                 backend):
    env = make_env(3)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    if backend == "rocksdb":
        env.set_state_backend("rocksdb", local_dir=str(tmp_path / "rocksdb"))
    batches = env.from_batches(mixed, count=MIXED).uid("batches")
    rows = batches.rows().uid("rows")
    for kind, columns in KEY_COLUMNS.items():
        batches.key_by(columns).agg(n=("v", "count"), total=("v", "sum")).uid(f"batch-{kind}").discard()
        (rows.key_by(lambda r, columns=columns: key_of(r, columns)).reduce(lambda a, b: b).uid(f"row-{kind}")
         .discard())
    env.execute(f"key-groups-{backend}")
    path = epochal.latest_checkpoint(str(tmp_path / "checkpoints"), f"key-groups-{backend}")

    for kind, columns in KEY_COLUMNS.items():
        groups = placement(path, f"batch-{kind}", "aggregates")
        assert groups == placement(path, f"row-{kind}", "aggregate"), kind
        assert groups == {key: key_group_of(key, env.max_parallelism) for key in groups}, kind
        state = read_keyed(spark, path, f"batch-{kind}", "aggregates")  # the state DataFrame reader
        assert {key: value for key, (value, _) in state.items()} == mixed_oracle(columns), kind
        assert {key: group for key, (_, group) in state.items()} == groups, kind


# ------------------------------------------------------------------ queryable state, savepoint, restore
KEYS = 8
FIRST = 160  # batches of the first job; then empty ones until it is stopped
SECOND = 60


def first_batch(i: int) -> pa.RecordBatch:
    """Batch ``i < FIRST``: the keys of ``i``'s parity (split ``i % 2`` of 2: each key from one
    split, in order), ``v = i``; later ones empty."""
    keys = [f"k{k}" for k in range(i % 2, KEYS, 2)] if i < FIRST else []
    return pa.RecordBatch.from_pydict({"k": pa.array(keys, pa.string()), "v": pa.array([i] * len(keys), pa.int64())})


def second_batch(j: int) -> pa.RecordBatch:
    keys = [f"k{k}" for k in range(KEYS)]
    return pa.RecordBatch.from_pydict({"k": pa.array(keys, pa.string()),
                                       "v": pa.array([1000 + j] * KEYS, pa.int64())})


def first_values() -> dict[str, list[int]]:
    values: dict[str, list[int]] = collections.defaultdict(list)
    for i in range(FIRST):
        for key in first_batch(i)["k"].to_pylist():
            values[key].append(i)
    return values


def accumulator(values: list[int]) -> tuple[Any, ...]:
    """The accumulator tuple of ``agg(n=count, total=sum, avg=mean, hi=max)``: a mean's is (sum, count)."""
    return (len(values), sum(values), (sum(values), len(values)), max(values))


def aggregated(stream: Any) -> Any:
    return stream.agg(n=("v", "count"), total=("v", "sum"), avg=("v", "mean"), hi=("v", "max")).uid("totals")


def test_queryable_batch_state_a_savepoint_of_it_read_and_restored_at_parallelism_3(make_env, spark, tmp_path):
    values = first_values()
    finals = {key: accumulator(v) for key, v in values.items()}
    env = make_env(2)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"), retained=10_000)
    keyed = env.from_batches(first_batch, rate=100).uid("batches").key_by("k")
    aggregated(keyed.as_queryable_state("totals")).discard()
    job = env.execute_async("queryable-batches")
    job.wait_until_running()
    try:
        with epochal.QueryableStateClient(job, timeout=30) as client:
            answers = committed = 0
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, "the queryable state did not reach the oracle's final values"
                now = client.get_many("totals", list(finals))
                for key, value in now.items():  # each answer is the key's accumulators after its first n batches
                    assert value == accumulator(values[key][:value[0]]), f"{key}: {value}"
                    answers += 1
                seen = client.get_many("totals", list(finals), level="read_committed")
                if client.checkpoint_id is not None and seen:
                    assert seen == checkpoint_values(job.checkpoint_path, client.checkpoint_id, uid="totals",
                                                     state="aggregates")
                    committed += 1
                if now == finals and committed >= 2:
                    break
                time.sleep(0.05)
            assert answers > len(finals) and client.get("totals", "nokey") is None
        savepoint = job.stop_with_savepoint(str(tmp_path / "savepoints"), timeout=60)
    finally:
        if not job.status.is_terminal:
            job.cancel()

    saved = read_keyed(spark, savepoint, "totals", "aggregates")
    assert {key: value for key, (value, _) in saved.items()} == finals
    assert all(group == key_group_of(key, 128) for key, (_, group) in saved.items())

    env = make_env(3)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    rows = aggregated(env.from_batches(second_batch, count=SECOND).uid("more").key_by("k")).rows().collect()
    result = env.execute("restored-batches", restore_from=savepoint, allow_non_restored_state=True)
    assert [entry["uid"] for entry in result.non_restored_state] == ["batches"]
    counts: dict[str, list[int]] = collections.defaultdict(list)
    last: dict[str, tuple[Any, ...]] = {}
    for key, n, total, avg, hi in rows.get():
        counts[key].append(n)
        assert avg == total / n and hi >= 1000
        if n == len(values[key]) + SECOND:
            last[key] = (n, total)
    more = sum(1000 + j for j in range(SECOND))
    assert {key: sorted(c) for key, c in counts.items()} == {
        key: list(range(len(v) + 1, len(v) + SECOND + 1)) for key, v in values.items()}  # continued, once each
    assert last == {key: (len(v) + SECOND, sum(v) + more) for key, v in values.items()}


# ------------------------------------------------------------------ windows stopped, restored, drained
WINDOW_KEYS, WINDOW = 4, 10


def timed(i: int) -> pa.RecordBatch:
    """Batch ``i``: the keys of ``i``'s parity at event time ``i``: each key from one source split
    (of 2), in order, so that a drain leaves only its last window short."""
    keys = [f"w{k}" for k in range(i % 2, WINDOW_KEYS, 2)]
    return pa.RecordBatch.from_pydict({"k": pa.array(keys, pa.string()), "ts": pa.array([i] * len(keys), pa.int64())})


def windowed_job(env: Any, out: Any) -> None:
    (env.from_batches(timed, rate=200).uid("batches").with_watermarks("ts").uid("watermarks")
     .key_by("k").window(WINDOW).agg(n=("ts", "count"), total=("ts", "sum")).uid("windows")
     .rows().sink_to(ExactlyOnceFileSink(str(out), format=lambda w: f"{w[0]} {w[1]} {w[3]} {w[4]}")).uid("sink"))


def wait_for_output(out: Any, at_least: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.isdir(out) and len(read_committed_lines(str(out))) >= at_least:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {at_least} committed rows after {timeout} s")


def test_batch_windows_stopped_restored_at_parallelism_3_and_drained_fire_each_window_once(make_env, tmp_path):
    out, savepoints = tmp_path / "out", str(tmp_path / "savepoints")
    env = make_env(2)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    windowed_job(env, out)
    client = env.execute_async("batch-windows-1")
    wait_for_output(out, 3 * WINDOW_KEYS)
    stopped = client.stop_with_savepoint(savepoints, timeout=90)

    env = make_env(3)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    windowed_job(env, out)
    client = env.execute_async("batch-windows-2", restore_from=stopped)
    wait_for_output(out, len(read_committed_lines(str(out))) + 3 * WINDOW_KEYS)
    client.stop_with_savepoint(savepoints, drain=True, timeout=90)

    windows: dict[str, dict[int, tuple[int, int]]] = collections.defaultdict(dict)
    for line in read_committed_lines(str(out)):
        key, start, n, total = line.split()
        assert int(start) not in windows[key], f"window {key} {start} emitted twice"
        windows[key][int(start)] = (int(n), int(total))
    assert sorted(windows) == [f"w{k}" for k in range(WINDOW_KEYS)]
    for key, fired in windows.items():
        starts = sorted(fired)
        assert starts == list(range(0, starts[-1] + 1, WINDOW)), f"{key}: a window is missing"
        times = {start: list(range(start + int(key[1:]) % 2, start + WINDOW, 2)) for start in starts}
        for start in starts[:-1]:  # nothing lost or repeated
            assert fired[start] == (len(times[start]), sum(times[start])), (key, start, fired[start])
        n, total = fired[starts[-1]]  # the last, fired by the drain: the records its split had read
        assert 0 < n <= len(times[starts[-1]]) and total == sum(times[starts[-1]][:n]), (key, n, total)
