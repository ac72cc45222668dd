"""The graph job's coordinator on the JobMaster (no Spark): the barrier's commands, checkpoint
chains of full and delta files, the metadata a restore reads (written by the driver's
``CheckpointFiles``, as the JobMaster does), and resuming after a restart."""

from __future__ import annotations

import numpy as np

from epochal.control.checkpoint_files import CheckpointFiles, WriteCheckpoint
from epochal.graph import checkpoints
from epochal.graph.coordination import GraphCoordination
from epochal.graph.engine import StepReport
from epochal.graph.program import StepResult, VectorProgram
from epochal.graph.supersteps import Halt, RunSuperstep, SuperstepDone
from epochal.messages import KindCommand, KindReport
from epochal.state.storage import CheckpointStorage

FILES = CheckpointFiles()


def carried_out(coordination: GraphCoordination, outputs: list) -> list:
    """What the JobMaster does with the coordinator's outputs: checkpoint metadata written by its
    driver (and the coordinator told); the commands for every worker, as they read them."""
    commands = []
    for output in outputs:
        if isinstance(output, WriteCheckpoint):
            assert FILES.write(output) is None
            assert coordination.checkpoint_written(output.checkpoint_id, None, 0.0) == []
        else:
            commands.append(output.payload if isinstance(output, KindCommand) else output)
    return commands


def report(coordination: GraphCoordination, worker: int, payload, now: float) -> list:
    return carried_out(coordination, coordination.on_message(worker, KindReport(worker, payload), now, now, True))


def started(coordination: GraphCoordination, now: float) -> list:
    return carried_out(coordination, coordination.started(now, now))


class Ten(VectorProgram):
    max_supersteps = 10
    aggregators = {"total": "sum"}

    def init(self, part, ctx):
        return StepResult(np.zeros(part.num_masters))


def handle(n: int) -> dict:
    return {"file": "worker-x", "size": n, "crc": n}


def finish(coordination: GraphCoordination, n: int, checkpoint: bool, full: bool = False, now: float = 0.0):
    out = []
    for worker in (0, 1):
        file = handle(n * 10 + worker) if checkpoint else None
        done = SuperstepDone(StepReport(n, 1, 1, {"total": worker + 1}), file, full)
        out = report(coordination, worker, done, now)
    return out


def test_checkpoints_every_k_supersteps_with_a_full_one_every_n(tmp_path):
    storage = CheckpointStorage(str(tmp_path))
    coordination = GraphCoordination("job", Ten(), 2, storage, checkpoint_interval=2, full_every=2)
    assert coordination.restore_request(0).checkpoint_id is None
    assert started(coordination, 0.0) == [RunSuperstep(0, {}, True, True)]  # the first checkpoint is full
    assert finish(coordination, 0, True, True) == [RunSuperstep(1, {"total": 3}, False, False)]
    assert coordination.latest_checkpoint == 0
    assert finish(coordination, 1, False) == [RunSuperstep(2, {"total": 3}, True, False)]
    assert finish(coordination, 2, True) == [RunSuperstep(3, {"total": 3}, False, False)]
    assert coordination.chains[0] == [[0, handle(0)], [2, handle(20)]]
    finish(coordination, 3, False)
    assert coordination.supersteps.superstep == 4 and coordination.timings[-1]["full"]  # every 2nd is full
    finish(coordination, 4, True, True)
    assert coordination.chains[1] == [[4, handle(41)]]
    metadata = storage.read_metadata(4)
    assert metadata["kind"] == checkpoints.KIND and metadata["superstep"] == 4
    assert metadata["workers"]["1"] == [[4, handle(41)]] and metadata["aggregates"] == {"total": 3}


def test_a_new_attempt_restores_the_latest_checkpoint_and_resumes_after_it(tmp_path):
    storage = CheckpointStorage(str(tmp_path))
    coordination = GraphCoordination("job", Ten(), 2, storage, checkpoint_interval=3)
    started(coordination, 0.0)
    for n in range(5):
        finish(coordination, n, n % 3 == 0, n == 0)
    # worker 0 wrote superstep 6's file, then the attempt failed: 6 never completed
    report(coordination, 0, SuperstepDone(StepReport(5, 1, 1), None), 0.0)
    coordination.new_attempt(1)
    request = coordination.restore_request(1)
    assert (request.storage, request.checkpoint_id) == (storage, 3)
    assert started(coordination, 1.0) == [RunSuperstep(4, {"total": 3}, False, False)]
    assert coordination.restores == [3]


