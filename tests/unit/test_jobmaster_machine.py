"""The JobMaster's state machine driven by event sequences: no sockets, no threads, no Spark, no
clocks. Each test feeds ``JobMasterMachine.handle`` events (time is a field of each) and compares
the instructions it returns. Worker ``w`` of job attempt ``a`` talks on connection ``10 * (a + 1) + w``.
A dataflow job's kind is a ``DataflowCoordination``; checkpointing tests use a real
``CheckpointCoordinator`` on ``tmp_path`` whose I/O (metadata, deletions) the tests carry out as
the driver does (``handled``), answering a metadata write with ``CheckpointWritten``."""

from __future__ import annotations

import typing

import pytest

from epochal.config import CheckpointConfig, EngineConfig
from epochal.control.checkpoint_files import (
    CheckpointFiles,
    CheckpointIdReserved,
    CheckpointIO,
    CheckpointWritten,
    RecordStats,
    ReserveCheckpointId,
    WriteCheckpoint,
)
from epochal.control.jobmaster import _DO, _INBOX, resolve_restore
from epochal.control.jobmaster_events import (
    Broadcast,
    CancelRequested,
    CloseConnections,
    Event,
    Instruction,
    JobStarted,
    KillSparkJob,
    ResolveRestore,
    Restarting,
    RestoreFailed,
    RestoreResolved,
    SendTo,
    SparkJobEnded,
    SubmitSparkJob,
    WorkerDisconnected,
    WorkerMessage,
)
from epochal.control.jobmaster_machine import DEFAULT_RESTORE_HINT, EVENTS, MESSAGES, JobMasterMachine
from epochal.control.lifecycle import FAILURE_GRACE_S, JobStatus
from epochal.control.restart import FixedDelayRestart
from epochal.dataflow.checkpointing.coordinator import CheckpointCoordinator
from epochal.dataflow.checkpointing.messages import (
    Ack,
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
from epochal.dataflow.coordination import DataflowCoordination
from epochal.errors import InsufficientSlotsError, JobCancelledError
from epochal.machines import TimePassed
from epochal.messages import (
    Cancel,
    Deploy,
    Failed,
    Finished,
    Heartbeat,
    KindReport,
    Processing,
    Ready,
    Register,
    Reject,
    RestorePoint,
    Shutdown,
    Start,
    ToJobMaster,
    message_types,
)
from epochal.state.storage import CheckpointError, CheckpointStorage

S = JobStatus
CONFIG = EngineConfig(registration_timeout=10.0, heartbeat_timeout=5.0, cancel_timeout=3.0)
PEERS = {0: ("127.0.0.1", 6000), 1: ("127.0.0.1", 6001)}
STATS = {"bytes": 1, "alignment_s": 0.0, "sync_s": 0.0, "async_s": 0.0}
ATTEMPT_0 = (10, 11)  # the connections of attempt 0's workers
ATTEMPT_1 = (20, 21)


def conn(worker: int, attempt: int = 0) -> int:
    return 10 * (attempt + 1) + worker


def make(num_workers: int = 2, coordinator: CheckpointCoordinator | None = None, restore: dict | None = None,
         loops: dict[int, int] | None = None, **options) -> JobMasterMachine:
    """A dataflow job's machine right after ``start()``: DEPLOYING, its first Spark job submitted."""
    kind = DataflowCoordination(num_workers, coordinator, restore, loops, ["sink"])
    machine = JobMasterMachine("job", b"deployment", num_workers, options.pop("config", CONFIG), kind, **options)
    assert machine.handle(JobStarted(0.0)) == [SubmitSparkJob()]
    assert machine.status == S.DEPLOYING
    return machine


FILES = CheckpointFiles()


def handled(machine: JobMasterMachine, event: Event) -> list[Instruction]:
    """``machine.handle(event)`` with the checkpoint I/O carried out as the driver does (a metadata
    write answered at once with ``CheckpointWritten``); the other instructions, in order."""
    out: list[Instruction] = []
    for instruction in machine.handle(event):
        if isinstance(instruction, WriteCheckpoint):
            error = FILES.write(instruction)
            out += handled(machine, CheckpointWritten(instruction.checkpoint_id, error, getattr(event, "now", 0.0)))
        elif isinstance(instruction, CheckpointIO):
            FILES.carry_out(instruction)
        else:
            out.append(instruction)
    return out


def send(machine: JobMasterMachine, worker: int, message: ToJobMaster, now: float, attempt: int = 0,
         connection: int | None = None) -> list[Instruction]:
    connection = conn(worker, attempt) if connection is None else connection
    return handled(machine, WorkerMessage(worker, connection, message, now, 1000.0 + now))


def register(machine: JobMasterMachine, worker: int, now: float = 1.0, attempt: int = 0,
             job_attempt: int | None = None, connection: int | None = None) -> list[Instruction]:
    job_attempt = attempt if job_attempt is None else job_attempt
    message = Register(worker, 0, job_attempt, 100 + worker, "127.0.0.1", 6000 + worker, "host")
    return send(machine, worker, message, now, attempt, connection)


def deploy(machine: JobMasterMachine, now: float = 1.0, attempt: int = 0, point: RestorePoint | None = None,
           hint: str = DEFAULT_RESTORE_HINT) -> ResolveRestore:
    """Every worker registers; the restore round trip is answered; the job is deployed."""
    for worker in range(machine.num_workers - 1):
        assert register(machine, worker, now, attempt) == []
    [resolve] = register(machine, machine.num_workers - 1, now, attempt)
    assert isinstance(resolve, ResolveRestore) and machine.status == S.DEPLOYING
    connections = tuple(conn(w, attempt) for w in range(machine.num_workers))
    peers = {w: PEERS[w] for w in range(machine.num_workers)}
    assert handled(machine, RestoreResolved(point, hint)) == [Broadcast(Deploy(b"deployment", peers, point),
                                                                      connections)]
    assert machine.status == S.RUNNING
    return resolve


def start(machine: JobMasterMachine, now: float = 2.0, attempt: int = 0) -> None:
    """Every worker reports ready: the job is told to start."""
    for worker in range(machine.num_workers - 1):
        assert send(machine, worker, Ready(worker), now, attempt) == []
    connections = tuple(conn(w, attempt) for w in range(machine.num_workers))
    last = machine.num_workers - 1
    assert send(machine, last, Ready(last), now, attempt) == [Broadcast(Start(), connections)]
    assert machine.all_running() and machine.started_running


def coordinator_on(tmp_path, num_workers: int = 2, **options) -> CheckpointCoordinator:
    config = CheckpointConfig(**{"interval": 100.0, "timeout": 10.0, "storage": str(tmp_path), **options})
    storage = CheckpointStorage(str(tmp_path / "job"))
    return CheckpointCoordinator(config, storage, "job", subtasks={(0, i): "v" for i in range(num_workers)},
                                 vertex_parallelism={0: num_workers}, max_parallelism=128,
                                 completed=storage.completed())


def ack(checkpoint_id: int, worker: int) -> Ack:
    return Ack(checkpoint_id, vertex=0, subtask=worker, worker=worker, handles={}, stats=STATS)


def fail_over(machine: JobMasterMachine, at: float) -> list[Instruction]:
    """A tick just after the failure grace period that began at ``at``."""
    assert handled(machine, TimePassed(at + FAILURE_GRACE_S, 0.0)) == []  # not over yet
    return handled(machine, TimePassed(at + FAILURE_GRACE_S + 0.01, 0.0))


# ---------------------------------------------------------------------- registration and deployment
def test_registration_resolves_the_restore_then_deploys_and_readiness_starts():
    machine = make()
    assert register(machine, 0) == []
    assert machine.status == S.DEPLOYING and machine.connections() == (10,)
    assert register(machine, 1) == [ResolveRestore(None, None, None)]
    assert machine.status == S.DEPLOYING  # until the restore is resolved
    assert handled(machine, RestoreResolved(None, DEFAULT_RESTORE_HINT)) == [
        Broadcast(Deploy(b"deployment", PEERS, None), ATTEMPT_0)]
    assert machine.status == S.RUNNING
    assert send(machine, 0, Ready(0), 2.0) == []
    assert not machine.all_running()
    assert send(machine, 1, Ready(1), 2.0) == [Broadcast(Start(), ATTEMPT_0)]
    assert machine.all_running()


def test_the_first_attempt_restores_the_checkpoint_the_user_gave():
    given = {"storage": "/c/job", "checkpoint_id": 3, "metadata": {"operators": {}}}
    machine = make(restore=given)
    point = RestorePoint("/c/job", 3, {"operators": {}})
    assert deploy(machine, point=point, hint="use chk-2") == ResolveRestore(None, None, given)
    assert machine.restore_hint == "use chk-2"


def test_a_registration_from_a_stale_job_attempt_is_rejected():
    machine = make()
    assert register(machine, 0, job_attempt=1) == [
        SendTo(10, Reject("job is deploying; worker 0 attempt 0 is not needed"))]
    assert machine.workers == {}


def test_a_duplicate_or_unknown_registration_is_rejected():
    machine = make()
    assert register(machine, 0) == []
    assert register(machine, 0, connection=99) == [
        SendTo(99, Reject("job is deploying; worker 0 attempt 0 is not needed"))]
    assert register(machine, 2, connection=98) == [
        SendTo(98, Reject("job is deploying; worker 2 attempt 0 is not needed"))]
    assert machine.connections() == (10,)
    register(machine, 1)
    handled(machine, RestoreResolved(None, DEFAULT_RESTORE_HINT))
    assert register(machine, 1, connection=97) == [
        SendTo(97, Reject("job is running; worker 1 attempt 0 is not needed"))]


def test_a_connection_no_registered_worker_uses_is_closed_when_it_ends():
    machine = make()
    register(machine, 0)
    register(machine, 0, connection=99)  # rejected
    assert handled(machine, WorkerDisconnected(0, 99, 2.0)) == [CloseConnections((99,))]
    assert machine.status == S.DEPLOYING and machine.failures == []


# ---------------------------------------------------------------------- registration timeout
def test_registration_timeout_cancels_then_fails_once_the_spark_job_ended():
    machine = make()
    register(machine, 0)
    assert handled(machine, TimePassed(10.0, 0.0)) == []  # the deadline (10 s after the start) is not passed
    [cancel] = handled(machine, TimePassed(10.5, 0.0))
    assert isinstance(machine.error, InsufficientSlotsError)
    assert "needs 2 workers running at the same time, but only 1 started within 10 s" in str(machine.error)
    assert cancel == Broadcast(Cancel(str(machine.error)), (10,))
    assert machine.status == S.DEPLOYING  # stopping: waiting for the Spark job
    # while stopping only the Spark job's end and the clock count
    assert register(machine, 1) == [] and machine.connections() == (10,)
    assert handled(machine, CancelRequested("by the user", 11.0)) == []
    assert handled(machine, TimePassed(12.0, 0.0)) == []
    assert handled(machine, SparkJobEnded([], None, 12.5)) == []  # ended by itself: nothing to kill
    assert machine.status == S.FAILED and isinstance(machine.error, InsufficientSlotsError)


def test_registration_timeout_kills_the_spark_job_after_cancel_timeout():
    machine = make()
    register(machine, 0)
    handled(machine, TimePassed(10.5, 0.0))
    assert handled(machine, TimePassed(13.4, 0.0)) == []
    assert handled(machine, TimePassed(13.5, 0.0)) == [KillSparkJob()]  # 10.5 + cancel_timeout
    assert machine.status == S.FAILED


def test_registration_timeout_without_any_worker_kills_the_spark_job_at_once():
    machine = make()
    assert handled(machine, TimePassed(10.5, 0.0)) == [Broadcast(Cancel(str(machine.error)), ()), KillSparkJob()]
    assert machine.status == S.FAILED
    assert "only 0 started within 10 s" in str(machine.error)


def test_an_unreadable_restore_fails_the_job():
    machine = make()
    register(machine, 0)
    register(machine, 1)
    error = CheckpointError("checkpoint 4 is incomplete: missing file")
    assert handled(machine, RestoreFailed(error, 2.0)) == [Broadcast(Cancel(str(error)), ATTEMPT_0)]
    assert handled(machine, SparkJobEnded(None, None, 2.5)) == []
    assert machine.status == S.FAILED and machine.error is error


# ---------------------------------------------------------------------- the end of a job
def test_all_finished_without_checkpointing_shuts_down_and_finishes_when_spark_ends():
    machine = make()
    deploy(machine)
    start(machine)
    assert send(machine, 0, Finished({"records": 3}), 3.0) == []
    assert send(machine, 1, Finished({"records": 4}), 3.0) == [Broadcast(Shutdown(), ATTEMPT_0)]
    assert machine.status == S.FINISHING
    assert handled(machine, TimePassed(4.0, 0.0)) == []
    assert handled(machine, SparkJobEnded(["r0", "r1"], None, 4.5)) == []  # FINISHING: no failure
    assert handled(machine, TimePassed(4.6, 0.0)) == []
    assert machine.status == S.FINISHED and machine.spark_results == ["r0", "r1"] and machine.error is None
    assert machine.workers[1].metrics == {"records": 4}


def test_workers_that_do_not_stop_after_shutdown_are_killed():
    machine = make()
    deploy(machine)
    start(machine)
    send(machine, 0, Finished({}), 3.0)
    send(machine, 1, Finished({}), 3.0)
    assert handled(machine, TimePassed(6.0, 0.0)) == []
    assert handled(machine, TimePassed(6.1, 0.0)) == [KillSparkJob()]  # 3.0 + cancel_timeout passed
    assert machine.status == S.FINISHED


def test_all_finished_with_checkpointing_takes_a_final_checkpoint_then_shuts_down(tmp_path):
    coordinator = coordinator_on(tmp_path)
    machine = make(coordinator=coordinator)
    deploy(machine)
    start(machine)
    assert send(machine, 0, Finished({}), 3.0) == []
    assert send(machine, 1, Finished({}), 3.0) == [Broadcast(TriggerCheckpoint(1), ATTEMPT_0)]
    assert machine.kind.final_checkpoint == 1 and coordinator.paused
    assert coordinator.pending[1].triggered_at == 1003.0  # the wall time of the message's event
    assert send(machine, 0, ack(1, 0), 3.5) == []
    assert send(machine, 1, ack(1, 1), 3.5) == [Broadcast(CheckpointComplete(1), ATTEMPT_0)]
    assert coordinator.storage.completed() == [1]
    assert machine.status == S.RUNNING  # until every worker committed
    assert send(machine, 0, Committed(1, 0), 4.0) == []
    assert send(machine, 0, Committed(1, 0), 4.0) == []  # once per worker
    assert send(machine, 1, Committed(1, 1), 4.0) == [Broadcast(Shutdown(), ATTEMPT_0)]
    assert machine.status == S.FINISHING
    handled(machine, SparkJobEnded([], None, 4.5))
    assert handled(machine, TimePassed(4.6, 0.0)) == []
    assert machine.status == S.FINISHED


def test_a_tolerated_decline_or_timeout_of_the_final_checkpoint_takes_it_again(tmp_path):
    coordinator = coordinator_on(tmp_path, timeout=2.0, tolerable_failures=3)
    machine = make(coordinator=coordinator)
    deploy(machine)
    start(machine)
    send(machine, 0, Finished({}), 3.0)
    assert send(machine, 1, Finished({}), 3.0) == [Broadcast(TriggerCheckpoint(1), ATTEMPT_0)]
    assert send(machine, 1, Decline(1, worker=1, reason="disk full"), 3.5) == [
        Broadcast(CheckpointAbort(1), ATTEMPT_0), Broadcast(TriggerCheckpoint(2), ATTEMPT_0)]
    assert machine.kind.final_checkpoint == 2
    assert handled(machine, TimePassed(6.0, 0.0)) == [  # timed out (2 s): once more
        Broadcast(CheckpointAbort(2), ATTEMPT_0), Broadcast(TriggerCheckpoint(3), ATTEMPT_0)]
    send(machine, 0, ack(3, 0), 6.5)
    assert send(machine, 1, ack(3, 1), 6.5) == [Broadcast(CheckpointComplete(3), ATTEMPT_0)]
    send(machine, 0, Committed(3, 0), 7.0)
    assert send(machine, 1, Committed(3, 1), 7.0) == [Broadcast(Shutdown(), ATTEMPT_0)]


@pytest.mark.parametrize("restart", [FixedDelayRestart(1, 0.0), None])
def test_a_failure_during_the_final_checkpoint_restarts_or_fails(tmp_path, restart):
    coordinator = coordinator_on(tmp_path)
    machine = make(coordinator=coordinator, restart=restart)
    deploy(machine)
    start(machine)
    send(machine, 0, Finished({}), 3.0)
    send(machine, 1, Finished({}), 3.0)
    send(machine, 0, ack(1, 0), 3.5)
    send(machine, 1, ack(1, 1), 3.5)
    assert send(machine, 0, Committed(1, 0), 4.0) == []
    # worker 1 dies before it committed: a finished worker's lost connection is no failure itself...
    assert handled(machine, WorkerDisconnected(1, 11, 4.1)) == []
    assert machine.status == S.RUNNING
    # ...but its Spark task is: the Spark job fails before every worker committed
    assert handled(machine, SparkJobEnded(None, "Python worker exited unexpectedly", 4.2)) == []
    assert machine.status == S.FAILING
    out = fail_over(machine, 4.2)
    assert machine.error is None if restart else machine.error is not None
    if restart is None:  # the Spark job already ended: nothing to kill
        assert out == [Broadcast(Cancel(str(machine.error)), ATTEMPT_0)] and machine.status == S.FAILED
        assert "the Spark job running the workers failed: Python worker exited unexpectedly" in str(machine.error)
        return
    [restarting, cancel] = out  # the driver logs the restart and its cause as it happens
    assert restarting.cause == "the Spark job running the workers failed: Python worker exited unexpectedly"
    assert (restarting.attempt, restarting.number) == (0, 1)
    assert cancel.message.reason.startswith("restarting: job 'job' failed: the Spark job running the workers failed")
    assert machine.status == S.RESTARTING
    assert handled(machine, TimePassed(4.8, 0.0)) == [CloseConnections(ATTEMPT_0), SubmitSparkJob()]
    assert machine.status == S.DEPLOYING and machine.attempt == 1 and machine.kind.final_checkpoint is None
    assert not coordinator.paused
    # the new attempt restores the final checkpoint, which completed
    assert deploy(machine, attempt=1) == ResolveRestore(coordinator.storage, 1, None)


# ---------------------------------------------------------------------- failures
def test_a_more_specific_failure_within_the_grace_period_is_the_reported_error():
    machine = make()
    deploy(machine)
    start(machine)
    assert handled(machine, WorkerDisconnected(0, 10, 5.0)) == []
    assert machine.status == S.FAILING and machine.lifecycle.failing_since == 5.0
    failure = Failed("user", "ValueError: bad", 1, operator="Map", traceback="Traceback ...")
    assert send(machine, 1, failure, 5.3) == []
    out = fail_over(machine, 5.0)
    assert machine.error is not None and machine.error.category == "user"
    assert str(machine.error) == "job 'job' failed: operator 'Map' (worker 1) raised ValueError: bad\nTraceback ..."
    assert out == [Broadcast(Cancel(str(machine.error)), ATTEMPT_0)]
    assert machine.status == S.FAILING  # stopping: waiting for the Spark job
    assert send(machine, 1, Failed("internal", "late", 1), 5.6) == []  # decided: later failures change nothing
    assert handled(machine, TimePassed(8.6, 0.0)) == [KillSparkJob()]
    assert machine.status == S.FAILED and machine.error.category == "user"


def test_a_missed_heartbeat_fails_the_job():
    machine = make()
    deploy(machine)
    start(machine)  # every worker last seen at 2.0
    assert send(machine, 1, Heartbeat({"records_processed": 9}), 6.0) == []
    assert handled(machine, TimePassed(7.0, 0.0)) == []  # worker 0: 5 s, not more
    assert handled(machine, TimePassed(7.1, 0.0)) == []
    assert machine.status == S.FAILING
    [failure] = machine.failures
    assert failure.category == "heartbeat" and failure.worker == 0
    fail_over(machine, 7.1)
    assert "worker 0 (pid 100 on host) sent no heartbeat for 5 s; it is hung or unreachable" in str(machine.error)


def test_finished_workers_need_no_heartbeat(tmp_path):
    machine = make(coordinator=coordinator_on(tmp_path))
    deploy(machine)
    start(machine)
    send(machine, 0, Finished({}), 2.5)
    send(machine, 1, Finished({}), 2.5)
    assert handled(machine, TimePassed(12.0, 0.0)) == []  # 9.5 s of silence; the checkpoint's timeout is 10 s
    assert machine.status == S.RUNNING  # waiting for the final checkpoint


def test_with_high_availability_a_checkpoint_id_is_reserved_before_its_trigger_is_sent(tmp_path):
    """The reservation in the HA store is an instruction of the pure machine, answered by an
    event: the trigger goes out only once the id is the job's; a refused id sends nothing (the
    checkpoint times out; a deposed leader's job is cancelled meanwhile)."""
    coordinator = coordinator_on(tmp_path, interval=1.0)
    coordinator.reserve_ids = True  # what Leadership.attach sets
    machine = make(coordinator=coordinator)
    deploy(machine)
    start(machine)
    assert machine.handle(TimePassed(3.0, 500.0)) == [ReserveCheckpointId(1)]
    assert machine.handle(CheckpointIdReserved(1, None, 3.0)) == [Broadcast(TriggerCheckpoint(1), ATTEMPT_0)]
    send(machine, 0, ack(1, 0), 3.2)
    assert send(machine, 1, ack(1, 1), 3.2) == [Broadcast(CheckpointComplete(1), ATTEMPT_0)]
    assert machine.handle(TimePassed(4.2, 501.0)) == [ReserveCheckpointId(2)]
    assert machine.handle(CheckpointIdReserved(2, "starting checkpoint 2 was refused", 4.2)) == []
    assert 2 in coordinator.pending and machine.status == S.RUNNING


def test_restart_after_restart_resumes_from_the_latest_checkpoint_then_gives_up(tmp_path):
    coordinator = coordinator_on(tmp_path, interval=1.0)
    machine = make(coordinator=coordinator, restart=FixedDelayRestart(2, 0.0))
    deploy(machine)
    start(machine)
    assert handled(machine, TimePassed(3.0, 500.0)) == [Broadcast(TriggerCheckpoint(1), ATTEMPT_0)]
    send(machine, 0, ack(1, 0), 3.2)
    assert send(machine, 1, ack(1, 1), 3.2) == [Broadcast(CheckpointComplete(1), ATTEMPT_0)]
    assert handled(machine, TimePassed(4.2, 0.0)) == [Broadcast(TriggerCheckpoint(2), ATTEMPT_0)]  # stays pending

    # the first failure: the pending checkpoint is aborted, the workers cancelled
    assert handled(machine, WorkerDisconnected(0, 10, 5.0)) == []
    [restarting, abort, cancel] = fail_over(machine, 5.0)
    assert restarting == Restarting(0, "worker 0 (Spark task attempt 0, pid 100 on host) died or lost its connection "
                                       "to the driver", 0.0, 1, "fixed delay (2 attempts, 0 s apart)")
    assert abort == Broadcast(CheckpointAbort(2), ATTEMPT_0)
    assert cancel.message.reason.startswith("restarting: job 'job' failed: worker 0 (Spark task attempt 0")
    assert machine.status == S.RESTARTING and machine.restarting.restarts[0]["attempt"] == 0
    assert handled(machine, TimePassed(8.5, 0.0)) == []  # the workers have until 5.51 + cancel_timeout to stop
    assert handled(machine, TimePassed(8.6, 0.0)) == [KillSparkJob()]
    assert handled(machine, TimePassed(8.7, 0.0)) == []  # killed once; the next attempt waits for its end
    assert handled(machine, SparkJobEnded(None, "killed", 8.8)) == []  # RESTARTING: not a new failure
    assert handled(machine, TimePassed(8.9, 0.0)) == [CloseConnections(ATTEMPT_0), SubmitSparkJob()]
    assert machine.attempt == 1 and machine.status == S.DEPLOYING and machine.failures == []
    assert coordinator.records_base == 0

    # attempt 1 restores checkpoint 1 and fails too
    point = RestorePoint(coordinator.storage.uri, 1, coordinator.storage.read_metadata(1))
    assert deploy(machine, now=9.0, attempt=1, point=point) == ResolveRestore(coordinator.storage, 1, None)
    start(machine, now=9.5, attempt=1)
    assert machine.restarting.restarts[0]["recovered_s"] == pytest.approx(4.5)
    assert send(machine, 1, Processing(1), 9.7, attempt=1) == []
    assert machine.restarting.restarts[0]["resumed_s"] == pytest.approx(4.7)
    send(machine, 1, Failed("internal", "boom", 1, traceback="Traceback (internal)"), 10.0, attempt=1)
    [restarting, cancel] = fail_over(machine, 10.0)
    assert (restarting.attempt, restarting.cause, restarting.number) == (1, "boom", 2)
    assert machine.status == S.RESTARTING
    handled(machine, SparkJobEnded([], None, 10.6))
    assert handled(machine, TimePassed(10.7, 0.0)) == [CloseConnections(ATTEMPT_1), SubmitSparkJob()]
    assert machine.attempt == 2
    assert [r["attempt"] for r in machine.restarting.restarts] == [0, 1]

    # attempt 2 restores checkpoint 1 again; its failure exhausts the restarts
    assert deploy(machine, now=11.0, attempt=2) == ResolveRestore(coordinator.storage, 1, None)
    handled(machine, WorkerDisconnected(1, conn(1, 2), 12.0))
    assert fail_over(machine, 12.0) == [Broadcast(Cancel(str(machine.error)), (30, 31))]
    assert "(after 2 restarts; restart strategy: fixed delay (2 attempts, 0 s apart))" in str(machine.error)
    assert machine.error.category == "worker_lost"
    handled(machine, SparkJobEnded([], None, 12.6))
    assert machine.status == S.FAILED and machine.attempt == 2


def test_without_a_restart_strategy_the_first_failure_fails_the_job():
    machine = make()
    deploy(machine)
    start(machine)
    send(machine, 0, Failed("peer_lost", "lost worker 1", 0, peer=1), 3.0)
    fail_over(machine, 3.0)
    assert str(machine.error) == "job 'job' failed: lost worker 1"  # no give-up note: never restarted
    handled(machine, SparkJobEnded([], None, 4.0))
    assert machine.status == S.FAILED


def test_a_damaged_checkpoint_is_never_restarted_and_names_earlier_ones():
    machine = make(restart=FixedDelayRestart(5, 0.0))
    deploy(machine, hint="Restore from an earlier checkpoint instead (newest first): restore_from='/c/chk-2'")
    send(machine, 0, Failed("restore", "state file sum-0-0.keyed of checkpoint 3 is damaged", 0), 3.0)
    fail_over(machine, 3.0)
    assert machine.error.category == "restore" and machine.restarting.restarts == []
    assert str(machine.error) == (
        "job 'job' failed: state file sum-0-0.keyed of checkpoint 3 is damaged\n"
        "Restore from an earlier checkpoint instead (newest first): restore_from='/c/chk-2'\n"
        "(a damaged checkpoint is not a transient failure: the job was not restarted)")


def test_messages_on_an_old_connection_are_ignored_after_re_registration():
    machine = make(restart=FixedDelayRestart(1, 0.0))
    deploy(machine)
    start(machine)
    handled(machine, WorkerDisconnected(0, 10, 3.0))
    fail_over(machine, 3.0)
    handled(machine, SparkJobEnded([], None, 3.6))
    handled(machine, TimePassed(3.7, 0.0))
    deploy(machine, now=4.0, attempt=1)  # worker 0 is now on connection 20
    assert send(machine, 0, Heartbeat({"stale": 1}), 4.5, connection=10) == []
    assert machine.workers[0].metrics == {} and machine.workers[0].last_seen == 4.0
    assert send(machine, 0, Failed("user", "from the dead", 0), 4.5, connection=10) == []
    assert send(machine, 0, Ready(0), 4.5, connection=10) == [] and not machine.workers[0].ready
    assert handled(machine, WorkerDisconnected(0, 10, 4.6)) == [CloseConnections((10,))]
    assert machine.status == S.RUNNING and machine.failures == []


def test_a_message_of_an_unknown_type_is_ignored():
    class Unknown(ToJobMaster):
        __slots__ = ()

    machine = make()
    deploy(machine)
    assert send(machine, 0, Unknown(), 3.0) == [] and machine.status == S.RUNNING


# ---------------------------------------------------------------------- cancel
def test_cancel_tells_every_worker_and_ends_cancelled_when_spark_ends():
    machine = make()
    deploy(machine)
    assert handled(machine, CancelRequested("cancelled by the user", 3.0)) == [
        Broadcast(Cancel("cancelled by the user"), ATTEMPT_0)]
    assert machine.status == S.CANCELLING and isinstance(machine.error, JobCancelledError)
    assert handled(machine, CancelRequested("again", 3.1)) == []  # already stopping
    assert handled(machine, SparkJobEnded([], None, 4.0)) == []
    assert handled(machine, TimePassed(4.1, 0.0)) == []
    assert machine.status == S.CANCELLED


def test_cancel_before_any_worker_registered_kills_the_spark_job_at_once():
    machine = make()
    assert handled(machine, CancelRequested("by the user", 3.0)) == [Broadcast(Cancel("by the user"), ())]
    assert handled(machine, TimePassed(3.0, 0.0)) == []
    assert handled(machine, TimePassed(3.01, 0.0)) == [KillSparkJob()]
    assert machine.status == S.CANCELLED


# ---------------------------------------------------------------------- checkpoints and loops
def test_a_decline_beyond_the_tolerated_failures_fails_the_job(tmp_path):
    machine = make(coordinator=coordinator_on(tmp_path, interval=1.0, tolerable_failures=0))
    deploy(machine)
    start(machine)
    handled(machine, TimePassed(3.0, 0.0))
    assert send(machine, 1, Decline(1, worker=1, reason="disk full"), 3.5) == [
        Broadcast(CheckpointAbort(1), ATTEMPT_0)]
    assert machine.status == S.FAILING
    fail_over(machine, 3.5)
    assert machine.error.category == "checkpoint"
    assert str(machine.error) == ("job 'job' failed: checkpoint 1 failed (disk full) and more than 0 consecutive "
                                  "checkpoint failures are tolerated")


def test_checkpoint_timeouts_beyond_the_tolerated_failures_fail_the_job(tmp_path):
    machine = make(coordinator=coordinator_on(tmp_path, interval=1.0, timeout=2.0, tolerable_failures=0))
    deploy(machine)
    start(machine)
    assert handled(machine, TimePassed(3.0, 0.0)) == [Broadcast(TriggerCheckpoint(1), ATTEMPT_0)]
    assert handled(machine, TimePassed(5.5, 0.0)) == [Broadcast(CheckpointAbort(1), ATTEMPT_0)]
    assert machine.status == S.FAILING and machine.failures[0].error == (
        "checkpoints keep failing (more than 0 consecutive timeouts or declines)")


def test_no_periodic_checkpoint_before_the_job_started(tmp_path):
    machine = make(coordinator=coordinator_on(tmp_path, interval=1.0))
    deploy(machine)
    assert handled(machine, TimePassed(3.0, 0.0)) == []  # deployed, not every worker ready yet
    start(machine, now=3.5)
    assert handled(machine, TimePassed(3.6, 0.0)) == [Broadcast(TriggerCheckpoint(1), ATTEMPT_0)]


def test_loop_termination_rounds_are_broadcast():
    machine = make(loops={7: 2})
    deploy(machine)
    start(machine)
    assert send(machine, 0, LoopReady(7, 0), 3.0) == []
    assert send(machine, 1, LoopReady(7, 1), 3.0) == [Broadcast(StartLoopProbe(7, 1), ATTEMPT_0)]
    send(machine, 0, LoopVote(7, 1, 0, True), 3.1)
    assert send(machine, 1, LoopVote(7, 1, 1, False), 3.1) == [Broadcast(StartLoopProbe(7, 2), ATTEMPT_0)]
    send(machine, 0, LoopVote(7, 2, 0, True), 3.2)
    assert send(machine, 1, LoopVote(7, 2, 1, True), 3.2) == [Broadcast(EndLoop(7), ATTEMPT_0)]


# ---------------------------------------------------------------------- tables and the driver's half
def test_every_event_message_and_instruction_has_a_handler():
    assert EVENTS.missing(typing.get_args(Event)) == []
    # every message is one all kinds share, a kind's report, or a message of the dataflow kind's own
    kinds = {KindReport, *DataflowCoordination.messages}
    assert [m for m in MESSAGES.missing(message_types(ToJobMaster)) if m not in kinds] == []
    assert _DO.missing(typing.get_args(Instruction)) == []
    assert set(_INBOX.handlers) == set(typing.get_args(_inbox_events()))


def _inbox_events():
    from epochal.control.inbox import InboxEvent

    return InboxEvent


def test_the_driver_resolves_a_restore_from_the_checkpoint_storage(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "job"))
    metadata = {"checkpoint_id": 2, "operators": {}}
    storage.write_metadata(2, metadata)
    answer = resolve_restore(ResolveRestore(storage, 2, None))
    assert isinstance(answer, RestoreResolved) and answer.point == RestorePoint(storage.uri, 2, metadata)
    assert answer.hint.startswith("No earlier completed checkpoint is retained")
    failed = resolve_restore(ResolveRestore(storage, 3, None))  # no such checkpoint
    assert isinstance(failed, RestoreFailed) and isinstance(failed.error, CheckpointError)
    given = {"storage": storage.uri, "checkpoint_id": 2, "metadata": metadata}
    assert resolve_restore(ResolveRestore(None, None, given)) == answer
    assert resolve_restore(ResolveRestore(None, None, None)) == RestoreResolved(None, DEFAULT_RESTORE_HINT)


