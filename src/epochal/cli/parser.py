"""The command line's argument parsers: one sub-command per verb, ``--help`` on each.

``savepoint`` is both a verb on a job (``epochal savepoint JOB [DIR]``) and the group of
``epochal savepoint info PATH`` / ``epochal savepoint dispose PATH``: :func:`epochal.cli.main`
sends ``savepoint info``/``savepoint dispose`` to :func:`build_savepoint_parser` before parsing
(so a job named ``info`` or ``dispose`` is savepointed by its id).
"""

from __future__ import annotations

import argparse

from epochal.cli import jobs, query, run, savepoint_files, steer
from epochal.cli.check import check as run_check

EXIT_CODES = """exit codes: 0 ok; 1 the operation failed or was refused; 2 usage error (or a name that matches
several jobs); 3 job or path not found, driver not reachable, token refused; 4 timed out waiting"""
JOB_HELP = "a job id, a unique prefix of one (4+ characters), or a job name that names one job"


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    return common


def _remote() -> argparse.ArgumentParser:
    remote = argparse.ArgumentParser(add_help=False)
    remote.add_argument("--address", metavar="HOST:PORT",
                        help="ask the driver at this address instead of this machine's job registry")
    remote.add_argument("--token", help="its bearer token (default: EPOCHAL_TOKEN, or the registry's)")
    return remote


