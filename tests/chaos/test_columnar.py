"""Batch streams exactly once with workers SIGKILLed (issue 57): generated record batches ->
map_batches -> key_by(columns).agg -> an exactly-once file sink, at parallelism 2 and 3, keys of
int, str, bytes and two columns, on the state backends in turn (tests/chaos/conftest.py); a
windowed aggregation the same way; a savepoint of a batch aggregation restored at another
parallelism under kills. Necessity: with the aggregation's accumulators kept outside keyed state
(``checkpointed = False``) a kill breaks the output.

Each batch holds each key at most once, so a key's running count goes 1, 2, 3... one output row
per batch: the committed output must hold every ``(key, n)`` of the oracle exactly once, and each
key's last row its final total. The totals in between depend on the order in which the source
subtasks' batches arrive, which no run repeats, but each source split's batches reach a key's
subtask in order: a row ``(key, n, total)`` is right only if ``total`` is the sum of a prefix of
each split's values of the key, the prefixes ``n`` batches together (:func:`running_totals`). A
batch lost and another counted twice in its place, or a total restored from another checkpoint
than the counts, leaves rows with no such prefixes.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from epochal.control.restart import FixedDelayRestart
from epochal.testing import Fault, random_faults

BATCHES = 300
KEYS = 13
PER_BATCH = 5
RATE = 120.0  # batches per second in all: the job runs ~2.5 s, long enough for the planned kills
WINDOW = 20  # event time of batch i is i


def key_values(kind: str, numbers: list[int]) -> dict[str, pa.Array]:
    """The key column(s) of ``kind`` for key numbers."""
    if kind == "int":
        return {"k": pa.array(numbers, pa.int64())}
    if kind == "str":
        return {"k": pa.array([f"key-é{n}" for n in numbers], pa.string())}
    if kind == "bytes":
        return {"k": pa.array([b"\x00b%d" % n for n in numbers], pa.binary())}
    return {"k": pa.array([f"p{n % 3}" for n in numbers], pa.string()), "k2": pa.array(numbers, pa.int32())}


def value(index: int) -> int:
    """The value of every row of batch ``index``: squares, so that sums of different batches
    rarely agree (:func:`running_totals`)."""
    return index * index


def make_batch(kind: str, index: int) -> pa.RecordBatch:
    numbers = [(index + m) % KEYS for m in range(PER_BATCH)]
    columns = key_values(kind, numbers)
    columns["v"] = pa.array([value(index)] * PER_BATCH, pa.int64())
    columns["ts"] = pa.array([index] * PER_BATCH, pa.int64())
    return pa.RecordBatch.from_pydict(columns)


def key_text(kind: str, number: int) -> str:
    row = {name: array[0].as_py() for name, array in key_values(kind, [number]).items()}
    return "|".join(repr(row[name]) for name in sorted(row))


def count_oracle(kind: str) -> collections.Counter:
    """Every running count row ``key|n`` of every key once, and ``key|final|total`` per key."""
    running: dict[int, tuple[int, int]] = {}
    for index in range(BATCHES):
        for number in {(index + m) % KEYS for m in range(PER_BATCH)}:
            n, total = running.get(number, (0, 0))
            running[number] = (n + 1, total + 2 * value(index))
    rows: collections.Counter = collections.Counter()
    for number, (n, total) in running.items():
        key = key_text(kind, number)
        rows.update(f"{key}|{count}" for count in range(1, n + 1))
        rows[f"{key}|final|{total}"] += 1
    return rows


def counted(lines: list[str]) -> collections.Counter:
    """The committed rows as :func:`count_oracle` has them: ``key|n`` per row, and the total of
    each key's highest count as ``key|final|total``."""
    rows: collections.Counter = collections.Counter()
    last: dict[str, tuple[int, int]] = {}
    for line in lines:
        key, n, total = line.rsplit("|", 2)
        rows[f"{key}|{n}"] += 1
        if int(n) >= last.get(key, (0, 0))[0]:
            last[key] = (int(n), int(total))
    rows.update(f"{key}|final|{total}" for key, (_, total) in last.items())
    return rows


