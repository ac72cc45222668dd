"""A CEC job's coordinator on the JobMaster: single-worker recovery and the end of the job.

:class:`CecCoordination` is the :class:`~epochal.control.kinds.KindCoordinator` of the ``cec``
job kind and recovers lost workers task-locally
(:class:`~epochal.control.kinds.TaskLocalRecovery`): a worker lost while the job runs is
replaced by a new Spark task (:class:`~epochal.control.kinds.ReplaceWorker`) while every other
keeps running; the replacement rebuilds its stage instance from its persisted output queue
(papers/002). There is no global checkpoint and no restart of the job. The job ends when every
worker reported :class:`~epochal.cec.messages.StageDone`: then :class:`~epochal.cec.messages.FinishJob`
tells them to report ``Finished``. Pure: time is passed in; ``history`` keeps each recovery's
timings for the benchmarks.
"""

from __future__ import annotations

from typing import Any

from epochal.cec.messages import FinishJob, Rejoined, Resumed, StageDone
from epochal.control.jobmaster_events import ResolveRestore
from epochal.control.kinds import ReplaceWorker


class CecCoordination:
    """The coordinator of a ``cec`` job of ``num_workers`` workers."""

    task_local = True
    #: a survivor's ``Finished`` stands across a recovery (its output went to its sinks); the
    #: replacement reports ``StageDone`` and ``Finished`` of its own, and ``FinishJob`` is sent again
    recovering = False

    def __init__(self, num_workers: int) -> None:
        self.num_workers = num_workers
        self.done: set[int] = set()
        self.counters: dict[int, dict[str, int]] = {}
        #: per recovery: the worker, when its loss was seen (``lost``), when its replacement was
        #: ready (``ready``), had rebuilt (``rebuilt``, with its ``phases``) and processed its
        #: first input (``resumed``), in the JobMaster's monotonic seconds
        self.history: list[dict[str, Any]] = []
        self._open: dict[int, dict[str, Any]] = {}

    # ---------------------------------------------------------------- KindCoordinator
    def restore_request(self, attempt: int) -> ResolveRestore:
        return ResolveRestore(None, None, None)  # a CEC job restores from its workers' own queues

    def started(self, now: float) -> list[Any]:
        return []

    def new_attempt(self) -> None:
        self.done.clear()

    def on_report(self, worker: int, payload: Any, now: float) -> list[Any]:
        if isinstance(payload, StageDone):
            self.done.add(worker)
            self.counters[worker] = dict(payload.counters)
            return [FinishJob()] if len(self.done) == self.num_workers else []
        if isinstance(payload, Rejoined):
            entry = self._open.pop(worker, None)
            if entry is not None:
                entry.update({"rebuilt": now, "phases": dict(payload.phases)})
                self.history.append(entry)
        elif isinstance(payload, Resumed):
            for entry in reversed(self.history):
                if entry["worker"] == worker:
                    entry.setdefault("resumed", now)
                    break
        return []

    # ---------------------------------------------------------------- TaskLocalRecovery
    def worker_lost(self, worker: int, now: float) -> list[Any]:
        """Replace ``worker`` with a new Spark task; the others keep running."""
        self.done.discard(worker)
        self._open[worker] = {"worker": worker, "lost": now}
        return [ReplaceWorker(worker)]

    def worker_rejoined(self, worker: int, now: float) -> list[Any]:
        entry = self._open.get(worker)
        if entry is not None:
            entry["ready"] = now
        return []
