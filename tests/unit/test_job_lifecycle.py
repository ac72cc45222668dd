"""The job lifecycle and restart sub-machines, driven with event sequences (no Spark, no sockets,
no clocks): the instructions they return and the statuses they reach."""

from __future__ import annotations

import pytest

from epochal.control.lifecycle import (
    FAILURE_GRACE_S,
    IGNORED,
    TRANSITIONS,
    AllFinished,
    AllRegistered,
    CancelDecided,
    FailureReported,
    FinalCheckpointCommitted,
    IllegalTransition,
    JobLifecycle,
    JobStatus,
    KillSparkJob,
    NewAttempt,
    RegistrationTimedOut,
    RestartDecided,
    RestartsExhausted,
    RestoreUnreadable,
    SparkStopped,
    StartAttempt,
    Started,
    StopDeadlinePassed,
    TellWorkers,
)
from epochal.control.restart import FixedDelayRestart, NoRestart, RestartMachine
from epochal.messages import Cancel, Shutdown

S = JobStatus
_EXAMPLES = {Started: Started(), AllRegistered: AllRegistered(), AllFinished: AllFinished(),
             FinalCheckpointCommitted: FinalCheckpointCommitted(), FailureReported: FailureReported(1.0),
             RestartDecided: RestartDecided("boom"), NewAttempt: NewAttempt(),
             RestartsExhausted: RestartsExhausted(), RegistrationTimedOut: RegistrationTimedOut(),
             RestoreUnreadable: RestoreUnreadable(), CancelDecided: CancelDecided("by test"),
             SparkStopped: SparkStopped(), StopDeadlinePassed: StopDeadlinePassed()}

#: The lifecycle as the JobMaster behaved before it was a table (status, event) -> new status.
_EXPECTED = {
    (S.CREATED, Started): S.DEPLOYING,
    (S.DEPLOYING, AllRegistered): S.RUNNING,
    (S.DEPLOYING, RegistrationTimedOut): S.FAILED,
    (S.DEPLOYING, RestoreUnreadable): S.FAILED,
    (S.DEPLOYING, FailureReported): S.FAILING,
    (S.DEPLOYING, CancelDecided): S.CANCELLING,
    (S.RUNNING, AllFinished): S.FINISHING,
    (S.RUNNING, FinalCheckpointCommitted): S.FINISHING,
    (S.RUNNING, FailureReported): S.FAILING,
    (S.RUNNING, CancelDecided): S.CANCELLING,
    (S.FINISHING, SparkStopped): S.FINISHED,
    (S.FINISHING, StopDeadlinePassed): S.FINISHED,
    (S.FINISHING, FailureReported): S.FAILING,
    (S.FINISHING, CancelDecided): S.CANCELLING,
    (S.FAILING, FailureReported): S.FAILING,
    (S.FAILING, RestartDecided): S.RESTARTING,
    (S.FAILING, RestartsExhausted): S.FAILED,
    (S.FAILING, CancelDecided): S.CANCELLING,
    (S.RESTARTING, NewAttempt): S.DEPLOYING,
    (S.RESTARTING, CancelDecided): S.CANCELLING,
    (S.CANCELLING, SparkStopped): S.CANCELLED,
    (S.CANCELLING, StopDeadlinePassed): S.CANCELLED,
}


def _at(status: JobStatus) -> JobLifecycle:
    machine = JobLifecycle()
    machine.status = status  # a machine placed in ``status`` for a one-transition test
    return machine


def test_the_table_is_the_expected_lifecycle():
    assert TRANSITIONS == _EXPECTED
    assert not set(TRANSITIONS) & IGNORED


@pytest.mark.parametrize(("status", "event_type"), sorted(_EXPECTED, key=lambda k: (k[0].value, k[1].__name__)),
                         ids=lambda v: getattr(v, "value", getattr(v, "__name__", str(v))))
def test_every_legal_transition(status, event_type):
    machine = _at(status)
    assert machine.accepts(_EXAMPLES[event_type])
    machine.handle(_EXAMPLES[event_type])
    assert machine.status == _EXPECTED[(status, event_type)]


