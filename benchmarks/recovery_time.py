"""Recovery time vs keyed state size (papers/000 §7, the issue's 1 MB and 100 MB points).

A keyed job holds ``keys`` values of ``value_bytes`` each in managed ValueState, takes a
checkpoint every second, and one worker is crashed (``os._exit``) once the state is built.
Recovery time is measured by the JobMaster from failure detection (the crashed worker's
control connection closes at once) to the first record processed by the new attempt, after
every worker restored its state (``resumed_s``); ``restored_s`` is up to the start signal. Writes ``recovery_time.csv``.

    python -m benchmarks.recovery_time --sizes-mb 1 100
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import epochal
from benchmarks.common.results import RESULTS, write_rows
from epochal.control.spark import create_session
from epochal.state.descriptors import ValueStateDescriptor
from epochal.testing import Fault

VALUE_BYTES = 1000


class KeepPayload(epochal.ProcessFunction):
    """Stores a distinct payload per key: the state the restore has to read back."""

    def open(self, context):
        self.descriptor = ValueStateDescriptor("payload")

    def process_element(self, value, ctx):
        state = ctx.get_state(self.descriptor)
        if state.value() is None:
            state.update((str(value) * (VALUE_BYTES // len(str(value)) + 1))[:VALUE_BYTES].encode())
        return None


def measure(spark, size_mb: float, parallelism: int, kill_after: float) -> dict:
    keys = max(1, int(size_mb * 1_000_000 / VALUE_BYTES))
    env = epochal.Environment(parallelism, spark=spark)
    env.enable_checkpointing(1.0, storage=tempfile.mkdtemp(prefix="epochal-recovery-"))
    env.from_generator(lambda i: i % keys, count=None).key_by(lambda k: k).process(KeepPayload()).discard()
    client = env.execute_async("recovery", faults=[Fault("time", worker=parallelism - 1, after=kill_after)])
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        restarts = client.restarts()
        if restarts and "resumed_s" in restarts[0]:
            break
        time.sleep(0.1)
    stats = [c for c in client.checkpoint_stats() if c["status"] == "completed"]
    client.cancel(timeout=120)
    restart = client.restarts()[0]
    return {"state_mb": size_mb, "keys": keys, "parallelism": parallelism,
            "checkpoint_bytes": stats[-1]["bytes"] if stats else 0,
            "checkpoint_duration_s": stats[-1]["duration_s"] if stats else 0,
            "restored_s": restart["recovered_s"], "recovery_s": restart["resumed_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[1.0, 100.0])
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    spark = create_session(f"local[{max(args.parallelism, 2)}]", args.parallelism)
    rows = []
    for size in args.sizes_mb:
        row = measure(spark, size, args.parallelism, kill_after=4.0 + size * 0.08)
        rows.append(row)
        print(f"{size:g} MB keyed state ({row['keys']:,} keys): last checkpoint {row['checkpoint_bytes'] / 1e6:.1f} MB "
              f"in {row['checkpoint_duration_s']:.2f} s; kill -> state restored and started "
              f"{row['restored_s']:.2f} s, kill -> first record processed {row['recovery_s']:.2f} s")
    write_rows(os.path.join(args.out, "recovery_time.csv"), rows)
    spark.stop()


if __name__ == "__main__":
    main()