def running_totals(kind: str, splits: int) -> dict[str, dict[int, set[int]]]:
    """Per key, count ``n`` -> every total a row of ``n`` may have: the sums of one prefix of each
    source split's values of the key (split ``j`` reads batches ``j, j + splits, ...`` in order),
    the prefixes' lengths adding up to ``n``."""
    possible = {}
    for number in range(KEYS):
        reach: dict[int, set[int]] = {0: {0}}
        for split in range(splits):
            prefixes, total = [0], 0
            for index in range(split, BATCHES, splits):
                if (number - index) % KEYS < PER_BATCH:  # the key is in batch ``index``
                    total += 2 * value(index)
                    prefixes.append(total)
            grown: dict[int, set[int]] = {}
            for n, totals in reach.items():
                for length, prefix in enumerate(prefixes):
                    grown.setdefault(n + length, set()).update(t + prefix for t in totals)
            reach = grown
        possible[key_text(kind, number)] = reach
    return possible


def impossible_rows(lines: list[str], kind: str, splits: int) -> list[str]:
    """The committed rows whose total no order of the source splits' batches gives at their count."""
    possible = running_totals(kind, splits)
    wrong = []
    for line in lines:
        key, n, total = line.rsplit("|", 2)
        if int(total) not in possible.get(key, {}).get(int(n), ()):
            wrong.append(line)
    return wrong[:5]


def line_of(names: list[str]):
    def line(row: tuple[Any, ...]) -> str:
        keys = dict(zip(names, row, strict=False))
        text = "|".join(repr(keys[name]) for name in sorted(names))
        return f"{text}|{row[len(names)]}|{row[len(names) + 1]}"
    return line


