"""A job run with high availability by real driver processes (tests/chaos/test_high_availability.py).

    python tests/ha_job.py HA_URI WORK_DIR [RECORDS] [RATE]

Keyed running counts into an exactly-once file sink under ``WORK_DIR/out``, checkpoints under
``WORK_DIR/checkpoints``, on Spark ``local[2]``. The driver that runs the job to its end appends
``FINAL <records>`` to ``WORK_DIR/final.log``; one that finds it ended elsewhere prints
``ENDED ELSEWHERE``; a deposed one exits 3 with its message.
"""

from __future__ import annotations

import collections
import os
import sys
import time

KEYS = 20


def key_of(i: int) -> str:
    return f"k{i % KEYS}"


def oracle(records: int) -> collections.Counter:
    """The committed lines of an exact run: every key's running counts once."""
    seen: collections.Counter = collections.Counter()
    lines: collections.Counter = collections.Counter()
    for i in range(records):
        seen[key_of(i)] += 1
        lines[f"{key_of(i)} {seen[key_of(i)]}"] += 1
    return lines


def main() -> int:
    import logging

    import epochal
    from epochal.connectors.files import ExactlyOnceFileSink
    from epochal.control.restart import FixedDelayRestart
    from epochal.errors import LeadershipLostError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    uri, work = sys.argv[1], sys.argv[2]
    records = int(sys.argv[3]) if len(sys.argv) > 3 else 6000
    rate = float(sys.argv[4]) if len(sys.argv) > 4 else 400.0
    lease = float(os.environ.get("HA_LEASE_TIMEOUT", "3"))
    env = epochal.Environment(2, master="local[2]", registration_timeout=60.0)
    env.enable_checkpointing(0.25, storage=os.path.join(work, "checkpoints"), retained=2)
    env.set_restart_strategy(FixedDelayRestart(attempts=5, delay=0.2))
    env.enable_high_availability(uri, lease_timeout=lease, poll_interval=0.1)
    counts = env.from_generator(key_of, count=records, rate=rate).key_by(lambda k: k).count()
    counts.sink_to(ExactlyOnceFileSink(os.path.join(work, "out"), format=lambda kv: f"{kv[0]} {kv[1]}"),
                   name="exactly-once-sink")
    print(f"DRIVER {os.getpid()} STARTED {time.time():.3f}", flush=True)
    try:
        result = env.execute("ha-counts")
    except LeadershipLostError as error:
        print(f"DEPOSED {error}", flush=True)
        return 3
    if result.ended_elsewhere is not None:
        print("ENDED ELSEWHERE", flush=True)
        return 0
    with open(os.path.join(work, "final.log"), "a", encoding="utf-8") as out:
        out.write(f"FINAL {os.getpid()} {result.records_processed}\n")
    print(f"FINAL {result}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
