"""How far a job's sources are, where they know their size (the progress line and the dashboard).

Two ways a source knows: the records it will produce in all (``Source.size_hint``: a collection,
a generator or sequence with a count), compared with the records the job read; or its splits'
progress in a unit of its own (``Source.progress_unit``: a text file's bytes), which each source
subtask reports with its heartbeats (``source_progress``: done and total; see
``SourceReader.progress``). :func:`vertex_progress` sums a source vertex's subtasks, once every
one of them reported; :func:`job_share` is the job's share read. Positions are absolute (a
restored split seeks to its checkpointed offset), so a restart does not set the share back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SourceVertex:
    """A source vertex whose splits report progress: its id, parallelism and their unit."""

    vertex: int
    parallelism: int
    unit: str


@dataclass(frozen=True)
class SourceProgress:
    """A source vertex's progress over all its subtasks: ``done`` of ``total`` ``unit``."""

    vertex: int
    unit: str
    done: int
    total: int

    @property
    def share(self) -> float:
        return min(self.done / self.total, 1.0) if self.total > 0 else 1.0


def vertex_progress(source: SourceVertex, metrics: dict[int, dict[str, Any]]) -> SourceProgress | None:
    """``source``'s progress from the workers' heartbeat ``metrics``; None until each of its
    subtasks reported some."""
    reports = {key: report for worker in metrics.values() for key, report in (worker.get("subtasks") or {}).items()}
    done = total = 0
    for index in range(source.parallelism):
        found = (reports.get(f"{source.vertex}/{index}") or {}).get("source_progress")
        if found is None:
            return None
        done, total = done + int(found[0]), total + int(found[1])
    return SourceProgress(source.vertex, source.unit, done, total)


def job_share(records_read: int, source_records: int | None, sources: tuple[SourceVertex, ...],
              metrics: dict[int, dict[str, Any]]) -> float | None:
    """The share of its input the job read: ``records_read`` of ``source_records`` where every
    source knows its records; otherwise, where every source vertex reports progress in its own
    unit (``sources``), the mean of their shares; None when neither is known."""
    if source_records:
        return min(records_read / source_records, 1.0)
    if not sources:
        return None
    shares = [vertex_progress(source, metrics) for source in sources]
    if any(s is None for s in shares):
        return None
    return sum(s.share for s in shares if s is not None) / len(shares)
