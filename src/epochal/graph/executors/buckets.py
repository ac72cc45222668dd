"""Stage 1 of loading on the executors: one Spark task per split sends its rows to their home workers.

A vertex's *home* is the worker ``mix64(id) % W`` (the hash partitioner's owner). A task reads its
split (:func:`~epochal.graph.executors.sources.read_split`), checks the weights it holds (the first
non-finite and the first negative one, by position), and writes one bucket file per home worker
into the staging directory: ``v-<split>-<w>`` (vertex ids, positions, properties) and
``e-<split>-<w>`` (every edge with an endpoint homed at ``w``: sources, destinations, weights,
positions; an edge whose endpoints share a home is written once). It returns a
:class:`SplitReport` of counts and first problems: nothing of the graph goes back to the driver.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np

from epochal.filesystems import join, resolve
from epochal.graph.executors.sources import read_split
from epochal.graph.executors.splits import Split, SplitColumns, SplitProblem
from epochal.graph.placement import mix64


@dataclass(frozen=True)
class BucketPlan:
    """What every stage-1 task needs besides its split."""

    staging: str
    num_workers: int
    weight_column: str | None = None
    property_columns: tuple[str, ...] = ()


@dataclass
class EdgeNote:
    """One edge named in a report: its position, endpoints and weight."""

    pos: int
    src: int
    dst: int
    weight: float


@dataclass
class SplitReport:
    """What a stage-1 task tells the driver about its split."""

    index: int
    what: str
    rows: int
    lines: int
    problem: SplitProblem | None = None
    non_finite: EdgeNote | None = None
    negative: EdgeNote | None = None
    bytes_written: int = 0


def put(uri: str, value: Any) -> int:
    """Write ``value`` (arrays in containers) to ``uri``; returns the bytes written."""
    data = pickle.dumps(value, protocol=5)
    fs, path = resolve(uri)
    with fs.open_output_stream(path, compression=None) as out:
        out.write(data)
    return len(data)


def get(uri: str) -> Any:
    fs, path = resolve(uri)
    with fs.open_input_stream(path, compression=None) as source:
        return pickle.loads(source.read())


def home_of(ids: np.ndarray, num_workers: int) -> np.ndarray:
    """The home worker of each id (the hash partitioner's owner)."""
    return (mix64(ids) % np.uint64(num_workers)).astype(np.int32)


def bucket_name(what: str, split: int, worker: int) -> str:
    return f"{what[0]}-{split:06d}-{worker:05d}"


def _first(mask: np.ndarray, columns: dict[str, np.ndarray], pos: np.ndarray) -> EdgeNote | None:
    if not mask.any():
        return None
    i = int(np.argmax(mask))
    return EdgeNote(int(pos[i]), int(columns["src"][i]), int(columns["dst"][i]), float(columns["weight"][i]))


def bucket_columns(data: SplitColumns, split: int, what: str, plan: BucketPlan) -> SplitReport:
    """Write the bucket files of one read split and report on it."""
    report = SplitReport(split, what, int(data.pos.size), data.lines, data.problem)
    if data.problem is not None:
        return report
    w_count = plan.num_workers
    if what == "vertex":
        home = home_of(data.columns["id"], w_count)
        for worker in range(w_count):
            mine = home == worker
            if mine.any():
                report.bytes_written += put(join(plan.staging, bucket_name("vertex", split, worker)),
                                            {"pos": data.pos[mine], **{k: v[mine] for k, v in data.columns.items()}})
        return report
    src, dst = data.columns["src"], data.columns["dst"]
    weight = data.columns.get("weight")
    if weight is not None and weight.size:
        report.non_finite = _first(~np.isfinite(weight), data.columns, data.pos)
        report.negative = _first(weight < 0, data.columns, data.pos)
    home_s, home_d = home_of(src, w_count), home_of(dst, w_count)
    for worker in range(w_count):
        mine = (home_s == worker) | (home_d == worker)
        if mine.any():
            report.bytes_written += put(join(plan.staging, bucket_name("edge", split, worker)),
                                        {"pos": data.pos[mine], **{k: v[mine] for k, v in data.columns.items()}})
    return report


def bucket_split(split: Split, plan: BucketPlan) -> SplitReport:
    """Stage 1 for a file split (the body of one Spark task)."""
    data = read_split(split, plan.weight_column, plan.property_columns)
    return bucket_columns(data, split.index, split.what, plan)
