"""Fault injection: kill real worker processes, at a random time or at a chosen point of the
checkpoint protocol.

Two ways in:

* ``kill_worker(client, w)`` sends a signal to a running worker's process from the driver
  (works where driver and executors share a machine, e.g. Spark ``local[N]``);
* ``Fault`` objects passed to ``Environment.execute(..., faults=[...])`` travel with the
  deployment inside a :class:`FaultInjector`, the worker's hook; the worker SIGKILLs itself
  when it reaches the point: a real crash, no clean-up, no goodbye to its peers or the
  JobMaster.

``Fault``, ``FaultInjector``, ``crash`` and ``POINTS`` are defined in
:mod:`epochal.runtime.host.hooks`, which every worker process imports to unpickle them; this module
adds what runs on the driver and imports no driver code itself at run time.
"""

from __future__ import annotations

import os
import random
import signal
import socket
from typing import TYPE_CHECKING

from epochal.runtime.host.hooks import POINTS, Fault, FaultInjector, crash

if TYPE_CHECKING:
    from epochal.control.client import JobClient

__all__ = ["POINTS", "Fault", "FaultInjector", "crash", "kill_worker", "random_faults"]


def random_faults(seed: int, workers: int, count: int = 3, window: tuple[float, float] = (0.5, 2.0)) -> list[Fault]:
    """``count`` time faults, one per job attempt, at seeded random workers and moments."""
    rng = random.Random(seed)
    return [Fault("time", worker=rng.randrange(workers), attempt=attempt, after=rng.uniform(*window))
            for attempt in range(count)]


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