def test_illegal_transitions_are_refused():
    refused = 0
    for status in JobStatus:
        for event_type, event in _EXAMPLES.items():
            if (status, event_type) in _EXPECTED:
                continue
            machine = _at(status)
            if (status, event_type) in IGNORED:
                assert machine.handle(event) == [] and machine.status == status
                continue
            with pytest.raises(IllegalTransition):
                machine.handle(event)
            assert machine.status == status
            refused += 1
    assert refused > 80
    # e.g. a job cannot finish while deploying, nor be redeployed once finished
    with pytest.raises(IllegalTransition, match="AllFinished cannot happen while the job is deploying"):
        _at(S.DEPLOYING).handle(AllFinished())
    with pytest.raises(IllegalTransition):
        _at(S.FINISHED).handle(NewAttempt())


def test_terminal_states_accept_nothing():
    for status in (S.FINISHED, S.FAILED, S.CANCELLED):
        assert status.is_terminal
        assert not any(_at(status).accepts(event) for event in _EXAMPLES.values())


def test_instructions():
    assert _at(S.RUNNING).handle(AllFinished()) == [TellWorkers(Shutdown())]
    assert _at(S.RUNNING).handle(FinalCheckpointCommitted()) == [TellWorkers(Shutdown())]
    assert _at(S.FAILING).handle(RestartDecided("boom")) == [TellWorkers(Cancel("restarting: boom"))]
    assert _at(S.FINISHING).handle(StopDeadlinePassed()) == [KillSparkJob()]
    assert _at(S.CANCELLING).handle(StopDeadlinePassed()) == [KillSparkJob()]
    assert _at(S.FINISHING).handle(SparkStopped()) == []
    assert _at(S.CREATED).handle(Started()) == []


@pytest.mark.parametrize("status", [S.DEPLOYING, S.RUNNING, S.FINISHING, S.FAILING, S.RESTARTING])
def test_cancel_in_each_active_state(status):
    machine = _at(status)
    assert machine.handle(CancelDecided("stop it")) == [TellWorkers(Cancel("stop it"))]
    assert machine.status == S.CANCELLING
    assert machine.handle(CancelDecided("again")) == []  # a second cancel changes nothing
    assert machine.handle(FailureReported(2.0)) == []  # workers failing while they are cancelled
    assert machine.handle(StopDeadlinePassed()) == [KillSparkJob()]
    assert machine.status == S.CANCELLED


def test_cancel_before_start_and_after_the_end_is_ignored():
    for status in (S.CREATED, S.FINISHED, S.FAILED, S.CANCELLED):
        machine = _at(status)
        assert machine.handle(CancelDecided("late")) == [] and machine.status == status


def test_failure_grace_period_starts_at_the_first_failure():
    machine = _at(S.RUNNING)
    machine.handle(FailureReported(10.0))
    machine.handle(FailureReported(10.3))  # a more specific cause: ranked later, no new grace period
    assert machine.failing_since == 10.0
    assert not machine.grace_over(10.0 + FAILURE_GRACE_S)
    assert machine.grace_over(10.0 + FAILURE_GRACE_S + 0.01)
    assert not _at(S.RUNNING).grace_over(100.0)


def _fail_and_decide(machine: JobLifecycle, restarts: RestartMachine, attempt: int, now: float) -> float | None:
    """A worker of ``attempt`` fails at ``now``; the grace period passes; the restart machine decides."""
    machine.handle(FailureReported(now))
    restarts.failure_seen(now)
    later = now + FAILURE_GRACE_S + 0.05
    assert machine.grace_over(later)
    delay = restarts.decide("worker_lost", later)
    if delay is None:
        machine.handle(RestartsExhausted())
    else:
        restarts.begin(attempt, f"worker of attempt {attempt} lost", delay, later)
        assert machine.handle(RestartDecided("lost")) == [TellWorkers(Cancel("restarting: lost"))]
    return delay


