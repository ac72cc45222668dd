"""The worker machine (and its snapshot-pipeline and loop sub-machines) driven with event
sequences: no sockets, no threads, no Spark. Each test compares the instructions returned; every
type of its event union yields an exact list in a table, and any other type raises."""

from __future__ import annotations

import typing
from collections.abc import Callable

import pytest

from epochal.config import AT_LEAST_ONCE, EXACTLY_ONCE, SYNCHRONOUS
from epochal.dataflow.checkpointing.events import (
    AbortAlignment,
    AlignmentOverflow,
    Capture,
    EmitBarrier,
    Feedback,
    FinishSubtask,
    InputEnded,
    LoopClosed,
    LoopShape,
    NotifyAborted,
    NotifyComplete,
    ProbeArrived,
    SendProbe,
    SnapshotHeld,
    SnapshotUpload,
    StartAlignment,
    SubtaskAligned,
    SubtaskFinished,
    SubtaskInfo,
    UploadWithLog,
)
from epochal.dataflow.checkpointing.messages import (
    CheckpointAbort,
    CheckpointComplete,
    Committed,
    Decline,
    EndLoop,
    LoopReady,
    LoopVote,
    StartLoopProbe,
    TriggerCheckpoint,
)
from epochal.dataflow.protocol import (
    Built,
    ConnectAndBuild,
    EndSources,
    Event,
    FinishSources,
    FirstRecord,
    StartProcessing,
    WorkerDrained,
)
from epochal.dataflow.worker_machine import _HANDLERS, WorkerMachine, WorkerPhase
from epochal.machines import TimePassed, UnknownEvent
from epochal.messages import Cancel, Deploy, Finished, KindCommand, Processing, Ready, Reject, Shutdown, Start
from epochal.runtime.host.events import FailPeerLost, ReachPoint, Registered, Send, StopWorker
from epochal.runtime.host.mailbox import JobMasterLost, PeerClosed, PeerJoined

SOURCE = (0, 0)
MAP = (1, 0)
SINK = (2, 0)
DEPLOY = Deploy(b"graph", {0: ("127.0.0.1", 1)}, None)


def running(*infos: SubtaskInfo, mode: str = EXACTLY_ONCE, iteration_log: bool = True) -> WorkerMachine:
    """A machine taken through registration, deployment and start."""
    machine = WorkerMachine(0)
    assert machine.handle(Registered(0.0, 60.0)) == []
    assert machine.handle(DEPLOY) == [ConnectAndBuild(DEPLOY)]
    assert machine.handle(Built(1.0, 30.0, infos, mode, iteration_log)) == [Send(Ready(0))]
    assert machine.handle(Start()) == [StartProcessing()]
    assert machine.phase is WorkerPhase.RUNNING
    return machine


def pipeline(mode: str = EXACTLY_ONCE) -> WorkerMachine:
    return running(SubtaskInfo(SOURCE, source=True), SubtaskInfo(MAP, barriers=True),
                   SubtaskInfo(SINK, barriers=True), mode=mode)


# ---------------------------------------------------------------------- life cycle
def test_registration_deploy_ready_start():
    running()


def test_no_deployment_in_time_stops_the_worker():
    machine = WorkerMachine(3)
    machine.handle(Registered(10.0, 5.0))
    assert machine.handle(TimePassed(14.0, 0.0)) == []
    assert machine.handle(TimePassed(15.5, 0.0)) == [StopWorker("no 'Deploy' from the JobMaster within 5 s")]
    assert machine.phase is WorkerPhase.STOPPED
    assert machine.handle(DEPLOY) == []  # a stopped machine ignores everything


def test_no_start_in_time_stops_the_worker():
    machine = WorkerMachine(0)
    machine.handle(Registered(0.0, 60.0))
    machine.handle(DEPLOY)
    machine.handle(Built(1.0, 30.0, (), EXACTLY_ONCE))
    assert machine.handle(TimePassed(30.5, 0.0)) == []
    assert machine.handle(TimePassed(31.5, 0.0)) == [StopWorker("no 'Start' from the JobMaster within 30 s")]


