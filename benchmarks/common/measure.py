"""What one benchmark run measures: wall time, peak memory, the JobMaster's events, a running job's
throughput, and the CPU time of process trees.

:class:`MemoryWatch` measures, over a ``with`` block, the peak resident set size of

* the driver (this Python process: graph, partitioning, in-process peers such as scipy),
* the Spark JVM (local mode: driver and executor in one JVM, a child of this process), and
* the Python processes under the JVM (Spark's Python daemon and its forked workers: epochal's
  graph workers and the RDD/DataFrame peers' Python UDF workers), summed.

Each process's peak is its kernel high-water mark ``VmHWM`` (``/proc/<pid>/status``), reset at
the start of the block by writing ``5`` to ``/proc/<pid>/clear_refs``; a thread re-reads every
process of the tree every ``interval`` seconds so that workers started and ended inside the block
are counted too (one living shorter than the interval can be missed). The Python workers' figure
is the sum of each one's peak (they run at the same time, and forked workers share pages with the
daemon, which this sum counts once per process: an upper bound). Where ``clear_refs`` cannot be
written, sampled RSS is used instead (``exact`` False).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import psutil

from benchmarks.common.isolation import tree

_HWM = re.compile(rb"VmHWM:\s+(\d+) kB")
MB = 2**20


def _reset_peak(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _peak_bytes(process: psutil.Process, exact: bool) -> int | None:
    """The process's peak RSS since the reset (``exact``), else its current RSS; None if it is gone."""
    try:
        if exact:
            with open(f"/proc/{process.pid}/status", "rb") as handle:
                match = _HWM.search(handle.read())
            if match:
                return int(match.group(1)) * 1024
        return int(process.memory_info().rss)
    except (OSError, psutil.Error):
        return None


@dataclass
class MemoryPeaks:
    """Peak RSS in MiB: driver, Spark JVM, Spark's Python processes (sum of their peaks); and each
    one's RSS when the block started (``*_base_mb``: the JVM keeps the heap earlier runs grew)."""

    driver_base_mb: float = float("nan")
    jvm_base_mb: float = float("nan")
    workers_base_mb: float = float("nan")
    driver_mb: float = float("nan")
    jvm_mb: float = float("nan")
    workers_mb: float = float("nan")
    exact: bool = False


