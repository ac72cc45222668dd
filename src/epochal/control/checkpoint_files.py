"""Checkpoint files on the driver: the I/O the coordinators ask for, as instructions, and their executor.

Checkpoint coordination is pure (:class:`~epochal.dataflow.checkpointing.coordinator.CheckpointCoordinator`,
the graph job's coordinator): it returns these instructions, and the JobMaster's driver carries
them out with :class:`CheckpointFiles`, outside the lock under which its machine runs, as it does
a restore. Writing a checkpoint's metadata is a round trip: the metadata is the checkpoint's
commit point, so only once it is written (:class:`CheckpointWritten` back to the machine) is the
checkpoint complete and the workers told; a failed write aborts the checkpoint instead.

:class:`CheckpointFiles` also keeps which shared files (incremental chains) each completed
checkpoint references, read from its metadata once, so deleting a checkpoint deletes the shared
files no retained checkpoint references any more.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from epochal.state.storage import SHARED, CheckpointStorage, SavepointStorage, state_files

_log = logging.getLogger("epochal")


class CheckpointFence(Protocol):
    """With high availability, the leader's fence around checkpoint I/O
    (:class:`~epochal.control.ha.fencing.Leadership`): every write of checkpoint metadata and every
    deletion carries the leader's epoch and is refused once another leader took over."""

    def allows(self, action: str) -> str | None:
        """None while this driver still leads; else why ``action`` is refused."""

    def reserve(self, checkpoint_id: int) -> str | None:
        """Take ``checkpoint_id`` from the HA store's checkpoint id counter (fenced), before its
        trigger reaches any worker: a later leader starts past it. None once done, else why not."""

    def commit(self, storage_uri: str, checkpoint_id: int) -> str | None:
        """Make checkpoint ``checkpoint_id`` of ``storage_uri`` the job's latest in the HA store
        (its commit point, fenced); None once done, else why it was refused."""


# ---------------------------------------------------------------------- instructions
@dataclass(frozen=True, slots=True)
class WriteCheckpoint:
    """Write checkpoint ``checkpoint_id``'s metadata (atomically): from then on it exists. Answered
    with :class:`CheckpointWritten` (``error`` set if the write failed)."""

    storage: CheckpointStorage
    checkpoint_id: int
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeleteCheckpoints:
    """Delete completed checkpoints beyond retention, and the shared files that none of the
    ``kept`` checkpoints references."""

    storage: CheckpointStorage
    checkpoint_ids: tuple[int, ...]
    kept: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DiscardCheckpoint:
    """Delete what an aborted (or never completed) checkpoint wrote, its shared files too, except
    those a ``kept`` (completed) checkpoint references."""

    storage: CheckpointStorage
    checkpoint_id: int
    kept: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RecordStats:
    """Append one checkpoint's statistics to ``checkpoint_stats.jsonl`` (best effort)."""

    storage: CheckpointStorage
    entry: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReserveCheckpointId:
    """With high availability: take ``checkpoint_id`` from the HA store's fenced checkpoint id
    counter before its trigger reaches any worker, so that a later leader starts past it and a
    deposed leader starts nothing. Answered with :class:`CheckpointIdReserved`."""

    checkpoint_id: int


#: The checkpoint I/O a job kind's coordinator returns; the JobMaster carries it out off its lock.
#: A :class:`WriteCheckpoint` and a :class:`ReserveCheckpointId` are answered with an event.
CheckpointIO = WriteCheckpoint | ReserveCheckpointId | DeleteCheckpoints | DiscardCheckpoint | RecordStats


@dataclass(frozen=True, slots=True)
class CheckpointWritten:
    """The answer to :class:`WriteCheckpoint`: written, or ``error`` (``now``: monotonic, when done)."""

    checkpoint_id: int
    error: str | None
    now: float


@dataclass(frozen=True, slots=True)
class CheckpointIdReserved:
    """The answer to :class:`ReserveCheckpointId`: taken (``refused`` None), or why the
    checkpoint must not start (a newer leader, an unreachable HA store); ``now`` monotonic."""

    checkpoint_id: int
    refused: str | None
    now: float


