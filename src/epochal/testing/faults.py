"""Fault injection: kill real worker processes.

``kill_worker`` sends a signal to the Python process of a running worker, found through the
pid it registered with the JobMaster. It works when the driver shares a machine with the
executors (Spark ``local[N]``), which is where tests run.
"""

from __future__ import annotations

import os
import signal
import socket

from epochal.control.client import JobClient


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
