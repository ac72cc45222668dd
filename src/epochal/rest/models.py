"""The REST API's typed contract: every request body and response is one of these models.

FastAPI derives the OpenAPI description (``/openapi.json``) from them, and the schema fuzz test
(tests/integration/test_rest_api.py) checks every response against it. Field names are
snake_case; paths follow Flink's REST API where they fit (``/jobs``, ``/jobs/overview``,
``/jobs/{job_id}``, ``.../vertices``, ``.../checkpoints``, ``.../savepoints``, ``.../stop``).
Times are seconds: ``*_time``/``*_at`` since the epoch, ``*_s`` durations. Every float is finite.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from epochal.control.lifecycle import JobStatus


class Error(BaseModel):
    """An error: what is wrong, in words; ``candidates``: the jobs an ambiguous name matches."""

    detail: str
    candidates: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------- jobs
class JobSummary(BaseModel):
    """One job in ``GET /jobs``."""

    id: str
    status: JobStatus


class JobList(BaseModel):
    jobs: list[JobSummary]


class JobOverview(BaseModel):
    """One job in ``GET /jobs/overview``, and the head of ``GET /jobs/{job_id}``.

    ``attempt``: the job attempt (0 until the first restart); ``parallelism``: the job's default
    parallelism; ``workers``: its long-lived Spark tasks; ``end_time``: None while it runs."""

    id: str
    name: str
    kind: str
    status: JobStatus
    attempt: int
    parallelism: int
    workers: int
    start_time: float
    end_time: float | None
    duration_s: float
    restarts: int


class JobsOverview(BaseModel):
    jobs: list[JobOverview]


class Restart(BaseModel):
    """A restart: the attempt that failed, why (``cause``: the first line; ``message``: the whole
    error, with the user's traceback where a user function raised; ``category``: what failed, as
    ``JobFailedError.category``), when the failure was detected (``time``, since the epoch), and
    (once back) seconds from the failure until every worker was restored (``recovered_s``) and
    until the first record (``resumed_s``)."""

    attempt: int
    cause: str
    message: str | None = None
    category: str | None = None
    time: float | None = None
    recovered_s: float | None = None
    resumed_s: float | None = None


class KindMetric(BaseModel):
    """One number of the job kind's own (a CEC job's G_checks, extent, replay sizes and
    recoveries per worker): the name it has on ``/metrics`` (a counter's without ``_total``),
    ``counter`` or ``gauge``, its labels beside the job's, and its value now."""

    name: str
    kind: Literal["counter", "gauge"]
    labels: dict[str, str]
    value: float


class JobDetails(JobOverview):
    """``GET /jobs/{job_id}``: the overview, plus why it failed (``error``, its first line),
    where its checkpoints and savepoints go, whether its kind takes savepoints at all
    (``takes_savepoints``; graph and CEC jobs refuse every request), records its sources read, its
    restarts, and the job kind's own numbers (``kind_metrics``; none for a dataflow job)."""

    error: str | None
    checkpoint_path: str | None
    savepoint_directory: str | None
    takes_savepoints: bool
    records_read: int
    restart_history: list[Restart]
    kind_metrics: list[KindMetric] = Field(default_factory=list)


class JobAccepted(BaseModel):
    """A cancel was accepted: the job's status when it was asked to stop."""

    id: str
    status: JobStatus


# ---------------------------------------------------------------------- vertices
class OperatorMetrics(BaseModel):
    """One operator of a vertex's chain, over all its subtasks: records in, and records out of
    its main output (side outputs not counted); ``state_bytes``: the size of its state in the
    latest completed checkpoint (None: none yet, or it has no state)."""

    uid: str
    name: str
    records_in: int
    records_out: int
    state_bytes: int | None = None


class SubtaskMetrics(BaseModel):
    """One subtask as its worker last reported it (with its heartbeat): records into the chain,
    out of it, its event time (the input watermark; None before any) and whether its output was
    waiting for credit (backpressured) at that moment."""

    index: int
    worker: int
    records_in: int
    records_out: int
    watermark: float | None
    backpressured: bool
    #: records per second into and out of the chain, and the share of the time it was busy
    #: (0..1), over the last seconds of its worker's clock; None until two reports were seen
    records_in_per_s: float | None = None
    records_out_per_s: float | None = None
    busy_ratio: float | None = None


class Backpressure(BaseModel):
    """The share of a vertex's subtasks whose output waited for credit at their last report, and
    its level as Flink names it (``ok`` <= 0.1 < ``low`` <= 0.5 < ``high``); ``unknown`` before any report."""

    level: Literal["ok", "low", "high", "unknown"]
    ratio: float | None


class SourceProgress(BaseModel):
    """How far a source vertex's subtasks are through their splits: ``done`` of ``total`` in the
    source's ``unit`` (a text file source's ``bytes``), ``share`` = done / total."""

    unit: str
    done: int
    total: int
    share: float


class Vertex(BaseModel):
    """A vertex (a chain of operators; a CEC job's stage): records into its first operator and
    out of its last, the lowest watermark of its subtasks, its backpressure, its operators and
    subtasks. Counts are of the current attempt (a restart starts them again)."""

    id: int
    name: str
    parallelism: int
    records_in: int
    records_out: int
    watermark: float | None
    backpressure: Backpressure
    operators: list[OperatorMetrics]
    subtasks: list[SubtaskMetrics]
    #: the sums of its subtasks' rates, and the busiest subtask's share (None: no rate yet)
    records_in_per_s: float | None = None
    records_out_per_s: float | None = None
    busy_ratio_max: float | None = None
    #: a source vertex whose source knows its size in a unit of its own, once every subtask reported
    source_progress: SourceProgress | None = None


class VertexList(BaseModel):
    job_id: str
    vertices: list[Vertex]


class PlanOperator(BaseModel):
    uid: str
    name: str


class PlanVertex(BaseModel):
    """A vertex of the plan: its chain of operators, in order."""

    id: int
    name: str
    parallelism: int
    operators: list[PlanOperator]


class PlanEdge(BaseModel):
    """Records flow from vertex ``source`` to vertex ``target``, partitioned so (``forward``,
    ``hash``, ``rebalance``, ``broadcast``, ...); a loop's ``back_edge``; a ``side_output``'s tag."""

    source: int
    target: int
    partitioning: str
    back_edge: bool
    side_output: str | None


class KindTable(BaseModel):
    """A table of a job kind's own numbers: title, column names, rows (oldest first)."""

    title: str
    columns: list[str]
    rows: list[list[str | int | float | bool | None]]


class KindTables(BaseModel):
    """``GET /jobs/{job_id}/kind``: what a job kind shows beyond what every kind shares: a graph
    job's supersteps (active vertices, messages, seconds) and recoveries (Rebirth/Migration with
    their phases, restores from checkpoints); a CEC job's single-worker recoveries and each
    worker's counters. A dataflow job has none."""

    job_id: str
    kind: str
    tables: list[KindTable]


class JobPlan(BaseModel):
    """``GET /jobs/{job_id}/plan``: the job's shape (Flink's plan): vertices, the edges between
    them, and the records its sources will read in all (None: unknown or unbounded)."""

    job_id: str
    kind: str
    vertices: list[PlanVertex]
    edges: list[PlanEdge]
    source_records: int | None


# ---------------------------------------------------------------------- checkpoints
class Checkpoint(BaseModel):
    """One checkpoint or savepoint (``savepoint``: its directory) that completed or was aborted
    (``reason``). Sizes and the slowest subtask's alignment, synchronous and asynchronous parts
    are known for completed ones."""

    id: int
    status: Literal["completed", "aborted"]
    savepoint: str | None
    trigger_time: float
    duration_s: float
    bytes: int | None
    alignment_s_max: float | None
    sync_s_max: float | None
    async_s_max: float | None
    alignment_buffered_bytes: int | None
    alignment_spilled_bytes: int | None
    reason: str | None


class CheckpointCounts(BaseModel):
    """Checkpoints and savepoints that ended, as Flink counts them (``failed`` = aborted)."""

    total: int
    completed: int
    failed: int
    savepoints: int


class Spread(BaseModel):
    """Minimum, average and maximum of a value over completed checkpoints (None: none yet)."""

    min: float | None
    avg: float | None
    max: float | None


class CheckpointSummary(BaseModel):
    duration_s: Spread
    bytes: Spread
    alignment_s_max: Spread


class CheckpointList(BaseModel):
    """``GET /jobs/{job_id}/checkpoints``: counts, a summary of completed checkpoints, the latest
    of each outcome, and the history, newest first (at most ``history`` entries)."""

    job_id: str
    checkpoint_path: str | None
    counts: CheckpointCounts
    summary: CheckpointSummary
    latest_completed: Checkpoint | None
    latest_failed: Checkpoint | None
    latest_savepoint: Checkpoint | None
    history: list[Checkpoint]


# ---------------------------------------------------------------------- savepoints
class SavepointTrigger(BaseModel):
    """``POST /jobs/{job_id}/savepoints``: where (a directory; the savepoint gets a directory of
    its own inside it; None: the job's default) and in which format."""

    model_config = ConfigDict(extra="forbid")

    target_directory: str | None = None
    format: Literal["canonical", "native"] = "canonical"


class StopTrigger(BaseModel):
    """``POST /jobs/{job_id}/stop``: take a savepoint (canonical) there and stop the job at it;
    ``drain``: end the sources first, so every event-time window and timer fires."""

    model_config = ConfigDict(extra="forbid")

    target_directory: str | None = None
    drain: bool = False


class TriggerAccepted(BaseModel):
    """The savepoint request was taken up: poll ``/jobs/{job_id}/savepoints/{request_id}``;
    ``location`` is where the savepoint will be."""

    request_id: str
    location: str


class SavepointReport(BaseModel):
    """A savepoint request: ``IN_PROGRESS``, ``COMPLETED`` (at ``location``) or ``FAILED``
    (``error`` says why); ``stop``/``drain``: what was asked."""

    request_id: str
    status: Literal["IN_PROGRESS", "COMPLETED", "FAILED"]
    location: str
    format: str
    stop: bool
    drain: bool
    error: str | None
    requested_at: float
    ended_at: float | None


# ---------------------------------------------------------------------- queryable state
class QueryableStateRoute(BaseModel):
    """Where one queryable state is served: ``parallelism`` of its operator, and per subtask
    (``"0"``, ``"1"``, ...) the ``host:port`` of the worker serving it. Subtask ``i`` of
    ``parallelism`` holds key groups ``[ceil(i*max_parallelism/parallelism),
    ceil((i+1)*max_parallelism/parallelism))``."""

    parallelism: int
    workers: dict[str, str]


class LocalSocket(BaseModel):
    """A worker's local query socket: clients whose host identity equals ``host`` may connect to
    the abstract Unix socket ``socket`` instead of the worker's TCP port (same protocol)."""

    model_config = ConfigDict(extra="forbid")

    host: str
    socket: str


class QueryableRoutes(BaseModel):
    """``GET /jobs/{job_id}/queryable``: what a query client needs to reach a job's queryable
    states. ``serving``: every worker of the current attempt is running (False while the job
    deploys or restarts: ask again); ``token``: the job's query token (hex), which every query
    carries and which grants nothing else; ``max_parallelism``: the job's key-group count (None
    until a worker reported it); ``local_sockets``: per worker ``host:port``, its local socket,
    for clients on the worker's host (docs/queryable_state.md)."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    status: JobStatus
    attempt: int
    serving: bool
    max_parallelism: int | None
    token: str
    states: dict[str, QueryableStateRoute]
    local_sockets: dict[str, LocalSocket] = {}