# ---------------------------------------------------------------------- the executor
class CheckpointFiles:
    """Carries out checkpoint I/O instructions; remembers the shared files of each checkpoint.
    ``fence`` (high availability): what a stale leader may no longer write or delete."""

    def __init__(self, fence: CheckpointFence | None = None) -> None:
        self.fence = fence
        #: (storage root, checkpoint id) -> shared files its metadata references
        self._shared: dict[tuple[str, int], set[str]] = {}

    def carry_out(self, instruction: CheckpointIO) -> str | None:
        """Carry out any of the instructions: a write's error (None once written), a reservation's
        refusal (None once reserved), else None."""
        if isinstance(instruction, WriteCheckpoint):
            return self.write(instruction)
        if isinstance(instruction, ReserveCheckpointId):
            return self.reserve(instruction.checkpoint_id)
        if isinstance(instruction, DeleteCheckpoints):
            self.delete(instruction)
        elif isinstance(instruction, DiscardCheckpoint):
            self.discard(instruction)
        else:
            self.record_stats(instruction)
        return None

    def reserve(self, checkpoint_id: int) -> str | None:
        """Before checkpoint ``checkpoint_id`` is triggered: with a fence, take its id from the HA
        store's counter; None once taken (or without a fence), else why it must not start."""
        return self.fence.reserve(checkpoint_id) if self.fence is not None else None

    def write(self, instruction: WriteCheckpoint) -> str | None:
        """Write the metadata; returns None, or the error that kept it from being written."""
        storage = instruction.storage
        fence = self.fence
        if fence is not None and (refused := fence.allows(f"writing checkpoint {instruction.checkpoint_id}")):
            return f"refused (fencing): {refused}"
        try:
            storage.write_metadata(instruction.checkpoint_id, instruction.metadata)
        except Exception as error:  # noqa: BLE001 - a storage failure aborts this checkpoint only
            return f"{type(error).__name__}: {error}"
        if fence is not None and not isinstance(storage, SavepointStorage):
            refused = fence.commit(storage.uri, instruction.checkpoint_id)
            if refused:  # not the job's checkpoint: its files are never restored, its id never reused
                return f"refused (fencing): {refused}"
        self._shared[(storage.uri, instruction.checkpoint_id)] = shared_files_of(instruction.metadata)
        return None

    def _deletion_refused(self, what: str) -> bool:
        refused = self.fence.allows(f"deleting {what}") if self.fence is not None else None
        if refused:
            _log.warning("not deleting %s: %s", what, refused)
        return bool(refused)

    def delete(self, instruction: DeleteCheckpoints) -> None:
        storage = instruction.storage
        if self._deletion_refused(f"checkpoints {list(instruction.checkpoint_ids)}"):
            return
        candidates: set[str] = set()
        for checkpoint_id in instruction.checkpoint_ids:
            candidates |= self._shared_of(storage, checkpoint_id)
            self._shared.pop((storage.uri, checkpoint_id), None)
            storage.delete(checkpoint_id)
        if candidates:  # shared files no retained checkpoint's chain references any more
            referenced = self._referenced(storage, instruction.kept)
            storage.delete_shared(sorted(candidates - referenced))

    def discard(self, instruction: DiscardCheckpoint) -> None:
        storage = instruction.storage
        if self._deletion_refused(f"checkpoint {instruction.checkpoint_id}"):
            return
        storage.delete(instruction.checkpoint_id)
        marker = f".c{instruction.checkpoint_id}."
        referenced = self._referenced(storage, instruction.kept)
        storage.delete_shared([name for name in storage.shared_files() if marker in name and name not in referenced])

    @staticmethod
    def record_stats(instruction: RecordStats) -> None:
        storage = instruction.storage
        try:
            storage.fs.create_dir(storage.root, recursive=True)
            with storage.fs.open_append_stream(f"{storage.root}/checkpoint_stats.jsonl") as out:
                out.write((json.dumps(instruction.entry) + "\n").encode())
        except (OSError, NotImplementedError):
            pass  # statistics must never fail a checkpoint (object stores may not append)

    def _referenced(self, storage: CheckpointStorage, kept: tuple[int, ...]) -> set[str]:
        return set().union(*(self._shared_of(storage, c) for c in kept))

    def _shared_of(self, storage: CheckpointStorage, checkpoint_id: int) -> set[str]:
        key = (storage.uri, checkpoint_id)
        if key not in self._shared:  # completed before this driver started
            try:
                self._shared[key] = shared_files_of(storage.read_metadata(checkpoint_id))
            except Exception:  # noqa: BLE001 - unreadable: it references nothing we can know of
                self._shared[key] = set()
        return self._shared[key]


def shared_files_of(metadata: dict[str, Any]) -> set[str]:
    """The shared files (incremental chains) a checkpoint's metadata references."""
    files: set[str] = set()
    for operator in metadata.get("operators", {}).values():
        for handle in operator.get("subtasks", {}).values():
            for part in ("keyed", "operator"):
                for file in state_files(handle[part]) if part in handle else ():
                    if file["file"].startswith(f"{SHARED}/"):
                        files.add(file["file"])
    return files
