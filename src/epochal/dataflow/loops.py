"""Termination detection of loops, on the driver.

A bounded job with a loop must end when its sources are exhausted and no record is left in
the loop, which no single subtask can see. Once every head of a loop reported that its inputs
from outside the loop ended (nothing can enter the loop any more), the detector runs probe
rounds: each head sends ``LoopProbe(round)`` into the loop (it travels like a barrier: an
operator forwards it once all its loop inputs delivered it and its outside inputs ended) and,
when the probe comes back over its back-edge, votes *quiet* if no record arrived on the
back-edge since it sent the probe. If every head voted quiet the loop is empty, and the heads
end it; otherwise another round starts.

Why this is sound (the argument in docs/architecture.md, in short): by FIFO channels, a
record that reaches a head's back-edge after the head's probe came back was emitted after the
probe at every hop back to some head, which emitted it while processing a back-edge record
received after sending its own probe; if that record arrived before the probe came back the
head voted dirty, else the same argument applies to it, earlier in time. So after a round in
which every head voted quiet, no record can ever reach a back-edge again, and since nothing
enters from outside, the loop is empty.
"""

from __future__ import annotations

from epochal.dataflow.checkpointing.messages import EndLoop, StartLoopProbe


class LoopTermination:
    """Probe rounds of every loop of a job; returns the messages to broadcast to the workers.

    Args:
        heads: loop id -> number of head subtasks (the loop's parallelism).
    """

    def __init__(self, heads: dict[int, int]) -> None:
        self.heads = heads
        self.reset()

    def reset(self) -> None:
        """A new job attempt: every loop starts over."""
        self.ready: dict[int, set[int]] = {loop: set() for loop in self.heads}
        self.round: dict[int, int] = {loop: 0 for loop in self.heads}
        self.votes: dict[int, dict[int, bool]] = {loop: {} for loop in self.heads}
        self.ended: set[int] = set()
        #: Rounds each loop needed before it ended (for tests and metrics).
        self.rounds_used: dict[int, int] = {}

    def on_ready(self, loop: int, subtask: int) -> list[StartLoopProbe | EndLoop]:
        """Head ``subtask`` of ``loop`` will receive nothing more from outside the loop."""
        self.ready[loop].add(subtask)
        if len(self.ready[loop]) == self.heads[loop] and self.round[loop] == 0:
            return [self._next_round(loop)]
        return []

    def on_vote(self, loop: int, probe_round: int, subtask: int, quiet: bool) -> list[StartLoopProbe | EndLoop]:
        """Head ``subtask`` saw probe ``probe_round`` come back; ``quiet``: no feedback meanwhile."""
        if loop in self.ended or probe_round != self.round[loop]:
            return []
        votes = self.votes[loop]
        votes[subtask] = quiet
        if len(votes) < self.heads[loop]:
            return []
        if all(votes.values()):
            self.ended.add(loop)
            self.rounds_used[loop] = probe_round
            return [EndLoop(loop)]
        return [self._next_round(loop)]

    def _next_round(self, loop: int) -> StartLoopProbe:
        self.round[loop] += 1
        self.votes[loop] = {}
        return StartLoopProbe(loop, self.round[loop])
