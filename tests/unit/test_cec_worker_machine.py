"""The CEC worker machine (cec/worker_machine.py) and the reports its coordinator takes, event by
event: the exact instructions each event yields in each phase, events out of phase (too early,
twice, after the worker finished), stops, deadlines, and events of types it does not take. No
sockets, no Spark."""

from __future__ import annotations

import typing

import pytest

from epochal.cec.coordination import CecCoordination
from epochal.cec.protocol import (
    BeginProcessing,
    CecCommand,
    Event,
    FinishJob,
    FirstInput,
    InputDone,
    Instruction,
    Rejoined,
    ReportFinished,
    Resumed,
    SetUp,
    SetUpWorker,
    StageDone,
)
from epochal.cec.worker import _DO
from epochal.cec.worker_machine import _COMMANDS, _HANDLERS, CecPhase, CecWorkerMachine
from epochal.control.kinds import ReplaceWorker
from epochal.dataflow.checkpointing.messages import TriggerCheckpoint
from epochal.graph.supersteps import RunSuperstep
from epochal.machines import OutOfPhase, TimePassed, UnknownEvent
from epochal.messages import Cancel, Deploy, KindCommand, KindReport, Processing, Ready, Reject, Shutdown, Start
from epochal.runtime.host.events import Registered, Send, StopWorker
from epochal.runtime.host.mailbox import JobMasterLost, PeerClosed

WORKER = 3
DEPLOY = Deploy(b"deployment", {0: ("127.0.0.1", 1)}, None)
JOINING = Deploy(b"deployment", {0: ("127.0.0.1", 1)}, None, joining=True)
FINISH = KindCommand(FinishJob())
PHASES = [CecPhase.REGISTERING, CecPhase.SETTING_UP, CecPhase.READY, CecPhase.RUNNING, CecPhase.DONE,
          CecPhase.FINISHED]


def machine_in(phase: CecPhase, joining: bool = False) -> CecWorkerMachine:
    """A machine taken to ``phase`` the way a worker gets there, checking each step exactly."""
    machine = CecWorkerMachine(WORKER)
    assert machine.handle(Registered(0.0, 60.0)) == []
    steps: list[tuple[object, list]] = [
        (JOINING if joining else DEPLOY, [SetUpWorker(JOINING if joining else DEPLOY)]),
        (SetUp(1.0, 30.0, {"load_s": 0.5} if joining else {}),
         [Send(Ready(WORKER))] + ([Send(KindReport(WORKER, Rejoined(WORKER, {"load_s": 0.5})))] if joining else [])),
        (Start(), [BeginProcessing(), Send(Processing(WORKER))]),
        (InputDone({"frames": 2}), [Send(KindReport(WORKER, StageDone(WORKER, {"frames": 2})))]),
        (FINISH, [ReportFinished()]),
    ]
    for event, expected in steps[:PHASES.index(phase)]:
        assert machine.handle(event) == expected
    assert machine.phase is phase
    return machine


def test_the_machine_takes_exactly_its_event_union_and_the_worker_carries_out_every_instruction():
    assert set(_HANDLERS.handlers) == set(typing.get_args(Event))
    assert set(_COMMANDS.handlers) == {CecCommand}
    assert _DO.missing(typing.get_args(Instruction)) == []


def test_a_worker_goes_through_its_phases_one_event_at_a_time():
    machine = machine_in(CecPhase.FINISHED)
    assert machine.handle(Shutdown("done")) == [StopWorker("done")]
    assert machine.phase is CecPhase.STOPPED


def test_a_replacement_reports_its_rebuild_when_set_up_and_its_first_input_once():
    machine = machine_in(CecPhase.READY, joining=True)  # Rejoined was reported with Ready
    # a producer's replay may reach it before its Start
    assert machine.handle(FirstInput()) == [Send(KindReport(WORKER, Resumed(WORKER)))]
    assert machine.handle(FirstInput()) == []
    assert machine.handle(Start()) == [BeginProcessing(), Send(Processing(WORKER))]
    assert machine.handle(FirstInput()) == []


@pytest.mark.parametrize("phase", PHASES + [CecPhase.STOPPED], ids=lambda p: p.name)
def test_a_worker_that_replaces_none_never_reports_its_first_input(phase):
    machine = _stopped() if phase is CecPhase.STOPPED else machine_in(phase)
    assert machine.handle(FirstInput()) == []


