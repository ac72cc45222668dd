"""Which aborted checkpoints count as failures, and when too many in a row fail the job.

Owns the count of consecutive failed checkpoints, as Flink's ``CheckpointFailureManager``: a
decline (a subtask could not write its snapshot), a timeout or a failed metadata write counts; an abort because a newer
checkpoint completed, or because the job attempt failed, does not. A completed checkpoint
resets the count. More than ``tolerable_failures`` consecutive failures fail the job.
"""

from __future__ import annotations

import enum


class AbortReason(enum.Enum):
    """Why a pending checkpoint was aborted."""

    DECLINED = "declined"  # a subtask declined (its upload failed, alignment overflowed)
    TIMED_OUT = "timed out"  # not every subtask acknowledged within the timeout
    SUPERSEDED = "superseded"  # a newer checkpoint completed first
    JOB_FAILED = "job failed"  # the job attempt failed; the checkpoint can never complete
    WRITE_FAILED = "write failed"  # every subtask acknowledged, but its metadata could not be written


#: The abort reasons that count towards ``tolerable_failures``.
COUNTED = frozenset({AbortReason.DECLINED, AbortReason.TIMED_OUT, AbortReason.WRITE_FAILED})


class CheckpointFailureManager:
    """Counts consecutive checkpoint failures against ``tolerable_failures``."""

    def __init__(self, tolerable_failures: int) -> None:
        self.tolerable_failures = tolerable_failures
        self.consecutive_failures = 0

    def on_completed(self) -> None:
        self.consecutive_failures = 0

    def on_aborted(self, reason: AbortReason) -> bool:
        """Count the abort if it is a failure; returns False once failures exceed tolerance."""
        if reason in COUNTED:
            self.consecutive_failures += 1
        return self.tolerable

    @property
    def tolerable(self) -> bool:
        return self.consecutive_failures <= self.tolerable_failures