def doubled(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.set_column(batch.schema.get_field_index("v"), "v", pc.multiply(batch["v"], 2))


def count_job(env: Any, kind: str, out: str) -> Any:
    names = ["k", "k2"] if kind == "pair" else ["k"]
    totals = (env.from_batches(lambda i: make_batch(kind, i), count=BATCHES, rate=RATE).uid("batches")
              .map_batches(doubled).uid("double")
              .key_by(names).agg(n=("v", "count"), total=("v", "sum")))
    totals.uid("totals")
    totals.rows().sink_to(ExactlyOnceFileSink(out, format=line_of(names)), name="out").uid("out")
    return totals


def run(env: Any, tmp_path: Any, faults: list[Any], name: str, **options: Any) -> Any:
    env.enable_checkpointing(0.25, storage=str(tmp_path / "checkpoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=len(faults) + 2, delay=0.2))
    return env.execute(name, timeout=300, faults=faults, **options)


def differences(output: collections.Counter, oracle: collections.Counter) -> tuple[list[str], list[str]]:
    return sorted(oracle - output)[:5], sorted(output - oracle)[:5]


@pytest.mark.parametrize("parallelism,kind,seed", [(2, "int", 3), (3, "str", 5), (2, "bytes", 7), (3, "pair", 11)])
def test_batch_aggregation_is_exactly_once_under_random_kills(make_env, tmp_path, parallelism, kind, seed):
    env = make_env(parallelism)
    out = str(tmp_path / "out")
    count_job(env, kind, out)
    faults = random_faults(seed, parallelism, count=2, window=(0.3, 0.8))
    result = run(env, tmp_path, faults, f"columnar-{kind}")
    assert len(result.restarts) == 2, result.restarts
    lines = read_committed_lines(out)
    output = counted(lines)
    assert output == count_oracle(kind), differences(output, count_oracle(kind))
    assert not impossible_rows(lines, kind, parallelism)


@pytest.mark.parametrize("point", ["after_sync", "during_upload", "before_commit"])
def test_batch_aggregation_is_exactly_once_with_a_kill_at_each_point_of_a_checkpoint(make_env, tmp_path, point):
    env = make_env(2)
    out = str(tmp_path / "out")
    count_job(env, "str", out)
    result = run(env, tmp_path, [Fault(point, worker=1, checkpoint=3)], f"columnar-{point}")
    assert len(result.restarts) == 1, result.restarts
    lines = read_committed_lines(out)
    output = counted(lines)
    assert output == count_oracle("str"), differences(output, count_oracle("str"))
    assert not impossible_rows(lines, "str", 2)


@pytest.mark.backends("heap")
def test_without_checkpointed_accumulators_a_kill_breaks_the_output(make_env, tmp_path):
    """The accumulators kept in plain dicts outside keyed state: the restored attempt counts from
    zero again, so keys repeat counts they already emitted (and their final counts are short)."""
    env = make_env(2)
    out = str(tmp_path / "out")
    totals = count_job(env, "int", out)
    totals.node.operator.checkpointed = False
    run(env, tmp_path, [Fault("during_upload", worker=1, checkpoint=4)], "columnar-unmanaged")
    lines = read_committed_lines(out)
    output = counted(lines)
    assert output != count_oracle("int"), "the output was exact without checkpointed accumulators"
    assert impossible_rows(lines, "int", 2)  # counted from zero again after the checkpoint's batches


def window_oracle() -> collections.Counter:
    counts = collections.Counter(((index + m) % KEYS, index // WINDOW * WINDOW)
                                 for index in range(BATCHES) for m in range(PER_BATCH))
    return collections.Counter(f"{k}|{start}|{n}" for (k, start), n in counts.items())


@pytest.mark.parametrize("parallelism,seed", [(2, 13), (3, 17)])
def test_batch_windows_are_exactly_once_under_random_kills(make_env, tmp_path, parallelism, seed):
    env = make_env(parallelism)
    out = str(tmp_path / "out")
    windows = (env.from_batches(lambda i: make_batch("int", i), count=BATCHES, rate=RATE).uid("batches")
               .with_watermarks("ts").key_by("k").window(WINDOW).agg(n=("v", "count")).uid("windows"))
    windows.rows().sink_to(ExactlyOnceFileSink(out, format=lambda r: f"{r[0]}|{r[1]}|{r[3]}"), name="out").uid("out")
    result = run(env, tmp_path, random_faults(seed, parallelism, count=2, window=(0.3, 0.8)), "columnar-windows")
    assert len(result.restarts) == 2 and result.late_records_dropped == 0
    output = collections.Counter(read_committed_lines(out))
    assert output == window_oracle(), differences(output, window_oracle())


@pytest.mark.parametrize("before,after,seed", [(2, 3, 19), (3, 1, 23)])
def test_a_batch_aggregation_restored_at_another_parallelism_continues_exactly(make_env, tmp_path, before, after,
                                                                                seed):
    out = str(tmp_path / "out")
    first = make_env(before)
    count_job(first, "str", out)
    first.enable_checkpointing(0.25, storage=str(tmp_path / "v1"))
    client = first.execute_async("columnar-v1")
    deadline = time.monotonic() + 60
    while not any(c["status"] == "completed" for c in client.checkpoint_stats()):
        assert time.monotonic() < deadline and not client.status.is_terminal
        time.sleep(0.05)
    time.sleep(0.5)
    savepoint = client.stop_with_savepoint(str(tmp_path / "savepoints"), timeout=60)
    second = make_env(after)
    count_job(second, "str", out)
    faults = random_faults(seed, after, count=1, window=(0.3, 0.8))
    result = run(second, tmp_path, faults, "columnar-v2", restore_from=savepoint)
    assert len(result.restarts) == len(faults)
    lines = read_committed_lines(out)
    output = counted(lines)
    assert output == count_oracle("str"), differences(output, count_oracle("str"))
    assert not impossible_rows(lines, "str", before)  # the splits stay cut for the first run's parallelism

