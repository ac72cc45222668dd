"""What the JobMasters of served jobs report, read into the REST API's models.

Every read goes through the JobMaster's query methods, which take its lock for as long as it
takes to copy what they return (a worker's metrics dict is replaced whole with each heartbeat,
never changed in place), or is a single reference to an immutable value (status, attempt): a
request never holds the JobMaster up for longer than a copy.
"""

from __future__ import annotations

import math
import time
from typing import Any, Literal

from epochal.control.savepoints import SavepointStatus
from epochal.rest.directory import ServedJob
from epochal.rest.models import (
    Backpressure,
    Checkpoint,
    CheckpointCounts,
    CheckpointList,
    CheckpointSummary,
    JobDetails,
    JobOverview,
    OperatorMetrics,
    QueryableRoutes,
    QueryableStateRoute,
    Restart,
    SavepointReport,
    Spread,
    SubtaskMetrics,
    Vertex,
    VertexList,
)
from epochal.rest.state_routes import routes_of


# ---------------------------------------------------------------------- jobs
def overview(served: ServedJob) -> JobOverview:
    return JobOverview(**_overview_fields(served))


def _overview_fields(served: ServedJob) -> dict[str, Any]:
    jm = served.jobmaster
    done = jm.done.is_set()
    duration = (jm.ended_at if done else time.monotonic()) - jm.started_at if jm.started_at else 0.0
    return {"id": jm.job_id, "name": jm.job_name, "kind": served.outline.kind, "status": jm.status,
            "attempt": jm.attempt, "parallelism": served.outline.parallelism, "workers": jm.num_workers,
            "start_time": jm.start_time, "end_time": jm.start_time + duration if done else None,
            "duration_s": max(duration, 0.0), "restarts": len(jm.restart_history())}


def details(served: ServedJob) -> JobDetails:
    jm = served.jobmaster
    checkpoint_path, savepoint_dir, records_base = jm.query(
        lambda kind: (kind.checkpoint_path, kind.default_savepoint_dir, kind.records_base))
    error = jm.error
    read = records_base + sum(m.get("source_records", 0) for m in jm.snapshot_metrics().values())
    history = [Restart(attempt=r["attempt"], cause=str(r["cause"]), recovered_s=_finite(r.get("recovered_s")),
                       resumed_s=_finite(r.get("resumed_s"))) for r in jm.restart_history()]
    return JobDetails(**_overview_fields(served), error=str(error).splitlines()[0] if error is not None else None,
                      checkpoint_path=checkpoint_path or None, savepoint_directory=savepoint_dir or None,
                      records_read=int(read), restart_history=history)


# ---------------------------------------------------------------------- vertices
def vertices(served: ServedJob) -> VertexList:
    """Each vertex of the outline with what its subtasks last reported (workers' metrics
    ``subtasks``: ``"<vertex id>/<index>"`` -> watermark, backpressured, operators' records)."""
    reports: dict[str, tuple[int, dict[str, Any]]] = {}
    for worker, metrics in served.jobmaster.snapshot_metrics().items():
        for key, report in (metrics.get("subtasks") or {}).items():
            reports[key] = (worker, report)
    return VertexList(job_id=served.job_id, vertices=[_vertex(v, reports) for v in served.outline.vertices])


def _vertex(outline: Any, reports: dict[str, tuple[int, dict[str, Any]]]) -> Vertex:
    uids = [o.uid for o in outline.operators]
    totals = {uid: [0, 0] for uid in uids}
    subtasks = []
    for index in range(outline.parallelism):
        found = reports.get(f"{outline.id}/{index}")
        if found is None:
            continue
        worker, report = found
        counts = report.get("operators") or {}
        for uid, (records_in, records_out) in counts.items():
            if uid in totals:
                totals[uid][0] += int(records_in)
                totals[uid][1] += int(records_out)
        first = counts.get(uids[0], (0, 0)) if uids else (0, 0)
        last = counts.get(uids[-1], (0, 0)) if uids else (0, 0)
        subtasks.append(SubtaskMetrics(index=index, worker=worker, records_in=int(first[0]),
                                       records_out=int(last[1]), watermark=_finite(report.get("watermark")),
                                       backpressured=bool(report.get("backpressured"))))
    watermarks = [s.watermark for s in subtasks if s.watermark is not None]
    every_subtask = len(watermarks) == outline.parallelism > 0
    return Vertex(id=outline.id, name=outline.name, parallelism=outline.parallelism,
                  records_in=sum(s.records_in for s in subtasks), records_out=sum(s.records_out for s in subtasks),
                  watermark=min(watermarks) if every_subtask else None,
                  backpressure=_backpressure(subtasks, outline.parallelism),
                  operators=[OperatorMetrics(uid=o.uid, name=o.name, records_in=totals[o.uid][0],
                                             records_out=totals[o.uid][1]) for o in outline.operators],
                  subtasks=subtasks)


