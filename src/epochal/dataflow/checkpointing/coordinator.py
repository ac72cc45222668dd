"""The checkpoint coordinator on the driver (papers/000 §4.2, papers/001 §3.2).

It triggers checkpoint *n* on every worker (sources inject barrier *n*), collects one
acknowledgement per subtask with the handles of its state files, and completes *n* by having
its metadata written atomically; only then does it notify the workers, which is when
transactional sinks commit. A checkpoint that times out, is declined (an upload failed) or whose
metadata cannot be written is aborted; more consecutive failures than tolerated fail the job.

The coordinator owns only the trigger timing (interval, pause, concurrency), the pending
checkpoints by id and the order of the steps; it composes one owner per concern, as Flink does:
:class:`PendingCheckpoint` (acks, classified by :class:`AckResult`), the
:class:`CheckpointFailureManager`, the :class:`CompletedCheckpointStore` (ids, retention,
record totals) and the :class:`CheckpointStatsTracker`. It is pure: every call takes the
monotonic ``now`` (and a trigger the wall time) from its caller (the dataflow kind's
coordination, :mod:`epochal.dataflow.coordination`), and returns what is to happen, in order
(:data:`Outbox`): the messages to broadcast to every worker and the checkpoint I/O the driver
carries out off the JobMaster's lock (:mod:`epochal.control.checkpoint_files`). Completing a
checkpoint is a round trip: the last ack returns :class:`WriteCheckpoint`; the driver's answer
comes back as :meth:`on_written` (complete it) or :meth:`on_write_failed` (abort it).
"""

from __future__ import annotations

from typing import Any

from epochal.config import CheckpointConfig
from epochal.control.checkpoint_files import (
    CheckpointIO,
    DeleteCheckpoints,
    DiscardCheckpoint,
    RecordStats,
    ReserveCheckpointId,
    WriteCheckpoint,
)
from epochal.dataflow.checkpointing.failures import AbortReason, CheckpointFailureManager
from epochal.dataflow.checkpointing.messages import (
    Ack,
    CheckpointAbort,
    CheckpointComplete,
    Decline,
    SavepointTarget,
    TriggerCheckpoint,
)
from epochal.dataflow.checkpointing.pending import AckResult, PendingCheckpoint
from epochal.dataflow.checkpointing.stats import CheckpointStatsTracker
from epochal.dataflow.checkpointing.store import CompletedCheckpointStore
from epochal.state.canonical import LAYOUT as CANONICAL_LAYOUT
from epochal.state.storage import CheckpointStorage, SavepointStorage

#: What a coordinator call asks for, in order: messages to broadcast to every worker, and I/O.
Outbox = list[TriggerCheckpoint | CheckpointComplete | CheckpointAbort | CheckpointIO]


