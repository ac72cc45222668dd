"""Handles the driver gets for a submitted job: :class:`JobClient` while it runs,
:class:`JobResult` when it finished."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from epochal.control.jobmaster import JobMaster, JobStatus
from epochal.control.kinds import KindCoordinator, checkpoints_of, collected_of
from epochal.control.source_progress import SourceVertex, job_share
from epochal.errors import EpochalError, JobTimeoutError, SavepointError


@dataclass(repr=False)
class JobResult:
    """What a finished job produced: collected records and final metrics.

    ``print(result)`` shows a one-line summary (job, duration, records, checkpoints, restarts,
    records collected); the details stay in the fields (``metrics`` per worker, ``checkpoints``
    per checkpoint and subtask, ``restarts``, ``collected``)."""

    job_name: str
    job_id: str
    duration_s: float
    collected: dict[str, list[Any]] = field(default_factory=dict)
    metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: Statistics of every checkpoint (completed and aborted), in trigger order.
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    #: One entry per restart: the failed attempt, its cause, and the seconds to recover.
    restarts: list[dict[str, Any]] = field(default_factory=list)
    #: Where this job's checkpoints are (empty without checkpointing).
    checkpoint_path: str = ""
    #: Source records read before the last attempt, covered by the checkpoint it restored.
    records_before_last_attempt: int = 0
    #: State of the ``restore_from`` checkpoint that no operator claimed and that was skipped
    #: because of ``allow_non_restored_state=True``: uid, name, operation and what state it held.
    non_restored_state: list[dict[str, Any]] = field(default_factory=list)
    #: High availability: the job had already ended under another driver (the HA result store's
    #: record: status, when, which driver); nothing ran here. None when it ran here.
    ended_elsewhere: dict[str, Any] | None = None

    def __repr__(self) -> str:
        if self.ended_elsewhere is not None:
            return (f"JobResult(job '{self.job_name}' (id {self.job_id}) had already ended "
                    f"{self.ended_elsewhere['status']} under {self.ended_elsewhere['driver']}; not run again)")
        aborted = len(self.checkpoints) - self.completed_checkpoints
        checkpoints = f"{self.completed_checkpoints} checkpoint{'s' * (self.completed_checkpoints != 1)}" + (
            f" ({aborted} aborted)" if aborted else "")
        restarts = f"{len(self.restarts)} restart{'s' * (len(self.restarts) != 1)}"
        collected = sum(len(records) for records in self.collected.values())
        return (f"JobResult(job '{self.job_name}' (id {self.job_id}) finished in {self.duration_s:.1f} s: "
                f"{self.records_processed:,} records, {checkpoints}, {restarts}"
                + (f", {collected:,} records collected" if self.collected else "") + ")")

    __str__ = __repr__

    @property
    def completed_checkpoints(self) -> int:
        return sum(1 for c in self.checkpoints if c["status"] == "completed")

    @property
    def records_processed(self) -> int:
        """Records the job's sources produced, each counted once: not once per operator or
        chain, and records replayed after a restart are not counted again."""
        return self.records_before_last_attempt + sum(m.get("source_records", 0) for m in self.metrics.values())

    @property
    def late_records_dropped(self) -> int:
        """Records event-time windows dropped because their window had already fired (in the
        last attempt)."""
        return sum(m.get("late_records_dropped", 0) for m in self.metrics.values())

    def operator_records(self) -> dict[str, int]:
        """Records that entered each operator, summed over its subtasks."""
        totals: dict[str, int] = {}
        for metrics in self.metrics.values():
            for key, count in metrics.get("operators", {}).items():
                name = key.rsplit("#", 1)[0]
                totals[name] = totals.get(name, 0) + count
        return totals


class JobClient:
    """A running job: wait for it, cancel it, look at its workers and metrics.

    It runs on the user's thread while the JobMaster coordinates on its own: everything it
    reads goes through the JobMaster's query methods (which take its lock) or is a single
    reference to an immutable value (status, attempt, error)."""

    def __init__(self, jobmaster: JobMaster, source_records: int | None = None, prints: bool = False,
                 sources: tuple[SourceVertex, ...] = ()) -> None:
        self._jobmaster = jobmaster
        #: the records the job's sources will read in all, when every source knows (None: unknown)
        self.source_records = source_records
        #: the source vertices, when every one reports progress in a unit of its own (a text
        #: file source's bytes; see :mod:`epochal.control.source_progress`)
        self.sources = sources
        #: whether the job has a ``print()`` sink (its workers write to the console)
        self.prints = prints

    def records_read(self) -> int:
        """Records the job's sources read so far, each counted once across restarts (what
        ``JobResult.records_processed`` will say)."""
        jm = self._jobmaster
        return jm.query(lambda kind: checkpoints_of(kind).records_base) + sum(
            m.get("source_records", 0) for m in jm.snapshot_metrics().values())

    def source_share(self) -> float | None:
        """The share of their input the sources read so far (0 to 1), where they know their size
        (:func:`~epochal.control.source_progress.job_share`); None: unknown or unbounded."""
        sources = self.sources
        return job_share(self.records_read() if self.source_records else 0, self.source_records, sources,
                         self._jobmaster.snapshot_metrics() if sources else {})

    @property
    def dashboard_url(self) -> str:
        """The job's page on its driver's dashboard, with the token that opens it ("" when the
        job is not served over REST). Whoever has it can steer the job: keep it to yourself."""
        return self._jobmaster.dashboard_url

    @property
    def kind(self) -> KindCoordinator:
        """The job kind's coordination on the JobMaster (a graph job's barrier and timings, a CEC
        job's recovery history); read it once the job ended, or through its own thread-safe queries."""
        return self._jobmaster.kind

    @property
    def job_id(self) -> str:
        return self._jobmaster.job_id

    @property
    def status(self) -> JobStatus:
        return self._jobmaster.status

    def workers(self) -> dict[int, dict[str, Any]]:
        """Registered workers: pid, host, hostname, data port and ``attempt`` (the Spark task
        attempt) of each (for tools and fault injection)."""
        return self._jobmaster.worker_infos()

    def jobmaster_address(self) -> tuple[str, int]:
        return self._jobmaster.address

    def metrics(self) -> dict[int, dict[str, Any]]:
        """The latest metrics of each worker (sent with its heartbeats)."""
        return self._jobmaster.snapshot_metrics()

    @property
    def done(self) -> bool:
        """Whether the job ended (finished, failed or was cancelled)."""
        return self._jobmaster.done.is_set()

    def collected(self, sink: Any) -> list[Any]:
        """``collected(handle)``: the records the ``collect()`` sink whose handle (what
        ``stream.collect()`` returned; or its ``collect_id``) is ``sink`` published so far, a
        copy that grows from call to call while the job runs. Under checkpointing records appear
        when the checkpoint covering them completes, each exactly once across restarts; without
        checkpointing as they arrive. ``handle.get()`` returns the same."""
        collect_id = getattr(sink, "collect_id", sink)
        return self._jobmaster.query(lambda kind: collected_of(kind).published(collect_id))

    def wait_until_running(self, timeout: float = 120.0) -> None:
        """Block until every worker has registered (or the job ended)."""
        deadline = time.monotonic() + timeout
        jm = self._jobmaster
        while time.monotonic() < deadline and not jm.done.is_set():
            if jm.all_running():
                return
            time.sleep(0.02)
        if jm.done.is_set() and jm.error is not None:
            raise jm.error
        if not jm.done.is_set():
            raise TimeoutError(f"job not running after {timeout} s (status {jm.status.value})")

    def cancel(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop the job: workers stop cleanly and the Spark job ends (killed if they do not)."""
        self._jobmaster.cancel()
        if wait:
            self._jobmaster.done.wait(timeout)

    def cancel_and_describe(self, reason: str, timeout: float | None = None) -> str:
        """Cancel the job, wait for it to end (``timeout``: the JobMaster's cancel_timeout plus a
        margin) and say how it ended: whether every worker stopped by itself or its Spark job had to
        be killed. A second Ctrl-C while waiting kills the Spark job at once."""
        jm = self._jobmaster
        if timeout is None:
            timeout = jm.config.cancel_timeout + 10.0
        jm.cancel(reason)
        try:
            ended = jm.done.wait(timeout)
        except KeyboardInterrupt:
            from epochal.control.interrupts import deferred_interrupts

            with deferred_interrupts():
                jm.cancel_spark_job()
            return (f"interrupted again while its {jm.num_workers} workers were stopping: its Spark job was "
                    "killed")
        if not ended:
            return (f"it was told to cancel, but had not stopped after {timeout:g} s (status "
                    f"{jm.status.value}); its Spark job group epochal-{jm.job_id} may still be running")
        if jm.status == JobStatus.FINISHED:
            return "it finished before the cancel took effect"
        if jm.status == JobStatus.FAILED:
            return f"it failed before the cancel took effect: {str(jm.error).splitlines()[0]}"
        if jm.spark_done:
            return f"all {jm.num_workers} workers stopped and its Spark job ended"
        if not jm.registered_workers():
            return f"none of its {jm.num_workers} workers had started yet, so its Spark job was killed"
        return (f"its workers did not all stop within cancel_timeout ({jm.config.cancel_timeout:g} s), so its "
                "Spark job was killed")

    def result(self, timeout: float | None = None) -> JobResult:
        """Wait for the job to end; return its result or raise the error that ended it.

        Raises :class:`~epochal.errors.JobTimeoutError` (a ``TimeoutError``) if the job is still
        running after ``timeout`` seconds; the job keeps running.
        """
        if not self._jobmaster.done.wait(timeout):
            raise JobTimeoutError(
                f"job '{self._jobmaster.job_name}' (id {self.job_id}) did not finish within {timeout:g} s and is "
                f"still running (status {self.status.value}); call result() again to keep waiting, or cancel() "
                "to stop it")
        jm = self._jobmaster
        if jm.error is not None:
            raise _fresh(jm.error)
        collected, path, records_base, skipped = jm.query(lambda kind: (
            collected_of(kind).published_all(), checkpoints_of(kind).checkpoint_path,
            checkpoints_of(kind).records_base, checkpoints_of(kind).non_restored_state))
        return JobResult(jm.job_name, jm.job_id, jm.ended_at - jm.started_at, collected, jm.snapshot_metrics(),
                         self.checkpoint_stats(), jm.restart_history(), path, records_base,
                         non_restored_state=skipped)

    # ------------------------------------------------------------------ savepoints
    def trigger_savepoint(self, target_dir: str | None = None, format: str = "canonical",
                          timeout: float | None = None) -> str:
        """Take a savepoint of the running job, which keeps running; returns its path (a directory
        of its own under ``target_dir``, default ``CheckpointConfig.savepoint_dir``), to pass as
        ``execute(restore_from=...)``. ``format``: ``canonical`` (every state backend restores
        it) or ``native``.

        Raises :class:`~epochal.errors.SavepointError` if it cannot be taken (the job is not
        running, another savepoint is in progress, the directory is not writable, a worker failed
        while writing it), and :class:`~epochal.errors.JobTimeoutError` after ``timeout`` seconds
        (the savepoint may still complete).
        """
        return self._savepoint(target_dir, format, stop=False, drain=False, timeout=timeout)

    def stop_with_savepoint(self, target_dir: str | None = None, drain: bool = False,
                            timeout: float | None = None, format: str = "canonical") -> str:
        """Take a savepoint and stop the job at it; returns the savepoint's path once the job ended.

        Without ``drain`` the sources read nothing after the savepoint's barrier, so nothing after
        it reaches a sink: a job restored from it continues exactly where this one stopped. With
        ``drain=True`` the sources end first: the maximum watermark flows and every event-time
        window and timer fires, then the savepoint is taken (Flink's ``stop --drain``). ``format``
        as for :meth:`trigger_savepoint`. Raises as :meth:`trigger_savepoint`; a failed savepoint
        leaves the job running."""
        path = self._savepoint(target_dir, format, stop=True, drain=drain, timeout=timeout)
        if not self._jobmaster.done.wait(timeout):
            raise JobTimeoutError(f"job '{self._jobmaster.job_name}' took savepoint {path} but did not stop within "
                                  f"{timeout:g} s (status {self.status.value})")
        return path

    def _savepoint(self, target_dir: str | None, format: str, stop: bool, drain: bool,
                   timeout: float | None) -> str:
        directory = target_dir or self._jobmaster.query(lambda kind: checkpoints_of(kind).default_savepoint_dir)
        if not directory:
            raise SavepointError(f"job '{self._jobmaster.job_name}' has no default savepoint directory: "
                                 "pass target_dir")
        status = self._jobmaster.request_savepoint(directory, format, stop=stop, drain=drain)
        if not status.wait(timeout):
            raise JobTimeoutError(f"savepoint {status.location} of job '{self._jobmaster.job_name}' did not "
                                  f"complete within {timeout:g} s; it may still complete")
        if status.error is not None:
            raise SavepointError(status.error)
        return status.location

    def checkpoint_stats(self) -> list[dict[str, Any]]:
        """Statistics of the checkpoints so far (also appended to checkpoint_stats.jsonl)."""
        return self._jobmaster.query(lambda kind: checkpoints_of(kind).checkpoint_stats())

    @property
    def checkpoint_path(self) -> str:
        """Where this job's checkpoints go (empty without checkpointing); usable as ``restore_from``."""
        return self._jobmaster.query(lambda kind: checkpoints_of(kind).checkpoint_path)

    def restarts(self) -> list[dict[str, Any]]:
        """One entry per restart so far: the failed attempt, its cause, and (once back)
        ``recovered_s`` (failure detected -> every worker restored and started) and ``resumed_s``
        (failure detected -> the first record processed by the new attempt)."""
        return self._jobmaster.restart_history()

    @property
    def attempt(self) -> int:
        """The current job attempt (0 until the first restart)."""
        return self._jobmaster.attempt


def _fresh(error: EpochalError) -> EpochalError:
    """Raise a copy so the traceback points at the caller, not at a previous raise."""
    try:
        copy = type(error)(*error.args)
        copy.__dict__.update(error.__dict__)
        return copy
    except Exception:
        return error
