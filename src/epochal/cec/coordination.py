"""A CEC job's coordinator on the JobMaster: single-worker recovery and the end of the job.

:class:`CecCoordination` is the :class:`~epochal.control.kinds.KindCoordinator` of the ``cec``
job kind and recovers lost workers task-locally (its ``local_recovery`` is itself, a
:class:`~epochal.control.kinds.TaskLocalRecovery`): a worker lost while the job runs is
replaced by a new Spark task (:class:`~epochal.control.kinds.ReplaceWorker`) while every other
keeps running; the replacement rebuilds its stage instance from its persisted output queue
(papers/002). There is no global checkpoint and no restart of the job. The job ends when every
worker reported :class:`~epochal.cec.protocol.StageDone`: then :class:`~epochal.cec.protocol.FinishJob`
tells them to report ``Finished``. Pure: time is passed in; ``history`` keeps each recovery's
timings for the benchmarks.
"""

from __future__ import annotations

from typing import Any, ClassVar

from epochal.cec.protocol import FinishJob, Rejoined, Resumed, StageDone
from epochal.cec.worker import CecWorker
from epochal.control.jobmaster_events import SavepointDone, SavepointRequest
from epochal.control.kinds import KindCoordinator, KindOutput, KindTable, ReplaceWorker, TaskLocalRecovery
from epochal.messages import KindCommand, KindReport, ToJobMaster


class CecCoordination(KindCoordinator):
    """The coordinator of a ``cec`` job of ``num_workers`` workers."""

    worker_body: ClassVar[type] = CecWorker
    kind_name: ClassVar[str] = "CEC"
    #: a survivor's ``Finished`` stands across a recovery (its output went to its sinks); the
    #: replacement reports ``StageDone`` and ``Finished`` of its own, and ``FinishJob`` is sent again
    recovering = False

    def __init__(self, num_workers: int) -> None:
        self.local_recovery: TaskLocalRecovery | None = self
        self.num_workers = num_workers
        self.done: set[int] = set()
        self.counters: dict[int, dict[str, int]] = {}
        #: per recovery: the worker, when its loss was seen (``lost``), when its replacement was
        #: ready (``ready``), had rebuilt (``rebuilt``, with its ``phases``) and processed its
        #: first input (``resumed``), in the JobMaster's monotonic seconds
        self.history: list[dict[str, Any]] = []
        self._open: dict[int, dict[str, Any]] = {}

    def tables(self, metrics: dict[int, dict[str, Any]]) -> list[KindTable]:
        """Single-worker recoveries (seconds from the loss to rebuilt and to the first input, and
        where the time went), and each worker's counters: records, frames logged and replayed."""
        recoveries = [(r["worker"], r["rebuilt"] - r["lost"], r["resumed"] - r["lost"] if "resumed" in r else None,
                       ", ".join(f"{k} {v:.3f}s" for k, v in r.get("phases", {}).items()))
                      for r in self.history if "rebuilt" in r]
        names = ("records_in", "records_out", "frames", "bytes_logged", "replayed_frames", "queued_frames")
        counters = [(worker, *(m.get(name) for name in names)) for worker, m in sorted(metrics.items())]
        return [KindTable("Single-worker recoveries", ("worker", "rebuilt after s", "first input after s", "phases"),
                          recoveries),
                KindTable("Workers", ("worker", *(n.replace("_", " ") for n in names)), counters)]

    # ---------------------------------------------------------------- KindCoordinator
    # (nothing to restore: a CEC job rebuilds from its workers' own queues)
    def new_attempt(self, attempt: int) -> None:
        self.done.clear()

    def request_savepoint(self, request: SavepointRequest, now: float, wall: float) -> list[KindOutput]:
        return [SavepointDone(request.request_id, None, (
            "CEC and CRB jobs take no savepoints: their window state is rebuilt from each worker's output "
            "queue, which no other job can read; run the job with enable_checkpointing(...) to take savepoints"))]

    def on_message(self, worker: int, message: ToJobMaster, now: float, wall: float,
                   running: bool) -> list[KindOutput]:
        payload = message.payload if isinstance(message, KindReport) else None
        if isinstance(payload, StageDone):
            self.done.add(worker)
            self.counters[worker] = dict(payload.counters)
            return [KindCommand(FinishJob())] if len(self.done) == self.num_workers else []
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
    def worker_lost(self, worker: int, now: float) -> list[KindOutput]:
        """Replace ``worker`` with a new Spark task; the others keep running."""
        self.done.discard(worker)
        self._open[worker] = {"worker": worker, "lost": now}
        return [ReplaceWorker(worker)]

    def worker_rejoined(self, worker: int, now: float) -> list[KindOutput]:
        entry = self._open.get(worker)
        if entry is not None:
            entry["ready"] = now
        return []
