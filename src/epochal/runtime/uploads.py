"""Taking and writing snapshots on a worker: the synchronous capture and the asynchronous upload.

:func:`capture` is the synchronous part of one subtask's snapshot (papers/000 §4.2): a copy of
its operators' state, timed. :func:`add_back_edge_log` completes a loop head's held copy with its
back-edge log (Algorithm 2). :class:`Uploader` is the asynchronous part: on its own thread (on
the processing thread for the synchronous baseline) it serialises and writes the state to
checkpoint storage, then acknowledges with the file handles, or declines when writing failed.
*When* to snapshot is the snapshot pipeline's decision (:mod:`epochal.runtime.snapshots`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from epochal.messages import Ack, Decline, ToJobMaster
from epochal.runtime.iteration import IterationHead
from epochal.runtime.mailbox import SnapshotUpload
from epochal.runtime.tasks import Subtask
from epochal.runtime.worker_events import Capture
from epochal.state.snapshot import handle_bytes, materialize
from epochal.state.storage import CheckpointStorage


def capture(subtask: Subtask, instruction: Capture) -> SnapshotUpload:
    """The synchronous part of ``subtask``'s snapshot, as an upload job with its statistics."""
    started = time.monotonic()
    captured = subtask.capture(instruction.checkpoint_id)
    stats: dict[str, float] = {"alignment_s": instruction.alignment_s, "sync_s": time.monotonic() - started,
                               **instruction.stats}
    if subtask.reader is not None:
        stats["source_records"] = subtask.records_read  # what this snapshot's positions cover
    return SnapshotUpload(instruction.checkpoint_id, subtask.vertex_id, subtask.index, captured, stats)


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
    """Writes captured snapshots and acknowledges them, in submission order.

    ``fault(point, checkpoint_id)`` reports the hook points ``during_upload`` (only if it is in
    ``hook_points``) and ``after_ack``. ``synchronous``: write on the caller's thread (the
    synchronous baseline) instead of the upload thread started by :meth:`start`.
    """

    def __init__(self, worker: int, storage: CheckpointStorage | None, send: Callable[[ToJobMaster], None],
                 fault: Callable[[str, int], None], hook_points: frozenset[str], synchronous: bool) -> None:
        self.worker = worker
        self.storage = storage
        self.send = send
        self.fault = fault
        self.hook_points = hook_points
        self.synchronous = synchronous
        self.jobs: queue.SimpleQueue[SnapshotUpload | None] = queue.SimpleQueue()

    def start(self) -> None:
        threading.Thread(target=self._run, name="epochal-uploader", daemon=True).start()

    def stop(self) -> None:
        self.jobs.put(None)

    def submit(self, upload: SnapshotUpload) -> None:
        if self.synchronous:
            self.upload(upload)  # the baseline writes state on the processing thread
        else:
            self.jobs.put(upload)

    def _run(self) -> None:
        while (upload := self.jobs.get()) is not None:
            self.upload(upload)

    def upload(self, upload: SnapshotUpload) -> None:
        """Serialise and write the captured state, then acknowledge (or decline)."""
        checkpoint_id = upload.checkpoint_id
        started = time.monotonic()
        try:
            if "during_upload" in self.hook_points:  # write part of the snapshot, then crash
                self.storage.write_file(  # type: ignore[union-attr]
                    checkpoint_id, f"partial-{self.worker}-{upload.subtask}", b"partial")
                self.fault("during_upload", checkpoint_id)
            handles = materialize(self.storage, checkpoint_id, upload.subtask, upload.captured)  # type: ignore[arg-type]
        except Exception as error:
            self.send(Decline(checkpoint_id, self.worker, f"{type(error).__name__}: {error}"))
            return
        stats = {**upload.stats, "async_s": time.monotonic() - started, "bytes": handle_bytes(handles)}
        self.send(Ack(checkpoint_id, upload.vertex, upload.subtask, self.worker, handles, stats))
        self.fault("after_ack", checkpoint_id)