def _waiting(parser: argparse.ArgumentParser, default: float) -> None:
    parser.add_argument("--timeout", type=float, default=default, metavar="SECONDS",
                        help=f"give up waiting after this long (exit 4; default {default:g})")
    parser.add_argument("--no-wait", action="store_true", help="return once the driver accepted the request")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="epochal", description="Run, watch and steer epochal jobs.", epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(title="verbs", metavar="VERB")
    common, remote = _common(), _remote()

    def verb(name: str, help: str, *parents: argparse.ArgumentParser, json: bool = True,
             **options: object) -> argparse.ArgumentParser:
        return verbs.add_parser(name, help=help, description=help, parents=[common, *parents] if json else [*parents],
                                epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter,
                                **options)  # type: ignore[arg-type]

    listing = verb("list", "list the running jobs of this machine (or of the driver at --address)", remote)
    listing.set_defaults(handler=jobs.list_jobs)

    info = verb("info", "show one job: status, attempt, parallelism, restarts, vertices", remote)
    info.add_argument("job", metavar="JOB", help=JOB_HELP)
    info.set_defaults(handler=jobs.info)

    checkpoints = verb("checkpoints", "show a job's checkpoints and savepoints", remote)
    checkpoints.add_argument("job", metavar="JOB", help=JOB_HELP)
    checkpoints.add_argument("--history", type=int, default=10, metavar="N", help="the N newest (default 10)")
    checkpoints.set_defaults(handler=jobs.checkpoints)

    board = verb("dashboard", "print the URL of a job's page on its driver's dashboard (it carries the token: "
                 "keep it to yourself)", remote)
    board.add_argument("job", metavar="JOB", help=JOB_HELP)
    board.set_defaults(handler=jobs.dashboard)

    savepoint = verb("savepoint", "take a savepoint of a running job (it keeps running) and print its path; "
                     "also: 'epochal savepoint info PATH', 'epochal savepoint dispose PATH'", remote,
                     usage="epochal savepoint [-h] [--format {canonical,native}] [options] JOB [DIR]\n"
                           "       epochal savepoint info [-h] [--json] PATH\n"
                           "       epochal savepoint dispose [-h] [--json] PATH")
    savepoint.add_argument("job", metavar="JOB", help=JOB_HELP)
    savepoint.add_argument("directory", metavar="DIR", nargs="?",
                           help="where (the savepoint gets a directory of its own inside; default: the job's "
                                "savepoint directory)")
    savepoint.add_argument("--format", choices=["canonical", "native"], default="canonical",
                           help="canonical (any state backend restores it; default) or native")
    _waiting(savepoint, 600.0)
    savepoint.set_defaults(handler=steer.savepoint)

    stop = verb("stop", "take a savepoint, stop the job at it, print its path", remote)
    stop.add_argument("job", metavar="JOB", help=JOB_HELP)
    stop.add_argument("--savepoint-dir", metavar="DIR", help="where (default: the job's savepoint directory)")
    stop.add_argument("--drain", action="store_true",
                      help="end the sources first: every event-time window and timer fires before the savepoint")
    _waiting(stop, 600.0)
    stop.set_defaults(handler=steer.stop)

    cancel = verb("cancel", "cancel a job: its workers stop, nothing is saved", remote)
    cancel.add_argument("job", metavar="JOB", help=JOB_HELP)
    _waiting(cancel, 120.0)
    cancel.set_defaults(handler=steer.cancel)

    asking = verb("query", "read a running job's queryable state: the values of KEYs (Python literals or "
                  "text), or every entry with --scan", remote)
    asking.add_argument("job", metavar="JOB", help=JOB_HELP)
    asking.add_argument("state", metavar="STATE", help="the name the state is queryable by")
    asking.add_argument("keys", metavar="KEY", nargs="*", help="keys: 42, 'a', ('a', 1); other text is a str")
    asking.add_argument("--level", choices=["read_uncommitted", "read_committed"], default="read_uncommitted",
                        help="read_uncommitted: the current value (default); read_committed: the value in the "
                             "last completed checkpoint")
    asking.add_argument("--committed", action="store_true", help="the same as --level read_committed")
    asking.add_argument("--scan", action="store_true", help="every entry of the state, page by page (small states)")
    asking.add_argument("--limit", type=int, default=1000, metavar="N", help="entries per page of --scan")
    asking.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="give up after this long while the job is not serving (exit 4; default 10)")
    asking.set_defaults(handler=query.query)

    running = verb("run", "run a job script here, restored from a savepoint if asked (the script's own "
                   "settings win over these); the script's own arguments go after --", json=False,
                   usage="epochal run [-h] [--restore PATH] [--allow-non-restored-state] [--parallelism N] "
                         "[--master URL] SCRIPT.py [-- ARG ...]")
    running.add_argument("script", metavar="SCRIPT.py", help="the job script")
    running.set_defaults(args=[])
    running.add_argument("--restore", "-s", metavar="PATH", help="restore from this savepoint or checkpoint")
    running.add_argument("--allow-non-restored-state", "-n", action="store_true",
                         help="skip state of the savepoint that no operator claims")
    running.add_argument("--parallelism", "-p", type=int, metavar="N", help="the default parallelism")
    running.add_argument("--master", metavar="URL", help="the Spark master (default: embedded local[N])")
    running.set_defaults(handler=run.run)

    latest = verb("latest-checkpoint", "print a job's latest completed checkpoint under a checkpoint storage "
                  "(to pass as restore_from or epochal run --restore)")
    latest.add_argument("storage", metavar="STORAGE", help="the checkpoint storage (enable_checkpointing(storage=...))")
    latest.add_argument("job_name", metavar="JOB_NAME", help="the job's name, as given to execute()")
    latest.set_defaults(handler=savepoint_files.latest_checkpoint)

    check = verb("check", "check that this machine can run epochal (Python, Java, PySpark)", json=False)
    check.set_defaults(handler=run_check)
    # listed for --help only: epochal.cli.main hands ``graph ...`` to the graph command line (epochal.cli.graph)
    verb("graph", "run an LDBC Graphalytics algorithm as a graph job (epochal graph run --help)", json=False,
         add_help=False)
    return parser


def build_savepoint_parser(action: str) -> argparse.ArgumentParser:
    """The parser of ``epochal savepoint info`` or ``epochal savepoint dispose``."""
    helps = {"info": "show what a savepoint or checkpoint holds: its job, operators by uid, states, key groups, "
                     "sizes",
             "dispose": "delete a savepoint directory (never a job's checkpoint)"}
    parser = argparse.ArgumentParser(prog=f"epochal savepoint {action}", description=helps[action],
                                     parents=[_common()], epilog=EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="PATH", help="the savepoint (or, for info, a checkpoint) directory")
    parser.set_defaults(handler=savepoint_files.info if action == "info" else savepoint_files.dispose)
    return parser

