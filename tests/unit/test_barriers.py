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
