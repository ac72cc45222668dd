"""A window stage's background path (papers/002 §II.B): when its checkpoints are taken, and what they cost.

Under CEC the window aggregate writes G_check control tuples for its open windows in short
slices, as the policy (:mod:`epochal.cec.policy`) grants them; under CRB, the baseline, it
snapshots every open window at once every ``snapshot_interval`` seconds. Either runs on the
operator thread, so its time is a pause of the input: :class:`BackgroundPath` counts it (in all,
and the longest) for the metrics. Time is passed in.
"""

from __future__ import annotations

from collections.abc import Callable

from epochal.cec.aggregate import WindowAggregate


class BackgroundPath:
    """The background path of ``aggregate`` in ``mode`` (``cec``, ``crb`` or ``none``)."""

    def __init__(self, aggregate: WindowAggregate, mode: str, snapshot_interval: float) -> None:
        self.aggregate = aggregate
        self.mode = mode
        self.snapshot_interval = snapshot_interval
        self.next_snapshot = 0.0
        #: seconds the operator thread spent in checkpoints: in all, and the longest once
        self.pause_s = self.pause_max_s = 0.0

    def start(self, now: float) -> None:
        """Processing starts: CRB's first snapshot is one interval in (a replacement starts from
        the checkpoint it restored; Flink's periodic trigger waits an interval after a restore too)."""
        self.next_snapshot = now + self.snapshot_interval

    def run(self, now: float, clock: Callable[[], float], writer_full: Callable[[], bool]) -> bool:
        """Take what is due at ``now``: CEC's G_check slice (it ends early once the log writer
        has no room: its one frame must not wait), or CRB's snapshot. Whether anything was taken."""
        aggregate, taken = self.aggregate, 0
        if self.mode == "cec":
            while not writer_full() and (step := aggregate.check_next(clock())):
                taken += step
        elif self.mode == "crb" and now >= self.next_snapshot:
            self.next_snapshot = now + self.snapshot_interval
            if aggregate.windows:
                aggregate.snapshot()
                taken = 1
        return bool(taken)

    def paused(self, seconds: float) -> None:
        """The operator thread spent ``seconds`` on one run."""
        self.pause_s, self.pause_max_s = self.pause_s + seconds, max(self.pause_max_s, seconds)
