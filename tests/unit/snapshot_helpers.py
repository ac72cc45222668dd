"""Driving a keyed-state backend's checkpoints as the runtime does, without Spark: the barrier
(``begin_snapshot``), the write (``materialize``), the report (``snapshot_written``); and restoring
a checkpoint into every subtask of some parallelism."""

from __future__ import annotations

from collections.abc import Callable

from epochal.control.checkpoint_files import CheckpointFiles, DeleteCheckpoints, DiscardCheckpoint, WriteCheckpoint
from epochal.dataflow.checkpointing.store import CompletedCheckpointStore
from epochal.plan.keygroups import key_group_range
from epochal.state.snapshot import RestoreSource, materialize
from epochal.state.storage import CheckpointStorage


def write_checkpoint(backend, storage, checkpoint_id: int, subtask: int, uid: str) -> tuple[object, dict]:
    """Checkpoint ``backend`` (subtask ``subtask``'s state of operator ``uid``); the plan its
    barrier made and the subtask's handles."""
    plan = backend.begin_snapshot(checkpoint_id)
    handles = materialize(storage, checkpoint_id, subtask, {uid: {"keyed": backend.capture_snapshot(plan),
                                                                  "operator": {}}})
    backend.snapshot_written(checkpoint_id, handles[uid]["keyed"])
    return plan, handles[uid]


def metadata(uid: str, handles: dict[int, dict]) -> dict:
    """A checkpoint's metadata with ``handles`` of operator ``uid`` by subtask."""
    return {"operators": {uid: {"subtasks": {str(i): h for i, h in handles.items()}}}}


def restored(storage, checkpoint_id: int, meta: dict, uid: str, max_parallelism: int, parallelism: int,
             make_backend: Callable[[int, range], object]) -> dict:
    """Restore into every subtask of ``parallelism`` (``make_backend(index, key_groups)``); the
    union of their state, each key group once (and only in the subtask that owns it)."""
    out: dict = {}
    for index in range(parallelism):
        groups = key_group_range(index, parallelism, max_parallelism)
        backend = make_backend(index, groups)
        for group, states in RestoreSource(storage, checkpoint_id, meta).keyed_groups(uid, groups):
            assert group in groups
            backend.restore_group(group, states)
        for group, states in backend.capture().items():
            assert group not in out
            out[group] = states
        getattr(backend, "dispose", lambda: None)()
    return out


class CheckpointHistory:
    """A job's completed checkpoints as the JobMaster keeps them: the pure store decides what to
    retain, the driver's :class:`CheckpointFiles` writes and deletes the files."""

    def __init__(self, storage: CheckpointStorage, retained: int) -> None:
        self.storage = storage
        self.store = CompletedCheckpointStore([], retained)
        self.files = CheckpointFiles()

    @property
    def completed(self) -> list[int]:
        return self.store.completed

    def complete(self, checkpoint_id: int, metadata: dict) -> None:
        """Write the metadata, record the checkpoint, delete what retention no longer keeps."""
        assert self.files.write(WriteCheckpoint(self.storage, checkpoint_id, metadata)) is None
        self.store.add(checkpoint_id, 0)
        deleted = self.store.retain()
        self.files.delete(DeleteCheckpoints(self.storage, tuple(deleted), tuple(self.store.completed)))

    def discard(self, checkpoint_id: int) -> None:
        self.files.discard(DiscardCheckpoint(self.storage, checkpoint_id, tuple(self.store.completed)))
