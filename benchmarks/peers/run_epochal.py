"""epochal's side of the peer benchmarks: the four jobs of :mod:`benchmarks.peers.spec`.

Configuration (the defaults a user gets, nothing tuned for the benchmark):

* Spark ``local[P]``; one worker per subtask slot, ``P = --parallelism``; batch size 1024.
* Checkpointed jobs: ``enable_checkpointing(1 s, "exactly_once")`` into ``--work-dir`` on the local
  file system (aligned asynchronous barrier snapshots, heap keyed state).
* Source: ``from_generator(lambda i: make_line(i, keys), count=N)`` (subtask j generates
  i = j, j+P, ...).
* The running count is ``key_by(key).reduce(...)``, the user function Flink's ``reduce`` takes;
  the window job is ``with_watermarks`` (ascending event times) and ``window(1000).count()``.
* The sink drops records and samples the latency of records that carry a creation time; each
  subtask writes its samples to a file in the work directory.

``job_s`` is the wall time of ``env.execute``: it contains epochal's per-job start-up (planning,
shipping the job to Spark, worker registration), which the driver measures with a tiny run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import epochal
from benchmarks.peers import spec
from epochal.connectors.base import Sink, SinkContext, SinkWriter


class _LatencyWriter(SinkWriter):
    def __init__(self, path: Path, index: int) -> None:
        self.path = path / f"latency-{index}.json"
        self.samples: list[float] = []

    def write_batch(self, records: list[Any]) -> None:
        samples = self.samples
        for record in records:
            created = record[-1]
            if created:
                samples.append(spec.latency_ms(created))

    def flush(self) -> None:
        self.path.write_text(json.dumps(self.samples))


class LatencySamplingDiscardSink(Sink):
    """Drops every record; keeps ``now - created`` of the sampled ones (the last field)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def create_writer(self, context: SinkContext) -> SinkWriter:
        return _LatencyWriter(self.directory, context.subtask_index)


def _keep(row: tuple[str, int, int, int]) -> bool:
    return row[1] < spec.FILTER_BELOW


def _doubled(row: tuple[str, int, int, int]) -> tuple[str, int, int]:
    return (row[0], row[1] * 2, row[3])


def _one(row: tuple[str, int, int, int]) -> tuple[str, int, int]:
    return (row[0], 1, row[3])


def _key(row: tuple[Any, ...]) -> Any:
    return row[0]


def _event_time(row: tuple[str, int]) -> int:
    return row[1]


def _add_counts(acc: tuple[str, int, int], row: tuple[str, int, int]) -> tuple[str, int, int]:
    return (acc[0], acc[1] + row[1], row[2])


def running_counts(parsed: epochal.DataStream) -> epochal.DataStream:
    """The ``keyed`` jobs after their parse: ``(key, 1, created)`` -> key by key -> a running count
    (``(key, count, created)`` per record)."""
    return parsed.map(_one).key_by(_key).reduce(_add_counts)


def build(env: epochal.Environment, job: str, records: int, sink: Sink | None) -> epochal.DataStream | None:
    """The job's dataflow; returns the collected stream when ``sink`` is None (``--verify``)."""
    keys = spec.JOBS[job].keys
    make_line = spec.make_line

    def line(i: int) -> str:  # a plain closure: functools.partial with a keyword costs ~90 ns more per call
        return make_line(i, keys)

    parsed = env.from_generator(line, count=records).map(spec.parse_line)
    if job == "stateless":
        out = parsed.filter(_keep).map(_doubled)
    elif job == "window":
        out = (parsed.map(lambda row: (row[0], row[2])).with_watermarks(_event_time)
               .key_by(_key).window(spec.WINDOW_MS, timestamp=_event_time).count())
    else:
        out = running_counts(parsed)
    if sink is None:
        return out.collect()
    out.sink_to(sink)
    return None


def run(system: str, description: str, build: Callable[..., Any], make_sink: Callable[[Path], Sink],
        config: Callable[[epochal.Environment], dict[str, Any]], versions: dict[str, str]) -> None:
    """A runner's whole life: parse the arguments, build the job (``build(env, job, records,
    sink)``; the sink is None with ``--verify``), time ``env.execute`` with Spark already started,
    and write the result with the sampled latencies, the checkpoints and ``config(env)``."""
    args = spec.runner_arguments(description, ["default"])
    job = spec.JOBS[args.job]
    args.work_dir.mkdir(parents=True, exist_ok=True)
    env = epochal.Environment(parallelism=args.parallelism)
    if job.checkpointed:
        env.enable_checkpointing(args.checkpoint_interval, "exactly_once",
                                 storage=str(args.work_dir / "checkpoints"))
    sink = None if args.verify else make_sink(args.work_dir)
    collected = build(env, args.job, args.records, sink)
    env.spark  # start Spark before the timed region: its JVM start is process start-up  # noqa: B018
    started = time.perf_counter()
    result = env.execute(f"peers {args.job} {system} n={args.records}")
    job_s = time.perf_counter() - started
    latency = None
    if job.measures_latency and sink is not None:
        latency = [s for f in sorted(args.work_dir.glob("latency-*.json")) for s in json.loads(f.read_text())]
    checkpoint_ms = [c["duration_s"] * 1000 for c in result.checkpoints if c["status"] == "completed"]
    summary = spec.summarize(args.job, collected.get()) if collected is not None else None
    spec.write_result(args, system, job_s=job_s, latency=latency,
                      checkpoint_ms=checkpoint_ms if job.checkpointed else None, summary=summary,
                      config={**config(env), "checkpoints": len(checkpoint_ms)},
                      versions={"epochal": version("epochal"), "pyspark": version("pyspark"), **versions})


def main() -> None:
    run("epochal", __doc__.splitlines()[0], build, LatencySamplingDiscardSink,
        lambda env: {"batch_size": env.config.batch_size}, {})


if __name__ == "__main__":
    main()
