"""The typed protocol: every control message (those every kind shares, the dataflow kind's and
its checkpoint and loop protocol's), mailbox event, inbox event and upload job is a frozen,
slotted dataclass that survives the wire encoding, and every one has a handler."""

from __future__ import annotations

import dataclasses
import inspect
import socket
import typing

import pytest

from epochal import messages
from epochal.connectors.memory import CollectBatch, CollectCommit, CollectEpoch, CollectPayload, CollectSeal
from epochal.control import inbox
from epochal.control.jobmaster import _INBOX, _ON
from epochal.control.jobmaster_events import SavepointRequest
from epochal.dataflow.checkpointing import messages as checkpoint_messages
from epochal.dataflow.checkpointing.events import SnapshotUpload
from epochal.dataflow.checkpointing.messages import (
    Ack,
    CheckpointAbort,
    CheckpointComplete,
    Committed,
    Decline,
    EndLoop,
    LoopReady,
    LoopVote,
    SavepointTarget,
    StartLoopProbe,
    TriggerCheckpoint,
)
from epochal.dataflow.coordination import DataflowCoordination
from epochal.dataflow.protocol import Collect, EndSources, Instruction
from epochal.dataflow.worker import _DATA, _DO, Bootstrap, PeerLost, Worker, WorkerStopped
from epochal.dataflow.worker_machine import _HANDLERS, WorkerPhase
from epochal.messages import (
    Cancel,
    Deploy,
    Dispatch,
    Failed,
    Finished,
    Heartbeat,
    KindCommand,
    KindReport,
    Processing,
    Ready,
    Register,
    Reject,
    RestorePoint,
    Shutdown,
    Start,
    ToJobMaster,
    ToWorker,
    message_types,
)
from epochal.runtime.host import frames as protocol
from epochal.runtime.host import mailbox
from epochal.runtime.host.events import StopWorker
from epochal.runtime.host.hooks import Fault, FaultInjector, HookPoint
from epochal.runtime.host.mailbox import (
    JobMasterLost,
    PeerClosed,
    PeerCredit,
    PeerData,
    PeerEvent,
    PeerJoined,
)
from epochal.runtime.operators.inband import CheckpointBarrier

_EPOCH = CollectEpoch("0.0.abc", 0, 3)
_SOCK_A, _SOCK_B = socket.socketpair()

