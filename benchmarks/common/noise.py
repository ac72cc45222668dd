"""How busy and how fast the machine is beside a benchmark run (``benchmarks/machine_noise.py``
measures how much it moves with nothing else running):

* :class:`CpuWatch`: the CPU other processes (not this benchmark's tree) used during a run, in
  cores (``foreign_cpu_cores`` in the CSVs); :class:`ForkAwareCpuWatch` also counts the children
  a worker forks for its snapshots; :func:`wait_for_quiet` waits until the others leave the CPUs;
* speed probes (:func:`start_probes`, :func:`stop_probes`): one process per core timing a fixed
  :func:`unit` of pure-Python work every 0.1 s, so that a phase's throughput can be read against
  how fast the cores ran in it (:func:`unit_ms`).
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from pathlib import Path
from typing import Any

import psutil


# ------------------------------------------------------------------------------ other processes
class CpuWatch:
    """CPU seconds of the whole machine and of this process tree, to tell other load apart.

    Each process of the tree is counted by its own user + system time (not its reaped
    children's, which would count them twice), from its first sample (0 for a process born
    after the start) to its last: ``sample()`` is called periodically, so a process that dies
    (a killed worker) is counted up to its last sample; Spark's Python workers are reused
    across jobs, so their totals before the start are left out."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.t0, self.busy0 = time.monotonic(), self._busy()
        self.sample(initial=True)

    @staticmethod
    def _busy() -> float:
        times = psutil.cpu_times()
        return sum(times) - times.idle - getattr(times, "iowait", 0.0)

    def sample(self, initial: bool = False) -> None:
        for process in [self.me, *self.me.children(recursive=True)]:
            try:
                t = process.cpu_times()
            except psutil.Error:
                continue
            used = t.user + t.system
            if process.pid not in self.first:
                self.first[process.pid] = used if initial else 0.0
            self.last[process.pid] = used

    def foreign_cores(self) -> float:
        self.sample()
        ours = sum(self.last[pid] - self.first[pid] for pid in self.last)
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        return max(0.0, (self._busy() - self.busy0) - ours) / elapsed


class ForkAwareCpuWatch(CpuWatch):
    """:class:`CpuWatch` that also counts the forked snapshot children: their worker reaps them, so
    their CPU time is in the worker's children times, which ``CpuWatch`` leaves out (they would
    count a killed worker twice in the Python daemon's). A worker is a process whose parent is the
    daemon, the Python child of the JVM."""

    def sample(self, initial: bool = False) -> None:
        super().sample(initial)
        for process in self.me.children(recursive=True):
            try:
                parent = process.parent()
                if parent is None or parent.parent() is None or parent.parent().name() != "java":
                    continue
                t = process.cpu_times()
            except psutil.Error:
                continue
            used = t.children_user + t.children_system
            key = -process.pid  # beside the process's own entry
            if key not in self.first:
                self.first[key] = used if initial else 0.0
            self.last[key] = used


def wait_for_quiet(limit: float, cores: float) -> float:
    """Wait up to ``limit`` seconds until other processes use less than ``cores`` of the CPUs
    (sampled over 1 s); returns the seconds waited (0 without a ``limit``)."""
    if limit <= 0:
        return 0.0
    start = time.monotonic()
    while time.monotonic() - start < limit:
        watch = CpuWatch()
        time.sleep(1.0)
        if watch.foreign_cores() < cores:
            break
    return time.monotonic() - start


# ---------------------------------------------------------------------------- the cores' speed
def unit() -> int:
    """One unit of work: about 0.8 ms of pure-Python arithmetic on this machine."""
    total = 0
    for i in range(20_000):
        total += i * i
    return total


def probe(core: int, stop: Path, out: Path, every: float = 0.1) -> None:
    """A speed probe beside a benchmark: pinned to ``core``, time one :func:`unit` by this thread's
    CPU clock every ``every`` seconds (about 1 % of the core) until ``stop`` exists, then write
    ``[(time.monotonic(), CPU seconds of the unit), ...]`` as JSON to ``out``. The CPU time a fixed
    unit takes is how fast the core runs Python code at that moment, whoever else runs there."""
    import json

    os.sched_setaffinity(0, {core})
    samples: list[tuple[float, float]] = []
    while not stop.exists():
        cpu = time.thread_time()
        unit()
        samples.append((time.monotonic(), time.thread_time() - cpu))
        time.sleep(every)
    out.write_text(json.dumps(samples))


def start_probes(directory: Path) -> tuple[list[Any], Path]:
    """One :func:`probe` process per core of this process's affinity; returns them and the stop file."""
    context = multiprocessing.get_context("spawn")
    stop = directory / "probes-stop"
    processes = [context.Process(target=probe, args=(core, stop, directory / f"probe-{core}.json"), daemon=True)
                 for core in sorted(os.sched_getaffinity(0))]
    for process in processes:
        process.start()
    return processes, stop


def stop_probes(processes: list[Any], stop: Path) -> list[list[tuple[float, float]]]:
    """Stop the probes; each one's samples."""
    import json

    stop.touch()
    samples = []
    for process in processes:
        process.join(30)
    for path in sorted(stop.parent.glob("probe-*.json")):
        samples.append([tuple(s) for s in json.loads(path.read_text())])
    return samples


def unit_ms(samples: list[list[tuple[float, float]]], start: float, end: float) -> float:
    """The cores' mean of each core's median unit CPU time (ms) between ``start`` and ``end``."""
    medians = [statistics.median(cpu for at, cpu in core if start <= at < end)
               for core in samples if any(start <= at < end for at, _ in core)]
    return 1000 * statistics.fmean(medians) if medians else float("nan")
