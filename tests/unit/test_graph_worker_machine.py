"""The graph worker machine driven with event sequences (no sockets, no Spark): start-up and
restore resync, supersteps with early exchanges, checkpoints at the barrier, halt, failures; every
type of its event union (and every command) yields an exact list in a table, and any other type
raises."""

from __future__ import annotations

import typing
from collections.abc import Callable

import pytest

from epochal.cec.protocol import FinishJob
from epochal.graph.engine import StepReport
from epochal.graph.protocol import Event, GraphCommand
from epochal.graph.supersteps import (
    FinishRecovery,
    Halt,
    Recover,
    Recovered,
    RecoveryPrepared,
    RunSuperstep,
    SuperstepDone,
)
from epochal.graph.worker_machine import (
    _COMMANDS,
    _HANDLERS,
    Assemble,
    Assembled,
    CheckpointFileWritten,
    Commit,
    CommitResync,
    Compute,
    Computed,
    ConnectAndLoad,
    ExchangeArrived,
    GraphPhase,
    GraphWorkerMachine,
    Loaded,
    PeerRejoined,
    RecoveryArrived,
    Rewind,
    SendRecovery,
    SendResync,
    StartHeartbeats,
    WriteCheckpointFile,
    WriteOutput,
)
from epochal.machines import TimePassed, UnknownEvent
from epochal.messages import Cancel, Deploy, KindCommand, KindReport, Processing, Ready, Reject, Shutdown, Start
from epochal.runtime.host.events import FailPeerLost, ReachPoint, Registered, Send, StopWorker
from epochal.runtime.host.mailbox import JobMasterLost, PeerClosed, PeerJoined

DEPLOY = Deploy(b"graph", {0: ("h", 1), 1: ("h", 2), 2: ("h", 3)}, None)


def running(workers: int = 3, worker: int = 1) -> GraphWorkerMachine:
    machine = GraphWorkerMachine(worker)
    machine.handle(Registered(0.0, 60.0))
    assert machine.handle(DEPLOY) == [ConnectAndLoad(DEPLOY)]
    assert machine.handle(Loaded(1.0, 30.0, workers, restored=False)) == [Send(Ready(worker))]
    assert machine.handle(Start()) == [StartHeartbeats()]
    return machine


def run(n: int, checkpoint: bool = False, full: bool = False) -> KindCommand:
    return KindCommand(RunSuperstep(n, {}, checkpoint, full))


def report(n: int, active: int = 1) -> StepReport:
    return StepReport(n, active, 0)


def test_a_superstep_completes_when_computed_and_every_peer_delivered():
    machine = running()
    assert machine.handle(run(0)) == [Compute(RunSuperstep(0))]
    assert machine.handle(ExchangeArrived(0, 0)) == []
    assert machine.handle(Computed(0, report(0))) == [ReachPoint("superstep", 0), Send(Processing(1))]
    assert machine.handle(ExchangeArrived(0, 2)) == [Commit(0), Send(KindReport(1, SuperstepDone(report(0))))]
    # the next command says superstep 0's global barrier passed: the "barrier" point, then the work
    assert machine.handle(run(1)) == [ReachPoint("barrier", 0), Compute(RunSuperstep(1))]


def test_exchanges_of_a_peer_already_in_the_next_superstep_are_kept_for_it():
    machine = running()
    machine.handle(run(0))
    machine.handle(ExchangeArrived(1, 0))  # peer 0 got superstep 1's command first and computed
    machine.handle(ExchangeArrived(0, 0))
    machine.handle(ExchangeArrived(0, 2))
    assert machine.handle(Computed(0, report(0)))[-2:] == [Commit(0), Send(KindReport(1, SuperstepDone(report(0))))]
    machine.handle(run(1))
    machine.handle(ExchangeArrived(1, 2))
    assert Commit(1) in machine.handle(Computed(1, report(1)))


def test_a_checkpointed_superstep_reports_after_its_file_is_written():
    machine = running(workers=1, worker=0)
    machine.handle(run(4, checkpoint=True, full=True))
    out = machine.handle(Computed(4, report(4)))
    assert out[-2:] == [Commit(4), WriteCheckpointFile(4, True)]
    handle = {"file": "worker-0", "size": 10, "crc": 1}
    assert machine.handle(CheckpointFileWritten(4, handle)) == [
        Send(KindReport(0, SuperstepDone(report(4), handle, True)))]


