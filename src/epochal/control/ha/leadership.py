"""Running a job of any kind with high availability: standby, leader, takeover, end (papers/001 §4.5).

:func:`lead` is what a job kind runs once its spec has ``ha`` set (:mod:`epochal.dataflow.ha`,
:mod:`epochal.graph.ha`). The driver:

1. opens the job's HA services (:func:`~epochal.control.ha.services.open_services`: an unwritable
   store or an unreachable ZooKeeper fails here, in bounded time) under a job id every driver of
   the job shares (:func:`stable_job_id`), and compares the kind's fingerprint of its job with the
   job store's (another job under the same id fails at once);
2. joins the election (:class:`~epochal.control.ha.driver.ElectionDriver`) and, while a standby,
   starts its SparkSession and checks its executors' Python (and runs the kind's own warm-up),
   so a takeover only submits;
3. as leader (epoch *e*): stores the job and starts it with the kind's ``start``, given its
   :class:`~epochal.control.ha.fencing.Leadership` (checkpoint ids reserved past every earlier
   leader's, the workers' fence raised to *e*, checkpoint I/O fenced);
4. when the job ends, records its result (fenced): a finished job is never run again, and the
   standbys waiting for it return (:class:`JobEndedElsewhere`). Deposed (a newer leader, a lease
   not renewed), it cancels its workers and :meth:`HaJobClient.result` raises
   :class:`~epochal.errors.LeadershipLostError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from epochal.config import HighAvailabilityConfig
from epochal.control import executor_python, interrupts
from epochal.control.client import JobClient, JobResult
from epochal.control.ha.driver import ElectionDriver
from epochal.control.ha.election import ElectionTimings
from epochal.control.ha.fencing import Leadership
from epochal.control.ha.records import DriverInfo, JobRecord, JobResultRecord
from epochal.control.ha.services import Fenced, HaServices
from epochal.control.ha.stores import open_services
from epochal.control.job_registry import Registry, RegistryEntry
from epochal.control.jobmaster import JobMaster, JobStatus
from epochal.control.jobspec import JobSpec
from epochal.errors import EpochalError, HighAvailabilityError, LeadershipLostError

_log = logging.getLogger("epochal")

#: Set to 1 to turn fencing off (a deposed leader goes on committing): only to show it is needed.
UNSAFE_NO_FENCING = "EPOCHAL_HA_UNSAFE_NO_FENCING"


def stable_job_id(job_name: str) -> str:
    """The job id every driver of the job ``job_name`` derives alike (when none is given)."""
    return hashlib.sha256(f"epochal-ha:{job_name}".encode()).hexdigest()[:12]


class HaRun:
    """One driver's part in an HA job: its election, and how its leadership ended."""

    def __init__(self, services: HaServices, election: ElectionDriver, job_name: str) -> None:
        self.services = services
        self.election = election
        self.job_name = job_name
        self.leadership: Leadership | None = None
        #: why this driver lost the leadership (empty while it has not)
        self.lost = ""
        #: the job's end was recorded in the HA result store by this driver
        self.recorded = False
        #: this driver steps down (Ctrl-C) without ending the job: a standby takes over
        self.stepping_down = False
        #: what the job's end adds to its stored result (a graph job: its supersteps), if anything
        self.details: Callable[[], dict[str, Any]] | None = None

    def lost_error(self) -> LeadershipLostError:
        epoch = self.leadership.epoch if self.leadership else "?"
        return LeadershipLostError(
            f"{self.election.me.describe()} lost the leadership of job '{self.job_name}' (id "
            f"{self.services.job_id}, epoch {epoch}): {self.lost}. It stopped its workers and committed nothing "
            "more; the job goes on under the new leader.")

    def job_ended(self, jobmaster: JobMaster) -> None:
        """The JobMaster's end hook: record how the job ended, unless this driver was deposed or
        steps down (then the job is not over: a standby resumes it)."""
        self.election.stop()
        if self.lost or self.stepping_down or self.leadership is None:
            return
        status = jobmaster.status
        record = JobResultRecord(status.value.upper(), time.time(), self.election.me.describe(),
                                 error=str(jobmaster.error).splitlines()[0] if jobmaster.error else "",
                                 details=self.details() if self.details is not None and not jobmaster.error else {})
        try:
            self.services.put_result(self.leadership.epoch, record)
            self.recorded = True
            self.services.close()
        except Fenced as error:
            self.lost = f"recording the job's end was refused: {error}"
        except Exception as error:  # noqa: BLE001 - the store is unreachable: a standby runs it again
            self.lost = f"recording the job's end failed ({type(error).__name__}: {error})"