def _backpressure(subtasks: list[SubtaskMetrics], parallelism: int) -> Backpressure:
    if not subtasks:
        return Backpressure(level="unknown", ratio=None)
    ratio = sum(s.backpressured for s in subtasks) / len(subtasks)
    return Backpressure(level="ok" if ratio <= 0.1 else "low" if ratio <= 0.5 else "high", ratio=ratio)


# ---------------------------------------------------------------------- checkpoints
def checkpoints(served: ServedJob, history: int) -> CheckpointList:
    """Counts and the summary over every checkpoint that ended (read from the plain entries, so a
    long history costs little); models are built only for the latest ones and the ``history``
    newest."""
    jm = served.jobmaster
    stats, path = jm.query(lambda kind: (kind.checkpoint_stats(), kind.checkpoint_path))
    completed = [e for e in stats if e["status"] == "completed"]
    savepoints = [e for e in completed if e.get("savepoint")]

    def latest(found: list[dict[str, Any]]) -> Checkpoint | None:
        newest = max(found, key=lambda e: e["checkpoint_id"], default=None)
        return None if newest is None else _checkpoint(newest)

    return CheckpointList(
        job_id=served.job_id, checkpoint_path=path or None,
        counts=CheckpointCounts(total=len(stats), completed=len(completed), failed=len(stats) - len(completed),
                                savepoints=len(savepoints)),
        summary=CheckpointSummary(**{name: _spread([_finite(e.get(name)) for e in completed])
                                     for name in ("duration_s", "bytes", "alignment_s_max")}),
        latest_completed=latest([e for e in completed if not e.get("savepoint")]),
        latest_failed=latest([e for e in stats if e["status"] != "completed"]),
        latest_savepoint=latest(savepoints),
        history=[_checkpoint(e) for e in stats[::-1][:history]])


def _checkpoint(entry: dict[str, Any]) -> Checkpoint:
    def number(name: str) -> float | None:
        return _finite(entry.get(name))

    def count(name: str) -> int | None:
        value = entry.get(name)
        return int(value) if isinstance(value, int | float) and math.isfinite(value) else None

    status: Literal["completed", "aborted"] = "completed" if entry["status"] == "completed" else "aborted"
    return Checkpoint(id=int(entry["checkpoint_id"]), status=status,
                      savepoint=entry.get("savepoint") or None, trigger_time=number("trigger_time") or 0.0,
                      duration_s=number("duration_s") or 0.0, bytes=count("bytes"),
                      alignment_s_max=number("alignment_s_max"), sync_s_max=number("sync_s_max"),
                      async_s_max=number("async_s_max"), alignment_buffered_bytes=count("alignment_buffered_bytes"),
                      alignment_spilled_bytes=count("alignment_spilled_bytes"),
                      reason=str(entry["reason"]) if entry.get("reason") is not None else None)


def _spread(values: list[Any]) -> Spread:
    known = [float(v) for v in values if v is not None]
    if not known:
        return Spread(min=None, avg=None, max=None)
    return Spread(min=min(known), avg=sum(known) / len(known), max=max(known))


# ---------------------------------------------------------------------- savepoints
def savepoint_report(status: SavepointStatus) -> SavepointReport:
    return SavepointReport(request_id=status.request_id, status=status.status,  # type: ignore[arg-type]
                           location=status.location, format=status.format, stop=status.stop, drain=status.drain,
                           error=status.error, requested_at=status.requested_at,
                           ended_at=status.ended_at)


def _finite(value: Any) -> float | None:
    """``value`` as a float, or None when it is none, not a number, or not finite (JSON has no
    infinity; a watermark not yet set is minus infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


# ---------------------------------------------------------------------- queryable state
def queryable_routes(served: ServedJob) -> QueryableRoutes:
    """Where each queryable state of the job is served (:func:`epochal.rest.state_routes.routes_of`)."""
    document = routes_of(served.jobmaster)
    return QueryableRoutes(**{**document, "states": {name: QueryableStateRoute(**route)
                                                     for name, route in document["states"].items()}})
