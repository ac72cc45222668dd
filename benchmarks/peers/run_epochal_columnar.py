"""epochal's batch API (``epochal-columnar``) on the four jobs of :mod:`benchmarks.peers.spec`.

The same jobs as ``run_epochal``, written with batch streams (docs/columnar.md), the way Spark's
built-in variant writes them with SQL expressions. Configuration (defaults, nothing tuned):

* Spark ``local[P]``, one worker per subtask slot; checkpointed jobs
  ``enable_checkpointing(1 s, "exactly_once")`` into ``--work-dir`` (heap keyed state).
* Source: ``from_batches(make_batch, count=ceil(N / ROWS))``: batch ``b`` holds the text lines of
  records ``b * ROWS .. (b + 1) * ROWS - 1`` exactly as :func:`spec.make_line` writes them
  (sampled records carry their creation time), generated in vectorised code, as Spark's
  built-in variant generates its own lines in the JVM: ``i`` and the event time are cast to text
  by Arrow; the key ``k<n>`` and the value are taken from tables of their texts made once per
  process (the text of ``(i * 7919) % keys`` is one of ``keys`` strings).
* Parse: ``map_batches`` splitting the lines with Arrow (``split_pattern``) and casting the
  fields each job reads (Spark's built-in variant also reads only those).
* stateless: ``filter_batches(value < 90)`` -> ``map_batches(value * 2)``; keyed jobs:
  ``key_by("key").agg(count=("key", "count"), created=("created", "last"))``; window:
  ``with_watermarks("event_ms")`` -> ``key_by("key").window(1000).agg(count=...)``.
* The sink takes the batches as they are and samples the latency of records that carry a
  creation time: a sampled creation time is measured the first time the output shows it (a
  running ``last`` keeps showing it on later updates of the key, which are not measured again).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import epochal
from benchmarks.peers import spec
from benchmarks.peers.run_epochal import run
from epochal.connectors.base import Sink, SinkContext, SinkWriter

#: rows per generated record batch
ROWS = 65_536

_TEXTS: dict[int, pa.Array] = {}


def _texts(count: int) -> pa.Array:
    """The decimal texts of 0 .. count - 1, made once per process."""
    texts = _TEXTS.get(count)
    if texts is None:
        texts = _TEXTS[count] = pc.cast(pa.array(np.arange(count, dtype=np.int64)), pa.string())
    return texts


def make_batch(batch: int, records: int, keys: int) -> pa.RecordBatch:
    """The lines of records ``batch * ROWS`` up to ``records`` (exclusive), as spec.make_line."""
    index = np.arange(batch * ROWS, min((batch + 1) * ROWS, records), dtype=np.int64)
    key_texts = _key_texts(keys)
    event_ms = index * 1000 // spec.EVENTS_PER_SECOND
    first = int(event_ms[0]) if len(index) else 0
    events = pc.cast(pa.array(np.arange(first, int(event_ms[-1]) + 1 if len(index) else first)), pa.string())
    lines = pc.binary_join_element_wise(
        pc.cast(pa.array(index), pa.string()),
        key_texts.take(pa.array((index * spec.STRIDE) % keys)),
        _texts(100).take(pa.array(index % 100)),
        events.take(pa.array(event_ms - first)),
        ",")
    sampled = pa.array(index % spec.LATENCY_SAMPLE_EVERY == 0)
    if pc.any(sampled).as_py():  # one record in 1,000 carries its creation time (ns)
        stamped = pc.binary_join_element_wise(lines.filter(sampled), str(time.time_ns()), ",")
        lines = pc.replace_with_mask(lines, sampled, stamped)
    return pa.RecordBatch.from_arrays([lines], names=["line"])


_KEYS: dict[int, pa.Array] = {}


def _key_texts(keys: int) -> pa.Array:
    texts = _KEYS.get(keys)
    if texts is None:
        texts = _KEYS[keys] = pc.binary_join_element_wise("k", _texts(keys), "")
    return texts


def parse(fields: tuple[str, ...]) -> Any:
    """A ``map_batches`` function: the lines' ``fields`` (key, value, event_ms, created) as columns."""
    positions = {"key": 1, "value": 2, "event_ms": 3}

    def parse_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
        parts = pc.split_pattern(batch.column(0), ",")
        columns, names = [], []
        for name in fields:
            if name == "created":  # only sampled lines have a fifth field
                sampled = pc.equal(pc.list_value_length(parts), 5)
                stamps = pc.cast(pc.list_element(parts.filter(sampled), 4), pa.int64())
                columns.append(pc.replace_with_mask(pa.nulls(len(parts), pa.int64()), sampled, stamps))
            else:
                column = pc.list_element(parts, positions[name])
                columns.append(column if name == "key" else pc.cast(column, pa.int64()))
            names.append(name)
        return pa.RecordBatch.from_arrays(columns, names=names)
    return parse_batch


class _LatencyWriter(SinkWriter):
    def __init__(self, path: Path, index: int) -> None:
        self.path = path / f"latency-{index}.json"
        self.samples: list[float] = []
        self.seen: set[int] = set()

    def write_batch(self, records: list[Any]) -> None:
        now = time.time_ns()
        for batch in records:
            if "created" not in batch.schema.names:
                continue
            created = batch.column("created").drop_null().unique().to_pylist()
            fresh = [c for c in created if c not in self.seen]
            self.seen.update(fresh)
            self.samples += [(now - c) / 1e6 for c in fresh]

    def flush(self) -> None:
        self.path.write_text(json.dumps(self.samples))


class LatencySamplingBatchSink(Sink):
    """Drops every batch; keeps ``now - created`` of the sampled records, once each."""

    accepts_batches = True

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def create_writer(self, context: SinkContext) -> SinkWriter:
        return _LatencyWriter(self.directory, context.subtask_index)


def keep(batch: pa.RecordBatch) -> Any:
    return pc.less(batch.column("value"), spec.FILTER_BELOW)


def doubled(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.set_column(1, "value2", pc.multiply(batch.column("value"), 2))


def build(env: epochal.Environment, job: str, records: int, sink: Sink | None) -> Any:
    """The job's dataflow; returns the collected rows when ``sink`` is None (``--verify``)."""
    keys = spec.JOBS[job].keys
    batches = -(-records // ROWS)

    def generate(batch: int) -> pa.RecordBatch:
        return make_batch(batch, records, keys)

    source = env.from_batches(generate, count=batches)
    if job == "stateless":
        out = source.map_batches(parse(("key", "value", "created"))).filter_batches(keep).map_batches(doubled)
    elif job == "window":
        out = (source.map_batches(parse(("key", "event_ms"))).with_watermarks("event_ms")
               .key_by("key").window(spec.WINDOW_MS).agg(count=("key", "count"))
               .map_batches(lambda b: b.drop_columns(["window_end"])))
    else:
        out = source.map_batches(parse(("key", "created"))).key_by("key").agg(count=("key", "count"),
                                                                              created=("created", "last"))
    if sink is None:
        return out.rows().collect()
    out.sink_to(sink)
    return None


def main() -> None:
    run("epochal-columnar", __doc__.splitlines()[0], build, LatencySamplingBatchSink,
        lambda env: {"rows_per_batch": ROWS}, {"pyarrow": pa.__version__})


if __name__ == "__main__":
    main()