def test_a_command_for_a_new_superstep_before_the_last_completed_is_ignored():
    machine = running()
    machine.handle(run(0))
    assert machine.handle(run(1)) == []


def test_halt_writes_the_output_and_a_closing_peer_is_then_expected():
    machine = running()
    assert machine.handle(KindCommand(Halt(3, "converged"))) == [ReachPoint("barrier", 3), WriteOutput()]
    assert machine.handle(PeerClosed(2, "closed")) == []
    assert machine.handle(Shutdown()) == [StopWorker("shutdown")]


def test_a_lost_peer_while_running_fails_the_worker():
    machine = running()
    machine.handle(run(0))
    assert machine.handle(PeerClosed(2, "reset")) == [FailPeerLost(2, "reset")]
    assert machine.phase is GraphPhase.STOPPED and machine.handle(run(1)) == []


def test_a_restored_worker_resyncs_replicas_before_it_is_ready():
    machine = GraphWorkerMachine(0)
    machine.handle(Registered(0.0, 60.0))
    machine.handle(DEPLOY)
    assert machine.handle(Loaded(1.0, 30.0, 3, restored=True)) == [SendResync()]
    assert machine.handle(ExchangeArrived(7, 1, resync=True)) == []
    assert machine.handle(ExchangeArrived(7, 2, resync=True)) == [CommitResync(), Send(Ready(0))]
    assert machine.handle(Loaded(1.0, 30.0, 1, restored=True)) == [Send(Ready(0))]  # alone: nothing to resync


def test_deadlines_and_stops():
    machine = GraphWorkerMachine(0)
    machine.handle(Registered(0.0, 5.0))
    assert machine.handle(TimePassed(6.0, 0.0)) == [StopWorker("no 'Deploy' from the JobMaster within 5 s")]
    machine = GraphWorkerMachine(0)
    machine.handle(Registered(0.0, 60.0))
    machine.handle(DEPLOY)
    machine.handle(Loaded(1.0, 30.0, 3, restored=True))
    assert machine.handle(TimePassed(32.0, 0.0)) == [StopWorker("peers did not resynchronise within 30 s")]
    assert running().handle(Reject("late")) == []
    machine = GraphWorkerMachine(0)
    machine.handle(Registered(0.0, 60.0))
    assert machine.handle(Reject("not needed")) == [StopWorker("not needed")]


@pytest.mark.parametrize("message", [Cancel("restarting: x"), Shutdown(), JobMasterLost("gone")])
def test_stop_messages_stop_the_worker(message):
    assert running().handle(message) == [StopWorker(message.reason)]


def test_commands_before_the_start_are_ignored():
    machine = GraphWorkerMachine(0)
    machine.handle(Registered(0.0, 60.0))
    assert machine.handle(run(0)) == []
    assert machine.handle(Start()) == []


# ---------------------------------------------------------------------- replication (papers/003)
def replicated(workers: int = 3, worker: int = 1) -> GraphWorkerMachine:
    machine = GraphWorkerMachine(worker)
    machine.handle(Registered(0.0, 60.0))
    machine.handle(DEPLOY)
    assert machine.handle(Loaded(1.0, 30.0, workers, False, replicated=True)) == [Send(Ready(worker))]
    machine.handle(Start())
    return machine


def done(machine: GraphWorkerMachine, n: int) -> list:
    out = machine.handle(Computed(n, report(n)))
    for peer in sorted(machine.live_peers):
        out = machine.handle(ExchangeArrived(n, peer))
    return out


def test_with_replication_a_superstep_commits_so_that_it_can_be_taken_back_until_its_barrier():
    machine = replicated()
    assert machine.handle(run(0)) == [Compute(RunSuperstep(0))]
    assert done(machine, 0) == [Commit(0, undo=True), Send(KindReport(1, SuperstepDone(report(0))))]
    assert machine.handle(run(1)) == [ReachPoint("barrier", 0), Compute(RunSuperstep(1))]
    done(machine, 1)
    assert machine.handle(KindCommand(Halt(1, "bound"))) == [ReachPoint("barrier", 1), WriteOutput()]


