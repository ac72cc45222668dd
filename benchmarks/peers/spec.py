"""The four peer-benchmark jobs, defined once for every system, and the runner protocol.

This module is imported by every runner, each in its own virtualenv (PyFlink, Bytewax, Spark,
epochal), so it uses the standard library only.

The input
---------
Record ``i`` (``0 <= i < N``) is the text line produced by :func:`make_line`::

    "<i>,k<(i * STRIDE) % keys>,<i % 100>,<event time ms>[,<created ns>]"

* the key walks the key space in a scattered but deterministic order (``STRIDE`` is a prime
  coprime with every key-space size used), so every key is drawn equally often;
* the value is ``i % 100``;
* the event time is ``i * 1000 // EVENTS_PER_SECOND`` ms: the stream advances one event-time
  second every ``EVENTS_PER_SECOND`` records, and is ascending within every source subtask;
* one record in ``LATENCY_SAMPLE_EVERY`` (those with ``i % LATENCY_SAMPLE_EVERY == 0``) also
  carries the wall-clock time at which the source created it (``time.time_ns()``), so the sink
  can measure end-to-end latency on a sample without timing every record.

Every system generates the lines inside its own source (no files, no network), split over its
parallelism, and parses them with :func:`parse_line` (or the equivalent SQL for Spark's
built-in variant).

The jobs
--------
``stateless``  parse -> filter(value < 90) -> map to (key, value * 2, created) -> discard sink
``keyed``      parse -> (key, 1, created) -> key by key -> running sum -> discard sink,
               exactly-once checkpoints every ``CHECKPOINT_INTERVAL_S``
``window``     parse -> (key, event time) -> key by key -> tumbling event-time window of
               ``WINDOW_MS`` -> count per (key, window) -> discard sink, checkpoints as ``keyed``
``keyed_1m``   ``keyed`` with ``LARGE_KEYS`` distinct keys (state size matters)

The "discard" sink of the latency-measured jobs is a sink that drops every record but computes
``now - created`` for the sampled ones: :func:`latency_ms`.

The runner protocol
-------------------
A runner is ``python -m benchmarks.peers.run_<system>`` with the arguments of
:func:`runner_arguments`. It runs ONE job once and writes a JSON result (:func:`write_result`)
with at least ``job_s`` (seconds of the job's execution call, measured inside the runner) and,
where the system can give them, ``latency_ms`` samples and ``checkpoint_ms`` durations. With
``--verify`` it also collects the output and writes its :func:`summarize`-shaped ``summary``,
which the driver compares with :func:`oracle`. A job a system cannot run is reported with
``unsupported`` (the reason) instead of being skipped silently.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STRIDE = 7919
SMALL_KEYS = 10_000
LARGE_KEYS = 1_000_000
EVENTS_PER_SECOND = 100_000
WINDOW_MS = 1_000
LATENCY_SAMPLE_EVERY = 1_000
CHECKPOINT_INTERVAL_S = 1.0
FILTER_BELOW = 90


@dataclass(frozen=True)
class Job:
    """One benchmark job: its key space and whether it checkpoints, windows and measures latency."""

    name: str
    keys: int
    checkpointed: bool
    windowed: bool
    description: str

    @property
    def measures_latency(self) -> bool:
        return not self.windowed


JOBS: dict[str, Job] = {
    "stateless": Job("stateless", SMALL_KEYS, False, False, "parse -> filter -> map -> discard"),
    "keyed": Job("keyed", SMALL_KEYS, True, False, "keyed running count, 10k keys, exactly-once chk 1 s"),
    "window": Job("window", SMALL_KEYS, True, True, "tumbling 1 s event-time window count per key"),
    "keyed_1m": Job("keyed_1m", LARGE_KEYS, True, False, "keyed running count, 1M keys, exactly-once chk 1 s"),
}


def make_line(i: int, keys: int) -> str:
    """Input record ``i`` as a text line; sampled records carry their creation time (ns)."""
    line = f"{i},k{(i * STRIDE) % keys},{i % 100},{i * 1000 // EVENTS_PER_SECOND}"
    if i % LATENCY_SAMPLE_EVERY == 0:
        return f"{line},{time.time_ns()}"
    return line


def parse_line(line: str) -> tuple[str, int, int, int]:
    """``(key, value, event time ms, created ns or 0)`` of an input line."""
    fields = line.split(",")
    return fields[1], int(fields[2]), int(fields[3]), int(fields[4]) if len(fields) > 4 else 0


def latency_ms(created_ns: int) -> float:
    """Milliseconds from a sampled record's creation to now (call it in the sink)."""
    return (time.time_ns() - created_ns) / 1e6