def test_a_checkpoint_completes_once_the_driver_wrote_its_metadata_and_a_failed_write_aborts_it(tmp_path):
    coordinator = coordinator_on(tmp_path, interval=1.0, tolerable_failures=1)
    machine = make(coordinator=coordinator)
    deploy(machine)
    start(machine)
    assert machine.handle(TimePassed(3.0, 1.0)) == [Broadcast(TriggerCheckpoint(1), ATTEMPT_0)]
    machine.handle(WorkerMessage(0, conn(0), ack(1, 0), 3.1, 2.0))
    [write] = machine.handle(WorkerMessage(1, conn(1), ack(1, 1), 3.1, 2.0))
    assert isinstance(write, WriteCheckpoint) and write.checkpoint_id == 1  # the machine writes nothing itself
    out = machine.handle(CheckpointWritten(1, None, 3.2))
    assert out[0] == Broadcast(CheckpointComplete(1), ATTEMPT_0) and isinstance(out[1], RecordStats)
    assert coordinator.latest_completed == 1
    assert machine.handle(TimePassed(4.5, 3.0)) == [Broadcast(TriggerCheckpoint(2), ATTEMPT_0)]
    machine.handle(WorkerMessage(0, conn(0), ack(2, 0), 4.6, 4.0))
    [write] = machine.handle(WorkerMessage(1, conn(1), ack(2, 1), 4.6, 4.0))
    out = machine.handle(CheckpointWritten(2, "OSError: no space left on device", 4.7))
    assert out[0] == Broadcast(CheckpointAbort(2), ATTEMPT_0)  # never told complete: sinks do not commit
    assert coordinator.latest_completed == 1 and machine.status == S.RUNNING  # one failure is tolerated