def test_a_lost_peer_waits_for_the_jobmaster_and_a_rebirth_waits_for_the_replacement():
    machine = replicated()
    machine.handle(run(0))
    assert machine.handle(PeerClosed(2, "gone")) == []  # not fatal: the JobMaster recovers it
    assert machine.phase is GraphPhase.RUNNING and machine.lost == {2}
    recover = Recover(1, 0, (2,), "rebirth")
    assert machine.handle(KindCommand(recover)) == [Rewind(0)]  # the replacement is not connected yet
    assert machine.handle(RecoveryArrived(1, 0)) == []
    assert machine.handle(PeerRejoined(2)) == [SendRecovery(recover), ReachPoint("recovery", 1)]
    assert machine.handle(RecoveryArrived(1, 2)) == [Send(KindReport(1, RecoveryPrepared(1)))]
    assert machine.handle(KindCommand(FinishRecovery(1))) == [Assemble(recover)]
    [report] = machine.handle(Assembled(1, {"rewind_s": 0.5, "assemble_s": 0.25}))
    assert report == Send(KindReport(1, Recovered(1)))
    assert report.message.payload.phases == {"rewind_s": 0.5, "assemble_s": 0.25}  # the driver's timings ride along
    assert machine.handle(run(0)) == [Compute(RunSuperstep(0))]  # the superstep runs again


def test_a_migration_expects_batches_from_survivors_only_and_then_forgets_the_lost():
    machine = replicated(workers=4)
    machine.handle(run(0))
    done(machine, 0)
    machine.handle(PeerClosed(3, "gone"))
    recover = Recover(1, 1, (3,), "migration")
    assert machine.handle(KindCommand(recover)) == [Rewind(1), SendRecovery(recover), ReachPoint("recovery", 1)]
    machine.handle(RecoveryArrived(1, 0))
    assert machine.handle(RecoveryArrived(1, 2)) == [Send(KindReport(1, RecoveryPrepared(1)))]
    machine.handle(KindCommand(FinishRecovery(1)))
    machine.handle(Assembled(1))
    assert machine.live_peers == {0, 2}


def test_a_newer_recovery_restarts_it_and_a_stale_one_is_ignored():
    machine = replicated()
    machine.handle(run(0))
    machine.handle(PeerClosed(2, "gone"))
    machine.handle(PeerRejoined(2))
    first, second = Recover(1, 0, (2,), "rebirth"), Recover(2, 0, (0, 2), "rebirth")
    machine.handle(KindCommand(first))
    machine.handle(PeerClosed(0, "gone"))
    assert machine.handle(KindCommand(second)) == [Rewind(0)]  # waits for worker 0's replacement
    assert machine.handle(KindCommand(first)) == []
    assert machine.handle(RecoveryArrived(1, 2)) == []  # a batch of the abandoned epoch
    machine.handle(PeerRejoined(0))
    machine.handle(RecoveryArrived(2, 0))
    assert machine.handle(RecoveryArrived(2, 2)) == [Send(KindReport(1, RecoveryPrepared(2)))]
    assert machine.handle(KindCommand(FinishRecovery(1))) == []


def test_without_replication_a_lost_peer_still_fails_the_worker():
    machine = running()
    assert machine.handle(PeerClosed(2, "gone")) == [FailPeerLost(2, "gone")]


def test_the_barrier_point_is_reached_once_per_superstep_even_when_a_recovery_runs_the_next_again():
    machine = replicated()
    machine.handle(run(0))
    done(machine, 0)
    assert machine.handle(run(1)) == [ReachPoint("barrier", 0), Compute(RunSuperstep(1))]
    machine.handle(PeerClosed(2, "gone"))
    recover = Recover(1, 1, (2,), "migration")
    machine.handle(KindCommand(recover))
    machine.handle(RecoveryArrived(1, 0))
    machine.handle(KindCommand(FinishRecovery(1)))
    machine.handle(Assembled(1))
    assert machine.handle(run(1)) == [Compute(RunSuperstep(1))]  # superstep 1 again: 0's barrier passed once


# ---------------------------------------------------------------------- every event, exactly
def _registering() -> GraphWorkerMachine:
    machine = GraphWorkerMachine(1)
    machine.handle(Registered(0.0, 60.0))
    return machine


def _loading() -> GraphWorkerMachine:
    machine = _registering()
    machine.handle(DEPLOY)
    return machine


def _ready() -> GraphWorkerMachine:
    machine = _loading()
    machine.handle(Loaded(1.0, 30.0, 3, restored=False))
    return machine


def _computing() -> GraphWorkerMachine:
    machine = running()
    machine.handle(run(0))
    return machine


def _checkpointing() -> GraphWorkerMachine:
    machine = running()
    machine.handle(run(4, checkpoint=True, full=True))
    done(machine, 4)
    return machine


