"""Task slots: how many a Spark master has, and which epochal jobs of this process hold them.

An epochal job's workers are long-lived Spark tasks that keep their slots until the job ends,
so a second job that needs more slots than are left can never start: in local mode that is
known before submitting (:func:`check_slots`), from the jobs this process started
(:func:`track_job`) and Spark's status tracker.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from epochal.errors import InsufficientSlotsError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_slots(master: str) -> int | None:
    """Task slots of a ``local`` master (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``)."""
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\*|\d+)(?:,\s*\d+)?\]", master)
    if match is None:
        return None
    return os.cpu_count() or 1 if match.group(1) == "*" else int(match.group(1))


@dataclass
class RunningJob:
    """An epochal job that holds (or is about to hold) task slots of a SparkContext."""

    job_id: str
    name: str
    workers: int
    done: threading.Event

    @property
    def group(self) -> str:
        return f"epochal-{self.job_id}"


_jobs_lock = threading.Lock()
_running_jobs: dict[str, dict[str, RunningJob]] = {}  # SparkContext applicationId -> job id -> job


def context_key(spark: SparkSession) -> str:
    sc = spark.sparkContext
    return f"{sc.applicationId}@{id(sc)}"


def track_job(spark: SparkSession, job_id: str, name: str, workers: int, done: threading.Event) -> None:
    """Remember that a job's ``workers`` long-lived tasks hold slots of this SparkContext until
    ``done`` is set (so that the next job's slot check knows at once)."""
    with _jobs_lock:
        _running_jobs.setdefault(context_key(spark), {})[job_id] = RunningJob(job_id, name, workers, done)


def running_jobs(spark: SparkSession) -> list[RunningJob]:
    """The epochal jobs of this process that still run on this SparkContext."""
    with _jobs_lock:
        jobs = _running_jobs.get(context_key(spark), {})
        for job_id in [j for j, job in jobs.items() if job.done.is_set()]:
            del jobs[job_id]
        return list(jobs.values())


def _other_busy_tasks(spark: SparkSession, epochal_groups: set[str]) -> tuple[int, list[int]]:
    """Tasks running now for Spark jobs that are not epochal jobs of this process, and their ids."""
    try:
        tracker = spark.sparkContext.statusTracker()
        ours: set[int] = set()
        for group in epochal_groups:
            for job_id in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job_id)
                ours.update(info.stageIds if info is not None else [])
        busy, jobs = 0, []
        for job_id in tracker.getActiveJobsIds():
            info = tracker.getJobInfo(job_id)
            if info is None or set(info.stageIds) & ours:
                continue
            tasks = 0
            for stage_id in info.stageIds:
                stage = tracker.getStageInfo(stage_id)
                tasks += stage.numActiveTasks if stage is not None else 0
            if tasks:
                busy += tasks
                jobs.append(job_id)
        return busy, sorted(jobs)
    except Exception:  # the tracker is a convenience: never fail a job because of it
        return 0, []


def describe_busy_slots(job_name: str, workers: int, master: str, slots: int, jobs: list[RunningJob]) -> str:
    """The message of a job that cannot start because epochal jobs hold the slots it needs."""
    held = sum(job.workers for job in jobs)
    free = max(slots - held, 0)
    holders = ", ".join(f"'{job.name}' (job id {job.job_id}, {job.workers} workers)" for job in jobs)
    one = len(jobs) == 1
    fixes = [f"cancel {'it' if one else 'one of them'} (JobClient.cancel()) or wait until "
             f"{'it ends' if one else 'enough of them end'}"]
    if free:
        fixes.append(f"lower this job's parallelism to {free}")
    fixes.append(f"start Spark with more slots (master 'local[{held + workers}]' or more)")
    return (f"job '{job_name}' needs {workers} workers running at the same time, but {held} of the {slots} task "
            f"slots of Spark master '{master}' are held by running epochal "
            f"job{'' if one else 's'} {holders}; {free} {'is' if free == 1 else 'are'} free. An epochal "
            "job's workers are long-lived tasks that keep their slots until the job ends: "
            f"{', '.join(fixes[:-1])}, or {fixes[-1]}")


def check_slots(spark: SparkSession, workers: int, job_name: str = "epochal job") -> str:
    """Fail fast when Spark can certainly not run ``workers`` tasks at once.

    For ``local`` masters the slot count is exact, and slots held by other epochal jobs on the same
    SparkContext (long-lived tasks, see :func:`track_job`) fail the job at once. Tasks of other
    Spark jobs usually end soon, so they only go into the hint: the JobMaster's registration
    timeout bounds the wait, as it does on a cluster, where executors may still come and go.
    """
    sc = spark.sparkContext
    master = sc.master or ""
    slots = local_slots(master)
    if slots is not None:
        if workers > slots:
            raise InsufficientSlotsError(
                f"the job needs {workers} workers running at the same time but Spark master '{sc.master}' has "
                f"only {slots} task slots. Lower the parallelism to {slots} or start Spark with "
                f"master 'local[{workers}]' or more")
        jobs = running_jobs(spark)
        held = sum(job.workers for job in jobs)
        if held + workers > slots:
            raise InsufficientSlotsError(describe_busy_slots(job_name, workers, master, slots, jobs))
        busy, others = _other_busy_tasks(spark, {job.group for job in jobs})
        if jobs or busy:
            parts = [f"{held} held by running epochal jobs"] if jobs else []
            if busy:
                parts.append(f"{busy} busy with other Spark jobs (ids {', '.join(map(str, others))})")
            return f" (master '{sc.master}' has {slots} slots: {', '.join(parts)})"
        return f" (master '{sc.master}' has {slots} slots; other jobs may be using some)"
    return f" (Spark reports a default parallelism of {sc.defaultParallelism})"
