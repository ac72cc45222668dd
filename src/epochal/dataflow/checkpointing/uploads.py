"""Taking and writing snapshots on a worker: the synchronous capture and the asynchronous upload.

:func:`capture` is the synchronous part of one subtask's snapshot (papers/000 §4.2): a copy of
its operators' state, timed. :func:`add_back_edge_log` completes a loop head's held copy with its
back-edge log (Algorithm 2). :class:`Uploader` is the asynchronous part: on its own thread (on
the processing thread for the synchronous baseline) it serialises and writes the state to
checkpoint storage, then acknowledges with the file handles, or declines when writing failed;
for a snapshot taken by ``fork()`` (:mod:`epochal.dataflow.checkpointing.fork_snapshots`) the child writes and
the thread only waits for its report. An aborted checkpoint's uploads are dropped or abandoned
(:meth:`Uploader.abort`; which ones, the pure :class:`~epochal.dataflow.checkpointing.upload_queue.UploadQueue`
decides).
*When* to snapshot is the snapshot pipeline's decision (:mod:`epochal.dataflow.checkpointing.snapshots`).
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from epochal.dataflow.checkpointing.events import Capture, SnapshotUpload
from epochal.dataflow.checkpointing.fork_snapshots import ForkedSnapshot, fork_snapshot, kill, kill_running, wait_report
from epochal.dataflow.checkpointing.messages import Ack, Decline
from epochal.dataflow.checkpointing.upload_queue import End, KillChild, Reap, UploadQueue
from epochal.messages import ToJobMaster
from epochal.runtime.operators.iteration import IterationHead
from epochal.state.snapshot import handle_bytes, materialize
from epochal.state.storage import CheckpointStorage

if TYPE_CHECKING:
    from epochal.dataflow.dataplane.tasks import Subtask


def capture(subtask: Subtask, instruction: Capture) -> SnapshotUpload:
    """The synchronous part of ``subtask``'s snapshot, as an upload job with its statistics (a
    savepoint's in the canonical layout: all of the keyed state, whatever the backend)."""
    started = time.monotonic()
    captured = subtask.capture(instruction.checkpoint_id, _format(instruction))
    stats: dict[str, float] = {"alignment_s": instruction.alignment_s, "sync_s": time.monotonic() - started,
                               **instruction.stats}
    if subtask.reader is not None:
        stats["source_records"] = subtask.records_read  # what this snapshot's positions cover
    return SnapshotUpload(instruction.checkpoint_id, subtask.vertex_id, subtask.index, captured, stats)


def capture_forked(subtask: Subtask, instruction: Capture, storage: CheckpointStorage,
                   reach: Callable[[str], None]) -> ForkedSnapshot:
    """The synchronous part of ``subtask``'s snapshot taken by ``fork()``: the operators' snapshot
    hooks, then the fork; the child reads the state as it was and writes it (see
    :mod:`epochal.dataflow.checkpointing.fork_snapshots`)."""
    started = time.monotonic()
    checkpoint_id, index = instruction.checkpoint_id, subtask.index
    subtask.prepare_capture(checkpoint_id, _format(instruction))
    stats: dict[str, float] = {"alignment_s": instruction.alignment_s, **instruction.stats}
    if subtask.reader is not None:
        stats["source_records"] = subtask.records_read

    def write() -> dict[str, Any]:  # in the child
        return materialize(storage, checkpoint_id, index, subtask.capture_state())

    snapshot = fork_snapshot(checkpoint_id, subtask.vertex_id, index, stats, write, reach)
    snapshot.stats["sync_s"] = time.monotonic() - started
    return snapshot


def _format(instruction: Capture) -> str | None:
    return instruction.savepoint.format if instruction.savepoint is not None else None


def add_back_edge_log(upload: SnapshotUpload, head: IterationHead, log: list[Any], max_parallelism: int) -> None:
    """A loop head's back-edge log joins its held state copy: the loop's in-transit records."""
    parts = head.log_state(log, max_parallelism)
    mine = upload.captured[head.uid]
    if parts["keyed"]:
        mine["keyed"] = {**(mine.get("keyed") or {}), **parts["keyed"]}
    if parts["operator"]:
        mine["operator"] = {**(mine.get("operator") or {}), **parts["operator"]}
    upload.stats["loop_log_records"] = len(log)


