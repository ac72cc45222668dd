"""The barrier machines fed event sequences, compared with exact output lists: alignment
(block, release order, abort by a newer barrier or by the coordinator, aborted checkpoints
remembered), at-least-once tracking, and a loop head's back-edge logs."""

from __future__ import annotations

from dataclasses import dataclass

from epochal.dataflow.checkpointing.barriers import (
    Aborted,
    Aligned,
    BackEdgeLogs,
    BarrierAligner,
    BarrierState,
    BarrierTracker,
    Block,
    LogClosed,
    Unblock,
)
from epochal.dataflow.dataplane.subtask_barriers import SubtaskBarriers

A, B, C = 0, 1, 2


def test_aligned_blocks_each_input_until_all_delivered_then_snapshots_and_releases_all():
    aligner = BarrierAligner([A, B, C])
    assert aligner.on_barrier(A, 1, now=10.0) == [Block(A)]
    assert aligner.state is BarrierState.ALIGNING and aligner.pending == 1
    assert aligner.on_barrier(C, 1, now=10.5) == [Block(C)]
    # the snapshot is taken while every input is still blocked, then all are released
    assert aligner.on_barrier(B, 1, now=12.0) == [Block(B), Aligned(1, 2.0), Unblock((A, B, C))]
    assert aligner.state is BarrierState.WAITING and aligner.pending is None


def test_at_least_once_never_blocks():
    tracker = BarrierTracker([A, B, C])
    assert tracker.on_barrier(A, 1, 0.0) == []
    assert tracker.on_barrier(B, 1, 0.0) == []
    assert tracker.on_barrier(C, 1, 1.0) == [Aligned(1, 1.0)]


def test_a_newer_barrier_aborts_the_pending_checkpoint_and_its_late_barriers_start_nothing():
    aligner = BarrierAligner([A, B, C])
    aligner.on_barrier(A, 1, 0.0)
    assert aligner.on_barrier(B, 2, 0.0) == [Unblock((A,)), Aborted(1, "barrier 2 arrived before 1 was aligned"),
                                             Block(B)]
    assert aligner.on_barrier(A, 2, 0.0) == [Block(A)]
    assert aligner.on_barrier(C, 2, 1.0) == [Block(C), Aligned(2, 1.0), Unblock((A, B, C))]
    assert aligner.on_barrier(C, 1, 2.0) == []  # a late barrier of the superseded checkpoint


def test_the_coordinators_abort_releases_the_alignment_and_stragglers_start_nothing():
    aligner = BarrierAligner([A, B, C])
    aligner.on_barrier(A, 5, 0.0)
    assert aligner.abort(5, "timeout") == [Unblock((A,)), Aborted(5, "timeout")]
    assert aligner.on_barrier(B, 5, 0.0) == []
    assert aligner.pending is None


def test_a_barrier_that_comes_after_its_checkpoints_abort_is_never_aligned():
    """The abort (from the JobMaster) may overtake the barrier (from an upstream worker). Before
    the barrier machines remembered aborted checkpoints, such a late barrier blocked its input and
    the checkpoint was aligned, snapshotted and uploaded although the coordinator had discarded
    it (an orphaned upload in the checkpoint storage, and an input blocked for nothing)."""
    aligner = BarrierAligner([A, B])
    assert aligner.abort(5, "timed out") == []  # not pending here: remembered
    assert aligner.on_barrier(A, 5, 0.0) == []  # not blocked
    assert aligner.on_barrier(B, 5, 0.0) == []  # not aligned
    assert aligner.on_barrier(A, 6, 1.0) == [Block(A)]  # the next checkpoint is unaffected
    assert aligner.on_barrier(B, 6, 1.5) == [Block(B), Aligned(6, 0.5), Unblock((A, B))]
    assert aligner.aborted == set()  # forgotten once a newer checkpoint aligned
    tracker = BarrierTracker([A])
    tracker.abort(3, "timed out")
    assert tracker.on_barrier(A, 3, 0.0) == []