def test_messages_out_of_phase_are_ignored():
    machine = WorkerMachine(0)
    machine.handle(Registered(0.0, 60.0))
    assert machine.handle(Start()) == []  # a start before the deployment
    assert machine.handle(TriggerCheckpoint(1)) == []  # a checkpoint before the start
    assert machine.handle(StartLoopProbe(0, 1)) == []
    machine = running()
    assert machine.handle(DEPLOY) == [] and machine.handle(Start()) == []


def test_a_rejected_registration_stops_the_worker_but_a_running_worker_ignores_rejections():
    machine = WorkerMachine(1)
    machine.handle(Registered(0.0, 60.0))
    assert machine.handle(Reject("job is running; worker 1 attempt 2 is not needed")) == [
        StopWorker("job is running; worker 1 attempt 2 is not needed")]
    assert running().handle(Reject("late")) == []


@pytest.mark.parametrize("message", [Cancel("restarting: x"), Shutdown(), JobMasterLost("gone")])
def test_stop_messages_stop_the_worker(message):
    machine = running()
    assert machine.handle(message) == [StopWorker(message.reason)]
    assert machine.handle(TriggerCheckpoint(1)) == []


def test_a_lost_peer_fails_the_worker_unless_everything_finished():
    machine = running(SubtaskInfo(SINK))
    assert machine.handle(PeerClosed(2, "reset")) == [FailPeerLost(2, "reset")]
    machine = running(SubtaskInfo(SINK))
    machine.handle(SubtaskFinished(SINK))
    assert machine.handle(PeerClosed(2, "closed")) == []


def test_a_lost_peer_before_the_start_fails_the_worker():
    machine = WorkerMachine(0)
    machine.handle(Registered(0.0, 60.0))
    machine.handle(DEPLOY)
    machine.handle(Built(1.0, 30.0, (SubtaskInfo(SINK),), EXACTLY_ONCE))
    assert machine.handle(PeerClosed(1, "reset")) == [FailPeerLost(1, "reset")]


def test_first_record_and_finished_are_reported_once():
    machine = running()
    assert machine.handle(FirstRecord()) == [Send(Processing(0))]
    assert machine.handle(FirstRecord()) == []
    assert machine.handle(WorkerDrained({"records_processed": 3})) == [Send(Finished({"records_processed": 3}))]
    assert machine.handle(WorkerDrained({})) == []


# ---------------------------------------------------------------------- snapshot pipeline
def test_trigger_sources_emit_and_snapshot_others_wait_for_barriers():
    machine = pipeline()
    assert machine.handle(TriggerCheckpoint(1)) == [EmitBarrier(SOURCE, 1), Capture(SOURCE, 1)]
    assert machine.snapshots.expected == [1] and not machine.sources_halted


def test_alignment_forwards_the_barrier_then_snapshots():
    machine = pipeline()
    machine.handle(TriggerCheckpoint(1))
    assert machine.handle(SubtaskAligned(MAP, 1, 0.25, {"buffered_bytes": 10, "spilled_bytes": 0})) == [
        ReachPoint("alignment", 1), EmitBarrier(MAP, 1),
        Capture(MAP, 1, 0.25, {"buffered_bytes": 10, "spilled_bytes": 0})]


def test_complete_notifies_and_confirms_only_after_finished_was_reported():
    machine = pipeline()
    machine.handle(TriggerCheckpoint(1))
    assert machine.handle(CheckpointComplete(1)) == [ReachPoint("before_commit", 1), NotifyComplete(1)]
    machine.handle(TriggerCheckpoint(2))
    machine.handle(WorkerDrained({}))
    assert machine.handle(CheckpointComplete(2)) == [ReachPoint("before_commit", 2), NotifyComplete(2),
                                                     Send(Committed(2, 0))]
    assert machine.snapshots.expected == []


def test_a_completion_forgets_older_expected_checkpoints_and_an_abort_only_its_own():
    machine = pipeline()
    for checkpoint_id in (1, 2, 3):
        machine.handle(TriggerCheckpoint(checkpoint_id))
    assert machine.handle(CheckpointAbort(2)) == [NotifyAborted(2)]
    assert machine.snapshots.expected == [1, 3]
    machine.handle(CheckpointComplete(1))
    assert machine.snapshots.expected == [3]


