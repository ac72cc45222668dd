"""``epochal run SCRIPT.py``: run a job script here, as ``python SCRIPT.py`` would, with the
settings of :mod:`epochal.control.run_settings` (restore, parallelism, master) that the script's
``Environment`` and ``execute`` take when it does not set them itself (Flink's ``flink run``).

The script runs in this process (``runpy``, as ``__main__``, with ``sys.argv`` = the script and
the arguments after ``--``). Each job it starts is announced on stderr with its REST address; the
exit code is the script's (0 when it returns, 1 when it raises, its ``sys.exit`` status).
"""

from __future__ import annotations

import argparse
import logging
import os
import runpy
import sys
import traceback

from epochal.cli.common import CliError, Exit
from epochal.control.run_settings import (
    ALLOW_NON_RESTORED_STATE_ENV,
    MASTER_ENV,
    PARALLELISM_ENV,
    RESTORE_FROM_ENV,
)


def run(args: argparse.Namespace) -> int:
    script = os.path.abspath(args.script)
    if not os.path.isfile(script):
        raise CliError(Exit.NOT_FOUND, f"no job script {args.script}")
    if args.allow_non_restored_state and not args.restore:
        raise CliError(Exit.USAGE, "--allow-non-restored-state needs --restore PATH")
    if args.parallelism is not None:
        if args.parallelism < 1:
            raise CliError(Exit.USAGE, f"--parallelism must be 1 or more, got {args.parallelism}")
        os.environ[PARALLELISM_ENV] = str(args.parallelism)
    if args.master:
        os.environ[MASTER_ENV] = args.master
    if args.restore:
        os.environ[RESTORE_FROM_ENV] = args.restore if "://" in args.restore else os.path.abspath(args.restore)
        if args.allow_non_restored_state:
            os.environ[ALLOW_NON_RESTORED_STATE_ENV] = "1"
    _announce_jobs()
    sys.argv = [script, *args.args]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return Exit.FAILED
    except KeyboardInterrupt:
        print("epochal: interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - the script's failure, shown as Python shows it
        traceback.print_exc()
        return Exit.FAILED
    return Exit.OK


def _announce_jobs() -> None:
    """Print each job the script starts (``epochal.rest.server`` logs it) on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("epochal: %(message)s"))
    logger = logging.getLogger("epochal.rest")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