class HaJobClient(JobClient):
    """The client of a job this driver leads: :meth:`result` raises
    :class:`LeadershipLostError` if it was deposed (or could not record the job's end)."""

    def __init__(self, jobmaster: JobMaster, run: HaRun) -> None:
        super().__init__(jobmaster)
        self.run = run

    def result(self, timeout: float | None = None) -> JobResult:
        try:
            result = super().result(timeout)
        except EpochalError:
            if self.run.lost:
                raise self.run.lost_error() from None
            raise
        if self.run.lost:
            raise self.run.lost_error()
        return result

    def cancel_and_describe(self, reason: str, timeout: float | None = None) -> str:
        """This driver gives up (Ctrl-C, ``execute``'s timeout): it steps down without ending the
        job, which a standby resumes. ``cancel()`` ends the job for good."""
        self.run.stepping_down = True
        return super().cancel_and_describe(reason, timeout)


@dataclasses.dataclass(frozen=True)
class HaJob:
    """What :func:`lead` needs of a job of any kind: the kind's name (``epochal list``), the
    fingerprint that makes two drivers' jobs the same, the pickled job for the job store (made
    only by a leader), how to start it once this driver leads (its checkpoint I/O fenced by the
    :class:`Leadership` given), and what the job's end adds to its stored result (``details``)."""

    kind: str
    fingerprint: str
    blob: Callable[[], bytes]
    start: Callable[[Leadership], JobClient]
    details: Callable[[], dict[str, Any]] | None = None
    #: what the kind pays for while this driver is a standby, so a takeover only submits
    warm_up: Callable[[], None] | None = None


def lead(spec: JobSpec, job: HaJob) -> JobClient:
    """Run ``job`` with high availability, whatever its kind: join the election under the job's
    id, wait as a standby (Spark warmed up meanwhile) until this driver leads, then store the job
    and start it with its :class:`Leadership`; returns its client. Raises
    :class:`JobEndedElsewhere` if the job ended under another driver, and
    :class:`~epochal.errors.LeadershipLostError` if deposed while it started."""
    config = spec.ha
    if config is None:
        raise ValueError(f"job '{spec.name}' has no high availability settings")
    job_name = spec.name
    job_id = config.job_id or stable_job_id(job_name)
    fingerprint = job.fingerprint
    services = open_services(config.uri, job_id, session_timeout=config.lease_timeout,
                             connect_timeout=config.connect_timeout)
    _check_plan(services, job_name, fingerprint)
    ended = services.result()
    if ended is not None:
        services.close()
        raise JobEndedElsewhere(job_name, job_id, ended)
    me = DriverInfo.this_process()
    timings = ElectionTimings(config.lease_timeout, config.renew_every, config.poll_interval)
    election = ElectionDriver(services, me, timings).start()
    run = HaRun(services, election, job_name)
    run.details = job.details
    _announce(job_id, job_name, config.uri, "standby", job.kind)
    try:
        _log.info("job '%s' (id %s): %s joins the election at %s", job_name, job_id, me.describe(), config.uri)
        warm_up = _WarmUp(spec, job.warm_up)
        while not election.decided.wait(0.2):
            if interrupts.take_deferred():  # a standby may wait for ever: Ctrl-C must not wait with it
                raise KeyboardInterrupt(f"job '{job_name}': this standby driver was interrupted (Ctrl-C)")
        if election.outcome == "ended":
            election.stop()
            result = services.result()
            assert result is not None
            raise JobEndedElsewhere(job_name, job_id, result)
        warm_up.join()
        assert election.epoch is not None
        fencing = os.environ.get(UNSAFE_NO_FENCING) != "1"
        _log.warning("job '%s' (id %s): %s leads it (epoch %d)", job_name, job_id, me.describe(), election.epoch)
        stored = services.put_job(JobRecord(job_id, job_name, fingerprint, time.time(), me.describe()), job.blob())
        if stored.fingerprint != fingerprint:
            raise _other_plan(job_name, job_id, fingerprint, stored)
        run.leadership = Leadership(services, election, election.epoch, spec.checkpoint.retained, fencing)
        client = job.start(run.leadership)
    except JobEndedElsewhere:
        _announce(job_id, job_name, config.uri, "", job.kind)
        raise
    except Fenced as error:  # deposed while it started (its lease ran out meanwhile)
        run.lost = f"a fenced write was refused as it started the job: {error}"
        election.stop()
        raise run.lost_error() from None
    except BaseException:
        run.stepping_down = True
        election.resign()
        raise
    jobmaster: JobMaster = client._jobmaster
    jobmaster.on_end.append(lambda: run.job_ended(jobmaster))

    def deposed(reason: str) -> None:
        run.lost = reason
        if fencing:
            jobmaster.cancel(f"this driver lost the leadership of the job: {reason}")
        else:
            _log.error("fencing is off (%s=1): this deposed driver goes on", UNSAFE_NO_FENCING)

    election.on_deposed.append(deposed)
    if election.deposed.is_set():  # deposed while it started
        deposed(election.deposed_reason)
    _announce(job_id, job_name, config.uri, "leader", job.kind)
    return HaJobClient(jobmaster, run)