#: One instance of every type of the protocol; a new type without a sample fails the tests below.
SAMPLES: dict[type, object] = {
    # worker -> JobMaster
    Register: Register(worker=1, task_attempt=0, job_attempt=2, pid=4242, host="127.0.0.1", data_port=5000,
                       hostname="node-1"),
    Ready: Ready(worker=1),
    Heartbeat: Heartbeat({"worker": 1, "records_processed": 10, "uptime": 1.5, "operators": {"Map#1": 10}}),
    Processing: Processing(worker=1),
    Finished: Finished({"worker": 1, "records_processed": 10}),
    Ack: Ack(checkpoint_id=3, vertex=0, subtask=1, worker=1,
             handles={"map-0": {"operator": {"file": "map-0-1.operator", "size": 10}}},
             stats={"alignment_s": 0.0, "sync_s": 0.01, "async_s": 0.02, "bytes": 10}),
    Decline: Decline(checkpoint_id=3, worker=1, reason="OSError: disk full"),
    Committed: Committed(checkpoint_id=3, worker=1),
    LoopReady: LoopReady(loop=0, subtask=1),
    LoopVote: LoopVote(loop=0, round=2, subtask=1, quiet=True),
    Collect: Collect("collect-1", 1, CollectBatch("0.0.abc", 0, 3, [1, "a", (2, 3)])),
    Failed: Failed("user", "ValueError: bad", worker=1, operator="Map", where=None, traceback="Traceback ..."),
    KindReport: KindReport(1, ("superstep", 3)),
    KindCommand: KindCommand(("run", 4)),
    # JobMaster -> worker
    Deploy: Deploy(b"\x80\x05deployment", {0: ("127.0.0.1", 5000), 1: ("127.0.0.1", 5001)},
                   RestorePoint("file:///tmp/chk", 2, {"operators": {}})),
    Start: Start(),
    TriggerCheckpoint: TriggerCheckpoint(3, SavepointTarget("/tmp/savepoints/savepoint-1", "canonical", stop=True)),
    CheckpointComplete: CheckpointComplete(3, savepoint=True),
    EndSources: EndSources(),
    SavepointTarget: SavepointTarget("s3://bucket/savepoints/savepoint-2", "native"),
    CheckpointAbort: CheckpointAbort(3),
    StartLoopProbe: StartLoopProbe(loop=0, round=2),
    EndLoop: EndLoop(loop=0),
    Cancel: Cancel("cancelled by the user"),
    Shutdown: Shutdown(),
    Reject: Reject("job is running; worker 1 attempt 0 is not needed"),
    # payloads and parts
    RestorePoint: RestorePoint("file:///tmp/chk", 2, {"operators": {}}),
    CollectEpoch: _EPOCH,
    CollectBatch: CollectBatch("0.0.abc", 0, 3, [1, 2]),
    CollectSeal: CollectSeal("0.0.abc", 0, 3, checkpoint_id=4),
    CollectCommit: CollectCommit((_EPOCH,)),
    # the worker's mailbox and uploader
    PeerData: PeerData(7, [1, 2, 3]),
    PeerEvent: PeerEvent(7, CheckpointBarrier(3, 1.5)),
    PeerCredit: PeerCredit(7, 2),
    PeerClosed: PeerClosed(2, "closed the connection"),
    PeerJoined: PeerJoined(2, None, 1),
    JobMasterLost: JobMasterLost("the driver closed the control connection"),
    SnapshotUpload: SnapshotUpload(3, 0, 1, {"map-0": {"keyed": None, "operator": {"positions": [("s", 4)]}}},
                                   {"alignment_s": 0.0, "sync_s": 0.01}),
    HookPoint: HookPoint("after_ack", worker=1, job_attempt=0, checkpoint_id=3, processing_s=1.5,
                         records_processed=100),
    # the JobMaster's inbox (holds sockets and exceptions: never pickled)
    inbox.Received: inbox.Received(1, _SOCK_A, Ready(1)),
    inbox.Disconnected: inbox.Disconnected(1, _SOCK_A),
    inbox.SparkEnded: inbox.SparkEnded(None, RuntimeError("boom")),
    inbox.CancelAsked: inbox.CancelAsked("cancelled by the user"),
    inbox.SavepointAsked: inbox.SavepointAsked(SavepointRequest("r1", "/tmp/sp/savepoint-1", stop=True)),
}
_IN_PROCESS_ONLY = {inbox.Received, inbox.Disconnected, inbox.SparkEnded, inbox.CancelAsked, inbox.SavepointAsked,
                    PeerJoined}


def _dataclasses_of(module: object) -> set[type]:
    return {cls for _, cls in inspect.getmembers(module, inspect.isclass)
            if cls.__module__ == module.__name__ and dataclasses.is_dataclass(cls)}  # type: ignore[attr-defined]


def _union_members(alias: object) -> set[type]:
    return set(typing.get_args(alias))


def test_every_type_of_the_protocol_has_a_sample():
    collect_payloads = {CollectEpoch, *(t for t in typing.get_args(CollectPayload) if dataclasses.is_dataclass(t))}
    defined = (_dataclasses_of(messages) | _dataclasses_of(checkpoint_messages) | collect_payloads
               | set(message_types(messages.ControlMessage)) | _dataclasses_of(mailbox) | _dataclasses_of(inbox)
               | {HookPoint})
    assert defined - set(SAMPLES) == set(), "add a sample of each new type to SAMPLES"


