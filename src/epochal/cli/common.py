"""What every verb of the command line shares: exit codes, errors, finding a job, printing."""

from __future__ import annotations

import argparse
import enum
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from epochal.control.job_registry import Registry
from epochal.rest import names
from epochal.rest.client import RestClient, RestError, job_path

#: The token for ``--address`` when ``--token`` is not given.
TOKEN_ENV = "EPOCHAL_TOKEN"
#: Seconds between polls while a verb waits for a savepoint or the end of a job.
POLL_S = 0.25


class Exit(enum.IntEnum):
    """The command line's exit codes (documented in :mod:`epochal.cli`)."""

    OK = 0
    FAILED = 1
    USAGE = 2
    NOT_FOUND = 3
    TIMEOUT = 4


class CliError(Exception):
    """A verb failed: ``code`` is the exit code, ``candidates`` the jobs an ambiguous name matches."""

    def __init__(self, code: Exit, message: str, candidates: list[str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.candidates = candidates or []

    def report(self, as_json: bool) -> None:
        if as_json:
            emit({"error": str(self), "exit_code": int(self.code), "candidates": self.candidates})
        else:
            print(f"epochal: {self}", file=sys.stderr)


def from_rest(error: RestError, what: str) -> CliError:
    """A failed request as the verb's error: unreachable, unauthorized or not found -> 3, an
    ambiguous name or a malformed request -> 2, refused or failed -> 1."""
    if error.unreachable:
        return CliError(Exit.NOT_FOUND, f"{what}: the job's driver is not reachable ({error.detail})")
    if error.status == 401:
        return CliError(Exit.NOT_FOUND, f"{what}: the driver refused the token (401)")
    if error.status == 404:
        return CliError(Exit.NOT_FOUND, f"{what}: {error.detail}")
    if error.status == 422 or (error.status == 409 and error.candidates):
        return CliError(Exit.USAGE, f"{what}: {error.detail}", error.candidates)
    return CliError(Exit.FAILED, f"{what}: {error.detail}")


@dataclass
class Target:
    """Where a job verb sends its requests: the driver's client and the job as it names it."""

    client: RestClient
    job: str

    def path(self, *rest: str) -> str:
        return job_path(self.job, *rest)

    def call(self, what: str, method: str, *rest: str, body: dict[str, Any] | None = None,
             **query: Any) -> Any:
        try:
            return self.client.request(method, self.path(*rest), body=body, query=query or None)
        except RestError as error:
            raise from_rest(error, what) from None


def find_job(args: argparse.Namespace) -> Target:
    """The driver and job ``args.job`` names: at ``--address`` (the driver resolves the name), or
    in the registry (resolved here, so a name is unique across every driver of this machine)."""
    if args.address:
        return Target(RestClient(args.address, token_for(args)), args.job)
    registry = Registry()
    try:
        served = [e for e in registry.entries() if e.served]  # a standby's entry serves nothing
        entry = names.resolve(args.job, served, where=f" running on this machine (registry {registry.path})")
    except names.UnknownJob as error:
        raise CliError(Exit.NOT_FOUND, str(error)) from None
    except names.AmbiguousJob as error:
        raise CliError(Exit.USAGE, str(error), error.candidates) from None
    return Target(RestClient(entry.address, entry.token), entry.job_id)


def token_for(args: argparse.Namespace) -> str:
    """``--token``, else ``EPOCHAL_TOKEN``, else the registry's token for ``--address``."""
    token = args.token or os.environ.get(TOKEN_ENV)
    if token:
        return str(token)
    address = args.address.split("://", 1)[-1].rstrip("/")
    for entry in Registry().entries():
        if entry.address == address:
            return entry.token
    raise CliError(Exit.USAGE, f"no token for {args.address}: give --token (or set {TOKEN_ENV})")


def wait_until(check: Any, timeout: float, what: str) -> Any:
    """Call ``check()`` every :data:`POLL_S` until it returns something other than None; raise a
    TIMEOUT error after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise CliError(Exit.TIMEOUT, f"{what} after {timeout:g} s; it may still complete")
        time.sleep(POLL_S)


def emit(document: Any) -> None:
    """One JSON document on stdout."""
    print(json.dumps(document, indent=2, sort_keys=False))


def say(message: str) -> None:
    """Progress for people, on stderr (stdout stays for the result)."""
    print(message, file=sys.stderr, flush=True)