def test_an_abort_of_another_checkpoint_leaves_the_pending_one_aligning():
    aligner = BarrierAligner([A, B])
    aligner.on_barrier(A, 4, 0.0)
    assert aligner.abort(5, "timed out") == []
    assert aligner.pending == 4
    assert aligner.on_barrier(B, 4, 1.0) == [Block(B), Aligned(4, 1.0), Unblock((A, B))]
    assert aligner.on_barrier(A, 5, 2.0) == []


def test_ended_inputs_count_as_delivered():
    aligner = BarrierAligner([A, B, C])
    assert aligner.on_input_ended(C, 0.0) == []
    aligner.on_barrier(A, 1, 0.0)
    assert aligner.on_input_ended(B, 3.0) == [Aligned(1, 3.0), Unblock((A,))]


def test_start_takes_a_checkpoint_only_once_every_input_ended():
    aligner = BarrierAligner([A, B])
    assert aligner.start(1, 0.0) == []
    aligner.on_input_ended(A, 0.0)
    aligner.on_input_ended(B, 0.0)
    assert aligner.start(1, 1.0) == [Aligned(1, 0.0)]
    assert aligner.start(1, 2.0) == []  # done


def test_back_edge_logs_complete_in_order_when_the_barrier_returns_or_the_edge_ends():
    logs = BackEdgeLogs([7])
    assert logs.open(1) == []
    assert logs.open(2) == []  # overlapping logs of consecutive checkpoints
    assert logs.on_barrier(7, 2) == []  # 1 is older and still open
    assert logs.on_barrier(7, 1) == [LogClosed(1), LogClosed(2)]
    logs.open(3)
    logs.abort(3)
    assert logs.owing == {}
    logs.open(4)
    assert logs.on_input_ended(7) == [LogClosed(4)]
    assert logs.open(5) == [LogClosed(5)]  # an ended back-edge owes nothing


@dataclass(eq=False)
class Channel:
    id: int
    back_edge: bool = False
    blocked: bool = False


def test_the_subtask_driver_blocks_releases_and_opens_a_loop_heads_log_after_its_snapshot():
    r0, r1, back = Channel(0), Channel(1), Channel(2, back_edge=True)
    log: list = []
    clock = iter([0.0, 0.5, 1.0, 2.0, 3.0])
    barriers = SubtaskBarriers([r0, r1, back], aligned=True,
                               on_aligned=lambda cid, secs, savepoint: log.append(("snapshot", cid, secs, r0.blocked)),
                               on_released=lambda channels: log.append(("released", [c.id for c in channels])),
                               on_loop_closed=lambda cid: log.append(("log complete", cid)),
                               clock=lambda: next(clock))
    barriers.on_barrier(r0, 1)
    assert r0.blocked and not back.blocked
    barriers.on_barrier(r1, 1)  # never waits for the back-edge: no deadlock
    assert log == [("snapshot", 1, 0.5, True), ("released", [0, 1])]
    assert not r0.blocked and not r1.blocked
    barriers.on_barrier(back, 1)
    assert log[-1] == ("log complete", 1)
    barriers.abort(2, "timeout")
    barriers.on_barrier(r0, 2)
    assert not r0.blocked  # an aborted checkpoint's late barrier


def test_the_subtask_driver_hands_the_savepoint_a_barrier_carried_to_the_snapshot():
    r0, r1 = Channel(0), Channel(1)
    log: list = []
    barriers = SubtaskBarriers([r0, r1], aligned=True, clock=lambda: 0.0,
                               on_aligned=lambda cid, secs, savepoint: log.append((cid, savepoint)))
    barriers.on_barrier(r0, 1, "target-1")
    barriers.on_barrier(r1, 1, "target-1")
    barriers.on_barrier(r0, 2)
    barriers.on_barrier(r1, 2)
    barriers.on_barrier(r0, 3, "target-3")
    barriers.abort(3, "timeout")
    barriers.on_barrier(r0, 4)
    barriers.on_barrier(r1, 4)
    assert log == [(1, "target-1"), (2, None), (4, None)] and not barriers.savepoints
