"""Windows demo: user sessions with late data, and a sliding window with a ProcessWindowFunction.

Page views ``(user, time, ms spent)`` arrive mostly in order; every 37th one is 150 time units
late. Two windowed aggregations read them:

- per user, **session windows** (a session ends after 40 units without a view) summing the
  time spent, with ``allowed_lateness(500)``: a late view that belongs to a session that already
  fired updates it (a late firing) or merges two sessions; views later than that would go to the
  side output ``too-late`` (none are, here);
- per user, **sliding windows** of 1,000 units every 500, with a ``ProcessWindowFunction`` that
  sees all of a window's views and its bounds; they read only the views on time (late views,
  the ones that spent 100 ms or more here, would be dropped or not depending on when watermarks came).

``python examples/windows.py`` runs on the local runner (no Spark). ``python examples/windows.py
--spark`` runs on Spark ``local[N]`` with two workers, a checkpoint every 200 ms and one worker
killed midway (SIGKILL); window contents, sessions and their timers come back from the
checkpoint. Either way the committed output of the exactly-once file sink is checked against a
plain-Python oracle: each final session once with its full sum, every earlier firing of a
session once and contained in a final one, each sliding window once.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from typing import Any

import epochal
from epochal import EventTimeSessionWindows, OutputTag, ProcessWindowFunction, SlidingEventTimeWindows
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines

USERS, VIEWS = 9, 30_000
GAP, LATENESS = 40, 500
SIZE, SLIDE = 1_000, 500
TOO_LATE = OutputTag("too-late")


def late(i: int) -> bool:
    return i % 37 == 0 and i >= 150


def view(i: int) -> tuple[str, int, int]:
    """``(user, time, ms spent)``: users in turns of 150 views; every 37th view is 150 late (and
    spent 100 ms or more, which tells it apart)."""
    return f"u{(i // 150) % USERS}", i - 150 if late(i) else i, (100 if late(i) else 1) + i % 13


class Summary(ProcessWindowFunction):
    """All views of a user's window: ``(user, start, end, views, longest)``."""

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        window = context.window()
        yield (key, window.start, window.end, len(elements), max(e[2] for e in elements))


def build(env: epochal.Environment, rate: float | None, out: str) -> None:
    views = env.from_generator(view, count=VIEWS, rate=rate).with_watermarks(lambda v: v[1])
    per_user = views.key_by(lambda v: v[0])
    sessions = (per_user.window(EventTimeSessionWindows.with_gap(GAP), timestamp=lambda v: v[1])
                .allowed_lateness(LATENESS).side_output_late_data(TOO_LATE)
                .sum(lambda v: v[2]).uid("sessions"))
    on_time = views.filter(lambda v: v[2] < 100).key_by(lambda v: v[0])  # (late views: see below)
    sliding = (on_time.window(SlidingEventTimeWindows.of(SIZE, SLIDE), timestamp=lambda v: v[1])
               .process(Summary()).uid("sliding"))
    (sessions.map(lambda w: f"session {w.key} {w.start} {w.end} {w.value}")
     .union(sliding.map(lambda s: "sliding " + " ".join(map(str, s))),
            sessions.side_output(TOO_LATE).map(lambda v: f"too-late {v}"))
     .sink_to(ExactlyOnceFileSink(out), name="sink"))


def final_sessions() -> dict[tuple[str, int, int], int]:
    by_user: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i in range(VIEWS):
        user, at, spent = view(i)
        by_user[user].append((at, spent))
    finals = {}
    for user, items in by_user.items():
        items.sort()
        start = last = items[0][0]
        total = 0
        for at, spent in items:
            if at > last + GAP:  # windows [t, t + GAP) that touch or overlap merge, as in Flink
                finals[(user, start, last + GAP)] = total
                start, total = at, 0
            last, total = at, total + spent
        finals[(user, start, last + GAP)] = total
    return finals


def sliding_oracle() -> Counter[str]:
    windows: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i in (i for i in range(VIEWS) if not late(i)):
        user, at, spent = view(i)
        for start in range(at - at % SLIDE, at - SIZE, -SLIDE):
            windows[(user, start)].append(spent)
    return Counter(f"sliding {user} {start} {start + SIZE} {len(spent)} {max(spent)}"
                   for (user, start), spent in windows.items())


def check(committed: Counter[str]) -> list[str]:
    """What is wrong with the committed output (nothing: an empty list)."""
    problems = [f"committed twice: {line}" for line, n in committed.items() if n > 1]
    sliding = Counter({line: n for line, n in committed.items() if line.startswith("sliding")})
    if sliding != sliding_oracle():
        problems.append("sliding windows differ from the oracle")
    problems += [line for line in committed if line.startswith("too-late")]
    finals = final_sessions()
    firings = [tuple(line.split()[1:]) for line in committed if line.startswith("session")]
    found = {(u, int(s), int(e)): int(v) for u, s, e, v in firings if finals.get((u, int(s), int(e))) == int(v)}
    if found != finals:
        problems.append(f"{len(finals) - len(found)} sessions missing or without their full sum")
    for user, s, e, v in firings:
        if not any(u == user and a <= int(s) and int(e) <= b and int(v) <= t for (u, a, b), t in finals.items()):
            problems.append(f"a session firing no final session contains: {user} {s} {e} {v}")
    return problems


def run(workdir: str, spark: bool) -> int:
    env = epochal.Environment(parallelism=2)
    if spark:
        env.enable_checkpointing(0.2, storage=f"{workdir}/checkpoints")
    build(env, 12_000 if spark else None, f"{workdir}/out")
    started = time.monotonic()
    if spark:
        from epochal.testing import Fault

        result = env.execute("windows", faults=[Fault("time", worker=1, after=1.5)])
        print(f"workers killed and recovered from a checkpoint: {len(result.restarts)}")
    else:
        from epochal.testing import run_locally

        run_locally(env, "windows")
    committed = Counter(read_committed_lines(f"{workdir}/out"))
    sessions = sum(1 for line in committed if line.startswith("session"))
    print(f"{VIEWS:,} views windowed in {time.monotonic() - started:.1f} s: {sessions:,} session firings "
          f"({len(final_sessions()):,} sessions; the rest are earlier firings that late views updated)")
    problems = check(committed)
    if problems:
        print("MISMATCH: " + "; ".join(problems[:5]), file=sys.stderr)
        return 1
    print("OK: every session once with its full sum, every sliding window once (none lost, none duplicated)")
    if spark:
        env.spark.stop()
    return 0


def main(argv: list[str]) -> int:
    workdir = tempfile.mkdtemp(prefix="epochal-windows-")
    try:
        return run(workdir, "--spark" in argv)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