# ---------------------------------------------------------------------- the JobMaster's messages out of phase
#: (message, the phase that expects it, what it yields there); in every other phase it is ignored
EXPECTED = [
    (DEPLOY, CecPhase.REGISTERING, [SetUpWorker(DEPLOY)], CecPhase.SETTING_UP),
    (Start(), CecPhase.READY, [BeginProcessing(), Send(Processing(WORKER))], CecPhase.RUNNING),
    (FINISH, CecPhase.DONE, [ReportFinished()], CecPhase.FINISHED),
]


@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.name)
@pytest.mark.parametrize(("message", "expecting", "out", "after"), EXPECTED,
                         ids=["Deploy", "Start", "FinishJob"])
def test_a_message_of_the_jobmaster_out_of_phase_is_ignored(phase, message, expecting, out, after):
    machine = machine_in(phase)
    if phase is expecting:
        assert machine.handle(message) == out and machine.phase is after
        assert machine.handle(message) == [] and machine.phase is after  # the same message again
    else:
        assert machine.handle(message) == [] and machine.phase is phase


def test_finish_job_sent_again_after_a_replacement_finished_is_ignored_by_finished_workers():
    survivor = machine_in(CecPhase.FINISHED)
    assert survivor.handle(FINISH) == [] and survivor.phase is CecPhase.FINISHED
    assert survivor.handle(Shutdown()) == [StopWorker("shutdown")]


@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.name)
@pytest.mark.parametrize("message", [Cancel("cancelled by the user"), Shutdown(), JobMasterLost("gone")],
                         ids=["Cancel", "Shutdown", "JobMasterLost"])
def test_a_stop_stops_the_worker_in_every_phase(phase, message):
    machine = machine_in(phase)
    assert machine.handle(message) == [StopWorker(message.reason)]
    assert machine.phase is CecPhase.STOPPED


@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.name)
def test_a_reject_stops_a_starting_worker_and_is_stale_for_a_running_one(phase):
    machine = machine_in(phase)
    if phase in (CecPhase.RUNNING, CecPhase.DONE, CecPhase.FINISHED):
        assert machine.handle(Reject("late")) == [] and machine.phase is phase
    else:
        assert machine.handle(Reject("not needed")) == [StopWorker("not needed")]


# ---------------------------------------------------------------------- the driver's reports out of phase
@pytest.mark.parametrize("phase", [p for p in PHASES if p is not CecPhase.SETTING_UP], ids=lambda p: p.name)
def test_set_up_outside_setting_up_is_a_bug_of_the_driver(phase):
    machine = machine_in(phase)
    with pytest.raises(OutOfPhase, match=r"SetUp in phase CecPhase\.\w+"):
        machine.handle(SetUp(5.0, 30.0))
    assert machine.phase is phase


@pytest.mark.parametrize("phase", [p for p in PHASES if p is not CecPhase.RUNNING], ids=lambda p: p.name)
def test_input_done_outside_running_is_a_bug_of_the_driver(phase):
    """Before the start, and a second time (DONE, FINISHED): the driver reports it once, while
    it processes."""
    machine = machine_in(phase)
    with pytest.raises(OutOfPhase, match="InputDone"):
        machine.handle(InputDone())
    assert machine.phase is phase


# ---------------------------------------------------------------------- deadlines
def test_no_deployment_in_time_stops_the_worker():
    machine = CecWorkerMachine(WORKER)
    machine.handle(Registered(10.0, 5.0))
    assert machine.handle(TimePassed(15.0, 0.0)) == []
    assert machine.handle(TimePassed(15.5, 0.0)) == [StopWorker("no 'Deploy' from the JobMaster within 5 s")]


def test_no_start_in_time_stops_the_worker_and_a_running_one_has_no_deadline():
    machine = machine_in(CecPhase.READY)  # set up at 1.0 with 30 s to wait
    assert machine.handle(TimePassed(31.0, 0.0)) == []
    assert machine.handle(TimePassed(31.5, 0.0)) == [StopWorker("no 'Start' from the JobMaster within 30 s")]
    for phase in (CecPhase.SETTING_UP, CecPhase.RUNNING, CecPhase.DONE, CecPhase.FINISHED):
        assert machine_in(phase).handle(TimePassed(1e9, 0.0)) == []


