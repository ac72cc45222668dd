"""Fault injection: kill real worker processes, at a random time or at a chosen point of the
checkpoint protocol.

Two ways in:

* ``kill_worker(client, w)`` sends a signal to a running worker's process from the driver
  (works where driver and executors share a machine, e.g. Spark ``local[N]``);
* ``Fault`` objects passed to ``Environment.execute(..., faults=[...])`` travel with the
  deployment; the worker SIGKILLs itself when it reaches the point: a real crash,
  no clean-up, no goodbye to its peers or the JobMaster.
"""

from __future__ import annotations

import os
import random
import signal
import socket
from dataclasses import dataclass

from epochal.control.client import JobClient

#: Where a worker can be made to crash.
POINTS = (
    "time",            # ``after`` seconds after the worker started processing
    "records",         # after the worker processed ``after`` records
    "alignment",       # while aligning barriers of a checkpoint (an input blocked)
    "after_sync",      # after the synchronous part of a snapshot, before the upload
    "during_upload",   # in the middle of writing the snapshot's files
    "after_ack",       # after acknowledging a checkpoint, before it completes
    "before_commit",   # after the checkpoint completed, before the sink committed it
    "back_edge_log",   # at a loop head, while it logs the loop's in-transit records for a snapshot
)


@dataclass(frozen=True)
class Fault:
    """Crash worker ``worker`` of job attempt ``attempt`` at ``point``.

    ``after`` is seconds for ``time`` and a record count for ``records``; for the checkpoint
    points, ``checkpoint`` picks the checkpoint id (the first one reaching the point if None).
    """

    point: str
    worker: int = 0
    attempt: int = 0
    after: float = 0.0
    checkpoint: int | None = None

    def __post_init__(self) -> None:
        if self.point not in POINTS:
            raise ValueError(f"unknown fault point {self.point!r}; choose one of {', '.join(POINTS)}")


def random_faults(seed: int, workers: int, count: int = 3, window: tuple[float, float] = (0.5, 2.0)) -> list[Fault]:
    """``count`` time faults, one per job attempt, at seeded random workers and moments."""
    rng = random.Random(seed)
    return [Fault("time", worker=rng.randrange(workers), attempt=attempt, after=rng.uniform(*window))
            for attempt in range(count)]


def crash() -> None:
    """Die at once by SIGKILL: no clean-up, no goodbye to peers or the JobMaster."""
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(137)  # not reached on POSIX; a hard exit where SIGKILL does not exist


def kill_worker(client: JobClient, worker: int, sig: int = signal.SIGKILL) -> int:
    """Kill worker ``worker`` of a running job with ``sig`` (a real crash by default); returns its pid.

    Raises:
        ValueError: the worker is not registered, or runs on another host.
    """
    workers = client.workers()
    if worker not in workers:
        raise ValueError(f"worker {worker} is not registered (known: {sorted(workers)})")
    info = workers[worker]
    if info["hostname"] != socket.gethostname():
        raise ValueError(f"worker {worker} runs on {info['hostname']}, not on this host")
    os.kill(info["pid"], sig)
    return info["pid"]
