"""The checkpoint and loop protocol between a dataflow worker and the JobMaster: its messages.

A dataflow job's own control messages (the ones every job kind shares are :mod:`epochal.messages`),
frozen, slotted dataclasses sent in CONTROL frames like every control message. Their two ends
are below the ``dataflow`` package, so they are defined here, at the lower of the two: the
worker's checkpointing sub-machines (:mod:`~epochal.dataflow.checkpointing.snapshots`,
:mod:`~epochal.dataflow.checkpointing.loop_heads`) and uploader build and take them, and the
JobMaster's :class:`~epochal.dataflow.checkpointing.coordinator.CheckpointCoordinator` and the dataflow kind's
coordinator (:mod:`epochal.dataflow.coordination`) take and build them. Two conversations:

* checkpoints: :class:`TriggerCheckpoint` (a :class:`SavepointTarget` for a savepoint),
  answered per subtask with :class:`Ack` or, per worker, :class:`Decline`; then
  :class:`CheckpointComplete` or :class:`CheckpointAbort`; a finished worker confirms the commit
  of the final checkpoint with :class:`Committed`;
* loop termination (papers/000 §3.3): a loop head reports :class:`LoopReady` once nothing more
  enters the loop from outside; the JobMaster sends probe rounds (:class:`StartLoopProbe`), the
  heads answer each with a :class:`LoopVote`, and a quiet round ends the loop (:class:`EndLoop`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from epochal.messages import ToJobMaster, ToWorker

#: Where one operator's state of one subtask was written (see ``epochal.state.snapshot``): JSON-like.
StateHandle = dict[str, Any]


# ---------------------------------------------------------------------- checkpoints
@dataclass(frozen=True, slots=True)
class SavepointTarget:
    """A checkpoint that is a savepoint (papers/001 §3.3.1): its state goes to ``location`` (the
    savepoint's own directory) in ``format`` (``canonical``: one layout every state backend reads;
    ``native``: the backend's own, where it has one), whole (nothing shared with a checkpoint).
    ``stop``: the job stops at it: sources read nothing after its barrier, and once it completes
    the sinks commit and the job ends."""

    location: str
    format: str = "canonical"
    stop: bool = False


@dataclass(frozen=True, slots=True)
class TriggerCheckpoint(ToWorker):
    """Start checkpoint ``checkpoint_id`` (a savepoint when ``savepoint`` is set): sources
    snapshot and emit its barrier."""

    checkpoint_id: int
    savepoint: SavepointTarget | None = None


@dataclass(frozen=True, slots=True)
class Ack(ToJobMaster):
    """Subtask ``subtask`` of vertex ``vertex`` wrote its snapshot for checkpoint ``checkpoint_id``."""

    checkpoint_id: int
    vertex: int
    subtask: int
    worker: int
    #: operator uid -> where its state was written
    handles: dict[str, StateHandle]
    #: alignment_s, sync_s, async_s, bytes, and where they apply buffered_bytes, spilled_bytes,
    #: loop_log_records, source_records
    stats: dict[str, float]


@dataclass(frozen=True, slots=True)
class Decline(ToJobMaster):
    """The worker cannot complete checkpoint ``checkpoint_id`` (an upload failed, alignment overflowed)."""

    checkpoint_id: int
    worker: int
    reason: str


@dataclass(frozen=True, slots=True)
class CheckpointComplete(ToWorker):
    """Checkpoint ``checkpoint_id`` is complete (its metadata is written): sinks may commit.
    ``savepoint``: it is a savepoint the job stops at (the state backends keep no base of it;
    workers confirm the commit with ``Committed``). ``leader_epoch``: with high availability, the
    epoch of the leader that completed it: a worker commits only while no newer leader took over
    (:class:`~epochal.state.fencing.LeaderFence`)."""

    checkpoint_id: int
    savepoint: bool = False
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class CheckpointAbort(ToWorker):
    """Checkpoint ``checkpoint_id`` was aborted (declined, timed out, superseded by a newer one that
    completed, or its metadata could not be written): release its alignment, forget its snapshot,
    drop its uploads not yet written."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class Committed(ToJobMaster):
    """A finished worker's sinks committed checkpoint ``checkpoint_id`` (the final one)."""

    checkpoint_id: int
    worker: int


# ---------------------------------------------------------------------- loop termination
@dataclass(frozen=True, slots=True)
class LoopReady(ToJobMaster):
    """Head subtask ``subtask`` of loop ``loop`` will receive nothing more from outside the loop."""

    loop: int
    subtask: int


@dataclass(frozen=True, slots=True)
class StartLoopProbe(ToWorker):
    """The heads of loop ``loop`` send probe round ``round`` around the loop."""

    loop: int
    round: int


@dataclass(frozen=True, slots=True)
class LoopVote(ToJobMaster):
    """Head subtask ``subtask`` of loop ``loop`` saw probe round ``round`` come back; ``quiet``: no
    record arrived on its back-edge since it sent the probe."""

    loop: int
    round: int
    subtask: int
    quiet: bool


@dataclass(frozen=True, slots=True)
class EndLoop(ToWorker):
    """Loop ``loop`` is empty and nothing can enter it: its heads end it."""

    loop: int
