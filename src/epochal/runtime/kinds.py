"""Job kinds: which worker body a Spark task runs, and the Spark entry point that picks it.

Every kind of job runs as the tasks of one Spark job; what each task runs is its *worker body*,
chosen by the job kind that travels in the task's :class:`~epochal.runtime.links.Bootstrap`.
``dataflow`` (the streaming worker, :class:`epochal.runtime.worker.Worker`) is built in; a new
kind (the vertex-centric graph job) adds one entry to :data:`JOB_KINDS` in its own module's
import-free form: ``"module:Class"``, imported lazily in the executor process, so registering a
kind never imports its code into workers of other kinds.

A body is constructed as ``Body(bootstrap, worker_index, task_attempt)`` and ``run()`` returns
the task's summary (a picklable dict).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Protocol

from epochal.runtime.links import Bootstrap

#: Job kind -> ``"module:Class"`` of its worker body.
JOB_KINDS: dict[str, str] = {
    "dataflow": "epochal.runtime.worker:Worker",
    "graph": "epochal.graph.worker:GraphWorker",
    "cec": "epochal.cec.worker:CecWorker",
}


class WorkerBody(Protocol):
    """What a Spark task runs for one job kind."""

    def __init__(self, bootstrap: Bootstrap, index: int, task_attempt: int = 0) -> None: ...

    def run(self) -> dict[str, Any]:
        """Run until the job ends; the summary is the Spark task's result."""
        ...


def register_job_kind(kind: str, body: str) -> None:
    """Make ``kind`` run ``body`` (``"module:Class"``); the module must be importable on executors."""
    module, _, name = body.partition(":")
    if not module or not name:
        raise ValueError(f"a worker body is named 'module:Class', not {body!r}")
    existing = JOB_KINDS.get(kind)
    if existing is not None and existing != body:
        raise ValueError(f"job kind {kind!r} already runs {existing}")
    JOB_KINDS[kind] = body


def worker_body(kind: str) -> type[WorkerBody]:
    """The worker body class of job kind ``kind`` (imported now)."""
    try:
        path = JOB_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown job kind {kind!r}; known kinds: {', '.join(sorted(JOB_KINDS))}") from None
    module, _, name = path.partition(":")
    body: type[WorkerBody] = getattr(importlib.import_module(module), name)
    return body


#: jobs (ids) this Python process ran a warm-up task for (:func:`warm_worker_partition`)
WARMED_FOR: set[str] = set()
_tasks_run = 0


def task_started() -> int:
    """Count a task (a worker body or a warm-up) starting in this Python process; returns how
    many ran in it before (0: a process forked for this task, PySpark reuses idle ones)."""
    global _tasks_run
    before, _tasks_run = _tasks_run, _tasks_run + 1
    return before


def warm_worker_partition(job_id: str, job_kind: str, data: Any) -> Iterator[int]:
    """Spark entry point of a spare's warm-up task (``epochal.control.spare``): import the worker
    body of ``job_kind`` into this Python process, remember it was warmed for ``job_id``, and end;
    PySpark keeps the process idle for the job's next replacement."""
    for _ in data:  # consumed, or PySpark does not keep the process for the next task
        pass
    task_started()
    worker_body(job_kind)
    WARMED_FOR.add(job_id)
    return iter([0])


def run_worker_partition(bootstrap: Bootstrap, data: Any, index: int | None = None) -> Iterator[dict[str, Any]]:
    """Spark entry point: ``mapPartitions`` calls this once per task; it runs one worker body
    (worker ``index``, or the task's partition index when the job is one Spark job of W tasks)."""
    from pyspark import TaskContext

    for _ in data:  # consumed, or PySpark does not reuse the Python worker process for the next job
        pass

    context = TaskContext.get()
    if index is None:
        index = context.partitionId() if context is not None else 0
    task_attempt = context.attemptNumber() if context is not None else 0
    summary = worker_body(bootstrap.job_kind)(bootstrap, index, task_attempt).run()
    return iter([summary])
