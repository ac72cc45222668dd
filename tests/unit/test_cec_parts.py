"""The pure parts of the cec job kind around the window aggregate: a producer's output channels
(credit, replays, trimming), the worker's protocol machine, the JobMaster's coordinator, the
sink's commit log, and planning a job into stages (with the errors for what CEC cannot run)."""

from __future__ import annotations

import os

import pytest

from epochal.api.environment import Environment
from epochal.cec.coordination import CecCoordination
from epochal.cec.plan import build_stages, targets_of
from epochal.cec.protocol import FinishJob, Rejoined, Resumed, StageDone
from epochal.cec.replay import OutputChannels
from epochal.cec.sink import SinkCommitter
from epochal.cec.tuples import item_seq
from epochal.cec.worker_machine import (
    BeginProcessing,
    CecPhase,
    CecWorkerMachine,
    InputDone,
    ReportFinished,
    SetUp,
    SetUpWorker,
)
from epochal.connectors.base import SinkContext
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from epochal.control.kinds import ReplaceWorker
from epochal.errors import PlanError
from epochal.machines import TimePassed
from epochal.messages import Deploy, KindCommand, KindReport, Processing, Ready, Shutdown, Start
from epochal.plan.execution import build_execution_graph
from epochal.plan.partitioners import KeyGroupPartitioner, RebalancePartitioner
from epochal.runtime.host.events import Send, StopWorker


# ---------------------------------------------------------------- OutputChannels
def test_current_consumers_get_durable_frames_until_their_credit_runs_out():
    channels = OutputChannels([7, 8], window=2)
    assert channels.durable(1) == [7, 8] and channels.durable(2) == [7, 8]
    channels.credit(7, 1)
    assert channels.durable(3) == [7]  # 8 has two frames in flight: frame 3 waits in the queue
    assert channels.behind() == []  # no credit yet
    channels.credit(8, 2)
    assert channels.behind() == [8] and channels.replay_from(8) == (2, -1)
    assert not channels.of[8].replaying  # held back for credit, not a replay anyone asked for
    channels.replayed(8, 3)
    channels.caught_up(8)
    assert channels.durable(4) == [8] and channels.slowest() == 3


def test_a_replay_request_restarts_the_consumer_at_the_frame_holding_its_position():
    channels = OutputChannels([5])
    for frame in range(1, 6):
        channels.durable(frame)
    channels.request(5, item_seq(3, 2))  # it has item 2 of frame 3
    assert channels.behind() == [5] and channels.replay_from(5) == (2, item_seq(3, 2))
    assert channels.of[5].replaying
    assert channels.durable(6) == []  # behind: it reads the queue first
    assert channels.trim_before() == 3  # it will never ask for frames before 3 again
    channels.caught_up(5)
    assert not channels.of[5].replaying and channels.durable(7) == [5]


def test_a_replacement_producer_waits_for_each_consumer_to_say_where_it_stands():
    channels = OutputChannels([1, 2], live=False)
    assert channels.durable(10) == [] and channels.behind() == []
    channels.request(1, -1)
    assert channels.behind() == [1] and channels.replay_from(1) == (-1, -1)
    channels.lost(1)
    assert channels.durable(11) == []


# ---------------------------------------------------------------- the worker machine
def deploy(joining=False):
    return Deploy(b"", {}, None, joining=joining)


def test_the_worker_machine_runs_from_deploy_to_finished():
    machine = CecWorkerMachine(3)
    assert isinstance(machine.handle(deploy())[0], SetUpWorker) and machine.phase is CecPhase.SETTING_UP
    assert machine.handle(SetUp(0.0, 10.0)) == [Send(Ready(3))]
    assert machine.handle(Start()) == [BeginProcessing(), Send(Processing(3))]
    assert machine.handle(KindCommand(FinishJob())) == []  # not done yet
    assert machine.handle(InputDone({"frames": 2})) == [Send(KindReport(3, StageDone(3, {"frames": 2})))]
    assert machine.handle(KindCommand(FinishJob())) == [ReportFinished()]
    assert machine.handle(Shutdown("done")) == [StopWorker("done")]


def test_a_replacement_reports_its_rebuild_and_a_silent_jobmaster_stops_it():
    machine = CecWorkerMachine(1)
    machine.handle(deploy(joining=True))
    out = machine.handle(SetUp(5.0, 10.0, {"load_s": 0.1}))
    assert out == [Send(Ready(1)), Send(KindReport(1, Rejoined(1, {"load_s": 0.1})))]
    assert machine.handle(TimePassed(16.0, 0.0))[0].reason.startswith("no 'Start' from the JobMaster")


# ---------------------------------------------------------------- the coordinator
def report(coordination: CecCoordination, worker: int, payload, now: float) -> list:
    return coordination.on_message(worker, KindReport(worker, payload), now, now, True)


