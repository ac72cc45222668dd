"""The verb ``epochal query``: read a running job's queryable state (docs/queryable_state.md)."""

from __future__ import annotations

import argparse
import ast
import json
from typing import Any

from epochal.cli.common import CliError, Exit, emit, find_job
from epochal.errors import (
    QueryableStateError,
    QueryKeyTypeError,
    QueryUnauthorizedError,
    StateUnavailableError,
    UnknownQueryableStateError,
)
from epochal.rest.state_client import QueryableStateClient


def parse_key(text: str) -> Any:
    """A key as typed: a Python literal (``42``, ``'a'``, ``("a", 1)``), else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def query(args: argparse.Namespace) -> int:
    """The values of KEY... of state STATE (or every entry with ``--scan``)."""
    target = find_job(args)
    level = "read_committed" if args.committed else args.level
    what = f"querying state '{args.state}' of job {args.job}"
    client = QueryableStateClient(target.job, address=target.client.base, token=target.client.token,
                                  level=level, timeout=args.timeout)
    try:
        if args.scan:
            entries = list(client.scan(args.state, page_size=args.limit))
            rows = [(key, True, value) for key, value in entries]
        else:
            if not args.keys:
                raise CliError(Exit.USAGE, f"{what}: give one or more KEYs, or --scan")
            keys = [parse_key(text) for text in args.keys]
            found = client.get_many(args.state, keys)
            rows = [(key, key in found, found.get(key)) for key in keys]
    except QueryKeyTypeError as error:
        raise CliError(Exit.USAGE, f"{what}: {error}") from None
    except (UnknownQueryableStateError, QueryUnauthorizedError) as error:
        raise CliError(Exit.NOT_FOUND, f"{what}: {error}") from None
    except StateUnavailableError as error:
        raise CliError(Exit.TIMEOUT, f"{what}: {error}") from None
    except QueryableStateError as error:
        raise CliError(Exit.FAILED, f"{what}: {error}") from None
    finally:
        client.close()
    if args.json:
        emit({"state": args.state, "level": level, "checkpoint_id": client.checkpoint_id,
              "entries": [{"key": _plain(key), "found": has, "value": _plain(value)} for key, has, value in rows]})
        return Exit.OK
    for key, has, value in rows:
        print(f"{key!r}\t{value!r}" if has else f"{key!r}\t(no value)")
    return Exit.OK


def _plain(value: Any) -> Any:
    """``value`` as JSON has it, or its repr."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value