def _restart(machine: JobLifecycle, restarts: RestartMachine, now: float, delay: float) -> None:
    """The old Spark job ends; the next attempt starts after the delay, deploys and runs."""
    assert restarts.tick(now, spark_done=True) == []  # the delay has not passed
    assert restarts.tick(now + delay, spark_done=True) == [StartAttempt()]
    machine.handle(NewAttempt())
    restarts.new_attempt()
    assert machine.status == S.DEPLOYING
    machine.handle(AllRegistered())
    restarts.all_ready(now + delay + 1.0)
    restarts.processing(now + delay + 2.0)
    restarts.processing(now + delay + 9.0)  # only the first one counts


def test_restart_after_restart_then_the_strategy_gives_up():
    machine, restarts = JobLifecycle(), RestartMachine(FixedDelayRestart(attempts=2, delay=1.0), stop_timeout=5.0)
    machine.handle(Started())
    machine.handle(AllRegistered())
    assert _fail_and_decide(machine, restarts, 0, 100.0) == 1.0
    assert machine.status == S.RESTARTING
    _restart(machine, restarts, 100.6, 1.0)
    assert _fail_and_decide(machine, restarts, 1, 200.0) == 1.0
    _restart(machine, restarts, 200.6, 1.0)
    assert _fail_and_decide(machine, restarts, 2, 300.0) is None
    assert machine.status == S.FAILED
    assert [r["attempt"] for r in restarts.restarts] == [0, 1]
    assert restarts.restarts[0] == {"attempt": 0, "cause": "worker of attempt 0 lost", "detected": 100.0,
                                    "recovered_s": pytest.approx(2.6), "resumed_s": pytest.approx(3.6)}
    assert restarts.restarts[1]["detected"] == 200.0
    assert restarts.give_up_note() == "\n(after 2 restarts; restart strategy: fixed delay (2 attempts, 1 s apart))"


def test_failure_during_the_final_checkpoint_restarts():
    # all workers finished, the final checkpoint is pending (the job is still RUNNING): a worker dies
    machine, restarts = _at(S.RUNNING), RestartMachine(FixedDelayRestart(attempts=1, delay=0.0), stop_timeout=5.0)
    assert _fail_and_decide(machine, restarts, 0, 50.0) == 0.0
    assert machine.status == S.RESTARTING
    # the final checkpoint committed, the job is FINISHING (shutdown sent): a worker dies before stopping
    machine = _at(S.RUNNING)
    assert machine.handle(FinalCheckpointCommitted()) == [TellWorkers(Shutdown())]
    assert _fail_and_decide(machine, restarts, 0, 60.0) is None  # the single restart was used above
    assert machine.status == S.FAILED
    machine, restarts = _at(S.FINISHING), RestartMachine(FixedDelayRestart(attempts=1, delay=0.0), 5.0)
    assert _fail_and_decide(machine, restarts, 0, 60.0) == 0.0
    assert machine.status == S.RESTARTING


def test_restart_kills_a_spark_job_that_does_not_stop_once():
    restarts = RestartMachine(FixedDelayRestart(attempts=3, delay=2.0), stop_timeout=5.0)
    restarts.failure_seen(10.0)
    restarts.failure_seen(10.2)  # the first detection counts
    restarts.begin(0, "lost", 2.0, 10.6)
    assert restarts.restarts == [{"attempt": 0, "cause": "lost", "detected": 10.0}]
    assert restarts.tick(15.0, spark_done=False) == []
    assert restarts.tick(15.7, spark_done=False) == [KillSparkJob()]
    assert restarts.tick(16.0, spark_done=False) == []  # killed once
    assert restarts.tick(16.1, spark_done=True) == [StartAttempt()]


def test_a_damaged_checkpoint_is_never_restarted():
    strategy = FixedDelayRestart(attempts=3)
    restarts = RestartMachine(strategy, stop_timeout=5.0)
    assert restarts.decide("restore", 1.0) is None
    assert strategy.used == 0
    assert restarts.give_up_note() == ""
    assert RestartMachine(NoRestart(), 5.0).decide("user", 1.0) is None
