"""A warm spare Python worker, so that a replacement of a lost worker starts at once.

Jobs whose kind replaces one lost worker while the others keep running (task-local recovery:
CEC, Imitator's Rebirth) start the replacement as a new Spark task. PySpark runs a task in an
idle Python worker process of its executor if it has one, else it forks a new one from its
daemon; measured on the 2-core machine, a fork costs ~0.35 s between submitting the task and its
first line of Python, reusing an idle process ~0.05 s. While a job runs every Python worker is
busy (each runs a long-lived epochal worker), so a replacement always paid the fork.

:class:`SpareWorker` keeps one idle Python worker around for the job: now and then it runs a
Spark job of one trivial task (:func:`~epochal.runtime.host.entry.warm_worker_partition`, which also
imports the job kind's worker body) in the job's group; the process that ran it stays in
PySpark's idle pool (``spark.python.worker.reuse``), where the next replacement finds it. It
warms only while a task slot is free and every worker of the job is registered (their tasks
have taken their processes, so a warm-up neither takes one a worker's task is about to use nor
queues before a replacement): first once the job's workers registered, again once a replacement
(which took the spare) registered, and every ``refresh_s`` otherwise, because PySpark kills
idle workers after a minute without activity. It is a convenience: a failed warm-up is
ignored, and a job without a free slot replaces workers as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from epochal.control import slots

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SpareWorker:
    """Keeps one idle Python worker warm for the replacements of one job (see the module docstring).

    ``group`` is the job's Spark job group (cancelling the job cancels a running warm-up)."""

    def __init__(self, spark: SparkSession, group: str, job_id: str, worker_body: type | None,
                 refresh_s: float = 30.0) -> None:
        self.spark = spark
        self.group = group
        self.job_id = job_id
        self.worker_body = worker_body
        self.refresh_s = refresh_s
        self.warmups = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ready: Callable[[], bool] = lambda: False
        self._submitted = time.monotonic()
        self._warm_at: float | None = None  # when the spare was last warmed (None: not yet, or taken)
        self._thread: threading.Thread | None = None

    def start(self, ready: Callable[[], bool]) -> None:
        """Begin; ``ready()`` says whether every worker of the job is registered now."""
        from pyspark import InheritableThread

        self._ready = ready
        self._thread = InheritableThread(target=self._loop, daemon=True, name="epochal-spare-worker")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def worker_submitted(self) -> None:
        """A worker's task was (re)submitted: it will take the spare, if there is one."""
        with self._lock:
            self._submitted = time.monotonic()
            self._warm_at = None

    def _due(self, now: float) -> bool:
        if not self._ready():
            return False
        with self._lock:
            return self._warm_at is None or now - self._warm_at >= self.refresh_s

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            now = time.monotonic()
            if self._due(now) and self._slot_free():
                self._warm()
                with self._lock:
                    if self._submitted <= now:  # no worker submitted meanwhile
                        self._warm_at = time.monotonic()

    def _slot_free(self) -> bool:
        sc = self.spark.sparkContext
        total = slots.local_slots(sc.master or "")
        if total is None:
            total = sc.defaultParallelism
        try:
            tracker = sc.statusTracker()
            busy = 0
            for job_id in tracker.getActiveJobsIds():
                info = tracker.getJobInfo(job_id)
                for stage_id in info.stageIds if info is not None else []:
                    stage = tracker.getStageInfo(stage_id)
                    busy += stage.numActiveTasks if stage is not None else 0
        except Exception:  # noqa: BLE001 - no tracker: do not risk queueing before a replacement
            return False
        return busy < total

    def _warm(self) -> None:
        from epochal.runtime.host.entry import warm_worker_partition

        sc = self.spark.sparkContext
        try:
            sc.setJobGroup(self.group, "epochal spare Python worker", interruptOnCancel=True)
            warm = partial(warm_worker_partition, self.job_id, self.worker_body)
            sc.parallelize([0], 1).mapPartitions(warm).collect()
            self.warmups += 1
        except Exception:  # noqa: BLE001 - cancelled with the job, or Spark is stopping
            pass