class Uploader:
    """Writes captured snapshots and acknowledges them, in submission order; drops or abandons
    those of an aborted checkpoint (:meth:`abort`).

    ``fault(point, checkpoint_id)`` reports the hook points ``during_upload`` (only if it is in
    ``hook_points``) and ``after_ack``. ``synchronous``: write on the caller's thread (the
    synchronous baseline) instead of the upload thread started by :meth:`start`.
    """

    def __init__(self, worker: int, storage: CheckpointStorage | None, send: Callable[[ToJobMaster], None],
                 fault: Callable[[str, int], None], hook_points: frozenset[str], synchronous: bool,
                 written: Callable[[int, int, int, dict[str, Any]], None] = lambda *_: None) -> None:
        self.worker = worker
        self.storage = storage
        self.send = send
        self.fault = fault
        self.hook_points = hook_points
        self.synchronous = synchronous
        #: ``written(vertex, subtask, checkpoint_id, handles)``: files written, before the Ack
        self.written = written
        #: savepoints being written: each to its own location, and no backend builds on it
        self.savepoints: dict[int, CheckpointStorage] = {}
        #: the jobs not yet written, guarded by ``_changed`` (the processing thread submits and
        #: aborts, the upload thread takes)
        self.queue = UploadQueue()
        self._changed = threading.Condition()

    def start(self) -> None:
        threading.Thread(target=self._run, name="epochal-uploader", daemon=True).start()

    def stop(self) -> None:
        """The task ends: snapshot children still writing are killed (their checkpoints cannot
        complete any more), then the thread ends after the jobs queued before."""
        kill_running()
        with self._changed:
            self.queue.close()
            self._changed.notify()

    def submit(self, upload: SnapshotUpload | ForkedSnapshot) -> None:
        if self.synchronous and not isinstance(upload, ForkedSnapshot):
            self.upload(upload)  # the baseline writes state on the processing thread
            return
        with self._changed:  # a forked one's child writes; the thread waits for its report
            self.queue.submit(upload)
            self._changed.notify()

    def abort(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` was aborted: its uploads still queued never run, its
        snapshot children are killed, and the one being written is abandoned before its next
        operator; none of them is acknowledged or declined."""
        with self._changed:
            done = self.queue.abort(checkpoint_id)
        for step in done:
            if isinstance(step, KillChild):
                kill(step.snapshot)

    def _abandoned(self) -> bool:
        """Whether the checkpoint of the upload being written was aborted meanwhile."""
        with self._changed:
            return self.queue.abandoned()

    def _run(self) -> None:
        while True:
            with self._changed:
                while (step := self.queue.take()) is None:
                    self._changed.wait()
            if isinstance(step, End):
                return
            try:
                if isinstance(step, Reap):
                    wait_report(step.snapshot)  # its child was killed: reaped, nothing to report
                elif isinstance(step.job, ForkedSnapshot):
                    self.forked(step.job)
                else:
                    self.upload(step.job)
            except OSError as error:
                if getattr(error, "errno", None) != errno.EBADF:
                    raise
                return  # the control connection was closed: the task ends, nobody waits for this
            finally:
                with self._changed:
                    self.queue.done()

    def forked(self, snapshot: ForkedSnapshot) -> None:
        """Wait for a forked snapshot's child to report, then acknowledge (or decline)."""
        started = time.monotonic()
        if "during_upload" in self.hook_points:  # the worker dies while its child writes
            self.fault("during_upload", snapshot.checkpoint_id)
        handles, why = wait_report(snapshot)
        if self._abandoned():  # its checkpoint was aborted (and its child killed): nobody waits for it
            return
        if handles is None:
            self.send(Decline(snapshot.checkpoint_id, self.worker, why))
            return
        stats = {**snapshot.stats, "async_s": time.monotonic() - started, "bytes": handle_bytes(handles)}
        if snapshot.checkpoint_id not in self.savepoints:
            self.written(snapshot.vertex, snapshot.subtask, snapshot.checkpoint_id, handles)
        self.send(Ack(snapshot.checkpoint_id, snapshot.vertex, snapshot.subtask, self.worker, handles, stats))
        self.fault("after_ack", snapshot.checkpoint_id)

    def upload(self, upload: SnapshotUpload) -> None:
        """Serialise and write the captured state, one operator at a time, then acknowledge (or
        decline). An upload whose checkpoint is aborted meanwhile stops before its next operator
        and reports nothing."""
        checkpoint_id = upload.checkpoint_id
        started = time.monotonic()
        storage = self.savepoints.get(checkpoint_id, self.storage)
        handles: dict[str, Any] = {}
        try:
            if "during_upload" in self.hook_points:  # write part of the snapshot, then crash
                storage.write_file(  # type: ignore[union-attr]
                    checkpoint_id, f"partial-{self.worker}-{upload.subtask}", b"partial")
                self.fault("during_upload", checkpoint_id)
            for uid, parts in upload.captured.items():
                if self._abandoned():
                    return
                handles.update(materialize(storage, checkpoint_id, upload.subtask, {uid: parts}))  # type: ignore[arg-type]
        except Exception as error:
            if not self._abandoned():
                self.send(Decline(checkpoint_id, self.worker, f"{type(error).__name__}: {error}"))
            return
        if self._abandoned():
            return
        stats = {**upload.stats, "async_s": time.monotonic() - started, "bytes": handle_bytes(handles)}
        if checkpoint_id not in self.savepoints:
            self.written(upload.vertex, upload.subtask, checkpoint_id, handles)
        self.send(Ack(checkpoint_id, upload.vertex, upload.subtask, self.worker, handles, stats))
        self.fault("after_ack", checkpoint_id)
