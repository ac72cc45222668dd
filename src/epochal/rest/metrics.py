"""The Prometheus endpoint (``GET /metrics``): every served job's numbers in the text format.

Nothing is measured here: a scrape reads what the JobMasters already hold (the workers' heartbeat
metrics, the checkpoint statistics, the restart history) through their query methods, as the
REST views do, and :class:`JobCollector` turns it into metric families (``prometheus_client``'s
custom collector: no global registry, no background thread). Checkpoint histograms are kept
incrementally per job (:class:`CheckpointTotals`: each scrape adds only the checkpoints that
ended since the last one), so a scrape costs the same after a day of checkpoints.

Every series carries ``job_id`` and ``job_name``; per vertex ``vertex`` (its id) and
``vertex_name``; per subtask ``subtask``; per operator ``operator_uid`` and ``operator_name``.
The names (Flink's metrics in Prometheus' conventions, ``epochal_`` first):

=========================================== ======= =================================================
``epochal_job_status``                      gauge   1 for the job's current status (label ``status``)
``epochal_job_attempt``                     gauge   the job attempt (0 until the first restart)
``epochal_job_uptime_seconds``              gauge   seconds since the job started (to its end)
``epochal_job_restarts_total``              counter restarts so far (``JobResult.restarts``)
``epochal_job_source_records_total``        counter records the sources read, each once
                                                    (``JobResult.records_processed``)
``epochal_job_source_records_expected``     gauge   records the sources will read in all (if known)
``epochal_operator_records_in_total``       counter records into an operator's subtask
``epochal_operator_records_out_total``      counter records out of its main output
``epochal_operator_state_bytes``            gauge   its state in the latest completed checkpoint
``epochal_subtask_backpressured``           gauge   1 while the subtask's output waits for credit
``epochal_subtask_busy_seconds_total``      counter seconds it spent processing (``rate()``:
                                                    Flink's busy time per second)
``epochal_subtask_watermark``               gauge   its event time, in the job's own unit
``epochal_subtask_watermark_lag_seconds``   gauge   wall clock minus the watermark, where the
                                                    watermark is a UNIX time in s or ms
``epochal_checkpoints_total``               counter checkpoints and savepoints that ended, by
                                                    ``status`` (completed, aborted)
``epochal_savepoints_total``                counter of which savepoints, by ``status``
``epochal_checkpoint_duration_seconds``     histo.  trigger -> complete, completed ones
``epochal_checkpoint_size_bytes``           histo.  bytes each completed one wrote
``epochal_checkpoint_alignment_seconds``    histo.  its slowest subtask's barrier alignment
``epochal_checkpoint_sync_seconds``         histo.  its slowest subtask's synchronous part
``epochal_last_checkpoint_*``               gauge   the latest completed one: ``duration_seconds``,
                                                    ``size_bytes``, ``alignment_seconds``,
                                                    ``sync_seconds``, ``timestamp_seconds``, ``id``
``epochal_worker_rss_bytes``                gauge   resident memory of each worker's process
``epochal_cec_*``                           both    a CEC job's own, per ``worker``
                                                    (``KindCoordinator.kind_metrics``): G_checks,
                                                    G_opens, open windows, extent (output and
                                                    input tuples), replayed tuples and frames,
                                                    logged frames and bytes, recoveries and the
                                                    latest one's seconds (``epochal.cec.coordination``)
=========================================== ======= =================================================

Counters of records are those of the current attempt for operators and subtasks (a restart
starts them again, as in Flink); ``epochal_job_source_records_total`` counts across attempts.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from epochal.control.kinds import checkpoints_of
from epochal.control.lifecycle import JobStatus
from epochal.rest.directory import JobDirectory, ServedJob

#: Histogram buckets (upper bounds) of checkpoint times, seconds.
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: ... and of checkpoint sizes, bytes.
BYTES_BUCKETS = tuple(float(1 << n) for n in range(10, 41, 3))  # 1 KiB .. 1 TiB
#: The histograms: family name -> (statistics field, buckets, help).
HISTOGRAMS: dict[str, tuple[str, tuple[float, ...], str]] = {
    "epochal_checkpoint_duration_seconds": ("duration_s", SECONDS_BUCKETS,
                                            "Completed checkpoints and savepoints: seconds from trigger to complete"),
    "epochal_checkpoint_size_bytes": ("bytes", BYTES_BUCKETS, "Completed checkpoints and savepoints: bytes written"),
    "epochal_checkpoint_alignment_seconds": ("alignment_s_max", SECONDS_BUCKETS,
                                             "Completed checkpoints: the slowest subtask's barrier alignment, seconds"),
    "epochal_checkpoint_sync_seconds": ("sync_s_max", SECONDS_BUCKETS,
                                        "Completed checkpoints: the slowest subtask's synchronous part, seconds"),
}
#: The latest completed checkpoint's gauges: name suffix -> (statistics field, help).
LAST: dict[str, tuple[str, str]] = {
    "duration_seconds": ("duration_s", "seconds from trigger to complete"),
    "size_bytes": ("bytes", "bytes written"),
    "alignment_seconds": ("alignment_s_max", "the slowest subtask's barrier alignment, seconds"),
    "sync_seconds": ("sync_s_max", "the slowest subtask's synchronous part, seconds"),
    "timestamp_seconds": ("trigger_time", "when it was triggered, seconds since the epoch"),
    "id": ("checkpoint_id", "its checkpoint id"),
}


class CheckpointTotals:
    """A job's checkpoint counts and histograms, brought up to date with the statistics entries
    that ended since the previous scrape (entries are only ever appended)."""

    def __init__(self) -> None:
        self.seen = 0
        self.counts = {(kind, status): 0 for kind in ("checkpoint", "savepoint") for status in ("completed", "aborted")}
        self.buckets = {name: [0] * (len(bounds) + 1) for name, (_, bounds, _) in HISTOGRAMS.items()}
        self.sums = dict.fromkeys(HISTOGRAMS, 0.0)
        self.last: dict[str, Any] | None = None

    def update(self, entries: list[dict[str, Any]]) -> None:
        if len(entries) < self.seen:  # another list (cannot happen today): count afresh
            self.__init__()  # type: ignore[misc]
        for entry in entries[self.seen:]:
            completed = entry["status"] == "completed"
            self.counts[("savepoint" if entry.get("savepoint") else "checkpoint",
                         "completed" if completed else "aborted")] += 1
            if not completed:
                continue
            if self.last is None or entry["checkpoint_id"] >= self.last["checkpoint_id"]:
                self.last = entry
            for name, (field, bounds, _) in HISTOGRAMS.items():
                value = _number(entry.get(field))
                if value is None:
                    continue
                counts = self.buckets[name]
                counts[next((i for i, bound in enumerate(bounds) if value <= bound), len(bounds))] += 1
                self.sums[name] += value
        self.seen = len(entries)

    def histogram(self, name: str) -> tuple[list[tuple[str, float]], float]:
        """Cumulative ``(le, count)`` buckets (``+Inf`` last) and the sum."""
        bounds = HISTOGRAMS[name][1]
        running, buckets = 0, []
        for bound, count in zip((*[repr(b) for b in bounds], "+Inf"), self.buckets[name], strict=True):
            running += count
            buckets.append((bound, float(running)))
        return buckets, self.sums[name]


class JobCollector(Collector):
    """Metric families of every job a server serves (see the module docstring)."""

    def __init__(self, directory: JobDirectory) -> None:
        self.directory = directory
        self._totals: dict[str, CheckpointTotals] = {}
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        families = _Families()
        jobs = self.directory.jobs()
        with self._lock:  # two scrapes at once would add the same entries twice
            for key in [k for k in self._totals if k not in {j.job_id for j in jobs}]:
                del self._totals[key]
            for served in jobs:
                self._job(served, families)
        yield from families.all()

    def _job(self, served: ServedJob, out: _Families) -> None:
        jm = served.jobmaster
        job = [jm.job_id, jm.job_name]
        done = jm.done.is_set()
        status = jm.status
        for value in JobStatus:
            out.gauge("epochal_job_status", "1 for the job's current status", ["status"]).add_metric(
                [*job, value.value], 1.0 if value is status else 0.0)
        out.gauge("epochal_job_attempt", "The job attempt (0 until the first restart)").add_metric(job, jm.attempt)
        uptime = ((jm.ended_at if done else time.monotonic()) - jm.started_at) if jm.started_at else 0.0
        out.gauge("epochal_job_uptime_seconds", "Seconds since the job started (until it ended)").add_metric(
            job, max(uptime, 0.0))
        stats, records_base = jm.query(lambda kind: (checkpoints_of(kind).checkpoint_stats(),
                                                     checkpoints_of(kind).records_base))
        out.counter("epochal_job_restarts", "Restarts of the job so far").add_metric(job, len(jm.restart_history()))
        metrics = jm.snapshot_metrics()
        read = records_base + sum(int(m.get("source_records", 0)) for m in metrics.values())
        out.counter("epochal_job_source_records", "Records the job's sources read, each counted once (replays "
                    "after a restart not again)").add_metric(job, read)
        if served.outline.source_records is not None:
            out.gauge("epochal_job_source_records_expected", "Records the job's sources will read in all").add_metric(
                job, served.outline.source_records)
        self._subtasks(served, job, metrics, out)
        totals = self._totals.setdefault(jm.job_id, CheckpointTotals())
        totals.update(stats)
        self._checkpoints(job, totals, out)
        state = totals.last.get("state_bytes", {}) if totals.last else {}
        for vertex in served.outline.vertices:
            for operator in vertex.operators:
                if operator.uid in state:
                    out.gauge("epochal_operator_state_bytes", "Bytes of the operator's state in the latest completed "
                              "checkpoint", ["vertex", "vertex_name", "operator_uid", "operator_name"]).add_metric(
                        [*job, str(vertex.id), vertex.name, operator.uid, operator.name], state[operator.uid])
        for own in jm.query(lambda kind: kind.kind_metrics(metrics)):  # the job kind's own (CEC's)
            names = [label for label, _ in own.labels]
            family = out.counter(own.name, own.help, names) if own.kind == "counter" else \
                out.gauge(own.name, own.help, names)
            family.add_metric([*job, *(value for _, value in own.labels)], own.value)
        for worker, worker_metrics in sorted(metrics.items()):
            rss = _number(worker_metrics.get("rss_bytes"))
            if rss is not None:
                out.gauge("epochal_worker_rss_bytes", "Resident memory of the worker's process", ["worker"]).add_metric(
                    [*job, str(worker)], rss)

    def _subtasks(self, served: ServedJob, job: list[str], metrics: dict[int, dict[str, Any]],
                  out: _Families) -> None:
        reports = {key: report for worker_metrics in metrics.values()
                   for key, report in (worker_metrics.get("subtasks") or {}).items()}
        now = time.time()
        operator_labels = ["vertex", "vertex_name", "subtask", "operator_uid", "operator_name"]
        subtask_labels = ["vertex", "vertex_name", "subtask"]
        for vertex in served.outline.vertices:
            for index in range(vertex.parallelism):
                report = reports.get(f"{vertex.id}/{index}")
                if report is None:
                    continue
                where = [*job, str(vertex.id), vertex.name, str(index)]
                counts = report.get("operators") or {}
                for operator in vertex.operators:
                    if operator.uid not in counts:
                        continue
                    records_in, records_out = counts[operator.uid]
                    labels = [*where, operator.uid, operator.name]
                    out.counter("epochal_operator_records_in", "Records into the operator (this attempt)",
                                operator_labels).add_metric(labels, records_in)
                    out.counter("epochal_operator_records_out", "Records out of the operator's main output "
                                "(this attempt)", operator_labels).add_metric(labels, records_out)
                if "backpressured" in report:  # a CEC stage's subtask samples none
                    out.gauge("epochal_subtask_backpressured", "1 while the subtask's output waits for credit "
                              "(sampled at its last heartbeat)", subtask_labels).add_metric(
                        where, 1.0 if report.get("backpressured") else 0.0)
                busy = _number(report.get("busy_s"))
                if busy is not None:
                    out.counter("epochal_subtask_busy_seconds", "Seconds the subtask spent processing (this "
                                "attempt)", subtask_labels).add_metric(where, busy)
                watermark = _number(report.get("watermark"))
                if watermark is None:
                    continue
                out.gauge("epochal_subtask_watermark", "The subtask's event time (watermark), in the job's "
                          "event-time unit", subtask_labels).add_metric(where, watermark)
                lag = watermark_lag(watermark, now)
                if lag is not None:
                    out.gauge("epochal_subtask_watermark_lag_seconds", "Wall clock minus the watermark (watermarks "
                              "that are UNIX times in seconds or milliseconds)", subtask_labels).add_metric(where, lag)

    def _checkpoints(self, job: list[str], totals: CheckpointTotals, out: _Families) -> None:
        for status in ("completed", "aborted"):
            every = totals.counts[("checkpoint", status)] + totals.counts[("savepoint", status)]
            out.counter("epochal_checkpoints", "Checkpoints and savepoints that ended", ["status"]).add_metric(
                [*job, status], every)
            out.counter("epochal_savepoints", "Savepoints that ended", ["status"]).add_metric(
                [*job, status], totals.counts[("savepoint", status)])
        for name, (_, _, help_text) in HISTOGRAMS.items():
            buckets, total = totals.histogram(name)
            out.histogram(name, help_text).add_metric(job, buckets, total)
        last = totals.last
        if last is None:
            return
        for suffix, (field, help_text) in LAST.items():
            value = _number(last.get(field))
            if value is not None:
                family = out.gauge(f"epochal_last_checkpoint_{suffix}", f"The latest completed checkpoint: {help_text}")
                family.add_metric(job, value)


def watermark_lag(watermark: float, now: float) -> float | None:
    """``now`` minus ``watermark`` when the watermark reads as a UNIX time in seconds (2001 to
    2286) or milliseconds; None for any other event time (counters, the job's own units)."""
    if 1e9 <= watermark < 1e10:
        return now - watermark
    if 1e12 <= watermark < 1e13:
        return now - watermark / 1000
    return None


class _Families:
    """The metric families of one scrape, created on first use, in the order first used."""

    JOB = ["job_id", "job_name"]

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def _get(self, cls: type, name: str, help_text: str, labels: list[str]) -> Any:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = cls(name, help_text, labels=[*self.JOB, *labels])
        return family

    def gauge(self, name: str, help_text: str, labels: list[str] | None = None) -> GaugeMetricFamily:
        return self._get(GaugeMetricFamily, name, help_text, labels or [])

    def counter(self, name: str, help_text: str, labels: list[str] | None = None) -> CounterMetricFamily:
        return self._get(CounterMetricFamily, name, help_text, labels or [])

    def histogram(self, name: str, help_text: str) -> HistogramMetricFamily:
        return self._get(HistogramMetricFamily, name, help_text, [])

    def all(self) -> Iterator[Metric]:
        yield from self._families.values()


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def registry_for(directory: JobDirectory) -> CollectorRegistry:
    """A registry of its own (not prometheus_client's global one) holding one :class:`JobCollector`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(directory))
    return registry
