"""The job lifecycle: a pure state machine over :class:`JobStatus`, owned by the JobMaster's machine.

Events in, instructions out: :class:`~epochal.control.jobmaster_machine.JobMasterMachine` feeds
:class:`JobLifecycle` typed lifecycle events and turns the instructions ``handle`` returns into
its own, which the JobMaster (the driver, owning the sockets, threads, timers and the Spark job)
carries out. No sockets, threads or clocks inside: time is an event field.

``TRANSITIONS`` is the whole lifecycle, ``{(status, event type): new status}``. ``IGNORED`` names
the pairs that are legal but change nothing (a cancel after the job is already stopping, a
failure report while the attempt is already being torn down). Any other pair is a bug in the
JobMaster's machine and raises :class:`IllegalTransition`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from epochal.messages import Cancel, Shutdown, ToWorker


class JobStatus(enum.Enum):
    """Where a job is in its life."""

    CREATED = "created"
    DEPLOYING = "deploying"
    RUNNING = "running"
    FINISHING = "finishing"
    FINISHED = "finished"
    FAILING = "failing"
    RESTARTING = "restarting"
    FAILED = "failed"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELLED)


#: The grace period after the first failure, in which a more specific cause may still arrive.
FAILURE_GRACE_S = 0.5


# ---------------------------------------------------------------------- events
@dataclass(frozen=True)
class Started:
    """The JobMaster opened for registrations and submitted the first attempt's Spark job."""


@dataclass(frozen=True)
class AllRegistered:
    """Every worker of the current attempt registered: the graph is deployed to them."""


@dataclass(frozen=True)
class AllFinished:
    """Every worker finished, and the job does not checkpoint: shut down at once."""


@dataclass(frozen=True)
class FinalCheckpointCommitted:
    """Every worker committed the final checkpoint (taken once all had finished): shut down."""


@dataclass(frozen=True)
class FailureReported:
    """A worker, the Spark job, a timer or the checkpoint coordinator reported a failure."""

    now: float


@dataclass(frozen=True)
class RestartDecided:
    """The failure grace period passed and the restart strategy allows another attempt."""

    reason: str


@dataclass(frozen=True)
class NewAttempt:
    """The failed attempt's Spark job is gone and the restart delay passed: redeploy."""


@dataclass(frozen=True)
class RestartsExhausted:
    """The failure grace period passed and the job may not restart (again): it fails."""


@dataclass(frozen=True)
class RegistrationTimedOut:
    """Not every worker registered in time (too few Spark task slots): the job fails."""


@dataclass(frozen=True)
class RestoreUnreadable:
    """The checkpoint the attempt would restore cannot be read: the job fails."""


@dataclass(frozen=True)
class CancelDecided:
    """The user cancelled the job."""

    reason: str


@dataclass(frozen=True)
class SparkStopped:
    """The Spark job ended while the job was finishing or cancelling."""


@dataclass(frozen=True)
class StopDeadlinePassed:
    """The workers did not stop in time while the job was finishing or cancelling."""


LifecycleEvent = (Started | AllRegistered | AllFinished | FinalCheckpointCommitted | FailureReported
                  | RestartDecided | NewAttempt | RestartsExhausted | RegistrationTimedOut | RestoreUnreadable
                  | CancelDecided | SparkStopped | StopDeadlinePassed)


# ---------------------------------------------------------------------- instructions
@dataclass(frozen=True)
class TellWorkers:
    """Send ``message`` to every registered worker."""

    message: ToWorker


@dataclass(frozen=True)
class KillSparkJob:
    """Cancel the Spark job running the workers."""


@dataclass(frozen=True)
class StartAttempt:
    """Start the next job attempt (new workers, a new Spark job)."""


Instruction = TellWorkers | KillSparkJob | StartAttempt


class IllegalTransition(RuntimeError):
    """A lifecycle event that cannot happen in the job's current status."""


_S = JobStatus
#: The lifecycle: (status, event type) -> new status.
TRANSITIONS: dict[tuple[JobStatus, type], JobStatus] = {
    (_S.CREATED, Started): _S.DEPLOYING,
    (_S.DEPLOYING, AllRegistered): _S.RUNNING,
    (_S.DEPLOYING, RegistrationTimedOut): _S.FAILED,
    (_S.DEPLOYING, RestoreUnreadable): _S.FAILED,
    (_S.RUNNING, AllFinished): _S.FINISHING,
    (_S.RUNNING, FinalCheckpointCommitted): _S.FINISHING,
    (_S.DEPLOYING, FailureReported): _S.FAILING,
    (_S.RUNNING, FailureReported): _S.FAILING,
    (_S.FINISHING, FailureReported): _S.FAILING,
    (_S.FAILING, FailureReported): _S.FAILING,  # a later cause, ranked when the grace period ends
    (_S.FAILING, RestartDecided): _S.RESTARTING,
    (_S.FAILING, RestartsExhausted): _S.FAILED,
    (_S.RESTARTING, NewAttempt): _S.DEPLOYING,
    (_S.FINISHING, SparkStopped): _S.FINISHED,
    (_S.FINISHING, StopDeadlinePassed): _S.FINISHED,
    (_S.CANCELLING, SparkStopped): _S.CANCELLED,
    (_S.CANCELLING, StopDeadlinePassed): _S.CANCELLED,
    **{(status, CancelDecided): _S.CANCELLING
       for status in (_S.DEPLOYING, _S.RUNNING, _S.FINISHING, _S.FAILING, _S.RESTARTING)},
}
#: Legal events that change nothing in these states.
IGNORED: frozenset[tuple[JobStatus, type]] = frozenset(
    {(status, CancelDecided) for status in (_S.CREATED, _S.CANCELLING, _S.FINISHED, _S.FAILED, _S.CANCELLED)}
    | {(status, FailureReported) for status in (_S.RESTARTING, _S.CANCELLING, _S.FINISHED, _S.FAILED,
                                                _S.CANCELLED)})


class JobLifecycle:
    """The job's status, changed only through ``handle``."""

    def __init__(self) -> None:
        self.status = JobStatus.CREATED
        #: When the job entered FAILING (the start of the failure grace period).
        self.failing_since = 0.0

    def accepts(self, event: LifecycleEvent) -> bool:
        """Whether ``event`` changes the status now (it is neither ignored nor illegal)."""
        return (self.status, type(event)) in TRANSITIONS

    def handle(self, event: LifecycleEvent) -> list[Instruction]:
        key = (self.status, type(event))
        if key in IGNORED:
            return []
        if key not in TRANSITIONS:
            raise IllegalTransition(f"{type(event).__name__} cannot happen while the job is {self.status.value}")
        old, self.status = self.status, TRANSITIONS[key]
        if isinstance(event, FailureReported) and old != JobStatus.FAILING:
            self.failing_since = event.now
        if isinstance(event, CancelDecided):
            return [TellWorkers(Cancel(event.reason))]
        if isinstance(event, (AllFinished, FinalCheckpointCommitted)):
            return [TellWorkers(Shutdown())]
        if isinstance(event, RestartDecided):
            return [TellWorkers(Cancel(f"restarting: {event.reason}"))]
        if isinstance(event, StopDeadlinePassed):
            return [KillSparkJob()]
        return []

    def grace_over(self, now: float) -> bool:
        """FAILING for longer than the grace period: time to rank the failures and decide."""
        return self.status == JobStatus.FAILING and now - self.failing_since > FAILURE_GRACE_S
