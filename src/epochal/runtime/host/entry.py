"""The Spark entry points of a worker: which worker body a Spark task runs, and a spare's warm-up.

Every kind of job runs as Spark tasks; what each task runs is its *worker body*, the class its
job kind names (``KindCoordinator.worker_body``), which travels in the task's
:class:`~epochal.runtime.host.links.Bootstrap` as a class reference: unpickling the task imports the
body's module in the executor process, and only that kind's.

A body is constructed as ``Body(bootstrap, worker_index, task_attempt)`` and ``run()`` returns
the task's summary (a picklable dict).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from epochal.runtime.host.links import Bootstrap


class WorkerBody(Protocol):
    """What a Spark task runs for one job kind."""

    def __init__(self, bootstrap: Bootstrap, index: int, task_attempt: int = 0) -> None: ...

    def run(self) -> dict[str, Any]:
        """Run until the job ends; the summary is the Spark task's result."""
        ...


#: jobs (ids) this Python process ran a warm-up task for (:func:`warm_worker_partition`)
WARMED_FOR: set[str] = set()
_tasks_run = 0


def task_started() -> int:
    """Count a task (a worker body or a warm-up) starting in this Python process; returns how
    many ran in it before (0: a process forked for this task, PySpark reuses idle ones)."""
    global _tasks_run
    before, _tasks_run = _tasks_run, _tasks_run + 1
    return before


def warm_worker_partition(job_id: str, body: type | None, data: Any) -> Iterator[int]:
    """Spark entry point of a spare's warm-up task (``epochal.control.spare``): the worker body
    ``body`` was imported when this task was unpickled; remember the process was warmed for
    ``job_id``, and end; PySpark keeps the process idle for the job's next replacement."""
    for _ in data:  # consumed, or PySpark does not keep the process for the next task
        pass
    task_started()
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
    body: type[WorkerBody] | None = bootstrap.worker_body
    assert body is not None, "the launcher names the job kind's worker body"
    summary = body(bootstrap, index, task_attempt).run()
    return iter([summary])
