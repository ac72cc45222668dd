"""Checkpoint coordination on the driver, split into one owner per concern (as Flink does).

``coordinator`` (:class:`CheckpointCoordinator`: trigger timing, the pending checkpoints, the
order of completion and abort), ``pending`` (:class:`PendingCheckpoint`, :class:`AckResult`),
``failures`` (:class:`CheckpointFailureManager`, :class:`AbortReason`: what counts as a failure),
``store`` (:class:`CompletedCheckpointStore`: completed ids, retention, record totals),
``stats`` (:class:`CheckpointStatsTracker`), ``restore`` (:func:`check_restore`) and ``files``
(the checkpoint I/O coordinators ask the driver for, and :class:`CheckpointFiles`, which does it).
"""

from epochal.control.checkpointing.coordinator import CheckpointCoordinator
from epochal.control.checkpointing.failures import AbortReason, CheckpointFailureManager
from epochal.control.checkpointing.files import (
    CheckpointFiles,
    CheckpointIdReserved,
    CheckpointIO,
    CheckpointWritten,
    DeleteCheckpoints,
    DiscardCheckpoint,
    RecordStats,
    ReserveCheckpointId,
    WriteCheckpoint,
)
from epochal.control.checkpointing.pending import AckResult, PendingCheckpoint
from epochal.control.checkpointing.restore import check_restore
from epochal.control.checkpointing.stats import CheckpointStatsTracker
from epochal.control.checkpointing.store import CompletedCheckpointStore

__all__ = ["AbortReason", "AckResult", "CheckpointCoordinator", "CheckpointFailureManager", "CheckpointFiles",
           "CheckpointIdReserved", "CheckpointIO", "CheckpointStatsTracker", "CheckpointWritten",
           "CompletedCheckpointStore", "DeleteCheckpoints", "DiscardCheckpoint", "PendingCheckpoint", "RecordStats",
           "ReserveCheckpointId", "WriteCheckpoint", "check_restore"]