class MemoryWatch:
    """``with MemoryWatch() as watch: ...`` then ``watch.peaks`` (see the module docstring)."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.me = psutil.Process()
        self.peaks = MemoryPeaks()
        self._per_process: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)
        self._exact = False

    def _tree(self) -> Iterable[tuple[str, psutil.Process]]:
        """Every process of the tree with its role: driver, jvm, worker (under the JVM) or other."""
        yield "driver", self.me
        try:
            descendants = self.me.children(recursive=True)
        except psutil.Error:
            return
        roles: dict[int, str] = {self.me.pid: "driver"}
        for process in descendants:  # psutil lists parents before their children
            try:
                parent = roles.get(process.ppid(), "other")
                is_java = process.name().startswith("java")
            except psutil.Error:
                continue
            role = "jvm" if is_java else ("worker" if parent in ("jvm", "worker") else "other")
            roles[process.pid] = role
            yield role, process

    def _sample(self) -> None:
        for role, process in self._tree():
            peak = _peak_bytes(process, self._exact)
            if peak is None:
                continue
            key = process.pid
            previous = self._per_process.get(key, (role, 0))[1]
            self._per_process[key] = (role, max(previous, peak))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> MemoryWatch:
        base = {"driver": 0, "jvm": 0, "worker": 0, "other": 0}
        for role, process in self._tree():
            try:
                base[role] += process.memory_info().rss
            except psutil.Error:
                pass
        self.peaks.driver_base_mb = base["driver"] / MB
        self.peaks.jvm_base_mb = base["jvm"] / MB
        self.peaks.workers_base_mb = base["worker"] / MB
        self._exact = all(_reset_peak(p.pid) for _, p in self._tree())
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        totals = {"driver": 0, "jvm": 0, "worker": 0}
        for role, peak in self._per_process.values():
            if role in totals:
                totals[role] += peak
        self.peaks.driver_mb = totals["driver"] / MB
        self.peaks.jvm_mb = totals["jvm"] / MB if totals["jvm"] else float("nan")
        self.peaks.workers_mb = totals["worker"] / MB if totals["worker"] else float("nan")
        self.peaks.exact = self._exact


@dataclass
class Timer:
    """``with Timer() as t: ...`` then ``t.seconds`` (perf_counter) and ``t.started``/``t.ended``
    (monotonic, the clock epochal's timings use)."""

    started: float = 0.0
    ended: float = 0.0
    seconds: float = 0.0
    _perf: float = field(default=0.0, repr=False)

    def __enter__(self) -> Timer:
        self.started, self._perf = time.monotonic(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._perf
        self.ended = time.monotonic()


#: One recorded JobMaster event: ``(monotonic time, name, worker or None)``.
Event = tuple[float, str, int | None]


@contextmanager
def jobmaster_events() -> Iterator[list[Event]]:
    """Record the JobMaster's events during the block as ``(time, name, worker)``: worker messages
    by the message's type (Register, Ready, Processing, Failed ...; a graph report as
    ``KindReport:<payload type>``), other events by type, and the instructions ``SubmitSparkJob``
    and ``SubmitWorker``; ticks, heartbeats and superstep reports are left out. Instrumentation
    only: it wraps ``JobMasterMachine.handle`` for the block and changes nothing it does."""
    from epochal.control import jobmaster_machine

    events: list[Event] = []
    original = jobmaster_machine.JobMasterMachine.handle

    def handle(machine: Any, event: Any) -> Any:
        name, worker = type(event).__name__, None
        if name == "WorkerMessage":
            message = event.message
            name, worker = type(message).__name__, getattr(message, "worker", None)
            if name == "KindReport":
                name = f"KindReport:{type(message.payload).__name__}"
        if name not in ("TimePassed", "Heartbeat", "KindReport:SuperstepDone"):
            events.append((getattr(event, "now", time.monotonic()), name, worker))
        instructions = original(machine, event)
        now = time.monotonic()
        events.extend((now, type(i).__name__, getattr(i, "worker", None)) for i in instructions
                      if type(i).__name__ in ("SubmitSparkJob", "SubmitWorker"))
        return instructions

    jobmaster_machine.JobMasterMachine.handle = handle
    try:
        yield events
    finally:
        jobmaster_machine.JobMasterMachine.handle = original


def event_after(events: Sequence[Event], name: str, since: float, count: int = 1) -> float:
    """The time of the ``count``-th event ``name`` at or after ``since`` (NaN if there is none)."""
    times = [t for t, n, _ in events if n == name and t >= since]
    return times[count - 1] if len(times) >= count else float("nan")


def slope(client: Any, seconds: float) -> float:
    """Records per second the job's sources read over the next ``seconds``: the slope of
    ``JobClient.records_read`` sampled every 50 ms (the heartbeats' steps fitted by least squares)."""
    import numpy as np

    times, counts = [], []
    started = time.monotonic()
    while (now := time.monotonic()) - started < seconds:
        times.append(now - started)
        counts.append(client.records_read())
        time.sleep(0.05)
    return float(np.polyfit(np.array(times), np.array(counts, dtype=float), 1)[0])


def tree_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and its descendants (those still alive, and those they reaped)."""
    total = 0.0
    for process in tree(pid):
        try:
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except psutil.Error:
            continue
    return total


def spark_cpu(exclude: int | None = None) -> float:
    """CPU seconds used so far by every process under this one (the JVM, PySpark's daemon, the
    job's workers, and the children they reaped), but ``exclude`` and its children."""
    total = 0.0
    for process in psutil.Process().children(recursive=True):
        try:
            if exclude is not None and (process.pid == exclude or exclude in {p.pid for p in process.parents()}):
                continue
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except psutil.Error:  # ended meanwhile: its time is its parent's children time from now on
            continue
    return total
