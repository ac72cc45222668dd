"""The worker's queryable-state protocol as a pure machine: events in, instructions out.

:class:`QueryMachine` decides every answer of a worker's query server: it checks the token of
each request frame before unpickling it, knows which queryable states the worker's subtasks
hold and which key groups each owns, answers ``read_committed`` requests from its
:class:`~epochal.dataflow.queries.committed.CommittedViews`, and asks its driver
(:mod:`epochal.dataflow.queries.server`) to read the live state for ``read_uncommitted`` ones
(:class:`ReadLive`, :class:`ScanLive`), which the driver does on the processing thread between
batches. No sockets, threads or clocks inside.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from epochal.dataflow.checkpointing.messages import CheckpointAbort, CheckpointComplete
from epochal.dataflow.queries.committed import CommittedViews, Views
from epochal.messages import Dispatch
from epochal.plan.keygroups import key_group_of
from epochal.runtime.host.frames import TOKEN_BYTES, token_matches
from epochal.runtime.queries.wire import (
    BAD_KEY,
    BAD_REQUEST,
    LEVELS,
    NOT_OWNER,
    NOT_READY,
    READ_COMMITTED,
    UNAUTHORIZED,
    UNKNOWN_STATE,
    Answer,
    Lookup,
    Page,
    QueryFailed,
    Scan,
    Values,
    decode,
)

#: The most entries one scan page may hold.
MAX_PAGE = 100_000
#: False answers read_committed from the live state, as read_uncommitted: the committed views
#: switched off, for the test that shows they are needed (tests/chaos/test_queryable_state.py,
#: whose job switches it off in its workers). Every new machine switches it on again: PySpark
#: reuses worker processes, and a switch must not outlive its job.
COMMITTED_VIEWS = True


@dataclass(frozen=True, slots=True)
class Served:
    """A queryable state of one of the worker's subtasks: the operator's ``uid``, its state
    ``state_name``, the ``subtask`` of ``parallelism`` and the ``key_groups`` it owns."""

    uid: str
    state_name: str
    subtask: int
    parallelism: int
    key_groups: range
    max_parallelism: int


# ---------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True)
class FrameArrived:
    """Connection ``conn`` sent a request frame's body (token, then the pickled request)."""

    conn: int
    body: bytes


@dataclass(frozen=True, slots=True)
class StatesDeclared:
    """The worker's subtasks hold these queryable states (by query name); sent again when more
    are declared (a process function may declare its state on its first record)."""

    states: Mapping[str, Served]


@dataclass(frozen=True, slots=True)
class Serving:
    """The worker processes records: its state is restored and may be read."""


@dataclass(frozen=True, slots=True)
class SnapshotTaken:
    """One subtask's queryable states at checkpoint ``checkpoint_id``'s barrier."""

    checkpoint_id: int
    views: Views


@dataclass(frozen=True, slots=True)
class Restored:
    """One subtask restored checkpoint ``checkpoint_id``; ``views``: its queryable states as restored."""

    checkpoint_id: int
    views: Views


#: What the machine takes; a checkpoint's completion and abort are the JobMaster's messages, handed on
#: by the worker once its subtasks were told (a completion the worker's fence refused never comes).
Event = FrameArrived | StatesDeclared | Serving | SnapshotTaken | CheckpointComplete | CheckpointAbort | Restored


# ---------------------------------------------------------------------- instructions
@dataclass(frozen=True, slots=True)
class Reply:
    conn: int
    answer: Answer


@dataclass(frozen=True, slots=True)
class ReadLive:
    """Read ``request``'s keys (key groups ``groups``, owned) from the live state of ``served``
    and reply (on the processing thread, between batches: never a value half updated)."""

    conn: int
    request: Lookup
    served: Served
    groups: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ScanLive:
    """Read a page of the live state of ``served`` from ``request.cursor`` and reply."""

    conn: int
    request: Scan
    served: Served


@dataclass(frozen=True, slots=True)
class CloseConnection:
    conn: int


Instruction = Reply | ReadLive | ScanLive | CloseConnection

_ON = Dispatch("query machine events")
_REQUESTS = Dispatch("query requests")


