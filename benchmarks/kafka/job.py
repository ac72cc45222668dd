"""The Kafka benchmark's job, defined once for every system, and the runner protocol.

Imported by every runner, each in its own virtualenv (epochal, Spark, Bytewax, PyFlink), so it
uses the standard library only.

The job
-------
Read a topic whose records are ``key = b"k<j>"``, ``value = b"k<j>,<produced ms>"`` (4
partitions, records of one key in one partition, in order), parse the value, keep a running
count per key, and write ``key = k<j>``, ``value = b"k<j>,<count>[,<produced ms>]"`` to another
topic (4 partitions). Parallelism 2, state checkpointed every ``CHECKPOINT_INTERVAL_S``, the
sink exactly-once where the system offers one. The driver (``benchmarks.kafka``) fills the
input topics, reads the output topic with ``isolation.level=read_committed`` and checks it
against the oracle; runners only run the job.

The runner protocol
-------------------
``python -m benchmarks.kafka.run_<system> --bootstrap B --source IN --sink OUT --variant V
--parallelism P --work-dir D --result R [--latency]``

* Without ``--latency`` (throughput): read ``IN`` from its beginning to the end offsets it had
  when the job started (every runner's bounded mode), write ``OUT``, finish, and write
  :func:`write_result` with ``job_s``: the seconds of the system's execution call, measured in
  the runner (interpreter, JVM and session start-up outside it).
* With ``--latency``: run the same job unbounded (reading ``IN`` from its beginning) until the
  driver closes the runner's standard input, then stop; ``job_s`` is None. The driver measures
  latency from outside (see ``benchmarks.kafka.__main__``).

A runner that cannot run writes ``unsupported`` (the reason) instead of failing silently.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Distinct keys of the input (``k0`` .. ``k999``).
KEYS = 1_000
PARTITIONS = 4
CHECKPOINT_INTERVAL_S = 1.0
#: Keys of the records the latency driver writes until the job's first output is visible.
WARMUP_KEY = b"warmup"


def parse(value: bytes) -> tuple[bytes, bytes]:
    """``(key, produced ms)`` of an input value (what every Python runner calls per record)."""
    key, produced = value.split(b",")
    return key, produced


def output_value(key: bytes, count: int, produced: bytes | None = None) -> bytes:
    """The output record's value."""
    if produced is None:
        return b"%s,%d" % (key, count)
    return b"%s,%d,%s" % (key, count, produced)


def oracle(records: int, keys: int = KEYS) -> dict[bytes, int]:
    """The final running count of every key after ``records`` input records (record i has key
    ``k<i % keys>``)."""
    base, extra = divmod(records, keys)
    return {b"k%d" % k: base + (1 if k < extra else 0) for k in range(min(keys, records))}


class OutputCheck:
    """Summary of an output topic, fed row by row: per key the number of rows, the largest count
    and the sums of the counts and of their squares (which, with the row count, tell whether
    every update 1..n appears exactly once without keeping all of them)."""

    def __init__(self) -> None:
        self.rows: dict[bytes, list[int]] = {}

    def add(self, key: bytes, count: int) -> None:
        stats = self.rows.get(key)
        if stats is None:
            stats = self.rows[key] = [0, 0, 0, 0]
        stats[0] += 1
        if count > stats[1]:
            stats[1] = count
        stats[2] += count
        stats[3] += count * count

    def verdict(self, expected: dict[bytes, int], check: str) -> tuple[bool, dict[str, Any]]:
        """(ok, summary) against the oracle's final counts ``expected``.

        ``check`` is what the system promises: ``"exactly_once"``: one update per input record
        and each of the counts 1..n of every key exactly once; ``"at_least_once"``: one update
        per input record, the final counts right, duplicates allowed (counted); ``"final"``:
        the final counts right (Spark's SQL aggregation emits one update per key and
        micro-batch, not one per record)."""
        rows = sum(stats[0] for stats in self.rows.values())
        total = sum(expected.values())
        finals_ok = all(self.rows.get(key, [0, 0])[1] == n for key, n in expected.items())
        extra_keys = len(set(self.rows) - set(expected))
        exact = 0
        for key, n in expected.items():
            stats = self.rows.get(key)
            if stats and stats[0] == n and stats[2] == n * (n + 1) // 2 and \
                    stats[3] == n * (n + 1) * (2 * n + 1) // 6:
                exact += 1
        summary: dict[str, Any] = {"rows": rows, "keys": len(self.rows), "final_counts_ok": finals_ok}
        if extra_keys:
            summary["extra_keys"] = extra_keys
        ok = finals_ok and extra_keys == 0
        if check in ("exactly_once", "at_least_once"):
            summary["keys_each_update_once"] = f"{exact}/{len(expected)}"
            summary["duplicates"] = rows - total
            ok = ok and rows >= total
            if check == "exactly_once":
                ok = ok and exact == len(expected) and rows == total
        return ok, summary


# ------------------------------------------------------------------ runner protocol
def runner_arguments(description: str, variants: Iterable[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True, help="input topic")
    parser.add_argument("--sink", required=True, help="output topic")
    variants = list(variants)
    parser.add_argument("--variant", choices=variants, default=variants[0])
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--records", type=int, default=0, help="records in the input topic (informative)")
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--latency", action="store_true",
                        help="run unbounded until standard input closes (the driver measures latency)")
    parser.add_argument("--checkpoint-interval", type=float, default=CHECKPOINT_INTERVAL_S)
    return parser.parse_args()


def stdin_closed() -> threading.Event:
    """An event set once the driver closes this process's standard input (the latency run's stop)."""
    closed = threading.Event()

    def wait() -> None:
        try:
            sys.stdin.read()
        finally:
            closed.set()

    threading.Thread(target=wait, daemon=True).start()
    return closed


def write_result(args: argparse.Namespace, system: str, *, job_s: float | None = None,
                 unsupported: str | None = None, config: dict[str, Any] | None = None,
                 versions: dict[str, str] | None = None) -> None:
    result = {"system": system, "variant": args.variant, "job_s": job_s, "unsupported": unsupported,
              "config": config or {}, "versions": {"python": platform.python_version(), **(versions or {})}}
    args.result.parent.mkdir(parents=True, exist_ok=True)
    args.result.write_text(json.dumps(result))