@pytest.mark.parametrize("cls", [c for c in SAMPLES if c not in _IN_PROCESS_ONLY], ids=lambda c: c.__name__)
def test_round_trips_through_the_wire_encoding(cls):
    sample = SAMPLES[cls]
    payload = protocol.dumps(sample)
    assert payload[:2] == b"\x80\x05"  # pickle protocol 5, as every frame payload
    copy = protocol.loads(payload)
    assert type(copy) is cls
    assert copy == sample


@pytest.mark.parametrize("cls", list(SAMPLES), ids=lambda c: c.__name__)
def test_is_frozen_and_slotted(cls):
    sample = SAMPLES[cls]
    assert dataclasses.is_dataclass(sample)
    assert not hasattr(sample, "__dict__")
    assert type(sample).__dataclass_params__.frozen  # type: ignore[attr-defined]
    for field in dataclasses.fields(sample):  # type: ignore[arg-type]
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(sample, field.name, None)


def test_messages_travel_in_control_frames():
    a, b = socket.socketpair()
    try:
        sent = [SAMPLES[Register], SAMPLES[Ack], SAMPLES[Deploy], SAMPLES[Collect]]
        for message in sent:
            protocol.send_frame(a, protocol.CONTROL, 0, protocol.dumps(message))
        a.shutdown(socket.SHUT_WR)
        stream = b.makefile("rb")
        received = []
        while (frame := protocol.read_frame(stream)) is not None:
            assert frame[0] == protocol.CONTROL
            received.append(protocol.loads(frame[2]))
        assert received == sent
    finally:
        a.close()
        b.close()


def test_directions_are_disjoint_and_complete():
    to_worker, to_jobmaster = set(message_types(ToWorker)), set(message_types(ToJobMaster))
    assert not to_worker & to_jobmaster
    assert to_worker == {Deploy, Start, TriggerCheckpoint, CheckpointComplete, CheckpointAbort, StartLoopProbe,
                         EndLoop, EndSources, KindCommand, Cancel, Shutdown, Reject}
    assert to_jobmaster == {Register, Ready, Heartbeat, Processing, Finished, Ack, Decline, Committed, LoopReady,
                            LoopVote, Collect, Failed, KindReport}


# ---------------------------------------------------------------------- dispatch tables
def test_the_worker_handles_every_mailbox_event_and_every_message_to_it():
    mailbox_types = _union_members(mailbox.MailboxEvent) - {ToWorker}
    assert mailbox_types == _dataclasses_of(mailbox) - {SnapshotUpload}, "list new mailbox events in MailboxEvent"
    handled = set(_DATA.handlers) | set(_HANDLERS.handlers)
    assert not set(_DATA.handlers) & set(_HANDLERS.handlers), "one owner per event: data path or machine"
    # never delivered to a dataflow worker, so its machine raises UnknownEvent for them: a
    # replacement's connection (it accepts none) and a kind's command (a dataflow job sends none)
    assert {t for t in [*mailbox_types, *message_types(ToWorker)] if t not in handled} == {PeerJoined, KindCommand}


def test_the_worker_driver_carries_out_every_instruction():
    assert _DO.missing(_union_members(Instruction)) == []


def test_the_jobmaster_handles_every_message_to_it_and_every_inbox_event():
    # what every kind shares is the machine's; a kind's reports and the dataflow kind's own
    # messages go to the kind's coordinator
    by_kind = {KindReport, *DataflowCoordination.messages}
    assert [m for m in _ON.missing(message_types(ToJobMaster)) if m not in by_kind] == []
    assert not by_kind & set(_ON.handlers)
    inbox_types = _union_members(inbox.InboxEvent)
    assert inbox_types == _dataclasses_of(inbox), "list new inbox events in InboxEvent"
    assert _INBOX.missing(inbox_types) == []


