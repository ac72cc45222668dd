"""Windows on Spark: exact results, and windows fire as event time advances, not only when the
input ends; every shape (time and count, tumbling and sliding) against an oracle under every
checkpoint mode, and through a restore at another parallelism."""

from __future__ import annotations

import collections
import time

import pytest

from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from tests.aggregates import Span

RECORDS = 60_000
WINDOW = 2_000


def test_tumbling_window_counts_are_exact(make_env):
    env = make_env(3)
    out = (env.from_generator(lambda i: (f"k{i % 7}", i), count=RECORDS)
           .with_watermarks(lambda r: r[1])
           .key_by(lambda r: r[0]).window(WINDOW, timestamp=lambda r: r[1]).count().collect())
    env.execute("window counts")
    expected = collections.Counter((f"k{i % 7}", i - i % WINDOW) for i in range(RECORDS))
    got = {(key, start): n for key, start, n in out.get()}
    assert got == dict(expected)


def test_windows_fire_while_the_input_is_still_running(make_env):
    """A 3 s paced input: the first window is emitted long before the last record exists."""
    env = make_env(2)
    out = (env.from_generator(lambda i: (f"k{i % 3}", i), count=RECORDS, rate=RECORDS / 3)
           .with_watermarks(lambda r: r[1])
           .key_by(lambda r: r[0]).window(WINDOW, timestamp=lambda r: r[1]).count()
           .map(lambda w: (*w, time.time())).collect())
    env.execute("window timing")
    emitted = sorted(w[3] for w in out.get())
    assert len(emitted) == 3 * RECORDS // WINDOW
    # the last windows fire at the end of the input; had all waited for it, they would be instants apart
    assert emitted[0] < emitted[-1] - 1.0, "windows only fired when the input ended"


def test_sum_per_window_after_a_shuffle_without_watermarks_fires_at_the_end(make_env):
    env = make_env(2)
    out = (env.from_collection([("a", 1, 5), ("a", 2, 7), ("b", 3, 12), ("a", 4, 13)])
           .key_by(lambda r: r[0]).window(10, timestamp=lambda r: r[2]).sum(lambda r: r[1]).collect())
    env.execute("window sums")
    assert sorted(out.get()) == [("a", 0, 3), ("a", 10, 4), ("b", 10, 3)]


# ---------------------------------------------------------------------------------------------
# Every window shape in one job per checkpoint mode, and a restore at another parallelism.

#: A multiple of every parallelism below: key ``i % KEYS`` fixes ``i % p``, and from_generator gives
#: source subtask ``j`` of ``p`` the indices ``j, j + p, ...``, so each key's records come from one
#: source subtask, in index order. Count windows need that: their contents follow arrival order.
KEYS = 12
SHAPED = 24_000


def shaped(i: int) -> tuple[str, int, int]:
    """(key, event time, value)"""
    return (f"k{i % KEYS}", i, i % 11)


def event_time(record):
    return record[1]


SHAPES = {
    "time-tumbling": lambda keyed: keyed.window(1_000, event_time).avg(2),
    "time-sliding": lambda keyed: keyed.window(1_000, event_time, slide=250).sum(lambda r: r[2]),
    "count-tumbling": lambda keyed: keyed.count_window(100).max(2),
    "count-sliding": lambda keyed: keyed.count_window(100, slide=30).aggregate(Span()),
}


def shape_oracles():
    per_key: dict[str, list] = collections.defaultdict(list)
    for i in range(SHAPED):
        per_key[shaped(i)[0]].append(shaped(i))

    def timed(size, step, result):
        contents = collections.defaultdict(list)
        for key, records in per_key.items():
            for record in records:
                for start in range(record[1] // step * step, record[1] - size, -step):
                    contents[(key, start)].append(record)
        return sorted((key, start, result(records)) for (key, start), records in contents.items())

    def counted(size, step, result):
        return sorted((key, result(records[first:first + size])) for key, records in per_key.items()
                      for first in range(0, len(records) - size + 1, step))

    values = lambda rs: [r[2] for r in rs]  # noqa: E731
    return {
        "time-tumbling": timed(1_000, 1_000, lambda rs: sum(values(rs)) / len(rs)),
        "time-sliding": timed(1_000, 250, lambda rs: sum(values(rs))),
        "count-tumbling": counted(100, 100, lambda rs: (*rs[0][:2], max(values(rs)))),
        "count-sliding": counted(100, 30, lambda rs: (rs[0][1], rs[-1][1], len(rs))),
    }


@pytest.mark.parametrize("mode", ["exactly_once", "at_least_once", "none"])
def test_every_window_shape_matches_the_oracle_in_every_checkpoint_mode(make_env, tmp_path, mode):
    env = make_env(2)
    env.enable_checkpointing(0.2, mode=mode, storage=str(tmp_path / "checkpoints"))
    keyed = env.from_generator(shaped, count=SHAPED, rate=SHAPED / 2).with_watermarks(event_time) \
        .key_by(lambda r: r[0])
    outputs = {name: shape(keyed).uid(name).collect() for name, shape in SHAPES.items()}
    result = env.execute(f"window shapes {mode}")
    assert result.late_records_dropped == 0
    # checkpoints while windows are open (the input takes 2 s), or none at all
    assert (result.completed_checkpoints >= 3) if mode != "none" else not result.checkpoints
    expected = shape_oracles()
    for name, out in outputs.items():
        assert sorted(out.get()) == expected[name], name


def test_windows_restore_at_another_parallelism(make_env, tmp_path):
    """Job 1 (2 subtasks) is cancelled mid-run; job 2 (3 subtasks) restores its checkpoint into
    the same exactly-once sinks: together they committed every window once."""
    def build(env):
        keyed = env.from_generator(shaped, count=SHAPED, rate=SHAPED / 4).with_watermarks(event_time) \
            .key_by(lambda r: r[0])
        for name in ("time-sliding", "count-sliding"):
            SHAPES[name](keyed).uid(name).sink_to(ExactlyOnceFileSink(str(tmp_path / name), format=repr)) \
                .uid(f"sink-{name}")

    env = make_env(2)
    env.enable_checkpointing(0.2, storage=str(tmp_path / "v1"))
    build(env)
    client = env.execute_async("windows v1")
    client.wait_until_running()
    started = time.monotonic()
    while time.monotonic() - started < 1.5 or not any(c["status"] == "completed" for c in client.checkpoint_stats()):
        assert not client.status.is_terminal and time.monotonic() - started < 60, "job 1 ended before the cancel"
        time.sleep(0.05)
    client.cancel(timeout=60)
    expected = shape_oracles()
    for name in ("time-sliding", "count-sliding"):  # job 1 committed some windows, not all
        assert 0 < len(read_committed_lines(str(tmp_path / name))) < len(expected[name]), name

    env = make_env(3)
    env.enable_checkpointing(0.2, storage=str(tmp_path / "v2"))
    build(env)
    result = env.execute("windows v2", timeout=300, restore_from=client.checkpoint_path)
    assert result.records_processed < SHAPED  # the sources went on from job 1's positions
    for name in ("time-sliding", "count-sliding"):
        committed = collections.Counter(read_committed_lines(str(tmp_path / name)))
        assert committed == collections.Counter(map(repr, expected[name])), name
