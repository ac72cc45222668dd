"""A new leader cleans up what its deposed predecessors left: the directories of checkpoints that
never completed (docs/high_availability.md, "Orphaned checkpoints").

A leader killed (or deposed) while a checkpoint was in flight leaves its ``chk-<n>`` directory,
with some subtasks' files and no metadata, or with metadata that the HA store refused (a deposed
leader's write): neither is ever restored, and nobody else would delete them. The decision is
:func:`orphaned_checkpoints` (pure); :func:`discard_orphans` carries it out through the
JobMaster's checkpoint I/O (:class:`~epochal.control.checkpoint_files.CheckpointFiles`), so
every deletion is fenced by the new leader's epoch and keeps the shared files (incremental
chains) that a kept checkpoint references.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from epochal.control.checkpoint_files import CheckpointFence, CheckpointFiles, DiscardCheckpoint
from epochal.control.ha.records import CheckpointPointer
from epochal.state.storage import CheckpointStorage

_log = logging.getLogger("epochal")


def orphaned_checkpoints(on_disk: Iterable[int], pointer: CheckpointPointer | None, *,
                         referenced: Iterable[int] = (), below: int | None = None) -> list[int]:
    """The checkpoint directories a new leader deletes, oldest first: those ``on_disk`` that are
    not in the HA store's completed checkpoints (``pointer``: what it resumes from, the latest
    among them), not ``referenced`` by one of them (a graph checkpoint's chain reads the files of
    earlier ones), and below ``below`` (ids from there on are the new leader's own). Savepoints
    are never among ``on_disk`` (they are not ``chk-<n>`` directories of the job's run directory)."""
    kept = set(pointer.ids if pointer is not None else ()) | set(referenced)
    return sorted(c for c in set(on_disk) if c not in kept and (below is None or c < below))


def discard_orphans(storage: CheckpointStorage, fence: CheckpointFence, pointer: CheckpointPointer | None, *,
                    referenced: Iterable[int] = (), below: int | None = None) -> list[int]:
    """Delete the orphaned checkpoints of ``storage`` (see :func:`orphaned_checkpoints`), each
    deletion fenced; returns their ids. A pointer into another run directory keeps nothing here
    from being cleaned (this run directory's completed checkpoints are the pointer's)."""
    if pointer is not None and pointer.storage != storage.uri:
        return []
    orphans = orphaned_checkpoints(storage.checkpoint_dirs(), pointer, referenced=referenced, below=below)
    if orphans and (refused := fence.allows(f"removing checkpoints {orphans}")):
        _log.warning("not removing checkpoints %s of %s: %s", orphans, storage.uri, refused)
        return []
    kept = tuple(pointer.ids) if pointer is not None else ()
    files = CheckpointFiles(fence)
    for checkpoint_id in orphans:
        files.discard(DiscardCheckpoint(storage, checkpoint_id, kept))
    if orphans:
        _log.warning("removed checkpoints %s of %s: started by an earlier leader, never completed", orphans,
                     storage.uri)
    return orphans