class CheckpointCoordinator:
    """Triggers, completes, aborts and retains checkpoints of one job."""

    def __init__(self, config: CheckpointConfig, storage: CheckpointStorage, job_name: str,
                 subtasks: dict[tuple[int, int], str],
                 vertex_parallelism: dict[int, int], max_parallelism: int, first_id: int = 1,
                 split_layout: dict[str, int] | None = None,
                 operators: dict[str, dict[str, str]] | None = None, completed: list[int] | None = None) -> None:
        self.config = config
        self.storage = storage
        self.job_name = job_name
        self.subtasks = subtasks
        self.vertex_parallelism = vertex_parallelism
        self.max_parallelism = max_parallelism
        self.split_layout = split_layout or {}
        #: uid -> {"name", "operation"} of every operator, recorded in the metadata so that a restore
        #: into a changed job can say whose state nobody claims.
        self.operators = operators or {}
        self.next_id = first_id
        self.pending: dict[int, PendingCheckpoint] = {}
        #: fully acknowledged checkpoints whose metadata the driver is writing
        self.writing: dict[int, PendingCheckpoint] = {}
        #: ``completed``: the job's completed checkpoints so far (read from the storage when submitted)
        self.store = CompletedCheckpointStore(completed or [], config.retained)
        self.failures = CheckpointFailureManager(config.tolerable_failures)
        self.tracker = CheckpointStatsTracker()
        self.last_end = 0.0
        self.last_trigger = 0.0
        self.paused = False
        #: the job's id (recorded in its savepoints' metadata)
        self.job_id = ""
        #: savepoints aborted and why (read and cleared by the job kind's coordination)
        self.aborted_savepoints: dict[int, str] = {}
        #: with high availability: the epoch of this driver's leadership (stamped on every
        #: ``CheckpointComplete``, which workers check before committing); None without
        self.leader_epoch: int | None = None
        #: with high availability: a checkpoint's id is reserved in the HA store before its
        #: trigger is sent (:meth:`trigger` returns a ``ReserveCheckpointId``, :meth:`on_reserved`
        #: the trigger); without, the trigger goes at once
        self.reserve_ids = False

    # ---------------------------------------------------------------- views of the parts
    @property
    def latest_completed(self) -> int | None:
        return self.store.latest

    @property
    def completed(self) -> list[int]:
        return self.store.completed

    @property
    def source_records(self) -> dict[int, int]:
        return self.store.source_records

    @property
    def records_base(self) -> int:
        return self.store.records_base

    @records_base.setter
    def records_base(self, value: int) -> None:
        self.store.records_base = value

    @property
    def consecutive_failures(self) -> int:
        return self.failures.consecutive_failures

    @property
    def stats(self) -> list[dict[str, Any]]:
        return self.tracker.entries

    def stats_snapshot(self) -> list[dict[str, Any]]:
        """A copy of the statistics so far (safe from any thread)."""
        return self.tracker.snapshot()

    # ---------------------------------------------------------------- triggering
    def maybe_trigger(self, now: float, wall: float) -> Outbox:
        """Trigger a periodic checkpoint when the interval, pause and concurrency allow; returns
        its ``TriggerCheckpoint`` (nothing when none is due)."""
        if self.paused or self.config.interval is None:
            return []
        running = [p for p in (*self.pending.values(), *self.writing.values()) if p.savepoint is None]
        if len(running) >= self.config.max_concurrent:  # a savepoint in progress does not hold them up
            return []
        if now - self.last_trigger < self.config.interval or now - self.last_end < self.config.min_pause:
            return []
        return self.trigger(now, wall)[1]

    def trigger(self, now: float, wall: float, savepoint: SavepointTarget | None = None) -> tuple[int, Outbox]:
        """Start the next checkpoint (``now`` monotonic, ``wall`` the wall-clock time), a
        savepoint when ``savepoint`` says where; returns its id and the ``TriggerCheckpoint`` (with
        :attr:`reserve_ids`, the ``ReserveCheckpointId`` that :meth:`on_reserved` answers)."""
        checkpoint_id = self.next_id
        self.next_id += 1
        self.last_trigger = now
        self.pending[checkpoint_id] = PendingCheckpoint(checkpoint_id, wall, now, set(self.subtasks),
                                                        savepoint=savepoint)
        if self.reserve_ids:
            return checkpoint_id, [ReserveCheckpointId(checkpoint_id)]
        return checkpoint_id, [TriggerCheckpoint(checkpoint_id, savepoint)]

    def on_reserved(self, checkpoint_id: int, refused: str | None) -> Outbox:
        """The answer to :meth:`trigger`'s ``ReserveCheckpointId``: the ``TriggerCheckpoint`` once
        its id is reserved. Refused, nothing is sent: no worker ever sees the id, and the
        checkpoint stays pending until it times out (a counted failure; a deposed leader's job is
        cancelled meanwhile)."""
        pending = self.pending.get(checkpoint_id)
        if pending is None or refused is not None:
            return []
        return [TriggerCheckpoint(checkpoint_id, pending.savepoint)]

    def storage_of(self, pending: PendingCheckpoint) -> CheckpointStorage:
        """Where ``pending``'s files and metadata go: the job's checkpoint storage, or its savepoint's directory."""
        return SavepointStorage(pending.savepoint.location) if pending.savepoint is not None else self.storage

    # ---------------------------------------------------------------- acknowledgements
    def on_ack(self, message: Ack, now: float) -> tuple[AckResult, Outbox]:
        """Record one subtask's acknowledgement. The last one makes the checkpoint complete once
        its metadata is written: it returns the :class:`WriteCheckpoint` (answered through
        :meth:`on_written` or :meth:`on_write_failed`)."""
        pending = self.pending.get(message.checkpoint_id)
        if pending is None:
            return AckResult.UNKNOWN, []  # late ack of an aborted (or completed) checkpoint
        result = pending.acknowledge(message)
        if result is AckResult.SUCCESS and pending.fully_acknowledged:
            checkpoint_id = pending.checkpoint_id
            self.writing[checkpoint_id] = self.pending.pop(checkpoint_id)
            metadata = pending.metadata(self.job_name, self.max_parallelism, self.vertex_parallelism,
                                        self.split_layout, self.operators)
            if pending.savepoint is not None:
                metadata["savepoint"] = {"format": pending.savepoint.format, "job_id": self.job_id,
                                         "stop": pending.savepoint.stop}
                if pending.savepoint.format == "canonical":  # its keyed-state files' layout
                    metadata["savepoint"]["layout"] = CANONICAL_LAYOUT
            return result, [WriteCheckpoint(self.storage_of(pending), checkpoint_id, metadata)]
        return result, []

    def on_written(self, checkpoint_id: int, now: float) -> Outbox:
        """The metadata of ``checkpoint_id`` is written: it is complete. Returns the aborts of older
        pending checkpoints, the ``CheckpointComplete``, its statistics and the deletion of
        completed checkpoints beyond retention."""
        pending = self.writing.pop(checkpoint_id, None)
        if pending is None:
            return []
        if pending.savepoint is not None:
            return self._savepoint_written(pending, now)
        outbox: Outbox = []
        # older pending checkpoints can no longer be useful
        for older in [c for c, p in self.pending.items() if c < checkpoint_id and p.savepoint is None]:
            outbox += self.abort(older, AbortReason.SUPERSEDED, "a newer checkpoint completed", now)[1]
        self.store.add(checkpoint_id, pending.source_records())
        self.failures.on_completed()
        self.last_end = now
        outbox.append(CheckpointComplete(checkpoint_id, leader_epoch=self.leader_epoch))
        outbox.append(RecordStats(self.storage, self.tracker.completed(pending, now)))
        deleted = self.store.retain()
        if deleted:
            outbox.append(DeleteCheckpoints(self.storage, tuple(deleted), tuple(self.store.completed)))
        return outbox

    def _savepoint_written(self, pending: PendingCheckpoint, now: float) -> Outbox:
        """A savepoint is complete. It is the user's: not retained, not restored after a failure,
        and it supersedes no checkpoint. Its sinks' transactions commit with the next checkpoint
        (or when a job restored from it re-commits them), unless the job stops at it: then they
        commit now (``CheckpointComplete(savepoint=True)``) and the job ends."""
        assert pending.savepoint is not None
        self.last_end = now
        out: Outbox = [RecordStats(self.storage, self.tracker.completed(pending, now))]
        if pending.savepoint.stop:
            out.insert(0, CheckpointComplete(pending.checkpoint_id, savepoint=True, leader_epoch=self.leader_epoch))
        return out

    def on_write_failed(self, checkpoint_id: int, error: str, now: float) -> tuple[bool, Outbox]:
        """The metadata of ``checkpoint_id`` could not be written: abort it (a counted failure)."""
        pending = self.writing.pop(checkpoint_id, None)
        if pending is None:
            return True, []
        self.pending[checkpoint_id] = pending
        return self.abort(checkpoint_id, AbortReason.WRITE_FAILED, f"its metadata could not be written: {error}", now)

    # ---------------------------------------------------------------- failures
    def on_decline(self, message: Decline, now: float) -> tuple[bool, Outbox]:
        """A subtask could not write its snapshot: abort the checkpoint. Returns False (with the
        abort) when failures exceed tolerance."""
        return self.abort(message.checkpoint_id, AbortReason.DECLINED,
                          f"declined by worker {message.worker}: {message.reason}", now)

    def check_timeouts(self, now: float) -> tuple[bool, Outbox]:
        """Abort the checkpoints pending longer than the timeout; False (with the aborts so far)
        as soon as failures exceed tolerance."""
        outbox: Outbox = []
        for pending in list(self.pending.values()):
            if now - pending.started > self.config.timeout:
                tolerable, aborts = self.abort(pending.checkpoint_id, AbortReason.TIMED_OUT,
                                               f"timed out after {self.config.timeout:g} s", now)
                outbox += aborts
                if not tolerable:
                    return False, outbox
        return True, outbox

    def abort(self, checkpoint_id: int, why: AbortReason, reason: str, now: float) -> tuple[bool, Outbox]:
        """Abort a pending checkpoint; returns False when failures exceed the tolerated number,
        and the ``CheckpointAbort`` to broadcast (nothing if it was not pending). The failure
        manager decides whether ``why`` counts."""
        pending = self.pending.pop(checkpoint_id, None)
        if pending is None:
            return True, []
        pending.discard()
        self.last_end = now
        stats = self.tracker.aborted(pending, reason, now)
        # a failed savepoint is the user's failure to see, not one of the job's checkpoints
        tolerable = self.failures.tolerable if pending.savepoint is not None else self.failures.on_aborted(why)
        if pending.savepoint is not None:
            self.aborted_savepoints[checkpoint_id] = reason
        return tolerable, [
            CheckpointAbort(checkpoint_id), RecordStats(self.storage, stats),
            DiscardCheckpoint(self.storage_of(pending), checkpoint_id, tuple(self.store.completed))]

    def discard_pending(self) -> list[DiscardCheckpoint]:
        """The job ended (its workers and their snapshot processes are gone): delete what the
        checkpoints still pending had written; they can never complete."""
        kept = tuple(self.store.completed)
        return [DiscardCheckpoint(self.storage_of(pending), checkpoint_id, kept)
                for checkpoint_id, pending in self.pending.items()]

    def abort_all(self, reason: str, now: float) -> Outbox:
        """On a job failure: forget pending checkpoints (they can never complete); returns their aborts."""
        outbox: Outbox = []
        for checkpoint_id in list(self.pending):
            outbox += self.abort(checkpoint_id, AbortReason.JOB_FAILED, reason, now)[1]
        return outbox
