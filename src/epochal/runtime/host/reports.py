"""How a worker ends and what it reports about itself besides protocol messages.

:class:`WorkerStopped` and :class:`PeerLost` end a worker's run; :func:`failure_report` turns
whatever ended it with an error into the one :class:`~epochal.messages.Failed` report the
JobMaster ranks (a user function's error with the user's traceback, a damaged checkpoint, a lost
peer, or an internal error). :func:`rss_bytes` is the process's resident memory for metrics.
"""

from __future__ import annotations

import os
import traceback

from epochal.errors import RestoreError, UserFunctionError
from epochal.messages import Failed
from epochal.tracebacks import UserTraceback


class WorkerStopped(Exception):
    """The JobMaster told this worker to stop (cancel, rejection, or the driver went away)."""


class PeerLost(Exception):
    """A data connection to another worker broke before this worker finished."""

    def __init__(self, peer: int, reason: str) -> None:
        super().__init__(f"lost the connection to worker {peer}: {reason}")
        self.peer = peer


def failure_report(error: Exception, worker: int) -> Failed:
    """The report of worker ``worker`` failing with ``error`` (call it in the ``except`` block)."""
    if isinstance(error, UserFunctionError):
        return Failed("user", f"{type(error.error).__name__}: {error.error}", worker, operator=error.operator,
                      where=error.where, user_traceback=UserTraceback.of(error.error), record=error.record)
    if isinstance(error, RestoreError):
        return Failed("restore", str(error), worker, file=error.path, checkpoint_id=error.checkpoint_id)
    if isinstance(error, PeerLost):
        return Failed("peer_lost", str(error), worker, peer=error.peer)
    # an epochal bug or an environment problem
    return Failed("internal", f"{type(error).__name__}: {error}", worker, traceback=traceback.format_exc())


def rss_bytes() -> int:
    """Resident memory of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