def test_tables_hold_only_known_types():
    assert set(_ON.handlers) <= set(message_types(ToJobMaster))
    assert set(_DATA.handlers) <= _union_members(mailbox.MailboxEvent)


def test_a_type_gets_one_handler():
    table = Dispatch("test")
    table.on(Start)(lambda owner, message: None)
    with pytest.raises(TypeError, match="Start already has a handler"):
        table.on(Start)(lambda owner, message: None)
    assert table.missing([Start, Shutdown]) == [Shutdown]


# ---------------------------------------------------------------------- the worker's dispatch
def _worker(phase: WorkerPhase = WorkerPhase.RUNNING) -> Worker:
    worker = Worker(Bootstrap("127.0.0.1", 1, b"\0" * 32, "job", 1.0), index=0)
    worker.machine.phase = phase
    return worker


@pytest.mark.parametrize(("message", "reason"), [(Cancel("restarting: x"), "restarting: x"),
                                                 (Shutdown(), "shutdown")])
def test_a_running_worker_stops_on_cancel_and_shutdown(message, reason):
    with pytest.raises(WorkerStopped, match=reason):
        _worker()._handle(message)


def test_a_running_worker_ignores_messages_of_the_start_up():
    worker = _worker()
    for message in (Reject("not needed"), Start(), SAMPLES[Deploy]):
        worker._handle(message)
    assert worker.machine.phase is WorkerPhase.RUNNING


def test_lost_connections_end_a_running_worker():
    worker = _worker()
    with pytest.raises(WorkerStopped, match="driver closed"):
        worker._handle(JobMasterLost("the driver closed the control connection"))
    worker = _worker()
    worker.machine.subtasks[(0, 0)] = None  # type: ignore[assignment]  # one subtask, running
    with pytest.raises(PeerLost, match="worker 2"):
        worker._handle(PeerClosed(2, "closed the connection"))
    worker = _worker()
    worker.machine.subtasks[(0, 0)] = None  # type: ignore[assignment]
    worker.machine.finished.add((0, 0))  # all finished: a peer closing is expected
    worker._handle(PeerClosed(2, "closed the connection"))


def test_a_starting_worker_waits_for_the_wanted_message_skipping_others():
    machine = _worker(WorkerPhase.REGISTERING).machine
    assert machine.handle(Start()) == []
    assert [type(i).__name__ for i in machine.handle(SAMPLES[Deploy])] == ["ConnectAndBuild"]
    machine = _worker(WorkerPhase.REGISTERING).machine
    assert machine.handle(Reject("job is running")) == [StopWorker("job is running")]
    worker = _worker(WorkerPhase.READY)
    worker.machine.deadline, worker.machine.timeout = 0.0, 1.0
    with pytest.raises(WorkerStopped, match="no 'Start' from the JobMaster within 1 s"):
        worker._pump(lambda: False)


def test_fault_hooks_see_only_the_points_they_asked_for(monkeypatch):
    crashes: list[bool] = []
    monkeypatch.setattr("epochal.runtime.host.hooks.crash", lambda: crashes.append(True))
    hook = FaultInjector.of([Fault("after_ack", worker=0, attempt=1, checkpoint=3), Fault("time", worker=1, after=1.0)])
    assert hook is not None and FaultInjector.of([]) is None
    assert hook.points(0, 1) == {"after_ack"} and hook.points(0, 0) == frozenset() and hook.points(1, 0) == {"time"}
    for at in (HookPoint("after_ack", 0, 1, 2, 0.0, 0), HookPoint("after_ack", 0, 0, 3, 0.0, 0),
               HookPoint("time", 1, 0, None, 0.5, 0), HookPoint("after_sync", 0, 1, 3, 0.0, 0)):
        hook.reached(at)
    assert crashes == []
    hook.reached(HookPoint("after_ack", 0, 1, 3, 0.0, 0))
    hook.reached(HookPoint("time", 1, 0, None, 1.0, 0))
    assert crashes == [True, True]
