"""Broadcast state demo: alert thresholds broadcast to a keyed stream of sensor readings.

Sensor readings ``(sensor, seq, reading)`` are keyed by sensor; a second, slow stream carries the
rules ``(kind, threshold)``, one per kind of sensor. ``rules.broadcast(RULES)`` sends every rule
to every subtask of the ``KeyedBroadcastProcessFunction``, whose ``process_broadcast_element``
stores it in the broadcast state ``RULES``, the same on every subtask. ``process_element`` reads
the rule of its sensor's kind (read-only there) and emits an alert when the reading is above the
threshold. A reading that arrives before its rule waits in keyed state; when the rule arrives,
``apply_to_keyed_state`` checks every waiting reading of that kind on the subtask. Readings of a
kind that never gets a rule are reported when the input ends, by an event-time timer.

So the alerts do not depend on which stream is ahead: they equal a plain-Python oracle, whether
a reading met its rule at once ("direct") or waited for it ("waited").

``python examples/broadcast_rules.py`` runs the job on the local runner (no Spark, no Java) in
about a second. ``python examples/broadcast_rules.py --spark`` runs it on Spark ``local[N]`` with
two workers, a checkpoint every 200 ms and one worker killed midway (a real SIGKILL): broadcast
state, waiting readings and timers are in the checkpoint it restores from, and the committed
output of the exactly-once file sink is checked against the oracle.
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
from epochal import KeyedBroadcastProcessFunction, ListStateDescriptor, MapStateDescriptor
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines

SENSORS = 50
KINDS = ["temperature", "pressure", "vibration", "flow", "humidity"]
THRESHOLDS = {"temperature": 90, "pressure": 95, "vibration": 97, "flow": 93}  # humidity: no rule
RULES = MapStateDescriptor("rules")  # broadcast state: kind -> threshold
WAITING = ListStateDescriptor("waiting")  # keyed state: readings that came before their rule
END = 10**12  # an event-time timer that only the end of the input fires


def kind_of(sensor: str) -> str:
    return KINDS[int(sensor[1:]) % len(KINDS)]


def reading(i: int) -> tuple[str, int, int]:
    """Reading ``i``: ``(sensor, i, value)``; deterministic, so the source can replay it."""
    rng = random.Random(i)
    return f"s{rng.randrange(SENSORS):02d}", i, rng.randrange(100)


def rule(i: int) -> tuple[str, int]:
    """Rule ``i``: ``(kind, threshold)``."""
    kind = sorted(THRESHOLDS)[i]
    return kind, THRESHOLDS[kind]


class Alerts(KeyedBroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        threshold = ctx.get_broadcast_state(RULES).get(kind_of(value[0]))  # read-only here
        if threshold is None:
            ctx.get_state(WAITING).add(value)
            ctx.timer_service().register_event_time_timer(END)
            return None
        return alerts([value], threshold, "direct")

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        # Runs on every subtask with the same rule: it must change the broadcast state the same
        # way everywhere (no randomness, no clock, nothing that depends on the subtask).
        kind, threshold = value
        ctx.get_broadcast_state(RULES).put(kind, threshold)
        out: list[str] = []

        def check_waiting(sensor: str, waiting: Any) -> None:
            if kind_of(sensor) == kind:
                out.extend(alerts(waiting.get(), threshold, "waited"))
                waiting.clear()

        ctx.apply_to_keyed_state(WAITING, check_waiting)  # every key of this subtask with waiting readings
        return out

    def on_timer(self, timestamp: Any, ctx: Any) -> Any:
        waiting = ctx.get_state(WAITING).get()
        if waiting:  # the input ended and this kind never got a rule
            yield f"unchecked {ctx.get_current_key()} {len(waiting)}"


def alerts(readings: list[Any], threshold: int, how: str) -> list[str]:
    return [f"alert {sensor} {seq} {value} {threshold} {how}" for sensor, seq, value in readings
            if value > threshold]


def build(env: epochal.Environment, readings: int, rate: float | None, rules_rate: float | None, out: str) -> None:
    rules = env.from_generator(rule, count=len(THRESHOLDS), rate=rules_rate).name("rules").broadcast(RULES)
    events = env.from_generator(reading, count=readings, rate=rate).name("readings")
    checked = events.key_by(lambda r: r[0]).connect(rules).process(Alerts()).name("alerts").uid("alerts")
    checked.sink_to(ExactlyOnceFileSink(out), name="sink")


def oracle(readings: int) -> Counter[str]:
    lines: list[str] = []
    unchecked: Counter[str] = Counter()
    for i in range(readings):
        sensor, seq, value = reading(i)
        threshold = THRESHOLDS.get(kind_of(sensor))
        if threshold is None:
            unchecked[sensor] += 1
        elif value > threshold:
            lines.append(f"alert {sensor} {seq} {value} {threshold}")
    lines += [f"unchecked {sensor} {count}" for sensor, count in unchecked.items()]
    return Counter(lines)


def main(argv: list[str]) -> int:
    spark = "--spark" in argv
    workdir = tempfile.mkdtemp(prefix="epochal-broadcast-")
    try:
        return run(workdir, spark)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(workdir: str, spark: bool) -> int:
    readings = 25_000
    env = epochal.Environment(parallelism=2)
    if spark:
        env.enable_checkpointing(0.2, storage=f"{workdir}/checkpoints")
    # On Spark the rules trickle in (2 per second) while readings flow: many readings wait.
    build(env, readings, 10_000 if spark else None, 2 if spark else None, f"{workdir}/out")
    started = time.monotonic()
    if spark:
        from epochal.testing import Fault

        result = env.execute("broadcast rules", faults=[Fault("time", worker=1, after=1.5)])
        for restart in result.restarts:
            print(f"worker killed: {restart['cause'].split(': ', 1)[-1]}")
            print(f"recovered from the latest checkpoint in {restart.get('recovered_s', float('nan')):.2f} s; "
                  "broadcast state, waiting readings and timers came back with it")
        print(f"checkpoints completed: {result.completed_checkpoints} (every 0.2 s)")
    else:
        from epochal.testing import run_locally

        run_locally(env, "broadcast rules")
    elapsed = time.monotonic() - started
    lines = read_committed_lines(f"{workdir}/out")
    how = Counter(line.rsplit(" ", 1)[1] for line in lines if line.startswith("alert"))
    committed = Counter(line.rsplit(" ", 1)[0] if line.startswith("alert") else line for line in lines)
    expected = oracle(readings)
    where = "on Spark by 2 workers (Spark start-up and the recovery included)" if spark else "by the local runner"
    print(f"{readings:,} readings checked against {len(THRESHOLDS)} broadcast rules {where} in {elapsed:.1f} s: "
          f"{how['direct']:,} alerts at once, {how['waited']:,} after waiting for their rule, "
          f"{sum(1 for line in lines if line.startswith('unchecked'))} sensors without a rule")
    if committed != expected:
        missing, extra = sum((expected - committed).values()), sum((committed - expected).values())
        print(f"MISMATCH: {missing} lines missing, {extra} extra in the committed output", file=sys.stderr)
        return 1
    print("OK: committed alerts equal the oracle exactly (none lost, none duplicated)")
    if spark:
        env.spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
