"""State time-to-live (TTL), after Apache Flink's ``StateTtlConfig``.

A state descriptor with ``ttl=StateTtlConfig(...)`` makes its values expire ``ttl`` seconds after
they were last written (``update_type="on_create_and_write"``), or last written or read
(``"on_read_and_write"``)::

    ValueStateDescriptor("last_login", ttl=StateTtlConfig(3600))
    MapStateDescriptor("seen", ttl=StateTtlConfig(600, update_type="on_read_and_write",
                                                   cleanup_incrementally=10))

Semantics (those of Flink's docs, "State Time-To-Live (TTL)"):

* **Time**: processing time only (Flink's ``TtlTimeCharacteristic.ProcessingTime``): wall-clock
  seconds from :data:`CLOCK` (``time.time`` unless a test injects another with :func:`set_clock`).
  A value written at ``t`` is expired from ``t + ttl`` on (Flink: ``timestamp + ttl <= now``).
* **Granularity**: a value, reducing or aggregating state expires as a whole; every element of a
  list state and every user-key entry of a map state carries its own timestamp and expires on its
  own. Stored values are :data:`TtlValue` tuples ``(value, timestamp)`` (lists: a list of them;
  maps: a dict ``user key -> (value, timestamp)``).
* **Visibility**: ``"never_return_expired"`` (default) hides an expired value as if it were absent;
  ``"return_expired_if_not_cleaned_up"`` returns it while it is still stored. Either way the
  access that finds it expired removes it (cleanup on read), so it is returned at most once.
  A write that combines (reducing and aggregating ``add``) starts from the stored value only when
  a read would return it (Flink's TtlReduceFunction / TtlAggregateFunction); a list ``add`` drops
  the expired elements when the oldest one has expired; ``clear`` and map ``remove`` are as without TTL.
* **Cleanup**: on access (always); in full snapshots (``cleanup_in_snapshot``, default on: expired
  values are left out of what ``capture`` returns, the live state is not changed); incrementally
  (``cleanup_incrementally=n``: every access of the state also checks ``n`` further keys of it,
  advancing a cursor over all its keys in every owned key group, and drops what has expired:
  :class:`IncrementalCleanup`), and with ``cleanup_for_every_record`` on every record the operator
  processes too (the backend's ``set_current_key``), so the state is swept in the background of
  processing even when the expired keys never come again. (Flink's other background cleanup, a
  RocksDB compaction filter, has no Python binding in ``rocksdict``: on RocksDB the incremental
  cursor does the same by range scans of the owned key range, 256 stored keys at a time, checking
  each by its stored bytes: the backend's ``cleanup_cursor``.)
* **Restore**: timestamps are absolute wall-clock seconds and travel unchanged through snapshots,
  so a value expires at the same time whether or not the job was restored in between. Turning TTL
  on or off for an existing state name across a restore is not supported (in Flink it is a state
  incompatibility); changing the TTL of a TTL state is.

Any :class:`~epochal.state.backend.KeyedStateBackend` gets TTL on access for free (the state
objects do it through ``owned_table``: :class:`epochal.state.keyed.TtlAccess`); a backend's
``capture`` applies snapshot cleanup by calling :func:`drop_expired` for the states in
``backend.ttl_configs`` whose config asks for it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from epochal.errors import PlanError

UPDATE_TYPES = ("on_create_and_write", "on_read_and_write")
VISIBILITIES = ("never_return_expired", "return_expired_if_not_cleaned_up")
#: Kinds whose stored value is one TtlValue (list and map states hold one per element / entry).
SINGLE_VALUE_TYPES = frozenset({"value", "reducing", "aggregating"})


@dataclass(frozen=True)
class StateTtlConfig:
    """How the values of one state expire (Flink's ``StateTtlConfig``), built by keyword.

    ``ttl``: seconds (int, float or ``datetime.timedelta``; stored as float), finite and > 0.
    ``update_type``: when the timestamp is set: ``"on_create_and_write"`` (default; Flink's
    ``OnCreateAndWrite``) or ``"on_read_and_write"`` (also on every read of a live value).
    ``visibility``: ``"never_return_expired"`` (default) or ``"return_expired_if_not_cleaned_up"``.
    ``cleanup_in_snapshot``: leave expired values out of snapshots (Flink's ``cleanupFullSnapshot``).
    ``cleanup_incrementally``: keys of this state checked (and dropped if expired) on every access
    of it, besides the key accessed (Flink's ``cleanupIncrementally(n, false)``; on the heap
    backends an empty key group passed counts as one key: :class:`IncrementalCleanup`); 0
    (default) turns it off.
    ``cleanup_for_every_record``: also take that step for every record (and timer) the operator
    processes, whether or not it touches this state, so expired values of keys that are never
    seen again go away while the job runs (Flink's ``cleanupIncrementally(n, true)``; needs
    ``cleanup_incrementally`` > 0).
    Invalid values raise :class:`~epochal.errors.PlanError`.
    """

    ttl: float
    update_type: str = "on_create_and_write"
    visibility: str = "never_return_expired"
    cleanup_in_snapshot: bool = True
    cleanup_incrementally: int = 0
    cleanup_for_every_record: bool = False

    def __post_init__(self) -> None:
        ttl: Any = self.ttl
        if isinstance(ttl, timedelta):
            ttl = ttl.total_seconds()
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
            raise PlanError(f"StateTtlConfig: ttl must be a finite number of seconds > 0 (or a timedelta), "
                            f"got {self.ttl!r}")
        object.__setattr__(self, "ttl", float(ttl))
        if self.update_type not in UPDATE_TYPES:
            raise PlanError(f"StateTtlConfig: update_type must be one of {', '.join(UPDATE_TYPES)}; "
                            f"got {self.update_type!r}")
        if self.visibility not in VISIBILITIES:
            raise PlanError(f"StateTtlConfig: visibility must be one of {', '.join(VISIBILITIES)}; "
                            f"got {self.visibility!r}")
        if not isinstance(self.cleanup_in_snapshot, bool):
            raise PlanError(f"StateTtlConfig: cleanup_in_snapshot must be a bool, got {self.cleanup_in_snapshot!r}")
        n = self.cleanup_incrementally
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise PlanError(f"StateTtlConfig: cleanup_incrementally must be an int >= 0 (keys checked per "
                            f"access; 0: off), got {n!r}")
        if not isinstance(self.cleanup_for_every_record, bool):
            raise PlanError(f"StateTtlConfig: cleanup_for_every_record must be a bool, "
                            f"got {self.cleanup_for_every_record!r}")
        if self.cleanup_for_every_record and not n:
            raise PlanError("StateTtlConfig: cleanup_for_every_record needs cleanup_incrementally > 0 (the keys "
                            "checked per record), e.g. StateTtlConfig(60, cleanup_incrementally=10, "
                            "cleanup_for_every_record=True)")

    @property
    def refresh_on_read(self) -> bool:
        """Whether reading a live value renews its timestamp (``on_read_and_write``)."""
        return self.update_type == "on_read_and_write"

    @property
    def return_expired(self) -> bool:
        """Whether an expired value that is still stored is returned (once) by the access that removes it."""
        return self.visibility == "return_expired_if_not_cleaned_up"


#: What a TTL state stores per value (per list element, per map entry): the tuple ``(value,
#: timestamp)``, ``timestamp`` being the wall-clock seconds of the last write (or read, under
#: ``on_read_and_write``). A plain tuple: cheapest to build and to pickle, and what a snapshot holds.
TtlValue = tuple[Any, float]


class Clock:
    """The processing-time clock of TTL state: ``CLOCK.now()`` returns wall-clock seconds."""

    __slots__ = ("now",)

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self.now = now


#: The clock every TTL state reads (one per process). Tests replace it with :func:`set_clock`.
CLOCK = Clock()


def set_clock(now: Callable[[], float] | None) -> Callable[[], float]:
    """Make TTL state read time from ``now`` (``None``: ``time.time`` again); returns the previous
    clock so a caller can put it back. For tests: time moves without sleeping."""
    previous = CLOCK.now
    CLOCK.now = time.time if now is None else now
    return previous


def unexpired(stored: Any, state_type: str, horizon: float, copy: bool = False) -> Any:
    """``stored`` (what a state of ``state_type`` holds for one key) without what was last updated at or
    before ``horizon`` (``now - ttl``); ``None`` when nothing is left. Unless ``copy``, ``stored``
    itself is returned when nothing expired; a new list or dict otherwise (``stored`` is never
    changed)."""
    if state_type in SINGLE_VALUE_TYPES:
        return stored if stored[1] > horizon else None
    if state_type == "list":
        live = [e for e in stored if e[1] > horizon]
        if not live:
            return None
        return stored if len(live) == len(stored) and not copy else live
    if state_type == "map":
        kept = {k: e for k, e in stored.items() if e[1] > horizon}
        if not kept:
            return None
        return stored if len(kept) == len(stored) and not copy else kept
    raise PlanError(f"unknown state state_type {state_type!r}")


def drop_expired(entries: MutableMapping[Any, Any], state_type: str, config: StateTtlConfig,
                 now: float) -> dict[Any, Any]:
    """Snapshot cleanup for one key group of one state: a new dict ``key -> stored value`` without
    the keys, list elements and map entries that have expired at ``now``, and without keys left
    empty. Lists and maps in it are new containers (isolated from later in-place changes of the
    live state, as ``capture`` requires); ``entries`` is not changed. Any backend's ``capture`` may
    call it for states whose ``config.cleanup_in_snapshot`` is set."""
    horizon = now - config.ttl
    if state_type in SINGLE_VALUE_TYPES:
        return {k: v for k, v in entries.items() if v[1] > horizon}
    out: dict[Any, Any] = {}
    for key, stored in entries.items():
        live = unexpired(stored, state_type, horizon, copy=True)
        if live is not None:
            out[key] = live
    return out


class KeyCursor(Protocol):
    """Where an :class:`IncrementalCleanup` takes the keys of its state, a few at a time, when its
    backend lists keys more cheaply than by reading every key group in turn."""

    def next_keys(self) -> tuple[MutableMapping[Any, Any], list[Any]] | None:
        """The next keys of the round (possibly none: an empty key group) and the mapping that
        holds them (``mapping.get(key)``, ``del mapping[key]`` and ``mapping[key] = value`` work on
        them); ``None`` once the round is over (the next call starts another round)."""
        ...


class IncrementalCleanup:
    """Flink's incremental cleanup for one state of one backend: a lazy cursor over every key of
    the state, advanced by ``config.cleanup_incrementally`` keys on every access of the state
    (:meth:`step`). By default the cursor takes the keys of ``table[group]`` for each owned group
    in turn when it reaches the group, and an empty group passed counts as one key, so a step
    stays cheap when the state is small; a backend that lists keys more cheaply passes a
    ``cursor`` (:class:`KeyCursor`) instead. The keys it passes are checked and their expired
    values dropped (a list or map keeps its live elements). A round ends after the last key
    group and the next step starts the next round (as Flink's); keys added to a group after the
    cursor took that group's keys are seen in the next round."""

    __slots__ = ("table", "groups", "cursor", "state_type", "config", "_index", "_entries", "_pending")

    def __init__(self, table: MutableMapping[int, MutableMapping[Any, Any]], groups: Sequence[int], state_type: str,
                 config: StateTtlConfig, cursor: KeyCursor | None = None) -> None:
        self.table = table
        self.groups = groups
        self.cursor = cursor
        self.state_type = state_type
        self.config = config
        self._index = -1  # without a cursor: the position in groups of the group whose keys are pending
        self._entries: MutableMapping[Any, Any] = {}  # with a cursor: the mapping that holds the pending keys
        self._pending: list[Any] = []

    def step(self, now: float) -> int:
        """Check the next ``cleanup_incrementally`` keys; returns how many keys were dropped."""
        pending, state_type, cursor = self._pending, self.state_type, self.cursor
        if cursor is not None:
            entries = self._entries
        else:  # looked up again: a restore may have replaced the group's dict since the last step
            entries = self.table[self.groups[self._index]] if pending else {}
        budget = self.config.cleanup_incrementally
        horizon = now - self.config.ttl
        single = state_type in SINGLE_VALUE_TYPES
        dropped = 0
        while budget > 0:
            if not pending:
                if cursor is None:  # inline: this runs per record on the heap backends
                    self._index += 1
                    if self._index >= len(self.groups):
                        self._index = -1
                        break  # the round is over; the next step starts another
                    entries = self.table[self.groups[self._index]]
                    pending.extend(entries)
                else:
                    taken = cursor.next_keys()
                    if taken is None:
                        break
                    entries, keys = taken
                    self._entries = entries
                    pending.extend(keys)
                if not pending:
                    budget -= 1
                continue
            key = pending.pop()
            budget -= 1
            stored = entries.get(key)
            if stored is None:
                continue  # removed since the cursor took the key
            if single:
                if stored[1] <= horizon:
                    del entries[key]
                    dropped += 1
                continue
            live = unexpired(stored, state_type, horizon)
            if live is None:
                del entries[key]
                dropped += 1
            elif live is not stored:
                entries[key] = live
        return dropped