def test_without_storage_nothing_is_checkpointed_and_the_bound_halts():
    coordination = GraphCoordination("job", Ten(), 2)
    assert started(coordination, 0.0) == [RunSuperstep(0, {}, False, False)]
    for n in range(10):
        finish(coordination, n, False)
    assert finish(coordination, 10, False) == [Halt(10, "reached the bound of 10 supersteps")]
    assert coordination.halted == Halt(10, "reached the bound of 10 supersteps")
    assert coordination.latest_checkpoint is None


def test_each_superstep_keeps_when_every_worker_reported_and_where_its_time_went():
    coordination = GraphCoordination("job", Ten(), 2)
    started(coordination, 1.0)
    phases = {"compute": 0.25, "send": 0.125, "commit": 0.0625}
    report(coordination, 1, SuperstepDone(StepReport(0, 1, 1, phases=phases)), 1.5)
    report(coordination, 0, SuperstepDone(StepReport(0, 1, 1, phases={"compute": 0.5})), 2.0)
    first = coordination.timings[0]
    assert (first["started"], first["completed"]) == (1.0, 2.0)
    assert first["workers"] == {1: {"reported": 1.5, **phases}, 0: {"reported": 2.0, "compute": 0.5}}
    assert "workers" not in coordination.timings[1]  # superstep 1 has not been reported yet


def test_a_checkpoint_whose_metadata_cannot_be_written_is_never_restored(tmp_path):
    storage = CheckpointStorage(str(tmp_path))
    coordination = GraphCoordination("job", Ten(), 2, storage, checkpoint_interval=2)
    started(coordination, 0.0)
    finish(coordination, 0, True, True)  # checkpoint 0 written
    finish(coordination, 1, False)
    outputs = []
    for worker in (0, 1):  # checkpoint 2's metadata write fails (the driver's answer)
        done = SuperstepDone(StepReport(2, 1, 1, {"total": worker + 1}), handle(20 + worker), False)
        outputs = coordination.on_message(worker, KindReport(worker, done), 0.0, 0.0, True)
    [write] = [o for o in outputs if isinstance(o, WriteCheckpoint)]
    [failure] = coordination.checkpoint_written(write.checkpoint_id, "OSError: disk full", 0.0)
    assert failure.category == "checkpoint" and "disk full" in failure.error
    coordination.new_attempt(1)
    request = coordination.restore_request(1)
    assert request.checkpoint_id == 0  # the newest written one
    assert coordination.chains == {0: [[0, handle(0)]], 1: [[0, handle(1)]]}


def test_its_tables_show_each_superstep_and_the_restores():
    coordination = GraphCoordination("job", Ten(), 2)
    started(coordination, 0.0)
    for n in range(3):
        finish(coordination, n, False, now=float(n + 1))
    coordination.restores.append(1)
    supersteps, restores = coordination.tables({})
    assert supersteps.title == "Supersteps" and restores.rows == [(1, 1)]
    assert [row[:3] for row in supersteps.rows] == [(0, 2, 2), (1, 2, 2), (2, 2, 2)]  # active, messages summed
    assert [row[3] for row in supersteps.rows] == [1.0, 1.0, 1.0] and not any(row[4] for row in supersteps.rows)


def test_a_new_leader_resumes_from_the_metadata_another_driver_wrote(tmp_path):
    """High availability: a coordinator in another driver takes the job over from the latest
    complete checkpoint's metadata alone, restores it and extends its chains as the first did."""
    storage = CheckpointStorage(str(tmp_path))
    first = GraphCoordination("job", Ten(), 2, storage, checkpoint_interval=2, full_every=8)
    started(first, 0.0)
    for n in range(5):
        finish(first, n, n % 2 == 0, n == 0)
    taker = GraphCoordination("job", Ten(), 2, storage, checkpoint_interval=2, full_every=8)
    taker.resume(4, storage.read_metadata(4))
    request = taker.restore_request(0)
    assert (request.storage, request.checkpoint_id) == (storage, 4)
    assert started(taker, 1.0) == [RunSuperstep(5, {"total": 3}, False, False)]
    assert taker.restores == [4] and taker.chains == first.chains
    finish(taker, 5, False)
    finish(taker, 6, True)  # a delta on the resumed chain
    assert taker.chains[0] == [[0, handle(0)], [2, handle(20)], [4, handle(40)], [6, handle(60)]]


def test_resuming_refuses_metadata_of_another_superstep(tmp_path):
    import pytest

    storage = CheckpointStorage(str(tmp_path))
    coordination = GraphCoordination("job", Ten(), 2, storage, checkpoint_interval=1)
    with pytest.raises(ValueError, match="not a graph checkpoint"):
        coordination.resume(3, {"kind": checkpoints.KIND, "superstep": 2, "workers": {}})
