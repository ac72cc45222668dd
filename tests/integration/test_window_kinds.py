"""The window kinds beyond event-time tumbling/sliding, on Spark workers, in one job against
oracles: global windows with a purging count trigger, tumbling and sliding processing-time
windows, a full-window ProcessWindowFunction, a window join and a co-group."""

from __future__ import annotations

import collections

from epochal import (
    CountTrigger,
    GlobalWindows,
    PurgingTrigger,
    SlidingProcessingTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)

RECORDS = 6_000
KEYS = 4  # a multiple of the parallelism: each key's records come from one source subtask, in order
WINDOW = 500


def record(i: int) -> tuple[str, int]:
    return (f"k{i % KEYS}", i)


def test_global_processing_time_process_and_join_windows(make_env):
    env = make_env(2)
    events = env.from_generator(record, count=RECORDS, rate=RECORDS / 1.5).with_watermarks(lambda r: r[1])
    keyed = events.key_by(lambda r: r[0])
    batches = (keyed.window(GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(100)))
               .reduce(lambda a, b: (a[0], a[1] + b[1])).collect())
    tumbling = keyed.window(TumblingProcessingTimeWindows.of(0.25)).count().collect()
    sliding = keyed.window(SlidingProcessingTimeWindows.of(0.5, 0.25)).count().collect()
    shapes = (keyed.window(TumblingEventTimeWindows.of(WINDOW), timestamp=lambda r: r[1])
              .process(lambda key, ctx, elements: [(key, ctx.window().start, ctx.window().end, len(elements))])
              .collect())
    squares = events.map(lambda r: (r[0], r[1], r[1] * r[1])).with_watermarks(lambda r: r[1])
    joined = (events.join(squares).where(lambda r: r[0]).equal_to(lambda r: r[0])
              .window(WINDOW, timestamp=lambda r: r[1])
              .apply(lambda left, right: (left[1], right[2]) if left[1] == right[1] else None)
              .filter(lambda pair: pair is not None).collect())
    grouped = (events.co_group(squares).where(lambda r: r[0]).equal_to(lambda r: r[0])
               .window(WINDOW, timestamp=lambda r: r[1])
               .apply(lambda key, lefts, rights: [(key, len(lefts), len(rights))]).collect())
    env.execute("window kinds")

    per_key = collections.defaultdict(list)
    for i in range(RECORDS):
        per_key[record(i)[0]].append(i)
    assert all(w.start is None and w.end is None for w in batches.get())  # the global window
    assert sorted(w.value for w in batches.get()) == sorted((key, sum(values[n:n + 100]))
                                                            for key, values in per_key.items()
                                                            for n in range(0, len(values), 100))
    assert sum(count for _, _, count in tumbling.get()) == RECORDS  # every record in one window
    assert sum(count for _, _, count in sliding.get()) == 2 * RECORDS  # ... in two sliding ones
    assert all(w.end - w.start == 0.25 for w in tumbling.get())
    assert sorted(shapes.get()) == sorted((f"k{k}", start, start + WINDOW, WINDOW // KEYS)
                                          for k in range(KEYS) for start in range(0, RECORDS, WINDOW))
    assert sorted(joined.get()) == [(i, i * i) for i in range(RECORDS)]
    assert sorted(grouped.get()) == sorted((f"k{k}", WINDOW // KEYS, WINDOW // KEYS)
                                           for k in range(KEYS) for _ in range(0, RECORDS, WINDOW))
