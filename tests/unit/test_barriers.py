"""The barrier handler as a state machine: block, buffer, release order, abort by newer barrier or timeout."""

from __future__ import annotations

from dataclasses import dataclass

from epochal.runtime.barriers import BarrierHandler


@dataclass(eq=False)
class Input:
    name: str
    blocked: bool = False
    ended: bool = False


def make(aligned=True, n=3):
    inputs = [Input(f"in{i}") for i in range(n)]
    log = []
    handler = BarrierHandler(inputs, aligned,
                             on_aligned=lambda cid, t: log.append(("aligned", cid, [i.blocked for i in inputs])),
                             on_aborted=lambda cid, why: log.append(("aborted", cid)))
    return handler, inputs, log


def test_aligned_blocks_each_input_until_all_delivered_then_releases_all():
    handler, (a, b, c), log = make()
    handler.on_barrier(a, 1)
    assert (a.blocked, b.blocked, c.blocked) == (True, False, False)
    handler.on_barrier(c, 1)
    assert (a.blocked, b.blocked, c.blocked) == (True, False, True)
    assert log == []
    handler.on_barrier(b, 1)
    # the snapshot is taken while every input is still blocked, then all are released
    assert log == [("aligned", 1, [True, True, True])]
    assert not any(i.blocked for i in (a, b, c))


def test_at_least_once_never_blocks():
    handler, (a, b, c), log = make(aligned=False)
    for channel in (a, b, c):
        handler.on_barrier(channel, 1)
        assert not channel.blocked
    assert log == [("aligned", 1, [False, False, False])]


def test_newer_barrier_aborts_the_pending_checkpoint():
    handler, (a, b, c), log = make()
    handler.on_barrier(a, 1)
    handler.on_barrier(b, 2)
    assert log == [("aborted", 1)]
    assert not a.blocked and b.blocked
    handler.on_barrier(a, 2)
    handler.on_barrier(c, 2)
    assert log[-1][:2] == ("aligned", 2)
    handler.on_barrier(c, 1)  # late barrier of the aborted checkpoint: ignored
    assert not c.blocked and log[-1][:2] == ("aligned", 2)


def test_coordinator_abort_releases_the_alignment():
    handler, (a, b, c), log = make()
    handler.on_barrier(a, 5)
    handler.abort(5, "timeout")
    assert log == [("aborted", 5)] and not a.blocked
    handler.on_barrier(b, 5)  # stragglers of the aborted checkpoint start nothing
    assert handler.pending is None and not b.blocked


def test_ended_inputs_count_as_delivered():
    handler, (a, b, c), log = make()
    c.ended = True
    handler.on_barrier(a, 1)
    b.ended = True
    handler.on_input_ended()
    assert log == [("aligned", 1, [True, False, False])]


def test_release_reports_the_inputs_it_unblocked():
    inputs = [Input(f"in{i}") for i in range(3)]
    released = []
    handler = BarrierHandler(inputs, True, on_aligned=lambda cid, t: None,
                             on_released=lambda channels: released.append([c.name for c in channels]))
    handler.on_barrier(inputs[0], 1)
    handler.on_barrier(inputs[2], 1)
    handler.abort(1, "timeout")
    assert released == [["in0", "in2"]]
    handler.on_barrier(inputs[1], 2)
    inputs[0].ended = inputs[2].ended = True
    handler.on_input_ended()
    assert released == [["in0", "in2"], ["in1"]]


def make_head(aligned=True):
    """A loop head: two regular inputs and one back-edge (Algorithm 2)."""
    regular, back = [Input("r0"), Input("r1")], Input("back")
    log = []
    handler = BarrierHandler(regular + [back], aligned,
                             on_aligned=lambda cid, t: log.append(("snapshot", cid, back.blocked)),
                             on_aborted=lambda cid, why: log.append(("aborted", cid)),
                             back_edges=[back], on_loop_closed=lambda cid: log.append(("log complete", cid)))
    return handler, regular, back, log


def test_a_head_snapshots_once_its_regular_inputs_aligned_without_waiting_for_the_back_edge():
    handler, (r0, r1), back, log = make_head()
    handler.on_barrier(r0, 1)
    handler.on_barrier(r1, 1)
    assert log == [("snapshot", 1, False)]  # never blocked, never awaited: no deadlock
    assert handler.logging == {1: {id(back)}}  # recording the back-edge until barrier 1 returns
    handler.on_barrier(r0, 2)
    handler.on_barrier(r1, 2)
    assert 2 in handler.logging  # overlapping logs of consecutive checkpoints
    handler.on_barrier(back, 1)
    handler.on_barrier(back, 2)
    assert log[1:] == [("snapshot", 2, False), ("log complete", 1), ("log complete", 2)]
    assert not handler.logging


def test_a_head_whose_regular_inputs_ended_starts_checkpoints_itself_and_a_closed_back_edge_completes_logs():
    handler, (r0, r1), back, log = make_head()
    handler.start(1)
    assert log == []  # regular inputs still open: the barrier will bring it
    r0.ended = r1.ended = True
    handler.start(1)
    assert log == [("snapshot", 1, False)] and 1 in handler.logging
    handler.abort(1, "timeout")
    assert not handler.logging
    handler.start(2)
    back.ended = True
    handler.on_input_ended()
    assert log[-2:] == [("snapshot", 2, False), ("log complete", 2)]


def test_aborting_one_checkpoint_leaves_an_older_log_recording():
    handler, (r0, r1), back, log = make_head()
    handler.on_barrier(r0, 1)
    handler.on_barrier(r1, 1)  # log 1 recording
    handler.on_barrier(r0, 2)  # alignment of 2 pending
    handler.abort(2, "alignment buffered too much")
    assert 1 in handler.logging
    handler.on_barrier(back, 1)
    assert log[-1] == ("log complete", 1)
