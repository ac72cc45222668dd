"""Savepoints and checkpoints on disk: ``epochal savepoint info PATH``, ``epochal savepoint dispose
PATH`` and ``epochal latest-checkpoint STORAGE JOB_NAME``."""

from __future__ import annotations

import argparse

from epochal.cli.common import CliError, Exit, emit


def info(args: argparse.Namespace) -> int:
    """What a savepoint or checkpoint holds (``epochal.savepoint_info``)."""
    from epochal.state.inspect import format_savepoint_info, savepoint_info

    try:
        found = savepoint_info(args.path)
    except Exception as error:  # noqa: BLE001 - every storage error is the user's to read
        raise _error(args.path, error) from None
    if args.json:
        emit(found)
    else:
        print(format_savepoint_info(found))
    return Exit.OK


def dispose(args: argparse.Namespace) -> int:
    """Delete a savepoint directory (never a job's checkpoint)."""
    from epochal.state.inspect import dispose_savepoint

    try:
        path = dispose_savepoint(args.path)
    except Exception as error:  # noqa: BLE001
        raise _error(args.path, error) from None
    if args.json:
        emit({"disposed": path})
    else:
        print(f"disposed {path}")
    return Exit.OK


def latest_checkpoint(args: argparse.Namespace) -> int:
    """The latest completed checkpoint of a job under a checkpoint storage (``epochal.latest_checkpoint``)."""
    from epochal.state.checkpoint_dirs import latest_checkpoint as find
    from epochal.state.storage import CheckpointError

    try:
        path = find(args.storage, args.job_name)
    except CheckpointError as error:
        raise CliError(Exit.NOT_FOUND, str(error)) from None
    if args.json:
        emit({"checkpoint": path})
    else:
        print(path)
    return Exit.OK


def _error(path: str, error: Exception) -> CliError:
    from epochal.filesystems import resolve

    try:
        fs, local = resolve(path)
        missing = fs.get_file_info(local).type.name == "NotFound"
    except Exception:  # noqa: BLE001 - cannot tell: report what failed
        missing = False
    return CliError(Exit.NOT_FOUND if missing else Exit.FAILED, str(error).splitlines()[0] if str(error) else
                    type(error).__name__)
