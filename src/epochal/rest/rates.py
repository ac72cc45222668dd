"""Records per second and busy time per subtask, from the counters workers send with heartbeats.

A worker's heartbeat metrics carry running totals (records into and out of each subtask's
chain, its busy seconds) and the worker's own clock (``uptime``, seconds since it started).
:class:`Rates` keeps the last few readings of each subtask and answers the change per second
over the newest :data:`WINDOW_S` seconds of that clock: both readings come from the same
process, so neither the driver's clock nor when a request happened to read them matters. A new
worker process (another pid: a restart) or counters that went back start the subtask afresh.

A reading is taken whenever a view asks (the REST API's vertices, the dashboard's poll); before
two readings some way apart a rate is None. Thread safe.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

#: Seconds of the worker's clock a rate is measured over (at most; at least :data:`MIN_SPAN_S`).
WINDOW_S = 3.0
#: The shortest span a rate is given for (heartbeats come every 0.5 s by default).
MIN_SPAN_S = 0.4
#: Readings kept per subtask.
KEEP = 32


@dataclass(frozen=True, slots=True)
class Reading:
    """One heartbeat's totals of a subtask: the worker's clock, records in and out, busy seconds."""

    clock: float
    records_in: int
    records_out: int
    busy_s: float | None


@dataclass(frozen=True, slots=True)
class SubtaskRate:
    """Per second over the span: records in, records out, and the busy share of the span (0..1)."""

    records_in_per_s: float | None = None
    records_out_per_s: float | None = None
    busy_ratio: float | None = None


class Rates:
    """The recent readings of every subtask of one job, keyed ``"<vertex>/<index>"``."""

    def __init__(self) -> None:
        self._readings: dict[str, tuple[int, deque[Reading]]] = {}
        self._lock = threading.Lock()

    def observe(self, key: str, pid: int, reading: Reading) -> SubtaskRate:
        """Add ``reading`` of subtask ``key`` (run by worker process ``pid``) and return its rates."""
        with self._lock:
            known = self._readings.get(key)
            if known is None or known[0] != pid:
                known = (pid, deque(maxlen=KEEP))
                self._readings[key] = known
            readings = known[1]
            if readings:
                last = readings[-1]
                if reading.clock < last.clock or reading.records_in < last.records_in:
                    readings.clear()  # another process, or counters started again
                elif reading.clock == last.clock:
                    readings.pop()  # the same heartbeat read twice: keep one
            readings.append(reading)
            oldest = next((r for r in readings if reading.clock - r.clock <= WINDOW_S), reading)
        span = reading.clock - oldest.clock
        if span < MIN_SPAN_S:
            return SubtaskRate()
        busy = None
        if reading.busy_s is not None and oldest.busy_s is not None:
            busy = min(max((reading.busy_s - oldest.busy_s) / span, 0.0), 1.0)
        return SubtaskRate((reading.records_in - oldest.records_in) / span,
                           (reading.records_out - oldest.records_out) / span, busy)

    def forget(self, keep: set[str]) -> None:
        """Drop the readings of subtasks not in ``keep`` (a job rescaled, a vertex gone)."""
        with self._lock:
            for key in [k for k in self._readings if k not in keep]:
                del self._readings[key]