class QueryMachine:
    """The query protocol of worker ``worker``, whose requests must carry ``token``."""

    def __init__(self, token: bytes, worker: int) -> None:
        global COMMITTED_VIEWS
        COMMITTED_VIEWS = True
        self.token = token
        self.worker = worker
        self.states: dict[str, Served] = {}
        self.serving = False
        self.committed = CommittedViews()

    def handle(self, event: Event) -> list[Instruction]:
        return _ON.handlers[type(event)](self, event)

    @_ON.on(StatesDeclared)
    def _declared(self, event: StatesDeclared) -> list[Instruction]:
        self.states.update(event.states)
        return []

    @_ON.on(Serving)
    def _serving(self, event: Serving) -> list[Instruction]:
        self.serving = True
        return []

    @_ON.on(SnapshotTaken)
    def _taken(self, event: SnapshotTaken) -> list[Instruction]:
        self.committed.taken(event.checkpoint_id, event.views)
        return []

    @_ON.on(CheckpointComplete)
    def _completed(self, event: CheckpointComplete) -> list[Instruction]:
        if event.savepoint:  # never the committed view: a restart restores the latest checkpoint
            self.committed.aborted(event.checkpoint_id)
        else:
            self.committed.completed(event.checkpoint_id)
        return []

    @_ON.on(CheckpointAbort)
    def _aborted(self, event: CheckpointAbort) -> list[Instruction]:
        self.committed.aborted(event.checkpoint_id)
        return []

    @_ON.on(Restored)
    def _restored(self, event: Restored) -> list[Instruction]:
        self.committed.restored(event.checkpoint_id, event.views)
        return []

    @_ON.on(FrameArrived)
    def _frame(self, event: FrameArrived) -> list[Instruction]:
        body = event.body
        if len(body) < TOKEN_BYTES or not token_matches(body[:TOKEN_BYTES], self.token):
            return [Reply(event.conn, QueryFailed(0, UNAUTHORIZED, "unauthorized: a query must carry the job's "
                                                                   "query token")),
                    CloseConnection(event.conn)]
        try:
            request = decode(memoryview(body)[TOKEN_BYTES:])
        except Exception as error:  # a key of a class this worker cannot import, a damaged frame
            return [Reply(event.conn, QueryFailed(0, BAD_REQUEST, f"the request cannot be read: {error}"))]
        handler = _REQUESTS.handlers.get(type(request))
        if handler is None or not isinstance(request, Lookup | Scan):
            return [Reply(event.conn, QueryFailed(0, BAD_REQUEST, f"not a query: {type(request).__name__}"))]
        refusal = self._check(request)
        if refusal is not None:
            return [Reply(event.conn, refusal)]
        return handler(self, event.conn, request)

    def _check(self, request: Lookup | Scan) -> QueryFailed | None:
        rid = request.request_id
        if request.level not in LEVELS:
            return QueryFailed(rid, BAD_REQUEST, f"unknown isolation level {request.level!r}; use one of "
                                                 f"{', '.join(LEVELS)}")
        if request.state not in self.states:
            known = ", ".join(sorted(self.states)) or "none"
            return QueryFailed(rid, UNKNOWN_STATE, f"no queryable state '{request.state}' on worker {self.worker} "
                                                   f"(queryable here: {known})")
        if not self.serving:
            return QueryFailed(rid, NOT_READY, f"worker {self.worker} is not serving queries yet (deploying or "
                                               f"restoring)")
        return None

    @_REQUESTS.on(Lookup)
    def _lookup(self, conn: int, request: Lookup) -> list[Instruction]:
        served = self.states[request.state]
        groups = []
        for key in request.keys:
            try:
                group = key_group_of(key, served.max_parallelism)
            except TypeError as error:
                return [Reply(conn, QueryFailed(request.request_id, BAD_KEY, str(error)))]
            if group not in served.key_groups:
                return [Reply(conn, QueryFailed(
                    request.request_id, NOT_OWNER, f"key {key!r} (key group {group}) is not held by worker "
                                                   f"{self.worker} (subtask {served.subtask} of {served.parallelism} "
                                                   f"holds key groups {served.key_groups.start} to "
                                                   f"{served.key_groups.stop - 1}): ask the JobMaster again"))]
            groups.append(group)
        if request.level != READ_COMMITTED or not COMMITTED_VIEWS:
            return [ReadLive(conn, request, served, tuple(groups))]
        views = self.committed.groups(request.state)
        found, values = lookup(views, request.keys, groups)
        return [Reply(conn, Values(request.request_id, found, values, self.committed.checkpoint_id))]

    @_REQUESTS.on(Scan)
    def _scan(self, conn: int, request: Scan) -> list[Instruction]:
        served = self.states[request.state]
        if not 0 < request.limit <= MAX_PAGE:
            return [Reply(conn, QueryFailed(request.request_id, BAD_REQUEST,
                                            f"a page holds 1 to {MAX_PAGE} entries, not {request.limit}"))]
        if request.level != READ_COMMITTED or not COMMITTED_VIEWS:
            return [ScanLive(conn, request, served)]
        items, cursor = page(self.committed.groups(request.state), served.key_groups, request.cursor, request.limit)
        return [Reply(conn, Page(request.request_id, items, cursor, self.committed.checkpoint_id))]


_MISSING = object()


def lookup(groups: Mapping[int, Mapping[Any, Any]], keys: tuple[Any, ...],
           key_groups: list[int] | tuple[int, ...]) -> tuple[tuple[bool, ...], tuple[Any, ...]]:
    """``keys``' values in ``groups`` (key group -> key -> value): whether each was found, and it."""
    found = []
    values = []
    for key, group in zip(keys, key_groups, strict=True):
        entries = groups.get(group)
        value = _MISSING if entries is None else entries.get(key, _MISSING)
        found.append(value is not _MISSING)
        values.append(None if value is _MISSING else value)
    return tuple(found), tuple(values)


def page(groups: Mapping[int, Mapping[Any, Any]], key_groups: range, cursor: tuple[int, int] | None,
         limit: int) -> tuple[list[tuple[Any, Any]], tuple[int, int] | None]:
    """Up to ``limit`` (key, value) pairs of ``groups`` in key-group order from ``cursor``
    (``(group, entries of it already returned)``), and the cursor of the next page (None: done).
    A page is read at one moment; between pages keys may come and go (a scan is not a snapshot)."""
    group, skip = cursor if cursor is not None else (key_groups.start, 0)
    items: list[tuple[Any, Any]] = []
    for g in range(max(group, key_groups.start), key_groups.stop):
        entries = groups.get(g)
        if not entries:
            skip = 0
            continue
        start = skip if g == group else 0
        taken = _take(entries.items(), start, limit - len(items))
        items.extend(taken)
        if len(items) >= limit:
            following = start + len(taken)
            return items, ((g, following) if following < len(entries) else _next(g, key_groups))
    return items, None


def _take(pairs: Any, skip: int, count: int) -> list[tuple[Any, Any]]:
    taken: list[tuple[Any, Any]] = []
    iterator: Iterator[tuple[Any, Any]] = iter(pairs)
    for index, pair in enumerate(iterator):
        if index < skip:
            continue
        if len(taken) >= count:
            break
        taken.append(pair)
    return taken


def _next(group: int, key_groups: range) -> tuple[int, int] | None:
    return (group + 1, 0) if group + 1 < key_groups.stop else None
