"""The verbs that steer a running job: ``savepoint``, ``stop``, ``cancel``.

Each asks the job's driver (POST or PATCH), then, unless ``--no-wait``, polls until the savepoint
completed or failed and, for ``stop`` and ``cancel``, until the job ended (or its driver is gone:
a script whose job ended exits, and its server with it).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from epochal.cli.common import CliError, Exit, Target, emit, find_job, say, wait_until
from epochal.rest.client import RestError

#: Job statuses after which a job does nothing more.
TERMINAL = ("finished", "failed", "cancelled")


def savepoint(args: argparse.Namespace) -> int:
    """Take a savepoint of a running job (it keeps running); print its path once completed."""
    target = find_job(args)
    body = {"target_directory": _directory(args.directory), "format": args.format}
    accepted = target.call(f"savepoint of job {args.job}", "POST", "savepoints", body=body)
    if args.no_wait:
        return _accepted(args, accepted)
    say(f"savepoint {accepted['request_id']} of job {args.job} in progress, to {accepted['location']}")
    report = _wait_savepoint(target, accepted["request_id"], args.timeout)
    return _done(args, report)


def stop(args: argparse.Namespace) -> int:
    """Take a savepoint and stop the job at it (``--drain``: end the sources first); print its path
    once the job ended."""
    target = find_job(args)
    body = {"target_directory": _directory(args.savepoint_dir), "drain": args.drain}
    accepted = target.call(f"stopping job {args.job}", "POST", "stop", body=body)
    if args.no_wait:
        return _accepted(args, accepted)
    say(f"stopping job {args.job} at savepoint {accepted['location']}{' after draining' if args.drain else ''}")
    report = _wait_savepoint(target, accepted["request_id"], args.timeout)
    if report["status"] == "COMPLETED":
        report["job_status"] = _wait_ended(target, args.timeout)
    return _done(args, report)


def cancel(args: argparse.Namespace) -> int:
    """Cancel a job: its workers stop, nothing is saved."""
    target = find_job(args)
    accepted = target.call(f"cancelling job {args.job}", "PATCH", mode="cancel")
    status = accepted["status"] if args.no_wait else _wait_ended(target, args.timeout)
    if args.json:
        emit({"id": accepted["id"], "status": status})
    else:
        print(f"job {accepted['id']} {'is cancelling' if args.no_wait else status}")
    return Exit.OK


def _directory(directory: str | None) -> str | None:
    """A local directory as an absolute path (the driver may run elsewhere); URIs as given."""
    if directory is None or "://" in directory:
        return directory
    return os.path.abspath(directory)


def _wait_savepoint(target: Target, request_id: str, timeout: float) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        report = target.call("polling the savepoint", "GET", "savepoints", request_id)
        return None if report["status"] == "IN_PROGRESS" else report

    return wait_until(check, timeout, f"savepoint {request_id} did not complete")


def _wait_ended(target: Target, timeout: float) -> str:
    """The job's final status; ``ended`` if its driver went away first."""
    def check() -> str | None:
        try:
            status = target.client.get(target.path())["status"]
        except RestError as error:
            if error.unreachable:
                return "ended"
            raise CliError(Exit.FAILED, f"waiting for job {target.job} to end: {error.detail}") from None
        return status if status in TERMINAL else None

    return wait_until(check, timeout, f"job {target.job} did not end")


def _accepted(args: argparse.Namespace, accepted: dict[str, Any]) -> int:
    if args.json:
        emit(accepted)
    else:
        print(f"request {accepted['request_id']}: savepoint to {accepted['location']}")
    return Exit.OK


def _done(args: argparse.Namespace, report: dict[str, Any]) -> int:
    if report["status"] != "COMPLETED":
        raise CliError(Exit.FAILED, f"the savepoint failed: {report['error']}")
    if args.json:
        emit(report)
    else:
        print(report["location"])
    return Exit.OK
