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

from epochal.control.kinds import checkpoints_of
from epochal.control.savepoints import SavepointStatus
from epochal.control.source_progress import SourceVertex, vertex_progress
from epochal.rest.directory import ServedJob
from epochal.rest.models import (
    Backpressure,
    Checkpoint,
    CheckpointCounts,
    CheckpointList,
    CheckpointSummary,
    JobDetails,
    JobOverview,
    JobPlan,
    KindMetric,
    KindTable,
    KindTables,
    OperatorMetrics,
    PlanEdge,
    PlanOperator,
    PlanVertex,
    QueryableRoutes,
    QueryableStateRoute,
    Restart,
    SavepointReport,
    SourceProgress,
    Spread,
    SubtaskMetrics,
    Vertex,
    VertexList,
)
from epochal.rest.rates import Reading
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
    checkpoint_path, savepoint_dir, records_base, takes_savepoints = jm.query(
        lambda kind: (checkpoints_of(kind).checkpoint_path, checkpoints_of(kind).default_savepoint_dir,
                      checkpoints_of(kind).records_base, kind.takes_savepoints))
    error = jm.error
    metrics = jm.snapshot_metrics()
    read = records_base + sum(m.get("source_records", 0) for m in metrics.values())
    history = [restart(r, jm.start_time - jm.started_at) for r in jm.restart_history()]
    own = jm.query(lambda kind: kind.kind_metrics(metrics))
    return JobDetails(**_overview_fields(served), error=str(error).splitlines()[0] if error is not None else None,
                      checkpoint_path=checkpoint_path or None, savepoint_directory=savepoint_dir or None,
                      takes_savepoints=takes_savepoints,
                      records_read=int(read), restart_history=history,
                      kind_metrics=[KindMetric(name=m.name, kind=m.kind, labels=dict(m.labels),  # type: ignore[arg-type]
                                               value=m.value) for m in own])


def restart(entry: dict[str, Any], wall_minus_monotonic: float) -> Restart:
    """A restart history entry (``RestartMachine.restarts``) as the API shows it; its detection
    time (the JobMaster's monotonic clock) moved to the wall clock."""
    detected = _finite(entry.get("detected"))
    return Restart(attempt=entry["attempt"], cause=str(entry["cause"]), message=entry.get("message"),
                   category=entry.get("category") or None,
                   time=detected + wall_minus_monotonic if detected else None,
                   recovered_s=_finite(entry.get("recovered_s")), resumed_s=_finite(entry.get("resumed_s")))


# ---------------------------------------------------------------------- the plan
def plan(served: ServedJob) -> JobPlan:
    shape = served.outline
    return JobPlan(job_id=served.job_id, kind=shape.kind, source_records=shape.source_records,
                   vertices=[PlanVertex(id=v.id, name=v.name, parallelism=v.parallelism,
                                        operators=[PlanOperator(uid=o.uid, name=o.name) for o in v.operators])
                             for v in shape.vertices],
                   edges=[PlanEdge(source=e.source, target=e.target, partitioning=e.partitioning,
                                   back_edge=e.back_edge, side_output=e.side_output) for e in shape.edges])


def kind_tables(served: ServedJob) -> KindTables:
    """The job kind's own tables (``KindCoordinator.tables``), non-finite numbers as None."""
    metrics = served.jobmaster.snapshot_metrics()
    tables = served.jobmaster.query(lambda kind: kind.tables(metrics))
    return KindTables(job_id=served.job_id, kind=served.outline.kind, tables=[
        KindTable(title=t.title, columns=list(t.columns),
                  rows=[[_finite(v) if isinstance(v, float) else v for v in row] for row in t.rows])
        for t in tables])


# ---------------------------------------------------------------------- vertices
def subtask_reports(served: ServedJob) -> dict[str, tuple[int, int, float, dict[str, Any]]]:
    """``"<vertex id>/<index>"`` -> (worker, its pid, its clock, what the subtask last reported)
    (workers' metrics ``subtasks``: watermark, backpressured, busy seconds, operators' records)."""
    reports: dict[str, tuple[int, int, float, dict[str, Any]]] = {}
    for worker, metrics in served.jobmaster.snapshot_metrics().items():
        pid, clock = int(metrics.get("pid", 0)), float(metrics.get("uptime", 0.0))
        for key, report in (metrics.get("subtasks") or {}).items():
            reports[key] = (worker, pid, clock, report)
    return reports


