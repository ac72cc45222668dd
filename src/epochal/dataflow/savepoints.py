"""A dataflow job's savepoint requests (papers/001 §3.3.1): one at a time, each a checkpoint of its own.

:class:`SavepointRequests` is part of the dataflow kind's coordination
(:class:`~epochal.dataflow.coordination.DataflowCoordination`) and pure like it. A request
becomes a checkpoint triggered with a
:class:`~epochal.dataflow.checkpointing.messages.SavepointTarget`; it ends with a
:class:`~epochal.control.jobmaster_events.SavepointDone` when the savepoint's metadata is
written or when the checkpoint is aborted (a decline, a timeout, a failed write, a failed attempt).

- ``trigger_savepoint``: the job goes on; the savepoint is the user's (never retained, never
  restored after a failure), and its sinks' transactions commit with the next checkpoint or when a
  job restored from it commits them again.
- ``stop``: sources read nothing after the savepoint's barrier; once it is written the sinks
  commit and the job ends (the JobMaster waits for every worker's ``Committed``). If it fails the
  sources go on and so does the job.
- ``drain``: sources end first (``EndSources``): the maximum watermark flows, every window and
  timer fires, every worker finishes; the job's final checkpoint is then the savepoint.
"""

from __future__ import annotations

from epochal.control.jobmaster_events import SavepointDone, SavepointRequest
from epochal.control.kinds import KindOutput
from epochal.dataflow.checkpointing.coordinator import CheckpointCoordinator
from epochal.dataflow.checkpointing.messages import SavepointTarget
from epochal.dataflow.protocol import EndSources

FORMATS = ("canonical", "native")


class SavepointRequests:
    """The savepoint request in progress of one job, and what became of it."""

    def __init__(self) -> None:
        self.request: SavepointRequest | None = None
        #: the checkpoint id of the request's savepoint, once triggered
        self.checkpoint_id: int | None = None
        #: a drained stop: sources were told to end; the final checkpoint will be the savepoint
        self.draining = False
        #: the savepoint the job stopped at, once written (its output is being committed)
        self.stopped_at: str | None = None

    @property
    def stopping(self) -> bool:
        """The job is stopping at a savepoint (or draining towards one)."""
        return self.request is not None and self.request.stop

    def start(self, request: SavepointRequest, coordinator: CheckpointCoordinator | None,
              finishing: bool, now: float, wall: float) -> list[KindOutput]:
        """Take ``request`` now, or refuse it (one ``SavepointDone`` with the reason)."""
        refusal = self._refusal(request, coordinator, finishing)
        if refusal is not None:
            return [SavepointDone(request.request_id, None, refusal)]
        assert coordinator is not None
        self.request = request
        if request.drain:
            self.draining = True
            return [EndSources()]
        self.checkpoint_id, messages = coordinator.trigger(now, wall, self.target())
        if request.stop:
            coordinator.paused = True  # nothing after the stop: no more periodic checkpoints
        return list(messages)

    def target(self) -> SavepointTarget:
        assert self.request is not None
        return SavepointTarget(self.request.location, self.request.format, stop=self.request.stop)

    def final(self, coordinator: CheckpointCoordinator, now: float, wall: float) -> tuple[int, list[KindOutput]]:
        """A drained job finished: its final checkpoint is the savepoint."""
        self.checkpoint_id, messages = coordinator.trigger(now, wall, self.target())
        return self.checkpoint_id, list(messages)

    def written(self, checkpoint_id: int) -> list[KindOutput]:
        """Checkpoint ``checkpoint_id``'s metadata is written: the request is done if it was its savepoint."""
        if self.request is None or checkpoint_id != self.checkpoint_id:
            return []
        done = SavepointDone(self.request.request_id, self.request.location)
        if self.request.stop:
            self.stopped_at = self.request.location
        else:
            self.reset()
        return [done]

    def aborted(self, coordinator: CheckpointCoordinator) -> list[KindOutput]:
        """If the request's savepoint was aborted (``coordinator.aborted_savepoints``): it failed.
        A job that was to stop at it goes on (its sources resume on the abort)."""
        reasons, coordinator.aborted_savepoints = coordinator.aborted_savepoints, {}
        if self.request is None or self.checkpoint_id not in reasons:
            return []
        failed = SavepointDone(self.request.request_id, None, f"savepoint {self.request.location} failed: "
                               f"{reasons[self.checkpoint_id]}; the job goes on")
        if self.request.stop and not self.draining:
            coordinator.paused = False
        self.reset()
        return [failed]

    def fail(self, reason: str) -> list[KindOutput]:
        """The request can no longer complete (the attempt failed before its savepoint was taken)."""
        if self.request is None:
            return []
        failed = SavepointDone(self.request.request_id, None, f"savepoint {self.request.location} failed: {reason}")
        self.reset()
        return [failed]

    def reset(self) -> None:
        self.request, self.checkpoint_id, self.draining = None, None, False

    def _refusal(self, request: SavepointRequest, coordinator: CheckpointCoordinator | None,
                 finishing: bool) -> str | None:
        if coordinator is None:
            return ("a savepoint needs the job's checkpoint barriers: run it with "
                    "env.enable_checkpointing(interval) (a long interval takes few checkpoints)")
        if request.format not in FORMATS:
            return f"savepoint format must be one of {', '.join(FORMATS)}, not {request.format!r}"
        if self.request is not None:
            return (f"a savepoint is in progress ({self.request.location}, request {self.request.request_id}); "
                    "wait for it to end")
        if finishing:
            return "the job is finishing: its input ended and its final checkpoint is being taken"
        return None
