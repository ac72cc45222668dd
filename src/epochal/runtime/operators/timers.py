"""Timers of keyed operators: event-time and processing-time callbacks per key (Flink's
``InternalTimerService``).

A timer is ``(time domain, timestamp)`` for one key. Timers are managed keyed state: the table
``TIMERS`` holds, per key, ``{(domain, timestamp): None}``, so checkpoints hold them, a restore
at another parallelism moves them with their key groups, and every state backend (heap,
RocksDB) stores them. Beside the table, :class:`TimerQueue` keeps one in-memory heap per domain
of ``(timestamp, sequence, key group, key)``, rebuilt from the table when the operator opens;
deleting a timer only removes it from the table, and a heap entry whose timer is no longer in
the table is skipped when it comes up (lazy deletion). A timer registered twice is one timer.

Event-time timers fire when the watermark reaches their timestamp (``timestamp <= watermark``,
as Flink), processing-time timers when the wall clock (``time.time()``, seconds) does; both in
order of timestamp, then of registration. A timer fires once: it leaves the table as it fires,
so a checkpoint taken after the firing no longer holds it, and one taken before it holds it
and a restore fires it again (its output before the restore was never committed).

The queue knows nothing of operators, clocks or records: :meth:`TimerQueue.pop_due` hands out
due timers and the operator (``runtime/operators/process.py``, the window operators) sets the current key
and calls the user's ``on_timer``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from enum import StrEnum
from typing import Any


class TimeDomain(StrEnum):
    """The clock a timer follows."""

    EVENT_TIME = "event_time"
    PROCESSING_TIME = "processing_time"


EVENT_TIME = TimeDomain.EVENT_TIME
PROCESSING_TIME = TimeDomain.PROCESSING_TIME
_CODES = {EVENT_TIME: 0, PROCESSING_TIME: 1}

#: The keyed state that holds the timers of an operator (a name users cannot pick by accident).
TIMERS = "__timers__"


class TimerQueue:
    """The timers of one keyed operator subtask over the table ``groups`` (``{key group: {key:
    {(domain code, timestamp): None}}}``, every owned group present: a backend's
    ``owned_table(TIMERS)``).

    Contract: ``groups`` is the managed state and the truth; the heaps are an index that may hold
    entries of deleted timers. Values read from ``groups`` may be copies (RocksDB), so every
    change is written back.
    """

    def __init__(self, groups: Any) -> None:
        self.groups = groups
        self.heaps: tuple[list[tuple[Any, int, int, Any]], list[tuple[Any, int, int, Any]]] = ([], [])
        self.sequence = 0
        for group, entries in groups.items():
            for key, timers in entries.items():
                for code, timestamp in timers:
                    self._push(code, timestamp, group, key)

    def _push(self, code: int, timestamp: Any, group: int, key: Any) -> None:
        self.sequence += 1
        heapq.heappush(self.heaps[code], (timestamp, self.sequence, group, key))

    def register(self, domain: TimeDomain, timestamp: Any, key: Any, group: int) -> None:
        """Add a timer for ``key`` (in key group ``group``); a timer that exists stays one."""
        code = _CODES[domain]
        entries = self.groups[group]
        timers = entries.get(key)
        if timers is None:
            timers = {}
        elif (code, timestamp) in timers:
            return
        timers[(code, timestamp)] = None
        entries[key] = timers
        self._push(code, timestamp, group, key)

    def delete(self, domain: TimeDomain, timestamp: Any, key: Any, group: int) -> None:
        """Remove ``key``'s timer at ``timestamp`` if there is one."""
        entries = self.groups[group]
        timers = entries.get(key)
        if timers is None or timers.pop((_CODES[domain], timestamp), False) is False:
            return
        if timers:
            entries[key] = timers
        else:
            del entries[key]

    def pop_due(self, domain: TimeDomain, limit: Any) -> Iterator[tuple[Any, Any, int]]:
        """Remove and yield ``(timestamp, key, key group)`` of every timer of ``domain`` with a
        timestamp ``<= limit``, oldest first. Timers registered while this runs (by ``on_timer``)
        that are due come out of the same iteration."""
        code = _CODES[domain]
        heap = self.heaps[code]
        groups = self.groups
        while heap and heap[0][0] <= limit:
            timestamp, _, group, key = heapq.heappop(heap)
            entries = groups[group]
            timers = entries.get(key)
            if timers is None or timers.pop((code, timestamp), False) is False:
                continue  # deleted, or fired through an earlier entry of the same timer
            if timers:
                entries[key] = timers
            else:
                del entries[key]
            yield timestamp, key, group

    def next_timestamp(self, domain: TimeDomain) -> Any:
        """The earliest timestamp of ``domain`` in the heap (maybe a deleted timer's), or None."""
        heap = self.heaps[_CODES[domain]]
        return heap[0][0] if heap else None

    def timers_of(self, key: Any, group: int) -> list[tuple[TimeDomain, Any]]:
        """``key``'s timers, ``(domain, timestamp)``, in order of domain and timestamp."""
        timers = self.groups[group].get(key) or {}
        domains = (EVENT_TIME, PROCESSING_TIME)
        return [(domains[code], timestamp) for code, timestamp in sorted(timers)]

    def __len__(self) -> int:
        return sum(len(timers) for entries in self.groups.values() for timers in entries.values())


class TimerDriven:
    """What every keyed operator with a :class:`TimerQueue` does when time moves (a mixin placed
    before ``Operator``): a watermark above the last fires the event-time timers it reaches, the
    wall clock the processing-time ones, and the worker is asked to wake at the earliest
    processing-time timer. The operator supplies ``_fire(domain, limit)``, which fires the due
    timers its own way and returns what they emitted; ``timers`` is None until it opens."""

    watermark: Any
    timers: TimerQueue | None

    def _fire(self, domain: TimeDomain, limit: Any) -> list[Any]:
        raise NotImplementedError

    def on_watermark(self, watermark: Any) -> list[Any]:
        if watermark <= self.watermark:
            return []
        self.watermark = watermark
        return self._fire(EVENT_TIME, watermark)

    def on_processing_time(self, now: float) -> list[Any]:
        return self._fire(PROCESSING_TIME, now)

    def next_processing_time(self) -> float | None:
        return None if self.timers is None else self.timers.next_timestamp(PROCESSING_TIME)

