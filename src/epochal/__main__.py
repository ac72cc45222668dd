"""epochal's command line.

``python -m epochal check``: is this machine ready to run epochal (Python, Java, PySpark)?
``python -m epochal latest-checkpoint STORAGE JOB_NAME``: the path of job JOB_NAME's latest
completed checkpoint under the checkpoint storage STORAGE, to pass as ``restore_from``.
"""

from __future__ import annotations

import argparse
import os
import sys


def check() -> int:
    """Print what epochal will run with; exit non-zero with a readable message if it cannot."""
    from epochal.control.spark import check_java, find_java
    from epochal.errors import JavaNotFoundError

    try:
        java = check_java()
    except JavaNotFoundError as error:
        print(f"epochal: {error}", file=sys.stderr)
        return 1
    try:
        import pyspark
    except ImportError:
        print("epochal: PySpark is not installed; run 'pip install epochal' or 'make setup'", file=sys.stderr)
        return 1
    print(f"epochal ready: Python {sys.version.split()[0]}, Java {java} ({find_java()}), "
          f"PySpark {pyspark.__version__}, {os.cpu_count()} cores")
    return 0


def latest_checkpoint(storage: str, job_name: str) -> int:
    """Print the latest completed checkpoint of ``job_name`` under ``storage``, or say what was found."""
    from epochal.state.checkpoint_dirs import latest_checkpoint as find
    from epochal.state.storage import CheckpointError

    try:
        print(find(storage, job_name))
    except CheckpointError as error:
        print(f"epochal: {error}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m epochal", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="verify Java and PySpark")
    latest = commands.add_parser("latest-checkpoint", help="print a job's latest completed checkpoint (for "
                                                           "restore_from)")
    latest.add_argument("storage", help="the checkpoint storage (enable_checkpointing(storage=...))")
    latest.add_argument("job_name", help="the job's name, as given to execute()")
    args = parser.parse_args(argv)
    if args.command == "latest-checkpoint":
        return latest_checkpoint(args.storage, args.job_name)
    return check()


if __name__ == "__main__":
    sys.exit(main())