# ---------------------------------------------------------------------- stopped, and unknown events
def _stopped() -> CecWorkerMachine:
    machine = machine_in(CecPhase.RUNNING)
    machine.handle(Cancel("cancelled"))
    return machine


@pytest.mark.parametrize("event", [DEPLOY, SetUp(0.0, 1.0), Start(), FirstInput(), InputDone(), FINISH,
                                   Shutdown(), Reject("x"), TimePassed(1e9, 0.0)],
                         ids=lambda e: type(e).__name__)
def test_a_stopped_machine_ignores_every_event(event):
    machine = _stopped()
    assert machine.handle(event) == [] and machine.phase is CecPhase.STOPPED


@pytest.mark.parametrize("phase", PHASES + [CecPhase.STOPPED], ids=lambda p: p.name)
@pytest.mark.parametrize("event", [TriggerCheckpoint(1), PeerClosed(2, "reset"), "FinishJob"],
                         ids=["a dataflow message", "a connection event (the driver's)", "a string"])
def test_an_event_of_a_type_it_does_not_take_raises_in_every_phase(phase, event):
    machine = _stopped() if phase is CecPhase.STOPPED else machine_in(phase)
    with pytest.raises(UnknownEvent, match="cec worker machine does not take"):
        machine.handle(event)


@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.name)
@pytest.mark.parametrize("command", [KindCommand(RunSuperstep(0)), KindCommand(None)],
                         ids=["a graph command", "a command without payload"])
def test_a_command_it_does_not_take_raises_and_a_stopped_machine_looks_no_further(phase, command):
    with pytest.raises(UnknownEvent, match="cec worker commands does not take"):
        machine_in(phase).handle(command)
    assert _stopped().handle(command) == []


# ---------------------------------------------------------------------- the coordinator's reports out of phase
def report(coordination: CecCoordination, worker: int, payload: object, now: float = 1.0) -> list:
    return coordination.on_message(worker, KindReport(worker, payload), now, now, True)


def test_stage_done_twice_counts_once():
    coordination = CecCoordination(2)
    assert report(coordination, 0, StageDone(0)) == []
    assert report(coordination, 0, StageDone(0, {"frames": 3})) == []  # not both workers
    assert coordination.counters[0] == {"frames": 3}
    assert report(coordination, 1, StageDone(1)) == [KindCommand(FinishJob())]


def test_finish_job_is_sent_again_when_a_replacement_finishes_after_the_others():
    coordination = CecCoordination(2)
    report(coordination, 0, StageDone(0))
    assert report(coordination, 1, StageDone(1)) == [KindCommand(FinishJob())]
    assert coordination.worker_lost(1, 2.0) == [ReplaceWorker(1)]  # lost after its StageDone
    assert report(coordination, 0, StageDone(0)) == []  # a survivor's again: its own stands
    assert report(coordination, 1, StageDone(1)) == [KindCommand(FinishJob())]


def test_rejoined_or_resumed_without_a_recovery_and_twice_are_ignored():
    coordination = CecCoordination(2)
    assert report(coordination, 0, Rejoined(0, {"load_s": 0.1})) == []  # no loss of worker 0
    assert report(coordination, 0, Resumed(0)) == []
    assert coordination.history == []
    coordination.worker_lost(0, 2.0)
    coordination.worker_rejoined(0, 2.5)
    assert report(coordination, 0, Resumed(0), 2.6) == []  # before its Rejoined: no recovery to date yet
    assert report(coordination, 0, Rejoined(0, {"load_s": 0.1}), 2.7) == []
    assert report(coordination, 0, Rejoined(0, {"load_s": 9.9}), 2.8) == []  # twice: the first stands
    assert report(coordination, 0, Resumed(0), 2.9) == []
    assert report(coordination, 0, Resumed(0), 3.0) == []  # twice: the first stands
    assert coordination.history == [{"worker": 0, "lost": 2.0, "ready": 2.5, "rebuilt": 2.7,
                                     "phases": {"load_s": 0.1}, "resumed": 2.9}]