def test_the_coordinator_replaces_lost_workers_and_finishes_when_all_are_done():
    coordination = CecCoordination(3)
    assert report(coordination, 0, StageDone(0), 1.0) == []
    assert coordination.worker_lost(0, 2.0) == [ReplaceWorker(0)]  # done, then lost: must be done again
    coordination.worker_rejoined(0, 2.5)
    report(coordination, 0, Rejoined(0, {"load_s": 0.1}), 2.6)
    report(coordination, 0, Resumed(0), 2.7)
    assert coordination.history == [{"worker": 0, "lost": 2.0, "ready": 2.5, "rebuilt": 2.6,
                                     "phases": {"load_s": 0.1}, "resumed": 2.7}]
    assert report(coordination, 1, StageDone(1), 3.0) == [] and report(coordination, 2, StageDone(2), 3.0) == []
    assert report(coordination, 0, StageDone(0), 4.0) == [KindCommand(FinishJob())]
    recoveries, workers = coordination.tables({1: {"records_in": 5, "frames": 2}})
    assert recoveries.rows == [(0, pytest.approx(0.6), pytest.approx(0.7), None, None, None, "load_s 0.100s")]
    assert workers.columns[:3] == ("worker", "records in", "records out")
    assert workers.rows == [(1, 5, None, None, None, None, None, None, None, 2, None, None)]


def test_the_coordinator_shows_g_checks_extent_and_replay_per_worker_and_recovery():
    """The tables and kind metrics come from the workers' heartbeat counters and the recovery
    history: a recovery's replay size is its replacement's caught-up count, known for a worker's
    newest recovery only."""
    coordination = CecCoordination(2)
    for lost, rebuilt in ((1.0, 1.5), (5.0, 5.25)):
        coordination.worker_lost(1, lost)
        report(coordination, 1, Rejoined(1, {"reconstruct_s": 0.1, "extent": 700.0, "windows": 40.0}), rebuilt)
    report(coordination, 1, Resumed(1), 5.5)
    metrics = {0: {"records_in": 900, "frames": 3, "bytes_logged": 4096, "replayed_frames": 2},
               1: {"records_in": 50, "window_g_check": 12, "window_g_open": 40, "open_windows": 38, "extent": 650,
                   "extent_input": 80, "window_caught_up": 33}}
    recoveries, workers = coordination.tables(metrics)
    assert [row[:6] for row in recoveries.rows] == [(1, 0.5, None, 700, 40, None), (1, 0.25, 0.5, 700, 40, 33)]
    assert recoveries.rows[0][6] == "reconstruct_s 0.100s"
    by_title = dict(zip(workers.columns, workers.rows[1], strict=True))
    assert {k: by_title[k] for k in ("G_checks", "G_opens", "open windows", "extent", "replayed tuples")} == \
        {"G_checks": 12, "G_opens": 40, "open windows": 38, "extent": 650, "replayed tuples": 33}
    found = {(m.name, dict(m.labels)["worker"]): (m.kind, m.value) for m in coordination.kind_metrics(metrics)}
    assert found[("epochal_cec_g_checks", "1")] == ("counter", 12)
    assert found[("epochal_cec_extent_tuples", "1")] == ("gauge", 650)
    assert found[("epochal_cec_extent_input_tuples", "1")] == ("gauge", 80)
    assert found[("epochal_cec_replayed_tuples", "1")] == ("counter", 33)
    assert found[("epochal_cec_replayed_frames", "0")] == ("counter", 2)
    assert ("epochal_cec_g_checks", "0") not in found  # a worker without a window operator
    assert found[("epochal_cec_recoveries", "1")] == ("counter", 2)
    assert found[("epochal_cec_last_recovery_rebuilt_seconds", "1")] == ("gauge", 0.25)
    assert found[("epochal_cec_last_recovery_resumed_seconds", "1")] == ("gauge", 0.5)
    # one name, one kind and help, whatever the worker
    kinds = {}
    for m in coordination.kind_metrics(metrics):
        assert kinds.setdefault(m.name, (m.kind, m.help, [k for k, _ in m.labels])) == (m.kind, m.help, ["worker"])


# ---------------------------------------------------------------- the sink's commit log
def test_a_sink_commits_by_decision_and_a_replacement_recommits_and_resumes(tmp_path):
    out = tmp_path / "out"
    sink = ExactlyOnceFileSink(str(out))
    context = SinkContext("sink", 0, 1, lambda payload: None)
    committer = SinkCommitter(sink, context, tmp_path / "commits")
    committer.write(["a", "b"])
    committer.commit([4])
    committer.write(["c"])  # written, never decided: never visible
    committer.writer.close()
    committer.log.close()
    assert sorted(read_committed_lines(str(out))) == ["a", "b"]
    again = SinkCommitter(sink, context, tmp_path / "commits")
    assert again.committed == [4]  # where its input resumes
    again.write(["c2"])
    again.commit([6])
    again.close()
    assert sorted(read_committed_lines(str(out))) == ["a", "b", "c2"]


def test_a_decision_whose_commit_did_not_happen_is_committed_by_the_replacement(tmp_path):
    out = tmp_path / "out"
    sink = ExactlyOnceFileSink(str(out))
    context = SinkContext("sink", 0, 1, lambda payload: None)
    committer = SinkCommitter(sink, context, tmp_path / "commits")
    committer.write(["x"])
    committable = committer.writer.pre_commit(0)
    import pickle

    committer.log.append(0, 0.0, 0.0, pickle.dumps((committable, [1])))  # crash after the decision
    committer.log.close()
    assert read_committed_lines(str(out)) == []
    SinkCommitter(sink, context, tmp_path / "commits").close()
    assert read_committed_lines(str(out)) == ["x"]


