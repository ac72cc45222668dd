"""The uploads one worker still owes, as a pure machine: what its uploader thread writes next, and
what becomes of an aborted checkpoint's uploads.

The processing thread submits each snapshot's asynchronous part, a
:class:`~epochal.dataflow.checkpointing.events.SnapshotUpload` (state captured in this process) or a
:class:`~epochal.dataflow.checkpointing.fork_snapshots.ForkedSnapshot` (a child process that writes
from the moment it was forked), and the uploader thread takes them one at a time, in submission
order (:class:`~epochal.dataflow.checkpointing.uploads.Uploader` drives this machine under its
lock). When a checkpoint is aborted (``CheckpointAbort``: declined, timed out, superseded by a
newer checkpoint that completed, or its metadata could not be written) its uploads are of no use:

- one still queued in this process never runs: :meth:`UploadQueue.abort` drops it
  (:class:`Dropped`), nothing is written or acknowledged;
- a forked one's child is killed (:class:`KillChild`), and when its turn comes the thread only
  reaps it (:class:`Reap`): nothing is acknowledged or declined;
- the one being written is abandoned (:meth:`UploadQueue.abandoned` turns true; a forked one's
  child is killed too): the uploader stops before its next operator and acknowledges nothing.
  What it wrote already is left for the JobMaster to delete, as a failed upload's is (the abort's
  ``DiscardCheckpoint``).

No new upload of an aborted checkpoint comes after its abort (the snapshot pipeline captures
nothing for it any more), so the machine keeps no list of aborted checkpoints. No threads,
clocks or processes here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from epochal.dataflow.checkpointing.events import SnapshotUpload
from epochal.dataflow.checkpointing.fork_snapshots import ForkedSnapshot

#: One snapshot's asynchronous part.
Job = SnapshotUpload | ForkedSnapshot


# ---------------------------------------------------------------------- what the uploader thread does next
@dataclass(frozen=True)
class Write:
    """Write ``job`` (or wait for its child's report) and acknowledge it; then :meth:`UploadQueue.done`."""

    job: Job


@dataclass(frozen=True)
class Reap:
    """Wait for the killed child of ``snapshot``, of an aborted checkpoint; report nothing; then
    :meth:`UploadQueue.done`."""

    snapshot: ForkedSnapshot


@dataclass(frozen=True)
class End:
    """The queue is closed and empty: the thread ends."""


# ---------------------------------------------------------------------- what an abort does
@dataclass(frozen=True)
class Dropped:
    """``upload`` was queued and never runs."""

    upload: SnapshotUpload


@dataclass(frozen=True)
class KillChild:
    """Kill the child writing ``snapshot`` (its checkpoint was aborted)."""

    snapshot: ForkedSnapshot


class UploadQueue:
    """The uploads of one worker not yet written, and the one being written; see the module docstring."""

    def __init__(self) -> None:
        #: queued jobs, oldest first, each with whether its child was killed (a forked one's)
        self.queued: deque[tuple[Job, bool]] = deque()
        #: the job the thread is writing (taken and not done), and whether its checkpoint was aborted since
        self.current: Job | None = None
        self._abandoned = False
        self.closed = False

    def submit(self, job: Job) -> None:
        """The processing thread hands over ``job``, after every earlier one."""
        self.queued.append((job, False))

    def take(self) -> Write | Reap | End | None:
        """What the uploader thread does next (None: nothing yet, wait for a submission)."""
        if self.current is not None:
            raise RuntimeError("the uploader takes the next upload before the last is done")
        if self.queued:
            job, killed = self.queued.popleft()
            self.current, self._abandoned = job, killed
            return Reap(job) if killed and isinstance(job, ForkedSnapshot) else Write(job)
        return End() if self.closed else None

    def done(self) -> None:
        """The uploader thread finished the job it took."""
        self.current, self._abandoned = None, False

    def abandoned(self) -> bool:
        """Whether the checkpoint of the job being written was aborted since it was taken."""
        return self._abandoned

    def abort(self, checkpoint_id: int) -> list[Dropped | KillChild]:
        """Checkpoint ``checkpoint_id`` was aborted: its queued uploads are dropped, its forked
        snapshots' children killed, the job being written of it abandoned. Returns what was done
        to which job, queued ones first."""
        out: list[Dropped | KillChild] = []
        kept: deque[tuple[Job, bool]] = deque()
        for job, killed in self.queued:
            if job.checkpoint_id != checkpoint_id:
                kept.append((job, killed))
            elif isinstance(job, ForkedSnapshot):
                if not killed:
                    out.append(KillChild(job))
                kept.append((job, True))  # its child must still be reaped, in its turn
            else:
                out.append(Dropped(job))
        self.queued = kept
        current = self.current
        if current is not None and current.checkpoint_id == checkpoint_id and not self._abandoned:
            self._abandoned = True
            if isinstance(current, ForkedSnapshot):
                out.append(KillChild(current))
        return out

    def close(self) -> None:
        """The task ends: the thread ends once the jobs queued before are done."""
        self.closed = True
