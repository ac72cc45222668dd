"""An aborted checkpoint's uploads (dataflow/checkpointing/upload_queue.py and the Uploader that
drives it), without Spark: a queued upload of an aborted checkpoint never runs, a forked
snapshot's child is killed and only reaped, the upload being written stops before its next
operator, none of them is acknowledged or declined, and the next checkpoint still completes."""

from __future__ import annotations

import threading
import time

import pytest

from epochal.dataflow.checkpointing.events import SnapshotUpload
from epochal.dataflow.checkpointing.fork_snapshots import ForkedSnapshot, fork_available, fork_snapshot
from epochal.dataflow.checkpointing.messages import Ack, CheckpointAbort, Decline
from epochal.dataflow.checkpointing.upload_queue import Dropped, End, KillChild, Reap, UploadQueue, Write
from epochal.dataflow.checkpointing.uploads import Uploader
from epochal.dataflow.worker import Bootstrap, Worker
from epochal.dataflow.worker_machine import WorkerPhase
from epochal.state.storage import CheckpointStorage


def upload(checkpoint_id: int, subtask: int = 0, operators: tuple[str, ...] = ("map",)) -> SnapshotUpload:
    captured = {uid: {"keyed": None, "operator": {"positions": [(uid, checkpoint_id)]}} for uid in operators}
    return SnapshotUpload(checkpoint_id, 1, subtask, captured, {"alignment_s": 0.0, "sync_s": 0.0})


def forked(checkpoint_id: int, pid: int = 4242) -> ForkedSnapshot:
    return ForkedSnapshot(checkpoint_id, 1, 0, pid, -1)


# ---------------------------------------------------------------------- the machine
def test_a_queued_upload_of_an_aborted_checkpoint_is_dropped_and_the_next_one_runs():
    queue = UploadQueue()
    first, second, next_one = upload(1, 0), upload(1, 1), upload(2, 0)
    for job in (first, second, next_one):
        queue.submit(job)
    assert queue.take() == Write(first)
    assert queue.abort(1) == [Dropped(second)]
    assert queue.abandoned()  # the one being written stops before its next operator
    assert queue.abort(1) == []  # told twice: nothing more to do
    queue.done()
    assert queue.take() == Write(next_one) and not queue.abandoned()
    queue.done()
    assert queue.take() is None  # nothing to do: the thread waits


def test_a_forked_snapshot_of_an_aborted_checkpoint_has_its_child_killed_and_is_only_reaped():
    queue = UploadQueue()
    writing, waiting, next_one = forked(1, pid=10), forked(1, pid=11), forked(2, pid=12)
    for job in (writing, waiting, next_one):
        queue.submit(job)
    assert queue.take() == Write(writing)
    assert queue.abort(1) == [KillChild(waiting), KillChild(writing)]
    assert queue.abandoned()
    queue.done()
    assert queue.take() == Reap(waiting) and queue.abandoned()
    assert queue.abort(1) == []  # its child was killed already
    queue.done()
    assert queue.take() == Write(next_one) and not queue.abandoned()


def test_an_abort_of_another_checkpoint_changes_nothing():
    queue = UploadQueue()
    queue.submit(upload(2))
    assert queue.abort(1) == [] and queue.abort(3) == []
    assert queue.take() == Write(upload(2)) and not queue.abandoned()
    assert queue.abort(1) == [] and not queue.abandoned()


def test_a_closed_queue_ends_once_what_was_queued_before_is_done():
    queue = UploadQueue()
    queue.submit(upload(1))
    queue.close()
    assert queue.take() == Write(upload(1))
    with pytest.raises(RuntimeError, match="before the last is done"):
        queue.take()
    queue.done()
    assert queue.take() == End()


# ---------------------------------------------------------------------- the uploader
class Recorder:
    """What the uploader sends and registers, and a way to hold the upload thread in a hook."""

    def __init__(self) -> None:
        self.sent: list[object] = []
        self.written: list[tuple[int, int]] = []
        self.hold: int | None = None  # the checkpoint whose upload waits in the during_upload hook
        self.held = threading.Event()
        self.release = threading.Event()

    def fault(self, point: str, checkpoint_id: int) -> None:
        if point == "during_upload" and checkpoint_id == self.hold:
            self.held.set()
            assert self.release.wait(10)

    def uploader(self, storage: CheckpointStorage, holding: bool = False) -> Uploader:
        return Uploader(0, storage, self.sent.append, self.fault,
                        frozenset({"during_upload"}) if holding else frozenset(), synchronous=False,
                        written=lambda vertex, subtask, checkpoint_id, handles:
                        self.written.append((checkpoint_id, subtask)))

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + 10
        while len(self.sent) < count and time.monotonic() < deadline:
            time.sleep(0.01)


