"""Finding the checkpoint to restore: a job's directories of runs, and what ``restore_from`` names.

Checkpoints go to ``<storage>/<job directory>/<run id>/chk-<n>``: one directory per job name
(:func:`job_directory`), one per run of it (the job id of one ``execute``), so two runs never
mix. ``restore_from`` may name any of three levels (:func:`find_restore_point`):

* a savepoint's directory (it holds its ``_metadata``; moved or copied anywhere): that savepoint;
* a checkpoint, ``.../chk-<n>``: that one (it must be completed);
* a run, ``<storage>/<job>/<run id>``: its latest completed checkpoint;
* a job, ``<storage>/<job>``: the newest completed checkpoint of any of its runs (by the time it
  was triggered, from its metadata), so a run that crashed before its first checkpoint does not
  hide the checkpoints of the run before it.

When nothing fits, the error lists what was found (runs and their checkpoints, completed or
not), so the user sees what to pass instead. :func:`latest_checkpoint` is the same search from
a storage root and a job name (``epochal.latest_checkpoint``; ``python -m epochal
latest-checkpoint``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from epochal.state.storage import (
    METADATA,
    CheckpointError,
    CheckpointStorage,
    SavepointStorage,
    is_savepoint,
    open_filesystem,
)

_CHK = re.compile(r"chk-(\d+)$")
#: How many runs and checkpoints an error lists before it says "and N more".
_LISTED = 8


def job_directory(storage: str, job_name: str) -> str:
    """Where the runs of job ``job_name`` keep their checkpoints under ``storage``."""
    safe_name = re.sub(r"[^A-Za-z0-9_.-]+", "-", job_name).strip("-") or "job"
    return f"{storage.rstrip('/')}/{safe_name}"


@dataclass
class RunCheckpoints:
    """The checkpoints of one run directory: completed ids, and ``chk-<n>`` directories without
    metadata (in progress, or abandoned by a crash)."""

    path: str
    completed: list[int] = field(default_factory=list)
    incomplete: list[int] = field(default_factory=list)
    #: when the latest completed checkpoint was triggered (wall clock), or None
    newest_time: float | None = None

    def describe(self) -> str:
        done = ", ".join(f"chk-{c}" for c in self.completed[-_LISTED:]) or "none"
        text = f"{self.path}: completed {done}"
        if self.incomplete:
            text += f"; without _metadata (not completed): {', '.join(f'chk-{c}' for c in self.incomplete[-3:])}"
        return text


@dataclass(frozen=True)
class RestorePoint:
    """The checkpoint a ``restore_from`` path resolved to, and how (for the log)."""

    storage: CheckpointStorage
    checkpoint_id: int
    #: None when the path named the checkpoint itself; else how it was chosen, in words
    chosen: str | None = None

    @property
    def location(self) -> str:
        return self.storage.location(self.checkpoint_id)


def _listing(uri: str) -> tuple[pafs.FileSystem, str, list[pafs.FileInfo]]:
    fs, root = open_filesystem(uri)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except OSError as error:
        raise CheckpointError(f"cannot list {uri}: {error}") from error
    return fs, root, sorted((i for i in infos if i.type == pafs.FileType.Directory), key=lambda i: i.path)


def _run(uri: str, fs: pafs.FileSystem, infos: list[pafs.FileInfo]) -> RunCheckpoints:
    """The checkpoints among ``infos`` (the directories of ``uri``)."""
    run = RunCheckpoints(uri)
    for info in infos:
        match = _CHK.search(info.path)
        if match:
            done = fs.get_file_info(f"{info.path}/{METADATA}").type == pafs.FileType.File
            (run.completed if done else run.incomplete).append(int(match.group(1)))
    run.completed.sort()
    run.incomplete.sort()
    if run.completed:
        try:
            run.newest_time = float(CheckpointStorage(uri).read_metadata(run.completed[-1]).get("timestamp") or 0)
        except CheckpointError:
            run.newest_time = 0.0  # damaged: found, and reported if chosen
    return run


def list_runs(job_dir: str) -> list[RunCheckpoints]:
    """Every run directory under ``job_dir`` that holds ``chk-<n>`` directories, newest
    completed checkpoint last (runs without a completed one first)."""
    fs, _, infos = _listing(job_dir)
    runs = []
    for info in infos:
        uri = f"{job_dir.rstrip('/')}/{info.base_name}"
        run = _run(uri, fs, _listing(uri)[2])
        if run.completed or run.incomplete:
            runs.append(run)
    return sorted(runs, key=lambda r: (r.newest_time is not None, r.newest_time or 0.0))


def find_restore_point(uri: str) -> RestorePoint:
    """The checkpoint ``restore_from=uri`` names (see the module docstring); a
    :class:`CheckpointError` that lists what was found when there is none. A relative local path
    is taken from the driver's working directory (the workers that read the checkpoint have
    another one)."""
    stripped = (uri if "://" in uri else os.path.abspath(uri)).rstrip("/")
    fs, root = open_filesystem(stripped or "/")
    if fs.get_file_info(f"{root}/{METADATA}").type == pafs.FileType.File:
        savepoint = SavepointStorage(stripped)
        metadata = savepoint.read_metadata(0)  # fails clearly if corrupt
        if is_savepoint(metadata):
            return RestorePoint(savepoint, int(metadata["checkpoint_id"]))
    match = _CHK.search(stripped)
    if match:
        storage = CheckpointStorage(stripped[: match.start()].rstrip("/") or "/")
        checkpoint_id = int(match.group(1))
        storage.read_metadata(checkpoint_id)  # fails clearly if missing or corrupt
        return RestorePoint(storage, checkpoint_id)
    fs, _, infos = _listing(stripped)
    own = _run(stripped, fs, infos)
    if own.completed:
        return RestorePoint(CheckpointStorage(stripped), own.completed[-1],
                            f"the latest completed checkpoint of the run {stripped}")
    runs = list_runs(stripped)
    done = [r for r in runs if r.completed]
    if done:
        newest = done[-1]
        return RestorePoint(CheckpointStorage(newest.path), newest.completed[-1],
                            f"the newest completed checkpoint of the {len(runs)} run(s) of the job under {stripped}")
    raise CheckpointError(f"no completed checkpoint under {uri} (no chk-<n>/_metadata found). "
                          + _what_was_found(stripped, own, runs, [i.base_name for i in infos]))


def _what_was_found(uri: str, own: RunCheckpoints, runs: list[RunCheckpoints], names: list[str]) -> str:
    if own.incomplete:
        return f"Found only checkpoints that never completed: {own.describe()}"
    if runs:
        shown = "; ".join(r.describe() for r in runs[-_LISTED:])
        more = f" (and {len(runs) - _LISTED} older)" if len(runs) > _LISTED else ""
        return f"Found {len(runs)} run(s), none with a completed checkpoint: {shown}{more}"
    jobs = [name for name in names if list_runs(f"{uri}/{name}")]
    if jobs:
        listed = ", ".join(f"'{uri}/{name}'" for name in jobs[:_LISTED])
        return (f"It holds the checkpoints of {len(jobs)} job(s): pass one of {listed} (or "
                "epochal.latest_checkpoint(storage, job_name))")
    if names:
        return f"It holds no checkpoints, only: {', '.join(names[:_LISTED])}"
    return "The directory is empty or does not exist"


def resolve_restore_path(uri: str) -> tuple[CheckpointStorage, int]:
    """The storage and checkpoint id ``restore_from=uri`` names (:func:`find_restore_point`)."""
    point = find_restore_point(uri)
    return point.storage, point.checkpoint_id


def latest_checkpoint(storage: str, job_name: str) -> str:
    """The latest completed checkpoint of job ``job_name`` under the checkpoint storage
    ``storage`` (what ``enable_checkpointing(storage=...)`` was given), as a path to pass to
    ``execute(restore_from=...)``: the newest completed checkpoint of any run of that job.

    Raises :class:`~epochal.state.storage.CheckpointError` (listing what it found) when the job
    has none."""
    return find_restore_point(job_directory(storage, job_name)).location
