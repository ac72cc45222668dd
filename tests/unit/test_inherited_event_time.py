"""Event-time operators given no ``timestamp`` read the records' event time with the function of
the ``with_watermarks`` they come from unchanged (through partitioning and filters), as Flink
operators use the timestamps its watermark strategy assigned; after a ``map`` they need one."""

from __future__ import annotations

from collections import Counter

import pytest

import epochal
from epochal import PlanError, TumblingEventTimeWindows
from epochal.testing import run_locally

RECORDS = [(f"k{i % 3}", i) for i in range(60)]


def test_windows_joins_and_process_find_the_watermarks_timestamp():
    env = epochal.Environment(parallelism=2)
    events = env.from_collection(RECORDS).with_watermarks(lambda r: r[1])
    keyed = events.filter(lambda r: r[1] >= 0).key_by(lambda r: r[0])
    windows = keyed.window(TumblingEventTimeWindows.of(20)).count().collect()
    sized = keyed.window(20).count().collect()
    stamps = keyed.process(lambda r, ctx: [(r[1], ctx.timestamp())]).collect()
    joined = (keyed.interval_join(events.key_by(lambda r: r[0])).between(0, 0).process()
              .map(lambda pair: pair[0][1]).collect())
    window_joined = (events.join(events).where(lambda r: r[0]).equal_to(lambda r: r[0])
                     .window(TumblingEventTimeWindows.of(20)).apply(lambda a, b: 1).collect())
    run_locally(env)
    expected = Counter((f"k{i % 3}", i - i % 20) for i in range(60))
    assert Counter((w.key, w.start) for w in windows.get() for _ in range(w.value)) == expected
    assert sorted(sized.get()) == sorted(windows.get())
    assert sorted(stamps.get()) == [(i, i) for i in range(60)]
    assert sorted(joined.get()) == list(range(60))
    assert len(window_joined.get()) == sum(n * n for n in expected.values())  # every pair of a key's window


def test_after_a_map_the_timestamp_must_be_given():
    env = epochal.Environment(1)
    mapped = env.from_collection(RECORDS).with_watermarks(lambda r: r[1]).map(lambda r: r).key_by(lambda r: r[0])
    with pytest.raises(PlanError, match="is in event time: pass timestamp="):
        mapped.window(TumblingEventTimeWindows.of(20))
    with pytest.raises(PlanError, match="needs timestamp="):
        mapped.interval_join(mapped).between(0, 1)