def _announce(job_id: str, job_name: str, uri: str, role: str, kind: str) -> None:
    """This driver's entry in the per-user job registry, for ``epochal list``: a standby's (no
    address), the leader's (the served job's entry, marked), or none (``role`` empty)."""
    pid = os.getpid()
    try:
        registry = Registry()
        if role == "standby":
            registry.add(RegistryEntry(job_id, job_name, kind, "", "", pid, time.time(), role, uri))
            return
        served = [e for e in registry.entries() if e.job_id == job_id and e.pid == pid and e.served]
        if role and served:
            registry.add(dataclasses.replace(served[0], role=role, ha=uri))
        elif not served:
            registry.remove(job_id, pid=pid)
    except OSError as error:
        _log.debug("the job registry cannot be written: %s", error)


class JobEndedElsewhere(HighAvailabilityError):
    """The job had ended under another driver (its result is in the HA store): nothing ran here.
    ``execute`` turns it into its result (:meth:`result`); ``execute_async`` raises it."""

    def __init__(self, job_name: str, job_id: str, record: JobResultRecord) -> None:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.ended_at))
        self.where = f"job '{job_name}' (id {job_id}) ended {record.status} at {when} under {record.driver}"
        super().__init__(f"{self.where}; a job that ended is not run again under its id")
        self.job_name, self.job_id, self.record = job_name, job_id, record

    def result(self) -> JobResult:
        """The stored end as a result: FINISHED returns one (``ended_elsewhere`` set); FAILED and
        CANCELLED raise as they did under the driver that ran the job."""
        from epochal.errors import JobCancelledError, JobFailedError

        record = self.record
        if record.status == JobStatus.FAILED.value.upper():
            raise JobFailedError(f"{self.where}: {record.error}. A failed job is not run again under its id: give "
                                 "enable_high_availability(job_id=...) another id to run it anew")
        if record.status == JobStatus.CANCELLED.value.upper():
            raise JobCancelledError(f"{self.where}; it is not run again under its id")
        _log.warning("%s; a finished job is not run again", self.where)
        return JobResult(self.job_name, self.job_id, 0.0, ended_elsewhere=record.to_json())


def _check_plan(services: HaServices, job_name: str, fingerprint: str) -> None:
    stored = services.job()
    if stored is not None and stored.fingerprint != fingerprint:
        services.close()
        raise _other_plan(job_name, services.job_id, fingerprint, stored)


def _other_plan(job_name: str, job_id: str, fingerprint: str, stored: JobRecord) -> HighAvailabilityError:
    return HighAvailabilityError(
        f"job id {job_id} ('{job_name}') is taken in the HA store by a job with another plan (fingerprint "
        f"{stored.fingerprint}, this one {fingerprint}; stored by {stored.created_by}): a standby must run the "
        "same job. Give this job another id (enable_high_availability(..., job_id=...)) or another name")


class _WarmUp:
    """While a standby: start the SparkSession, check the executors' Python and run the kind's
    warm-up (the REST server's imports) on a thread of its own, so that a takeover only submits the job, and a job
    that ends elsewhere meanwhile is known at once. :meth:`join` waits for it and raises what it
    raised (Java missing ...)."""

    def __init__(self, spec: JobSpec, kind_warm_up: Callable[[], None] | None) -> None:
        self.spec = spec
        self.kind_warm_up = kind_warm_up
        self.error: EpochalError | None = None
        self.thread = threading.Thread(target=self._run, name="epochal-ha-warm-up", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            spark = self.spec.spark.get()
            executor_python.check_worker_python(spark, self.spec.engine.registration_timeout)
            if self.kind_warm_up is not None:  # e.g. the REST server's imports: seconds at a takeover, paid now
                self.kind_warm_up()
            _log.info("high availability: Spark is ready for a takeover")
        except EpochalError as error:
            self.error = error
        except Exception as error:  # noqa: BLE001 - found again, and reported, when the job starts
            _log.debug("warming Spark up as a standby failed: %s", error)

    def join(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


def describe(config: HighAvailabilityConfig, job_id: str) -> dict[str, Any]:
    """The job's leader and standbys as the HA store knows them (``epochal list``)."""
    services = open_services(config.uri, job_id, session_timeout=config.lease_timeout,
                             connect_timeout=config.connect_timeout)
    try:
        return services.describe()
    finally:
        services.close()