def window_start(event_ms: int) -> int:
    """Start (ms) of the tumbling window an event time belongs to."""
    return event_ms - event_ms % WINDOW_MS


# ------------------------------------------------------------------ verification
def oracle(job: str, records: int) -> dict[str, int]:
    """What a correct run of ``job`` over ``records`` input records must summarise to."""
    spec = JOBS[job]
    if job == "stateless":
        values = [i % 100 for i in range(records) if i % 100 < FILTER_BELOW]
        return {"records": len(values), "value_sum": 2 * sum(values)}
    if spec.windowed:
        windows = {((i * STRIDE) % spec.keys, window_start(i * 1000 // EVENTS_PER_SECOND)) for i in range(records)}
        return {"windows": len(windows), "count_sum": records, "fired_twice": 0}
    return {"keys": min(records, spec.keys), "count_sum": records}


def summarize(job: str, output: Iterable[Any]) -> dict[str, int]:
    """Summary of a run's collected output, comparable with :func:`oracle`.

    ``output`` holds, per job: ``stateless``: ``(key, value * 2, created)``; ``keyed`` and
    ``keyed_1m``: ``(key, running count, ...)`` (running updates; the final count of a key is its
    largest); ``window``: ``(key, window start ms, count)``, one per fired window.
    """
    if job == "stateless":
        rows = list(output)
        return {"records": len(rows), "value_sum": sum(int(row[1]) for row in rows)}
    if JOBS[job].windowed:
        windows: dict[tuple[str, int], int] = {}
        fired_twice = 0
        for key, start, count in output:
            pair = (str(key), int(start))
            fired_twice += pair in windows
            windows[pair] = windows.get(pair, 0) + int(count)
        return {"windows": len(windows), "count_sum": sum(windows.values()), "fired_twice": fired_twice}
    final: dict[str, int] = {}
    for row in output:
        key, count = str(row[0]), int(row[1])
        if count > final.get(key, 0):
            final[key] = count
    return {"keys": len(final), "count_sum": sum(final.values())}


# ------------------------------------------------------------------ runner protocol
def runner_arguments(description: str, variants: Iterable[str]) -> argparse.Namespace:
    """Parse the arguments every runner takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--job", choices=sorted(JOBS), required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    variants = list(variants)
    parser.add_argument("--variant", choices=variants, default=variants[0])
    parser.add_argument("--work-dir", type=Path, required=True,
                        help="empty directory for checkpoints, recovery databases and scratch files")
    parser.add_argument("--result", type=Path, required=True, help="where to write the JSON result")
    parser.add_argument("--verify", action="store_true",
                        help="collect the output and write its summary (small runs only)")
    parser.add_argument("--checkpoint-interval", type=float, default=CHECKPOINT_INTERVAL_S)
    return parser.parse_args()


def write_result(args: argparse.Namespace, system: str, *, job_s: float | None = None,
                 latency: list[float] | None = None, checkpoint_ms: list[float] | None = None,
                 summary: dict[str, int] | None = None, unsupported: str | None = None,
                 config: dict[str, Any] | None = None, versions: dict[str, str] | None = None) -> None:
    """Write a runner's JSON result to ``args.result``."""
    result = {
        "system": system, "variant": args.variant, "job": args.job, "records": args.records,
        "parallelism": args.parallelism, "job_s": job_s, "latency_ms": latency,
        "checkpoint_ms": checkpoint_ms, "summary": summary, "unsupported": unsupported,
        "config": config or {}, "versions": {"python": platform.python_version(), **(versions or {})},
    }
    args.result.parent.mkdir(parents=True, exist_ok=True)
    args.result.write_text(json.dumps(result))