# ---------------------------------------------------------------- planning
def stages_of(env):
    return build_stages(build_execution_graph(env.plan()))


def test_a_pipeline_becomes_stages_with_one_worker_per_instance():
    env = Environment(parallelism=2)
    (env.from_collection([(1, 2.0)]).filter(lambda r: True).key_by(lambda r: r[0]).count_window(3)
     .avg(lambda r: r[1]).map(str).sink_to(ExactlyOnceFileSink(os.devnull + "-dir")))
    source, window = stages_of(env)
    assert source.splits is not None and len(source.pre) == 1 and source.downstream == 1
    assert window.window is not None and window.window.shape.size == 3 and len(window.post) == 1
    assert window.first_worker == 2 and window.sink is not None and window.upstream == 0


@pytest.mark.parametrize("build,message", [
    (lambda s: s.key_by(lambda r: r).sum().discard(), "cannot run under continuous eventual checkpointing"),
    (lambda s: s.key_by(lambda r: r).count_window(2).count().print(), None),
    (lambda s: s.broadcast().map(str).discard(), "broadcast"),
])
def test_what_cec_cannot_run_is_a_plan_error(build, message):
    env = Environment(parallelism=2)
    build(env.from_collection([1, 2, 3]))
    if message is None:
        assert len(stages_of(env)) == 2
        return
    with pytest.raises(PlanError, match=message):
        stages_of(env)


def test_targets_follow_the_partitioners():
    records = list(range(10))
    hashed = KeyGroupPartitioner(lambda r: r, 128)
    expected = [i for i, part in enumerate(hashed.split(records, 3)) for _ in part]
    targets = targets_of(hashed, records, 3)
    assert sorted(targets) == sorted(expected)
    assert all(r in hashed.split(records, 3)[t] for r, t in zip(records, targets, strict=True))
    assert targets_of(RebalancePartitioner(), records, 3, offset=2)[:4] == [2, 0, 1, 2]


# ---------------------------------------------------------------- what a window's queue must keep
def test_a_window_stage_keeps_the_frames_of_durable_footprints_and_crb_its_newest_full_checkpoint():
    from epochal.cec.output import ExtentFrames
    from epochal.cec.tuples import FullCheckpoint, Position, WindowCheckpoint, WindowChecks, WindowClosed

    at = Position((1,))
    extent = ExtentFrames("cec")
    extent.emitted(5, [WindowCheckpoint("open", "a", 1, at)])
    extent.emitted(6, [WindowCheckpoint("open", "b", 1, at), WindowClosed("a")])
    assert extent.needed_from(4) == 4  # nothing durable yet: no footprint counts
    extent.durable(5)
    assert extent.needed_from(5) == 5
    extent.durable(6)  # a closed, b open from frame 6
    assert extent.needed_from(6) == 6
    extent.emitted(7, [WindowChecks(["b"], [2], at)])
    assert extent.needed_from(7) == 6  # its G_check is not on disk yet
    extent.durable(7)
    assert extent.needed_from(7) == 7
    extent.emitted(8, [WindowClosed("b")])
    extent.durable(8)
    assert extent.needed_from(8) == 8  # nothing open: only the newest frame
    full = ExtentFrames("crb")
    assert full.needed_from(3) == -1
    full.emitted(4, [FullCheckpoint({}, {}, 0, at)])
    assert full.durable(4) == at and full.needed_from(9) == 4


def test_trimming_deletes_only_segments_below_what_consumers_and_the_instance_need(tmp_path):
    from epochal.cec.output import StageOutput
    from epochal.cec.output_log import OutputLog
    from epochal.cec.plan import Stage

    log = OutputLog.open(tmp_path, segment_bytes=300, fsync=False)
    sent = []

    class Writer:
        def submit(self, seq, min_ts, max_ts, payload):
            output.durable(log.append(seq, min_ts, max_ts, payload))

    output = StageOutput(0, Stage(0, "s", 1, 0), log, Writer(), OutputChannels([1]),
                         lambda peer, event: sent.append(event) or True, {"records_out": 0, "frames": 0,
                                                                            "bytes_logged": 0})
    for n in range(20):
        output.emit([n] * 20, None, None)
    segments = len({f.segment for f in log.frames})
    times = [f.max_ts for f in log.frames]  # frames carry the time they were produced, in order
    assert times == sorted(times) and times[0] > 0 and log.find(ts=times[5]) <= 5
    output.channels.trim(1, item_seq(12, 0))
    output.trim(needed_from=8)  # the instance itself still needs frame 8 on
    assert log.frames[0].seq <= 8 and len({f.segment for f in log.frames}) < segments
    with pytest.raises(Exception, match="lost its own persisted output queue"):
        output.request(1, -1)  # a consumer that lost its queue asks for what is gone
    output.request(1, item_seq(12, 3))
    assert output.channels.behind() == [1]
