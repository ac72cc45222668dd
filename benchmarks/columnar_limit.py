"""The physical limit of the batch API's peer jobs on this machine: the same kernels on the same
data in one process, with no engine around them, stage by stage.

For each job of :mod:`benchmarks.peers.spec` it times, over the batches ``epochal-columnar``
generates (:mod:`benchmarks.peers.run_epochal_columnar`), on one core:

* ``generate``: making the batch of text lines (Arrow casts, takes, joins);
* ``parse``: splitting the lines and casting the fields the job reads;
* ``exchange``: the keyed exchange's key groups and split by subtask (2 consumers);
* ``operator``: the job's operators as epochal runs them (filter/map, keyed aggregate, window),
  driven by the operator harness in this process (state in heap dicts);
* ``kernels``: the pure Arrow work of the operator (``filter`` + ``multiply``; ``group_by`` with
  count; with the 1M key space the same), without keyed state: the floor of any columnar engine.

It writes ``columnar_limit.csv`` and ``columnar_limit.png`` (rows/s per stage and the per-core
rate of the whole chain generate + parse + exchange + operator) into ``--out``. The per-core
chain rate times the cores is the most a job of the peer benchmark can reach here; the peers
table's ``epochal-columnar`` row divided by it is the engine's share.

    python -m benchmarks.columnar_limit [--batches 40] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.common.results import BLUE, RED, RESULTS, machine, pyplot, save_figure, write_csv
from benchmarks.peers import run_epochal_columnar as columnar
from benchmarks.peers import spec
from epochal.plan.column_keygroups import ColumnKeys, KeyGroupBatchPartitioner
from epochal.runtime.columnar.aggregates import parse_aggregates
from epochal.runtime.columnar.keyed import KeyedAggregateOperator, WindowAggregateOperator
from epochal.runtime.columnar.operators import ColumnTimestamps, FilterBatchesOperator, MapBatchesOperator
from epochal.testing import OperatorHarness

STAGES = ("generate", "parse", "exchange", "operator", "kernels")


def timed(batches: list[Any], step: Callable[[Any], Any], repeats: int = 3) -> tuple[float, list[Any]]:
    """Seconds per batch of ``step`` over ``batches`` (best of ``repeats`` passes), and its outputs."""
    best, outputs = float("inf"), []
    for _ in range(repeats):
        started = time.perf_counter()
        outputs = [step(batch) for batch in batches]
        best = min(best, (time.perf_counter() - started) / len(batches))
    return best, outputs


def operator_of(job: str) -> tuple[Any, Any]:
    """The job's operators (a harness step) and its pure-kernel equivalent."""
    if job == "stateless":
        filtered = OperatorHarness(FilterBatchesOperator(columnar.keep))
        doubled = OperatorHarness(MapBatchesOperator(columnar.doubled))
        return (lambda b: doubled.process(*filtered.process(b)),
                lambda b: columnar.doubled(b.filter(columnar.keep(b))))
    aggregates = parse_aggregates({"count": ("key", "count")}, "agg")
    if job == "window":
        harness = OperatorHarness(WindowAggregateOperator(["key"], aggregates, spec.WINDOW_MS, None,
                                                          ColumnTimestamps("event_ms")))

        def window(b: pa.RecordBatch) -> Any:
            out = harness.process(b)
            return out + harness.watermark(pc.max(b.column("event_ms")).as_py() - 1)
        return window, lambda b: pa.Table.from_batches([b]).group_by(["key"]).aggregate([("key", "count")])
    harness = OperatorHarness(KeyedAggregateOperator(["key"], parse_aggregates(
        {"count": ("key", "count"), "created": ("created", "last")}, "agg")))
    return (lambda b: harness.process(b),
            lambda b: pa.Table.from_batches([b]).group_by(["key"], use_threads=False).aggregate(
                [("key", "count"), ("created", "last")]))


def measure(job: str, batches: int) -> dict[str, float]:
    """Rows per second of each stage of ``job`` on one core."""
    keys = spec.JOBS[job].keys
    records = batches * columnar.ROWS
    fields = {"stateless": ("key", "value", "created"), "window": ("key", "event_ms")}.get(job, ("key", "created"))
    generate_s, lines = timed(list(range(batches)), lambda i: columnar.make_batch(i, records, keys))
    parse = columnar.parse(fields)
    parse_s, parsed = timed(lines, parse)
    rates = {"generate": columnar.ROWS / generate_s, "parse": columnar.ROWS / parse_s}
    step, kernels = operator_of(job)
    if job == "stateless":
        exchange_s, inputs = 0.0, parsed
    else:
        partitioner = KeyGroupBatchPartitioner(ColumnKeys(["key"]), 128)
        exchange_s, _ = timed(parsed, lambda b: partitioner.split([b], 2))
        inputs = parsed
        rates["exchange"] = columnar.ROWS / exchange_s
    operator_s, _ = timed(inputs, step, repeats=1)
    kernels_s, _ = timed(inputs, kernels)
    rates["operator"] = columnar.ROWS / operator_s
    rates["kernels"] = columnar.ROWS / kernels_s
    rates["chain"] = columnar.ROWS / (generate_s + parse_s + exchange_s + operator_s)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--jobs", nargs="+", default=list(spec.JOBS), choices=list(spec.JOBS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for job in args.jobs:
        rates = measure(job, args.batches)
        rows.append({"job": job, **{f"{stage}_rows_per_s": rate for stage, rate in rates.items()}})
        print(f"{job:10s} " + "  ".join(f"{stage} {rate / 1e6:6.2f}M" for stage, rate in rates.items()))
    write_csv(args.out / "columnar_limit.csv", rows)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(rows), figsize=(3.6 * len(rows), 4), squeeze=False)
    for ax, row in zip(axes[0], rows, strict=True):
        stages = [s for s in (*STAGES, "chain") if f"{s}_rows_per_s" in row]
        values = [row[f"{s}_rows_per_s"] / 1e6 for s in stages]
        ax.bar(stages, values, color=[RED if s == "chain" else BLUE for s in stages])
        ax.set_title(row["job"], fontsize=10)
        ax.tick_params(axis="x", rotation=35, labelsize=8)
    axes[0][0].set_ylabel("M rows/s on one core")
    fig.suptitle(f"batch API: each stage alone, one process ({machine()})", fontsize=9)
    save_figure(fig, args.out / "columnar_limit.png")


if __name__ == "__main__":
    main()