def test_a_finished_subtask_answers_every_expected_checkpoint_with_its_final_state():
    machine = pipeline()
    machine.handle(TriggerCheckpoint(1))
    machine.handle(TriggerCheckpoint(2))
    machine.handle(SubtaskAligned(MAP, 1, 0.0))
    assert machine.handle(SubtaskFinished(MAP)) == [Capture(MAP, 2)]
    assert machine.handle(SubtaskFinished(MAP)) == []  # idempotent
    assert machine.handle(TriggerCheckpoint(3)) == [EmitBarrier(SOURCE, 3), Capture(SOURCE, 3), Capture(MAP, 3)]


def test_synchronous_checkpoints_halt_sources_until_they_complete():
    machine = pipeline(SYNCHRONOUS)
    machine.handle(TriggerCheckpoint(1))
    assert machine.sources_halted
    machine.handle(CheckpointComplete(1))
    assert not machine.sources_halted
    machine.handle(TriggerCheckpoint(2))
    machine.handle(CheckpointAbort(2))
    assert not machine.sources_halted
    machine = pipeline(AT_LEAST_ONCE)
    machine.handle(TriggerCheckpoint(1))
    assert not machine.sources_halted


def test_alignment_overflow_declines_and_releases():
    machine = pipeline()
    machine.handle(TriggerCheckpoint(4))
    assert machine.handle(AlignmentOverflow(MAP, 4, "too much")) == [AbortAlignment(MAP, 4, "too much"),
                                                                      Send(Decline(4, 0, "too much"))]


# ---------------------------------------------------------------------- loops
HEAD = (5, 0)
TAIL = (6, 0)
BACK, EXTERNAL, INNER = 100, 101, 102


def loop_machine(iteration_log: bool = True) -> WorkerMachine:
    return running(SubtaskInfo(SOURCE, source=True),
                   SubtaskInfo(HEAD, barriers=True, loop=LoopShape(7, True, frozenset(), frozenset({EXTERNAL}))),
                   SubtaskInfo(TAIL, barriers=True, loop=LoopShape(7, False, frozenset({INNER}), frozenset())),
                   iteration_log=iteration_log)


def _upload(checkpoint_id: int) -> SnapshotUpload:
    return SnapshotUpload(checkpoint_id, HEAD[0], HEAD[1], {"head": {"keyed": None, "operator": {}}}, {})


def test_a_loop_head_holds_its_state_copy_and_logs_feedback_until_the_barrier_comes_back():
    machine = loop_machine()
    machine.handle(TriggerCheckpoint(1))
    assert machine.handle(SubtaskAligned(HEAD, 1, 0.0)) == [ReachPoint("alignment", 1), EmitBarrier(HEAD, 1),
                                                     Capture(HEAD, 1, hold=True)]
    upload = _upload(1)
    assert machine.handle(SnapshotHeld(HEAD, upload)) == []
    assert machine.handle(Feedback(HEAD, ["a", "b"])) == [ReachPoint("back_edge_log", 1)]
    assert machine.handle(Feedback(HEAD, ["c"])) == [ReachPoint("back_edge_log", 1)]
    assert machine.handle(LoopClosed(HEAD, 1)) == [UploadWithLog(HEAD, upload, ["a", "b", "c"])]
    assert machine.handle(Feedback(HEAD, ["d"])) == []  # no snapshot in progress: nothing logged


def test_without_the_iteration_log_a_loop_head_uploads_at_once():
    machine = loop_machine(iteration_log=False)
    machine.handle(TriggerCheckpoint(1))
    assert machine.handle(SubtaskAligned(HEAD, 1, 0.0))[-1] == Capture(HEAD, 1)


def test_an_abort_drops_the_back_edge_log_and_the_held_copy():
    machine = loop_machine()
    machine.handle(TriggerCheckpoint(1))
    machine.handle(SubtaskAligned(HEAD, 1, 0.0))
    machine.handle(SnapshotHeld(HEAD, _upload(1)))
    machine.handle(CheckpointAbort(1))
    assert machine.handle(LoopClosed(HEAD, 1)) == []


