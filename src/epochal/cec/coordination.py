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

import math
from typing import Any, ClassVar

from epochal.cec.protocol import FinishJob, Rejoined, Resumed, StageDone
from epochal.cec.worker import CecWorker
from epochal.control.jobmaster_events import SavepointDone, SavepointRequest
from epochal.control.kinds import (
    KindCoordinator,
    KindMetric,
    KindOutput,
    KindTable,
    ReplaceWorker,
    TaskLocalRecovery,
)
from epochal.messages import KindCommand, KindReport, ToJobMaster

#: The columns of the workers' table: (heartbeat metrics key, title).
WORKER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("records_in", "records in"), ("records_out", "records out"), ("window_g_check", "G_checks"),
    ("window_g_open", "G_opens"), ("open_windows", "open windows"), ("extent", "extent"),
    ("extent_input", "extent (input)"), ("window_caught_up", "replayed tuples"), ("frames", "frames logged"),
    ("bytes_logged", "bytes logged"), ("replayed_frames", "frames replayed"))
#: Per worker, from its heartbeat metrics: (key, Prometheus name, kind, help). Counters are those
#: of the worker's current process (a replacement starts them again).
WORKER_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("window_g_check", "epochal_cec_g_checks", "counter",
     "G_checks (per-window eventual checkpoints) the worker's window operator emitted"),
    ("window_g_open", "epochal_cec_g_opens", "counter", "G_opens (a window's first footprint) it emitted"),
    ("open_windows", "epochal_cec_open_windows", "gauge", "Windows open in the worker's window operator"),
    ("extent", "epochal_cec_extent_tuples", "gauge", "Output tuples since the oldest open window's footprint: "
     "what rebuilding the worker would read back over now (papers/002's extent, bounded by Q)"),
    ("extent_input", "epochal_cec_extent_input_tuples", "gauge", "Input tuples since the oldest open window's "
     "footprint: what its producers would replay to a replacement now (bounded by U)"),
    ("window_caught_up", "epochal_cec_replayed_tuples", "counter", "Input tuples replayed to this worker after "
     "its rebuild that its predecessor had already read (the replay size of its recovery)"),
    ("replayed_frames", "epochal_cec_replayed_frames", "counter",
     "Frames of its output queue the worker sent again to a replaying consumer"),
    ("frames", "epochal_cec_logged_frames", "counter", "Frames the worker appended to its output queue"),
    ("bytes_logged", "epochal_cec_logged_bytes", "counter", "Bytes the worker appended to its output queue"),
    ("records_in", "epochal_cec_records_in", "counter", "Records into the worker's stage instance"),
    ("records_out", "epochal_cec_records_out", "counter", "Records out of the worker's stage instance"),
)


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        else None


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
        """Single-worker recoveries (seconds from the loss to rebuilt and to the first input, the
        extent its rebuild read back over, the windows it restored, the tuples replayed to it,
        where the time went), and each worker's counters (:data:`WORKER_COLUMNS`)."""
        recoveries = [(r["worker"], r["rebuilt"] - r["lost"], r["resumed"] - r["lost"] if "resumed" in r else None,
                       _count(r["phases"].get("extent")), _count(r["phases"].get("windows")), replayed,
                       ", ".join(f"{k} {v:.3f}s" for k, v in r["phases"].items() if k.endswith("_s")))
                      for r, replayed in self._recoveries(metrics)]
        counters = [(worker, *(m.get(key) for key, _ in WORKER_COLUMNS)) for worker, m in sorted(metrics.items())]
        return [KindTable("Single-worker recoveries", ("worker", "rebuilt after s", "first input after s", "extent",
                                                       "windows restored", "replayed tuples", "phases"), recoveries),
                KindTable("Workers", ("worker", *(title for _, title in WORKER_COLUMNS)), counters)]

    def kind_metrics(self, metrics: dict[int, dict[str, Any]]) -> list[KindMetric]:
        """Per worker, each of :data:`WORKER_METRICS` it reports (a window stage's G_checks,
        extent, replay; every worker's log and replays served), and its recoveries: how many, and
        the latest one's seconds to rebuilt and to its first input."""
        out = []
        for worker, m in sorted(metrics.items()):
            labels = (("worker", str(worker)),)
            for key, name, kind, text in WORKER_METRICS:
                value = m.get(key)
                if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                    out.append(KindMetric(name, text, kind, labels, float(value)))
        latest: dict[int, dict[str, Any]] = {}
        counts: dict[int, int] = {}
        for entry in self.history:
            if "rebuilt" in entry:
                latest[entry["worker"]] = entry
                counts[entry["worker"]] = counts.get(entry["worker"], 0) + 1
        for worker, entry in sorted(latest.items()):
            labels = (("worker", str(worker)),)
            out.append(KindMetric("epochal_cec_recoveries", "Single-worker recoveries of the worker (its "
                                  "replacement rebuilt)", "counter", labels, float(counts[worker])))
            out.append(KindMetric("epochal_cec_last_recovery_rebuilt_seconds", "The latest recovery: seconds from "
                                  "the loss to the replacement rebuilt", "gauge", labels,
                                  entry["rebuilt"] - entry["lost"]))
            if "resumed" in entry:
                out.append(KindMetric("epochal_cec_last_recovery_resumed_seconds", "The latest recovery: seconds "
                                      "from the loss to the replacement's first input", "gauge", labels,
                                      entry["resumed"] - entry["lost"]))
        return out

    def _recoveries(self, metrics: dict[int, dict[str, Any]]) -> list[tuple[dict[str, Any], int | None]]:
        """The recoveries whose replacement rebuilt, each with the tuples replayed to it: for a
        worker's newest recovery its replacement's ``window_caught_up`` (the input its predecessor
        had already read; that process's counter), for an older one unknown (None)."""
        done = [r for r in self.history if "rebuilt" in r]
        newest = {r["worker"]: i for i, r in enumerate(done)}
        return [(r, _count(metrics.get(r["worker"], {}).get("window_caught_up")) if newest[r["worker"]] == i else None)
                for i, r in enumerate(done)]

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