def _lost() -> GraphWorkerMachine:
    machine = replicated()
    machine.handle(run(0))
    machine.handle(PeerClosed(2, "gone"))
    return machine


def _recovering() -> GraphWorkerMachine:
    machine = _lost()
    machine.handle(KindCommand(Recover(1, 0, (2,), "rebirth")))
    return machine


def _prepared() -> GraphWorkerMachine:
    machine = _recovering()
    machine.handle(PeerRejoined(2))
    machine.handle(RecoveryArrived(1, 0))
    machine.handle(RecoveryArrived(1, 2))
    return machine


def _assembling() -> GraphWorkerMachine:
    machine = _prepared()
    machine.handle(KindCommand(FinishRecovery(1)))
    return machine


REBIRTH = Recover(1, 0, (2,), "rebirth")
HANDLE = {"file": "worker-1", "size": 10, "crc": 1}
#: (state, event, every instruction it yields there, in order)
EXACT: list[tuple[Callable[[], GraphWorkerMachine], object, list]] = [
    (lambda: GraphWorkerMachine(1), Registered(0.0, 60.0), []),
    (_registering, TimePassed(60.5, 0.0), [StopWorker("no 'Deploy' from the JobMaster within 60 s")]),
    (_registering, Reject("not needed"), [StopWorker("not needed")]),
    (_registering, DEPLOY, [ConnectAndLoad(DEPLOY)]),
    (_loading, Loaded(1.0, 30.0, 3, restored=False), [Send(Ready(1))]),
    (_ready, Start(), [StartHeartbeats()]),
    (running, Cancel("cancelled"), [StopWorker("cancelled")]),
    (running, Shutdown(), [StopWorker("shutdown")]),
    (running, JobMasterLost("gone"), [StopWorker("gone")]),
    (running, PeerClosed(2, "reset"), [FailPeerLost(2, "reset")]),
    (running, run(0), [Compute(RunSuperstep(0))]),
    (running, KindCommand(Halt(3, "bound")), [ReachPoint("barrier", 3), WriteOutput()]),
    (_computing, ExchangeArrived(0, 0), []),
    (_computing, Computed(0, report(0)), [ReachPoint("superstep", 0), Send(Processing(1))]),
    (_checkpointing, CheckpointFileWritten(4, HANDLE), [Send(KindReport(1, SuperstepDone(report(4), HANDLE, True)))]),
    (_lost, KindCommand(REBIRTH), [Rewind(0)]),
    (_recovering, PeerRejoined(2), [SendRecovery(REBIRTH), ReachPoint("recovery", 1)]),
    (_recovering, RecoveryArrived(1, 0), []),
    (_prepared, KindCommand(FinishRecovery(1)), [Assemble(REBIRTH)]),
    (_assembling, Assembled(1), [Send(KindReport(1, Recovered(1)))]),
]


def test_the_machine_takes_exactly_its_event_union_and_commands_and_the_table_covers_them():
    assert set(_HANDLERS.handlers) == set(typing.get_args(Event))
    assert set(_COMMANDS.handlers) == set(typing.get_args(GraphCommand))
    assert {type(event) for _, event, _ in EXACT} == set(typing.get_args(Event))
    commands = {type(event.payload) for _, event, _ in EXACT if isinstance(event, KindCommand)}
    assert commands == set(typing.get_args(GraphCommand))


@pytest.mark.parametrize(("state", "event", "expected"), EXACT,
                         ids=[type(getattr(e, "payload", e)).__name__ for _, e, _ in EXACT])
def test_each_event_yields_exactly_these_instructions(state, event, expected):
    assert state().handle(event) == expected


def _stopped() -> GraphWorkerMachine:
    machine = running()
    machine.handle(Cancel("cancelled"))
    return machine


@pytest.mark.parametrize("state", [_registering, _ready, running, _stopped],
                         ids=["registering", "ready", "running", "stopped"])
@pytest.mark.parametrize("event", [PeerJoined(2, None, 1), FinishJob(), object()],
                         ids=["a connection event (the driver's)", "a bare command", "anything else"])
def test_an_event_it_does_not_take_raises(state, event):
    with pytest.raises(UnknownEvent, match="graph worker machine does not take"):
        state().handle(event)


@pytest.mark.parametrize("state", [_registering, _ready, running], ids=["registering", "ready", "running"])
def test_a_command_of_another_kind_raises_even_before_the_start(state):
    with pytest.raises(UnknownEvent, match="graph worker commands does not take"):
        state().handle(KindCommand(FinishJob()))
