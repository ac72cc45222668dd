"""The ``epochal`` command line (also ``python -m epochal``): run, watch and steer jobs.

Verbs (``epochal VERB --help`` for each)::

    epochal list                                  running jobs on this machine (or at --address)
    epochal info JOB                              one job: status, attempt, vertices
    epochal checkpoints JOB                       its checkpoints and savepoints
    epochal savepoint JOB [DIR] [--format F]      take a savepoint; prints its path
    epochal stop JOB [--savepoint-dir DIR] [--drain]   savepoint, then stop; prints its path
    epochal cancel JOB                            stop without a savepoint
    epochal query JOB STATE KEY... [--committed]  a running job's queryable state (or --scan)
    epochal savepoint info PATH                   what a savepoint or checkpoint holds
    epochal savepoint dispose PATH                delete a savepoint
    epochal run SCRIPT.py [--restore PATH] [--allow-non-restored-state] [--parallelism N] [--master URL]
                          [-- ARG ...]         run a job script here (its arguments after --)
    epochal check                                 is this machine ready (Python, Java, PySpark)
    epochal graph run ALGORITHM --vertices G.v --edges G.e --output DIR [...]
                                                  a Graphalytics algorithm as a graph job
                                                  (:mod:`epochal.cli.graph`; exit 2 bad input, 1 failed)

``JOB`` is a job id, a unique prefix of one, or a job name that names one job. Jobs are found in
the per-user registry (:mod:`epochal.control.job_registry`), or asked of the driver at ``--address
HOST:PORT`` with ``--token`` (or ``EPOCHAL_TOKEN``). ``--json`` prints one JSON document for
machines instead of text for people.

Exit codes (:class:`Exit`): 0 success; 1 the operation failed or was refused (a savepoint that
failed, a job that cannot take one now, a script that raised); 2 usage (bad arguments, a name
that matches several jobs); 3 not found or not reachable (no such job or path, the driver gone,
a wrong token); 4 timed out waiting (the operation may still complete). ``epochal run`` exits
with its script's status.
"""

from __future__ import annotations

import sys

from epochal.cli.common import CliError, Exit
from epochal.cli.parser import build_parser, build_savepoint_parser

__all__ = ["CliError", "Exit", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["graph"]:  # the graph command line parses its own arguments
        from epochal.cli import graph

        return graph.main(args_list[1:])
    script_args: list[str] = []
    if args_list[:1] == ["run"] and "--" in args_list:  # epochal run SCRIPT.py [options] -- ARG ...
        split = args_list.index("--")
        args_list, script_args = args_list[:split], args_list[split + 1:]
    if len(args_list) >= 2 and args_list[0] == "savepoint" and args_list[1] in ("info", "dispose"):
        parser = build_savepoint_parser(args_list[1])
        args_list = args_list[2:]
    else:
        parser = build_parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exit_:  # argparse: --help (0) or a usage error (2)
        return int(exit_.code or 0)
    if script_args:
        args.args = script_args
    if getattr(args, "handler", None) is None:
        parser.print_help(sys.stderr)
        return Exit.USAGE
    try:
        return int(args.handler(args))
    except CliError as error:
        error.report(getattr(args, "json", False))
        return error.code
    except KeyboardInterrupt:
        print("epochal: interrupted", file=sys.stderr)
        return 130
