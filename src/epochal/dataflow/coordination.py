"""A dataflow job's coordinator on the JobMaster: checkpoints, loops, ``collect()`` and the final checkpoint.

:class:`DataflowCoordination` is the :class:`~epochal.control.kinds.KindCoordinator` of the
``dataflow`` job kind. It owns the checkpoint coordinator
(:class:`~epochal.dataflow.checkpointing.coordinator.CheckpointCoordinator`, None without checkpointing),
loop termination (:class:`~epochal.dataflow.loops.LoopTermination`), the ``collect()`` ledger
(:class:`~epochal.dataflow.collect.CollectLedger`), the user's ``restore_from`` and the final
checkpoint: once every worker finished, one last checkpoint commits the sinks' final epoch, and
the job ends when every worker confirmed its commit (``Committed``). Its messages are the
workers' ``Ack``, ``Decline``, ``Committed``, ``LoopReady``, ``LoopVote`` and ``Collect``.
Pure: time is passed in; checkpoint files are written and deleted by the driver
(the I/O instructions of :mod:`epochal.control.checkpoint_files`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from epochal.control import job_failures
from epochal.control.jobmaster_events import ResolveRestore, SavepointRequest
from epochal.control.kinds import EndJob, KindCoordinator, KindOutput
from epochal.dataflow.checkpointing.coordinator import CheckpointCoordinator
from epochal.dataflow.checkpointing.messages import Ack, CheckpointAbort, Committed, Decline, LoopReady, LoopVote
from epochal.dataflow.collect import CollectLedger
from epochal.dataflow.loops import LoopTermination
from epochal.dataflow.protocol import Collect
from epochal.dataflow.savepoints import SavepointRequests
from epochal.dataflow.worker import Worker
from epochal.filesystems import join
from epochal.messages import ToJobMaster


class DataflowCoordination(KindCoordinator):
    """The coordination of one dataflow job of ``num_workers`` workers.

    Args:
        coordinator: the checkpoint coordinator (None: checkpointing is off).
        restore: the user's ``restore_from`` checkpoint (read and checked at submit), or None.
        loops: loop id -> number of head subtasks.
        collect_ids: the job's ``collect()`` sinks.
    """

    worker_body: ClassVar[type] = Worker
    messages: ClassVar[frozenset[type]] = frozenset({Ack, Decline, Committed, LoopReady, LoopVote, Collect})
    takes_savepoints: ClassVar[bool] = True

    def __init__(self, num_workers: int, coordinator: CheckpointCoordinator | None = None,
                 restore: dict[str, Any] | None = None, loops: dict[int, int] | None = None,
                 collect_ids: list[str] | None = None) -> None:
        self.num_workers = num_workers
        self.coordinator = coordinator
        self.restore = restore
        self.loops = LoopTermination(loops or {})
        #: collect() sinks' records: staged per writer epoch, published when committed.
        self.collects = CollectLedger(collect_ids or [])
        #: the checkpoint taken once every worker finished, and the workers that committed it
        self.final_checkpoint: int | None = None
        self.committed: set[int] = set()
        #: the user's savepoint request in progress
        self.savepoints = SavepointRequests()

    # ---------------------------------------------------------------- KindCoordinator
    def restore_request(self, attempt: int) -> ResolveRestore:
        coordinator = self.coordinator
        if coordinator is not None and coordinator.latest_completed is not None and (
                attempt > 0 or self.restore is None):
            # a restarted attempt (or a job run again) resumes at its own latest checkpoint
            return ResolveRestore(coordinator.storage, coordinator.latest_completed, None)
        return ResolveRestore(None, None, self.restore)

    def on_message(self, worker: int, message: ToJobMaster, now: float, wall: float,
                   running: bool) -> list[KindOutput]:
        coordinator = self.coordinator
        if isinstance(message, Collect):
            self.collects.receive(message.collect_id, message.payload)
        elif isinstance(message, LoopReady):
            return list(self.loops.on_ready(message.loop, message.subtask))
        elif isinstance(message, LoopVote):
            return list(self.loops.on_vote(message.loop, message.round, message.subtask, message.quiet))
        elif isinstance(message, Ack) and coordinator is not None:
            return list(coordinator.on_ack(message, now)[1])
        elif isinstance(message, Decline) and coordinator is not None:
            tolerable, aborts = coordinator.on_decline(message, now)
            out: list[KindOutput] = [*aborts, *self._savepoint_aborted()]
            if not tolerable:
                out.append(job_failures.checkpoint_declined(message.checkpoint_id, message.reason,
                                                            coordinator.config.tolerable_failures))
            elif running:
                out += self._retry_final_checkpoint(aborts, now, wall)
            return out
        elif isinstance(message, Committed) and message.checkpoint_id == self.final_checkpoint:
            self.committed.add(worker)
            if len(self.committed) == self.num_workers:
                return [EndJob(final_checkpoint=True)]
        return []

    def tick(self, now: float, wall: float) -> list[KindOutput]:
        """Periodic checkpoints and their timeouts (a final checkpoint that timed out is taken again)."""
        coordinator = self.coordinator
        if coordinator is None:
            return []
        out: list[KindOutput] = list(coordinator.maybe_trigger(now, wall))
        tolerable, aborts = coordinator.check_timeouts(now)
        out += [*aborts, *self._savepoint_aborted()]
        if not tolerable:
            return [*out, job_failures.checkpoints_failing(coordinator.config.tolerable_failures)]
        return out + self._retry_final_checkpoint(aborts, now, wall)

    def all_finished(self, now: float, wall: float) -> list[KindOutput]:
        """Every record is processed: without checkpoints the job ends; with them one last
        checkpoint commits the sinks' final epoch (taken once)."""
        coordinator = self.coordinator
        if coordinator is None:
            return [EndJob()]
        if self.final_checkpoint is not None:
            return []
        coordinator.paused = True
        if self.savepoints.draining:  # stop with drain: the final checkpoint is the savepoint
            self.final_checkpoint, drained = self.savepoints.final(coordinator, now, wall)
            return drained
        self.final_checkpoint, messages = coordinator.trigger(now, wall)
        return list(messages)

    def request_savepoint(self, request: SavepointRequest, now: float, wall: float) -> list[KindOutput]:
        """Take a savepoint (see :mod:`epochal.dataflow.savepoints`); stopping at it, the job
        ends once every worker confirmed the commit of its sinks, as after a final checkpoint."""
        out = self.savepoints.start(request, self.coordinator, self.final_checkpoint is not None, now, wall)
        if request.stop and not request.drain and self.savepoints.checkpoint_id is not None:
            self.final_checkpoint = self.savepoints.checkpoint_id
        return out

    def attempt_failed(self, reason: str, now: float) -> list[KindOutput]:
        if self.coordinator is None:
            return []
        out: list[KindOutput] = [*self.coordinator.abort_all(reason, now), *self._savepoint_aborted()]
        return out + self.savepoints.fail(reason)

    def restart_refusal(self) -> str | None:
        location = self.savepoints.stopped_at
        if location is None:
            return None
        return (f"the job had stopped at savepoint {location} and its sinks were committing it: it is not "
                f"restarted from an older checkpoint, which would repeat output; restore from {location} to go on")

    def new_attempt(self, attempt: int) -> None:
        self.committed = set()
        self.final_checkpoint = None
        self.savepoints.reset()
        self.loops.reset()
        coordinator = self.coordinator
        if coordinator is not None:
            coordinator.paused = False
            # the new attempt's sources resume at the latest checkpoint: what it covers is counted
            latest = coordinator.latest_completed
            coordinator.records_base = coordinator.source_records.get(latest, 0) if latest else 0
        # collected epochs the restored checkpoint does not cover can never be published
        self.collects.new_attempt(attempt, coordinator.latest_completed if coordinator else None,
                                  checkpointing=coordinator is not None)

    def checkpoint_written(self, checkpoint_id: int, error: str | None, now: float) -> list[KindOutput]:
        coordinator = self.coordinator
        if coordinator is None:
            return []
        if error is None:
            return [*coordinator.on_written(checkpoint_id, now), *self.savepoints.written(checkpoint_id)]
        tolerable, aborts = coordinator.on_write_failed(checkpoint_id, error, now)
        out: list[KindOutput] = [*aborts, *self._savepoint_aborted()]
        if not tolerable:
            out.append(job_failures.checkpoint_declined(checkpoint_id, f"its metadata could not be written: {error}",
                                                        coordinator.config.tolerable_failures))
        return out

    def checkpoint_reserved(self, checkpoint_id: int, refused: str | None, now: float) -> list[KindOutput]:
        """With high availability: the trigger of a checkpoint whose id the HA store gave."""
        return list(self.coordinator.on_reserved(checkpoint_id, refused)) if self.coordinator is not None else []

    def job_ended(self) -> list[Any]:
        """Checkpoints still pending can never complete (the workers are gone): their files go."""
        return self.coordinator.discard_pending() if self.coordinator is not None else []

    def _savepoint_aborted(self) -> list[KindOutput]:
        """The user's savepoint, if one of the aborts was it: failed. A job that was to stop at it
        goes on; a drained one (its sources ended) still finishes, with a plain final checkpoint."""
        if self.coordinator is None:
            return []
        was_stop = self.savepoints.stopping and not self.savepoints.draining
        failed = self.savepoints.aborted(self.coordinator)
        if failed and was_stop:
            self.final_checkpoint = None
        return failed

    def _retry_final_checkpoint(self, aborts: list[Any], now: float, wall: float) -> list[KindOutput]:
        """Every worker finished and the final checkpoint was aborted within the tolerated
        failures: take it again, or the job would wait for it forever."""
        final, coordinator = self.final_checkpoint, self.coordinator
        if final is None or coordinator is None:
            return []
        if any(isinstance(abort, CheckpointAbort) and abort.checkpoint_id == final for abort in aborts):
            self.final_checkpoint, messages = coordinator.trigger(now, wall)
            return list(messages)
        return []

    # ---------------------------------------------------------------- what a JobClient reads
    def published(self, collect_id: str) -> list[Any]:
        return list(self.collects.published.get(collect_id, []))

    def published_all(self) -> dict[str, list[Any]]:
        return {cid: list(records) for cid, records in self.collects.published.items()}

    def checkpoint_stats(self) -> list[dict[str, Any]]:
        return self.coordinator.stats_snapshot() if self.coordinator is not None else []

    @property
    def default_savepoint_dir(self) -> str:
        """``CheckpointConfig.savepoint_dir``, else ``savepoints`` beside the job's checkpoint runs
        (``<storage>/<job name>/savepoints``)."""
        coordinator = self.coordinator
        if coordinator is None:
            return ""
        if coordinator.config.savepoint_dir:
            return coordinator.config.savepoint_dir
        return join(coordinator.storage.uri.rstrip("/").rsplit("/", 1)[0], "savepoints")

    @property
    def checkpoint_path(self) -> str:
        return self.coordinator.storage.uri if self.coordinator is not None else ""

    @property
    def records_base(self) -> int:
        return self.coordinator.records_base if self.coordinator is not None else 0

    @property
    def non_restored_state(self) -> list[dict[str, Any]]:
        return list((self.restore or {}).get("non_restored_state", []))
