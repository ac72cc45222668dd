"""Timers demo: per-user session timeout detection on event time, exactly once.

A user's session ends once the user has been inactive for ``GAP`` units of event time. A keyed
process function keeps each user's open session ``(start, last, events)`` in keyed state and one
event-time timer at ``last + GAP``; every event of the user moves that timer (delete, register).
When the watermark reaches the timer, ``on_timer`` emits the finished session. Records carry no
timestamps: ``process(fn, timestamp=...)`` names each event's time (``ctx.timestamp()``), and
``with_watermarks`` upstream moves event time on. At the end of the bounded input the watermark
goes to infinity, so every session still open is closed by its timer too.

``python examples/timers.py`` runs the job on the local runner (no Spark, no Java) in a second or
two. ``python examples/timers.py --spark`` runs it on Spark ``local[N]`` with two workers, a
checkpoint every 200 ms and one worker killed midway (a real SIGKILL): the open sessions and their
timers are keyed state in the checkpoint it restores from, and the committed output of the
exactly-once file sink is checked against a plain-Python oracle: every session once, none lost,
none duplicated.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import epochal
from epochal import KeyedProcessFunction, ValueStateDescriptor
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines

USERS = 60
GAP = 100  # a session ends after 100 units of event time without an event of its user
BLOCK = 400  # every 400 units of time another few users are active
SESSION = ValueStateDescriptor("session")  # (start, last, events) of the user's open session


def event(i: int) -> tuple[str, str, int]:
    """Event ``i``: ``(user, action, time)`` at time ``i``; deterministic, so the source can replay
    it. In each block of time six users are active, a different six in the next block."""
    rng = random.Random(i)
    user = (i // BLOCK * 7 + rng.randrange(6)) % USERS
    return f"u{user:02d}", rng.choice(["view", "click", "scroll"]), i


class SessionTimeout(KeyedProcessFunction):
    """Emits ``(user, start, last, events)`` when a user has been inactive for ``gap``."""

    def __init__(self, gap: int) -> None:
        self.gap = gap

    def process_element(self, value: Any, ctx: Any) -> Any:
        session, timers = ctx.get_state(SESSION), ctx.timer_service()
        now = ctx.timestamp()  # the event's time, from process(..., timestamp=...)
        current = session.value()
        if current is not None:
            start, last, count = current
            timers.delete_event_time_timer(last + self.gap)
            if now >= last + self.gap:
                # Timed out in event time, but the watermark has not reached its timer yet.
                yield (ctx.get_current_key(), start, last, count)
                current = None
        session.update((now, now, 1) if current is None else (current[0], now, current[2] + 1))
        timers.register_event_time_timer(now + self.gap)

    def on_timer(self, timestamp: Any, ctx: Any) -> Any:
        session = ctx.get_state(SESSION)
        start, last, count = session.value()
        session.clear()
        yield (ctx.get_current_key(), start, last, count)


def build(env: epochal.Environment, events: int, rate: float | None, out: str) -> None:
    # One source subtask (and watermark subtask): each user's events reach the session function
    # in order of time.
    source = env.from_generator(event, count=events, rate=rate).set_parallelism(1).name("events")
    sessions = (source.with_watermarks(lambda e: e[2]).set_parallelism(1)
                .key_by(lambda e: e[0])
                .process(SessionTimeout(GAP), timestamp=lambda e: e[2]).name("sessions").uid("sessions"))
    sessions.sink_to(ExactlyOnceFileSink(out, format=lambda s: " ".join(map(str, s))), name="sink")


def oracle(events: int) -> Counter[str]:
    """The sessions in plain Python: a user's events split wherever ``GAP`` or more passed."""
    by_user: dict[str, list[int]] = {}
    for i in range(events):
        user, _, at = event(i)
        by_user.setdefault(user, []).append(at)
    lines = []
    for user, times in by_user.items():
        start = last = times[0]
        count = 0
        for at in times:
            if at >= last + GAP:
                lines.append(f"{user} {start} {last} {count}")
                start, count = at, 0
            last, count = at, count + 1
        lines.append(f"{user} {start} {last} {count}")
    return Counter(lines)


def main(argv: list[str]) -> int:
    spark = "--spark" in argv
    workdir = tempfile.mkdtemp(prefix="epochal-timers-")
    try:
        return run(workdir, spark)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(workdir: str, spark: bool) -> int:
    events = 24_000
    env = epochal.Environment(parallelism=2)
    if spark:
        env.enable_checkpointing(0.2, storage=f"{workdir}/checkpoints")
    build(env, events, 10_000 if spark else None, f"{workdir}/out")
    started = time.monotonic()
    if spark:
        from epochal.testing import Fault

        result = env.execute("session timeouts", faults=[Fault("time", worker=1, after=1.5)])
        for restart in result.restarts:
            print(f"worker killed: {restart['cause'].split(': ', 1)[-1]}")
            print(f"recovered from the latest checkpoint in {restart.get('recovered_s', float('nan')):.2f} s; "
                  "open sessions and their timers came back with it")
        print(f"checkpoints completed: {result.completed_checkpoints} (every 0.2 s)")
    else:
        from epochal.testing import run_locally

        run_locally(env, "session timeouts")
    elapsed = time.monotonic() - started
    committed = Counter(read_committed_lines(f"{workdir}/out"))
    expected = oracle(events)
    where = "on Spark by 2 workers (Spark start-up and the recovery included)" if spark else "by the local runner"
    print(f"{events:,} events of {USERS} users sessionized {where} in {elapsed:.1f} s: "
          f"{sum(committed.values()):,} sessions ended by a {GAP}-unit timeout")
    if committed != expected:
        missing, extra = sum((expected - committed).values()), sum((committed - expected).values())
        print(f"MISMATCH: {missing} sessions missing, {extra} extra in the committed output", file=sys.stderr)
        return 1
    print(f"OK: committed sessions equal the oracle exactly ({sum(expected.values()):,} sessions, none lost, "
          "none duplicated)")
    if spark:
        env.spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