def test_when_the_heads_inputs_end_it_reports_ready_and_starts_expected_checkpoints_itself():
    machine = loop_machine()
    machine.handle(TriggerCheckpoint(1))
    assert machine.handle(InputEnded(HEAD, EXTERNAL)) == [Send(LoopReady(7, 0)), StartAlignment(HEAD, 1)]
    assert machine.handle(InputEnded(HEAD, BACK)) == []  # ready only once
    # once the head's inputs ended, a new checkpoint is started by the head
    assert machine.handle(TriggerCheckpoint(2)) == [EmitBarrier(SOURCE, 2), Capture(SOURCE, 2),
                                                    StartAlignment(HEAD, 2)]


def test_probes_vote_quiet_only_without_feedback_in_the_round():
    machine = loop_machine()
    assert machine.handle(StartLoopProbe(7, 1)) == [SendProbe(HEAD, 7, 1)]
    assert machine.handle(ProbeArrived(HEAD, BACK, 1, back_edge=True)) == [Send(LoopVote(7, 1, 0, quiet=True))]
    machine.handle(StartLoopProbe(7, 2))
    machine.handle(Feedback(HEAD, ["x"]))
    assert machine.handle(ProbeArrived(HEAD, BACK, 2, back_edge=True)) == [Send(LoopVote(7, 2, 0, quiet=False))]
    assert machine.handle(ProbeArrived(HEAD, BACK, 1, back_edge=True)) == []  # a stale round


def test_probes_are_forwarded_once_every_loop_input_delivered_them():
    machine = running(SubtaskInfo(TAIL, barriers=True,
                                  loop=LoopShape(7, False, frozenset({INNER, INNER + 1}), frozenset({EXTERNAL}))))
    assert machine.handle(ProbeArrived(TAIL, INNER, 1, back_edge=False)) == []
    assert machine.handle(ProbeArrived(TAIL, INNER + 1, 1, back_edge=False)) == []  # outside input still open
    assert machine.handle(InputEnded(TAIL, EXTERNAL)) == [SendProbe(TAIL, 7, 1)]
    assert machine.handle(ProbeArrived(TAIL, INNER, 2, back_edge=False)) == []
    assert machine.handle(InputEnded(TAIL, INNER + 1)) == [SendProbe(TAIL, 7, 2)]


def test_end_loop_finishes_the_heads_which_answer_expected_checkpoints():
    machine = loop_machine()
    machine.handle(TriggerCheckpoint(3))
    assert machine.handle(EndLoop(7)) == [FinishSubtask(HEAD), Capture(HEAD, 3)]
    assert machine.handle(EndLoop(7)) == []  # finished heads are not finished twice
    assert machine.handle(StartLoopProbe(7, 9)) == []


def test_an_alignment_of_an_aborted_or_completed_checkpoint_is_dropped():
    machine = pipeline()
    machine.handle(TriggerCheckpoint(1))
    assert machine.handle(CheckpointAbort(1)) == [NotifyAborted(1)]
    # the barrier came after the abort: no barrier downstream, no snapshot, no upload
    assert machine.handle(SubtaskAligned(MAP, 1, 0.0)) == []
    machine.handle(TriggerCheckpoint(2))
    machine.handle(CheckpointComplete(2))
    assert machine.handle(SubtaskAligned(SINK, 2, 0.0)) == []
    # a barrier that overtook its trigger is snapshotted
    assert machine.handle(SubtaskAligned(MAP, 3, 0.0)) == [ReachPoint("alignment", 3), EmitBarrier(MAP, 3),
                                                           Capture(MAP, 3)]


# ---------------------------------------------------------------------- every event, exactly
def _registering() -> WorkerMachine:
    machine = WorkerMachine(0)
    machine.handle(Registered(0.0, 60.0))
    return machine


def _deploying() -> WorkerMachine:
    machine = _registering()
    machine.handle(DEPLOY)
    return machine


def _ready() -> WorkerMachine:
    machine = _deploying()
    machine.handle(Built(1.0, 30.0, (SubtaskInfo(SINK),), EXACTLY_ONCE))
    return machine


def _triggered() -> WorkerMachine:
    machine = pipeline()
    machine.handle(TriggerCheckpoint(1))
    return machine


def _held() -> WorkerMachine:
    machine = loop_machine()
    machine.handle(TriggerCheckpoint(1))
    machine.handle(SubtaskAligned(HEAD, 1, 0.0))
    return machine