def files(storage: CheckpointStorage, checkpoint_id: int, tmp_path) -> set[str]:
    directory = tmp_path / f"chk-{checkpoint_id}"
    return {p.name for p in directory.iterdir()} if directory.exists() else set()


def test_an_upload_queued_when_its_checkpoint_is_aborted_never_runs(tmp_path):
    storage = CheckpointStorage(str(tmp_path))
    recorder = Recorder()
    uploader = recorder.uploader(storage)
    uploader.submit(upload(1, 0))  # queued: the upload thread has not started
    uploader.submit(upload(2, 0))
    uploader.abort(1)
    uploader.start()
    recorder.wait_for(1)
    uploader.stop()
    [ack] = recorder.sent
    assert isinstance(ack, Ack) and ack.checkpoint_id == 2  # the next checkpoint completes
    assert recorder.written == [(2, 0)]
    assert files(storage, 1, tmp_path) == set()  # nothing of checkpoint 1 was written
    assert files(storage, 2, tmp_path) == {"map-0.operator"}


def test_the_upload_being_written_is_abandoned_and_the_queued_one_dropped(tmp_path):
    storage = CheckpointStorage(str(tmp_path))
    recorder = Recorder()
    recorder.hold = 1
    uploader = recorder.uploader(storage, holding=True)
    uploader.start()
    uploader.submit(upload(1, 0, ("map", "sum")))  # written first: held in its hook
    uploader.submit(upload(1, 1, ("map", "sum")))  # queued behind it
    uploader.submit(upload(2, 0, ("map", "sum")))
    assert recorder.held.wait(10)
    uploader.abort(1)
    recorder.release.set()
    recorder.wait_for(1)
    time.sleep(0.1)  # (nothing more arrives)
    uploader.stop()
    assert [(type(m).__name__, m.checkpoint_id) for m in recorder.sent] == [("Ack", 2)]
    assert recorder.written == [(2, 0)]
    # checkpoint 1: only what the hook wrote before the abort; none of its operators' state
    assert files(storage, 1, tmp_path) == {"partial-0-0"}
    assert files(storage, 2, tmp_path) == {"partial-0-0", "map-0.operator", "sum-0.operator"}


@pytest.mark.skipif(not fork_available(), reason="needs fork()")
def test_a_forked_snapshot_of_an_aborted_checkpoint_is_killed_reaped_and_not_declined(tmp_path):
    storage = CheckpointStorage(str(tmp_path))
    recorder = Recorder()
    uploader = recorder.uploader(storage)
    late = tmp_path / "late"

    def write() -> dict:
        time.sleep(30)  # killed long before
        late.write_text("written")
        return {}

    child = fork_snapshot(1, 1, 0, {}, write, lambda point: None)
    started = time.monotonic()
    uploader.submit(child)
    uploader.submit(upload(2, 0))
    uploader.abort(1)
    uploader.start()
    recorder.wait_for(1)
    time.sleep(0.1)
    uploader.stop()
    [ack] = recorder.sent
    assert isinstance(ack, Ack) and ack.checkpoint_id == 2
    assert not any(isinstance(m, Decline) for m in recorder.sent)
    assert time.monotonic() - started < 10 and not late.exists()


def test_a_worker_told_of_an_abort_drops_the_checkpoints_queued_uploads(tmp_path):
    worker = Worker(Bootstrap("127.0.0.1", 1, b"\0" * 32, "job", 1.0), index=0)
    worker.machine.phase = WorkerPhase.RUNNING
    worker.uploader = Recorder().uploader(CheckpointStorage(str(tmp_path)))
    worker.uploader.submit(upload(1))
    worker.uploader.submit(upload(2))
    worker._handle(CheckpointAbort(1))  # the JobMaster's abort, through the machine's NotifyAborted
    assert [job.checkpoint_id for job, _ in worker.uploader.queue.queued] == [2]
