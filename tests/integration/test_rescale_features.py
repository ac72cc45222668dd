"""Stop a job at p=2 while it has pending timers, open session windows and async requests in
flight, and restore its latest checkpoint at p=3: the exactly-once sink's committed output of
both runs together equals the oracle: nothing lost, nothing fired twice."""

from __future__ import annotations

import asyncio
import collections
import time

import epochal
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from epochal.runtime.windows.assigners import EventTimeSessionWindows
from tests.chaos.test_datastream_features import BucketSums

RECORDS = 40_000
RATE = 8_000  # a 5 s input: the first run is stopped in the middle
KEYS = 13
GAP = 50


def record(i: int) -> tuple[str, int]:
    """Event time ``i``; each key in bursts of 500 records, then silent for 6,000: one session
    (gap 50) per burst, and every bucket of BucketSums spans several keys."""
    return (f"k{(i // 500) % KEYS}", i)


async def slow_lookup(r: tuple[str, int]) -> str:
    await asyncio.sleep(0.01)
    return f"async {r[0]} {r[1]}"


def oracle() -> collections.Counter:
    lines = collections.Counter(f"async {record(i)[0]} {i}" for i in range(RECORDS))
    sums: collections.Counter = collections.Counter()
    for i in range(RECORDS):
        key, value = record(i)
        sums[(key, value // 4_000)] += value
    lines.update(f"bucket {key} {bucket} {total}" for (key, bucket), total in sums.items())
    sessions: dict[str, list[list[int]]] = collections.defaultdict(list)  # key -> [start, last, sum]
    for i in range(RECORDS):
        key, ts = record(i)
        value = ts
        open_ = sessions[key][-1] if sessions[key] else None
        if open_ is not None and ts < open_[1] + GAP:
            open_[1], open_[2] = ts, open_[2] + value
        else:
            sessions[key].append([ts, ts, value])
    lines.update(f"session {key} {s} {last + GAP} {total}" for key, runs in sessions.items()
                 for s, last, total in runs)
    return lines


def build(env: epochal.Environment, out_dir: str) -> None:
    events = env.from_generator(record, count=RECORDS, rate=RATE).with_watermarks(lambda r: r[1]).uid("events")
    buckets = (events.key_by(lambda r: r[0]).process(BucketSums(), timestamp=lambda r: r[1]).uid("buckets")
               .map(lambda t: " ".join(map(str, t))))
    sessions = (events.key_by(lambda r: r[0])
                .window(EventTimeSessionWindows.with_gap(GAP), timestamp=lambda r: r[1])
                .sum(lambda r: r[1]).uid("sessions")
                .map(lambda w: f"session {w.key} {w.start} {w.end} {w.value}"))
    looked_up = events.async_map(slow_lookup, capacity=40, ordered=False).uid("lookup")
    buckets.union(sessions, looked_up).sink_to(ExactlyOnceFileSink(out_dir), name="sink")


def test_stop_at_p2_with_pending_timers_sessions_and_async_requests_and_restore_at_p3(make_env, tmp_path):
    out = str(tmp_path / "out")
    first = make_env(2)
    first.enable_checkpointing(0.3, storage=str(tmp_path / "chk"), retained=2)
    build(first, out)
    client = first.execute_async("rescale-features-p2")
    client.wait_until_running()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sum(c["status"] == "completed" for c in client.checkpoint_stats()) < 3:
        time.sleep(0.05)
    client.cancel(timeout=60)
    assert client.status == epochal.JobStatus.CANCELLED, "the first run ended before it was stopped"
    committed_first = collections.Counter(read_committed_lines(out))
    assert 0 < sum(committed_first.values()) < sum(oracle().values())  # stopped in the middle

    second = make_env(3)
    second.enable_checkpointing(0.3, storage=str(tmp_path / "chk2"))
    build(second, out)
    second.execute("rescale-features-p3", timeout=300, restore_from=client.checkpoint_path)
    committed = collections.Counter(read_committed_lines(out))
    expected = oracle()
    assert committed - expected == collections.Counter(), "duplicated or wrong lines"
    assert expected - committed == collections.Counter(), "lost lines"