def vertices(served: ServedJob) -> VertexList:
    """Each vertex of the outline with what its subtasks last reported (:func:`subtask_reports`),
    their rates (:mod:`epochal.rest.rates`) and the state size of each operator in the latest
    completed checkpoint."""
    reports = subtask_reports(served)
    state = latest_state_bytes(served)
    served.rates.forget(set(reports))
    return VertexList(job_id=served.job_id,
                      vertices=[_vertex(served, v, reports, state) for v in served.outline.vertices])


def latest_state_bytes(served: ServedJob) -> dict[str, int]:
    """Operator uid -> its state's bytes in the latest completed checkpoint ({}: none yet)."""
    def read(kind: Any) -> dict[str, int]:
        for entry in reversed(checkpoints_of(kind).checkpoint_stats()):
            if entry["status"] == "completed" and "state_bytes" in entry:
                return dict(entry["state_bytes"])
        return {}

    return served.jobmaster.query(read)


def _vertex(served: ServedJob, outline: Any, reports: dict[str, tuple[int, int, float, dict[str, Any]]],
            state: dict[str, int]) -> Vertex:
    uids = [o.uid for o in outline.operators]
    totals = {uid: [0, 0] for uid in uids}
    subtasks = []
    for index in range(outline.parallelism):
        key = f"{outline.id}/{index}"
        found = reports.get(key)
        if found is None:
            continue
        worker, pid, clock, report = found
        counts = report.get("operators") or {}
        for uid, (records_in, records_out) in counts.items():
            if uid in totals:
                totals[uid][0] += int(records_in)
                totals[uid][1] += int(records_out)
        # a vertex whose outline names no operators (a CEC stage): the subtask's own ``records``
        whole = report.get("records") or (0, 0)
        first = counts.get(uids[0], (0, 0)) if uids else whole
        last = counts.get(uids[-1], (0, 0)) if uids else whole
        busy = _finite(report.get("busy_s"))
        rate = served.rates.observe(key, pid, Reading(clock, int(first[0]), int(last[1]), busy))
        subtasks.append(SubtaskMetrics(index=index, worker=worker, records_in=int(first[0]),
                                       records_out=int(last[1]), watermark=_finite(report.get("watermark")),
                                       backpressured=bool(report.get("backpressured")),
                                       records_in_per_s=rate.records_in_per_s,
                                       records_out_per_s=rate.records_out_per_s, busy_ratio=rate.busy_ratio))
    watermarks = [s.watermark for s in subtasks if s.watermark is not None]
    # whether the subtasks sample backpressure at all (a CEC stage's do not)
    sampled = any("backpressured" in reports[f"{outline.id}/{s.index}"][3] for s in subtasks)
    every_subtask = len(watermarks) == outline.parallelism > 0
    rates_in = [s.records_in_per_s for s in subtasks if s.records_in_per_s is not None]
    rates_out = [s.records_out_per_s for s in subtasks if s.records_out_per_s is not None]
    busy_ratios = [s.busy_ratio for s in subtasks if s.busy_ratio is not None]
    progress = None
    if outline.progress_unit is not None:
        read = vertex_progress(SourceVertex(outline.id, outline.parallelism, outline.progress_unit),
                               {0: {"subtasks": {key: report for key, (_, _, _, report) in reports.items()}}})
        if read is not None:
            progress = SourceProgress(unit=read.unit, done=read.done, total=read.total, share=read.share)
    return Vertex(id=outline.id, name=outline.name, parallelism=outline.parallelism,
                  records_in=sum(s.records_in for s in subtasks), records_out=sum(s.records_out for s in subtasks),
                  watermark=min(watermarks) if every_subtask else None,
                  backpressure=_backpressure(subtasks, outline.parallelism) if sampled else
                  Backpressure(level="unknown", ratio=None),
                  operators=[OperatorMetrics(uid=o.uid, name=o.name, records_in=totals[o.uid][0],
                                             records_out=totals[o.uid][1], state_bytes=state.get(o.uid))
                             for o in outline.operators],
                  subtasks=subtasks, records_in_per_s=sum(rates_in) if rates_in else None,
                  records_out_per_s=sum(rates_out) if rates_out else None,
                  busy_ratio_max=max(busy_ratios, default=None), source_progress=progress)


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
    stats, path = jm.query(lambda kind: (checkpoints_of(kind).checkpoint_stats(), checkpoints_of(kind).checkpoint_path))
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
