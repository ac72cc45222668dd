"""Interval joins, async I/O with requests in flight, and session windows with allowed lateness
under real crashes (SIGKILL of Spark workers at seeded random moments, p=2 and p=3, an
exactly-once file sink): the join buffers and cleanup timers, the async operator's in-flight
records and the sessions with their late firings are in the checkpoints, so the committed output
equals the oracle: each join pair once, each async result once, and per session a strictly
increasing run of firings whose last one is the session's full sum.
"""

from __future__ import annotations

import asyncio
import collections

import pytest

from epochal import EventTimeSessionWindows
from epochal.connectors.files import ExactlyOnceFileSink
from epochal.testing import random_faults
from tests.chaos.harness import run_with_faults

RECORDS = 60_000
KEYS = 11
RATE = 20_000
LOWER, UPPER = -3, 2
GAP, LATENESS = 40, 500


def left(i: int) -> tuple[str, int, str]:
    return (f"k{i % KEYS}", i, "L")


def right(i: int) -> tuple[str, int, str]:
    return (f"k{(i * 3) % KEYS}", 2 * i, "R")  # right event time runs twice as fast


async def lookup(record: tuple[str, int, str]) -> tuple[str, int]:
    await asyncio.sleep(0.002 if record[1] % 7 else 0.02)  # some answers are slow: many in flight
    return (record[0], record[1] * 2)


def session_record(i: int) -> tuple[str, int, int]:
    """Keys in bursts of 200 records; every 37th record is 150 behind in event time (it arrives
    late: after the watermark passed it), which adds to a fired session (a late firing), opens
    a session of its own, or merges one into the burst's session."""
    return (f"s{(i // 200) % 7}", i - 150 if i % 37 == 0 and i >= 150 else i, i + 1)


def final_sessions() -> dict[tuple[str, int, int], int]:
    """(key, start, end) -> sum of every session at the end (Flink: windows [t, t + gap) that
    intersect or touch merge)."""
    per_key: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for i in range(RECORDS):
        key, ts, value = session_record(i)
        per_key[key].append((ts, value))
    sessions = {}
    for key, items in per_key.items():
        items.sort()
        start, last, total = items[0][0], items[0][0], 0
        for ts, value in items:
            if ts > last + GAP:
                sessions[(key, start, last + GAP)] = total
                start, total = ts, 0
            last = ts
            total += value
        sessions[(key, start, last + GAP)] = total
    return sessions


def check_sessions(lines: collections.Counter) -> None:
    """Each final session committed once with its full sum; every other firing (before a late
    record or a merge) once, inside a final session of its key and with less than its sum."""
    finals = final_sessions()
    firings = collections.Counter()
    for line, n in lines.items():
        _, key, start, end, value = line.split()
        firings[(key, int(start), int(end), int(value))] += n
    assert all(n == 1 for n in firings.values()), "a session firing was committed twice"
    assert {(k, s, e): v for (k, s, e, v) in firings if finals.get((k, s, e)) == v} == finals, "lost sessions"
    for (key, start, end, value) in firings:
        assert any(k == key and s <= start and end <= e and value <= v for (k, s, e), v in finals.items()), \
            f"a firing no final session explains: {key} {start} {end} {value}"


def interval_oracle() -> collections.Counter:
    rights: dict[str, list[int]] = collections.defaultdict(list)
    for i in range(RECORDS // 2):
        key, ts, _ = right(i)
        rights[key].append(ts)
    lines = collections.Counter()
    for i in range(RECORDS):
        key, ts, _ = left(i)
        for other in rights[key]:
            if LOWER <= other - ts <= UPPER:
                lines[f"join {key} {ts} {other}"] += 1
    return lines


def async_oracle() -> collections.Counter:
    return collections.Counter(f"async {left(i)[0]} {2 * i}" for i in range(RECORDS))


def job(env, out_dir):
    lefts = env.from_generator(left, count=RECORDS, rate=RATE).with_watermarks(lambda r: r[1])
    rights = env.from_generator(right, count=RECORDS // 2, rate=RATE / 2).with_watermarks(lambda r: r[1])
    joined = (lefts.key_by(lambda r: r[0])
              .interval_join(rights.key_by(lambda r: r[0]), timestamp=lambda r: r[1])
              .between(LOWER, UPPER).process().uid("interval-join")
              .map(lambda pair: f"join {pair[0][0]} {pair[0][1]} {pair[1][1]}"))
    looked_up = (lefts.async_map(lookup, capacity=50, ordered=False).uid("lookup")
                 .map(lambda r: f"async {r[0]} {r[1]}"))
    sessions = (env.from_generator(session_record, count=RECORDS, rate=RATE).with_watermarks(lambda r: r[1])
                .key_by(lambda r: r[0])
                .window(EventTimeSessionWindows.with_gap(GAP), timestamp=lambda r: r[1]).allowed_lateness(LATENESS)
                .sum(lambda r: r[2]).uid("sessions")
                .map(lambda w: f"session {w.key} {w.start} {w.end} {w.value}"))
    joined.union(looked_up, sessions).sink_to(ExactlyOnceFileSink(str(out_dir)), name="sink")


@pytest.mark.parametrize("parallelism,seed", [(2, 71), (3, 73)])
def test_interval_join_async_io_and_late_sessions_exactly_once_under_random_kills(make_env, tmp_path,
                                                                                 parallelism, seed):
    faults = random_faults(seed, parallelism, count=2, window=(0.5, 2.0))
    result, committed = run_with_faults(make_env, tmp_path, parallelism, faults, job, "joins chaos")
    assert len(result.restarts) == 2
    check_sessions(collections.Counter({line: n for line, n in committed.items() if line.startswith("session")}))
    assert result.late_records_dropped == 0  # every late record came within the allowed lateness
    committed = collections.Counter({line: n for line, n in committed.items() if not line.startswith("session")})
    expected = interval_oracle() + async_oracle()
    assert committed - expected == collections.Counter(), "duplicated or wrong lines"
    assert expected - committed == collections.Counter(), "lost lines"
