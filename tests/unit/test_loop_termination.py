"""Loop termination detection on the driver: probe rounds until every head votes quiet."""

from __future__ import annotations

from epochal.dataflow.checkpointing.messages import EndLoop, StartLoopProbe
from epochal.dataflow.loops import LoopTermination


def test_rounds_start_once_every_head_is_ready_and_end_after_a_quiet_round():
    detector = LoopTermination({0: 2, 1: 1})
    assert detector.on_ready(0, 0) == []
    assert detector.on_ready(0, 1) == [StartLoopProbe(loop=0, round=1)]
    assert detector.on_vote(0, 1, 0, quiet=True) == []
    assert detector.on_vote(0, 1, 1, quiet=False) == [StartLoopProbe(loop=0, round=2)]
    assert detector.on_vote(0, 1, 0, quiet=True) == []  # a stale round is ignored
    assert detector.on_vote(0, 2, 0, quiet=True) == []
    assert detector.on_vote(0, 2, 1, quiet=True) == [EndLoop(loop=0)]
    assert detector.rounds_used == {0: 2}
    assert detector.on_vote(0, 2, 1, quiet=True) == []  # ended loops stay ended
    assert detector.on_ready(1, 0) == [StartLoopProbe(loop=1, round=1)]  # loops are independent


def test_reset_starts_every_loop_over_for_a_new_attempt():
    detector = LoopTermination({0: 1})
    detector.on_ready(0, 0)
    detector.on_vote(0, 1, 0, quiet=True)
    detector.reset()
    assert detector.on_ready(0, 0) == [StartLoopProbe(loop=0, round=1)]