def _logging() -> WorkerMachine:
    machine = _held()
    machine.handle(SnapshotHeld(HEAD, _upload(1)))
    return machine


def _probing() -> WorkerMachine:
    machine = loop_machine()
    machine.handle(StartLoopProbe(7, 1))
    return machine


#: (state, event, every instruction it yields there, in order)
EXACT: list[tuple[Callable[[], WorkerMachine], object, list]] = [
    (lambda: WorkerMachine(0), Registered(0.0, 60.0), []),
    (_registering, TimePassed(60.5, 0.0), [StopWorker("no 'Deploy' from the JobMaster within 60 s")]),
    (_registering, DEPLOY, [ConnectAndBuild(DEPLOY)]),
    (_registering, Reject("not needed"), [StopWorker("not needed")]),
    (_deploying, Built(1.0, 30.0, (SubtaskInfo(SINK),), EXACTLY_ONCE), [Send(Ready(0))]),
    (_ready, Start(), [StartProcessing()]),
    (pipeline, Cancel("cancelled"), [StopWorker("cancelled")]),
    (pipeline, Shutdown(), [StopWorker("shutdown")]),
    (pipeline, JobMasterLost("gone"), [StopWorker("gone")]),
    (pipeline, PeerClosed(2, "reset"), [FailPeerLost(2, "reset")]),
    (pipeline, FirstRecord(), [Send(Processing(0))]),
    (pipeline, WorkerDrained({"records_processed": 3}), [Send(Finished({"records_processed": 3}))]),
    (pipeline, EndSources(), [FinishSources()]),
    (pipeline, TriggerCheckpoint(1), [EmitBarrier(SOURCE, 1), Capture(SOURCE, 1)]),
    (_triggered, SubtaskAligned(MAP, 1, 0.25),
     [ReachPoint("alignment", 1), EmitBarrier(MAP, 1), Capture(MAP, 1, 0.25)]),
    (_triggered, SubtaskFinished(MAP), [Capture(MAP, 1)]),
    (_triggered, AlignmentOverflow(MAP, 1, "full"), [AbortAlignment(MAP, 1, "full"), Send(Decline(1, 0, "full"))]),
    (_triggered, CheckpointComplete(1), [ReachPoint("before_commit", 1), NotifyComplete(1)]),
    (_triggered, CheckpointAbort(1), [NotifyAborted(1)]),
    (_held, SnapshotHeld(HEAD, _upload(1)), []),
    (_logging, Feedback(HEAD, ["a"]), [ReachPoint("back_edge_log", 1)]),
    (_logging, LoopClosed(HEAD, 1), [UploadWithLog(HEAD, _upload(1), [])]),
    (loop_machine, InputEnded(HEAD, EXTERNAL), [Send(LoopReady(7, 0))]),
    (loop_machine, StartLoopProbe(7, 1), [SendProbe(HEAD, 7, 1)]),
    (_probing, ProbeArrived(HEAD, BACK, 1, back_edge=True), [Send(LoopVote(7, 1, 0, quiet=True))]),
    (loop_machine, EndLoop(7), [FinishSubtask(HEAD)]),
]


def test_the_machine_takes_exactly_its_event_union_and_the_table_covers_it():
    assert set(_HANDLERS.handlers) == set(typing.get_args(Event))
    assert {type(event) for _, event, _ in EXACT} == set(typing.get_args(Event))


@pytest.mark.parametrize(("state", "event", "expected"), EXACT, ids=[type(e).__name__ for _, e, _ in EXACT])
def test_each_event_yields_exactly_these_instructions(state, event, expected):
    assert state().handle(event) == expected


def _stopped() -> WorkerMachine:
    machine = pipeline()
    machine.handle(Cancel("cancelled"))
    return machine


@pytest.mark.parametrize("state", [lambda: WorkerMachine(0), _ready, pipeline, _stopped],
                         ids=["new", "ready", "running", "stopped"])
@pytest.mark.parametrize("event", [KindCommand(("run", 1)), PeerJoined(2, None, 1), object()],
                         ids=["a kind's command", "a replacement's connection", "anything else"])
def test_an_event_it_does_not_take_raises(state, event):
    with pytest.raises(UnknownEvent, match="worker machine does not take"):
        state().handle(event)
