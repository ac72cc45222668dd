"""``epochal.QueryableStateClient``: reading a running job's queryable state from outside it.

The client asks the job's driver, once and again after a failure, where each queryable state is
served (``GET /jobs/{job_id}/queryable`` with the REST token; in the job's own process it may read
the JobMaster directly), then talks to the workers directly: one TCP connection per worker,
requests pipelined, every request carrying the job's query token
(:mod:`epochal.runtime.queries.wire`). A key goes to the worker holding its key group
(:class:`~epochal.rest.state_routes.Routes`). Many keys in one call are split by worker and asked
of all of them at once. When a worker is gone, or answers that it does not hold the key (a
restart or a rescale moved it), or the job is not serving (deploying, restarting), the client
reads the routes again and retries until its timeout, then raises
:class:`~epochal.errors.StateUnavailableError` (retriable).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any

from epochal.errors import (
    QueryableStateError,
    QueryKeyTypeError,
    QueryUnauthorizedError,
    StateUnavailableError,
    UnknownQueryableStateError,
)
from epochal.rest.client import RestClient, RestError, job_path
from epochal.rest.state_connection import WorkerConnection
from epochal.rest.state_routes import Routes, key_group, routes_of
from epochal.runtime.queries import local
from epochal.runtime.queries.wire import (
    BAD_KEY,
    LEVELS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    UNAUTHORIZED,
    UNKNOWN_STATE,
    Lookup,
    Page,
    QueryFailed,
    Request,
    Scan,
    Values,
    encode,
    request_frame,
)

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "QueryableStateClient"]

#: Seconds between two tries while the job is not serving.
RETRY_S = 0.05
#: How a client may reach the workers (QueryableStateClient's ``transport``).
TRANSPORTS = ("auto", "tcp")


class _Retry(Exception):
    """A try failed in a way another try after reading the routes again may not."""


class QueryableStateClient:
    """Queries of the queryable states of one running job.

    ``job``: the :class:`~epochal.control.client.JobClient` that ``execute_async`` returned, or a
    job id, unique id prefix or name of the registry (``epochal list``); with ``address`` (the
    driver's REST ``host:port``) and ``token`` (its REST token), a job of another machine.
    ``level``: the default isolation level, ``"read_uncommitted"`` (the current value in the worker
    holding the key) or ``"read_committed"`` (its value in the last completed checkpoint, which
    never rolls back after a failure). ``timeout``: seconds a call may take, retries included.
    ``transport``: ``"auto"`` (the default) talks to workers of this host over their local Unix
    socket, which costs them and the client less CPU than loopback TCP, and to the others over
    TCP; ``"tcp"``: TCP to every worker.
    A client keeps a connection to each worker it asked; it is not thread safe (one per thread).
    """

    def __init__(self, job: Any, *, address: str | None = None, token: str | None = None,
                 level: str = READ_UNCOMMITTED, timeout: float = 10.0, transport: str = "auto") -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r}: use one of {', '.join(map(repr, TRANSPORTS))}")
        self._setup(_route_source(job, address, token), _check_level(level), timeout, transport)

    def _setup(self, fetch: Callable[[], dict[str, Any]], level: str, timeout: float, transport: str = "auto") -> None:
        self.level = level
        self.timeout = timeout
        self.transport = transport
        self._host = local.host_identity() if transport == "auto" else None
        self._fetch = fetch
        self.routes: Routes | None = None
        self._connections: dict[tuple[str, int], WorkerConnection] = {}
        self._ids = itertools.count(1)
        #: the checkpoint the last read_committed answer was of (None: none completed yet)
        self.checkpoint_id: int | None = None
        self._pipeline: _Pipeline | None = None

    # ------------------------------------------------------------------ the API
    def get(self, state: str, key: Any, default: Any = None, *, level: str | None = None,
            timeout: float | None = None) -> Any:
        """The value of ``key`` in queryable state ``state``, or ``default`` if it has none."""
        if not _hashable(key):
            key_group(key, 1)  # raises QueryKeyTypeError with the reason
        level = _check_level(level or self.level)

        def attempt(routes: Routes) -> Any:  # get_many of one key, without its dictionaries
            answer = self._ask(routes, routes.owner(state, key), Lookup(next(self._ids), state, (key,), level))
            if level == READ_COMMITTED:
                self.checkpoint_id = answer.checkpoint_id
            return answer.values[0] if answer.found[0] else default

        return self._with_retries(attempt, timeout)

    def get_async(self, state: str, key: Any, default: Any = None, *, level: str | None = None) -> Future[Any]:
        """:meth:`get` without waiting: a future of the value of ``key`` (or ``default``).

        Lookups are pipelined: the keys asked while earlier lookups are on their way go together
        in the next request to each worker (one request per worker in flight), so one thread
        asking many single keys is answered at about the rate of :meth:`get_many`, each lookup
        within about two round trips. They go over connections of their own (a thread of this
        client sends them), so :meth:`get_async` may be called from any thread, beside the
        blocking calls of the client's own thread. A future fails with the error :meth:`get`
        would raise (after the client's ``timeout``); :meth:`close` fails the ones not answered.
        """
        if not _hashable(key):
            key_group(key, 1)  # raises QueryKeyTypeError with the reason
        level = _check_level(level or self.level)
        if self._pipeline is None:
            sibling = QueryableStateClient.__new__(QueryableStateClient)  # same job, own connections
            sibling._setup(self._fetch, self.level, self.timeout, self.transport)
            self._pipeline = _Pipeline(sibling)
        return self._pipeline.submit(state, key, default, level)

    def get_many(self, state: str, keys: Iterable[Any], *, level: str | None = None,
                 timeout: float | None = None) -> dict[Any, Any]:
        """The values of ``keys`` (those that have one) in state ``state``, asked of every worker
        holding some of them at once."""
        keys = list(keys)
        for key in keys:
            if not _hashable(key):
                key_group(key, 1)  # raises QueryKeyTypeError with the reason
        level = _check_level(level or self.level)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)

        def attempt(routes: Routes) -> dict[Any, Any]:
            by_worker: dict[tuple[str, int], list[Any]] = {}
            for key in keys:
                by_worker.setdefault(routes.owner(state, key), []).append(key)
            requests: dict[tuple[str, int], Request] = {address: Lookup(next(self._ids), state, tuple(batch), level)
                        for address, batch in by_worker.items()}
            answers = self._exchange(routes, requests)
            if level == READ_COMMITTED:
                answers = self._one_checkpoint(routes, requests, answers, deadline)
            values: dict[Any, Any] = {}
            for address, request in requests.items():
                answer = answers[address]
                assert isinstance(answer, Values) and isinstance(request, Lookup)
                for key, found, value in zip(request.keys, answer.found, answer.values, strict=True):
                    if found:
                        values[key] = value
            return values

        return self._with_retries(attempt, timeout)

    def _one_checkpoint(self, routes: Routes, requests: dict[tuple[str, int], Request],
                        answers: dict[tuple[str, int], Any], deadline: float) -> dict[tuple[str, int], Any]:
        """read_committed answers of several workers, all of one checkpoint: the newest any of them
        answered from. A worker behind has not yet heard that it completed (the JobMaster tells
        every worker at about the same time), so it is asked again until it has."""
        while True:
            ids = {address: answer.checkpoint_id for address, answer in answers.items()}
            newest = max((c for c in ids.values() if c is not None), default=None)
            behind = {a: r for a, r in requests.items() if ids[a] != newest}
            if not behind:
                self.checkpoint_id = newest
                return answers
            if time.monotonic() >= deadline:
                raise _Retry(f"the workers answered from different checkpoints ({sorted(map(str, set(ids.values())))}) "
                             f"until the timeout")
            time.sleep(0.002)
            again: dict[tuple[str, int], Request] = {
                a: Lookup(next(self._ids), r.state, r.keys, r.level)  # type: ignore[union-attr]
                for a, r in behind.items()}
            answers = {**answers, **self._exchange(routes, again)}

    def scan(self, state: str, *, level: str | None = None, page_size: int = 1000,
             timeout: float | None = None) -> Iterator[tuple[Any, Any]]:
        """Every (key, value) of state ``state``, a page of at most ``page_size`` per request, worker
        after worker (for small states; pages are read at different moments: not a snapshot)."""
        level = _check_level(level or self.level)
        route = self._with_retries(lambda routes: routes.state(state), timeout)
        for subtask in range(route.parallelism):
            cursor: tuple[int, int] | None = None
            while True:
                answer = self.scan_page(state, subtask, cursor, level=level, limit=page_size, timeout=timeout)
                yield from answer.items
                if answer.cursor is None:
                    break
                cursor = answer.cursor

    def scan_page(self, state: str, subtask: int, cursor: tuple[int, int] | None = None, *,
                  level: str | None = None, limit: int = 1000, timeout: float | None = None) -> Page:
        """One page of the entries subtask ``subtask`` of state ``state`` holds, from ``cursor``."""
        level = _check_level(level or self.level)

        def attempt(routes: Routes) -> Page:
            route = routes.state(state)
            address = route.workers.get(subtask)
            if address is None:
                raise _Retry(f"no worker serves subtask {subtask} of state '{state}'")
            request = Scan(next(self._ids), state, level, cursor, limit)
            answer = self._exchange(routes, {address: request})[address]
            assert isinstance(answer, Page)
            return answer

        return self._with_retries(attempt, timeout)

    def close(self) -> None:
        """Close the connections; lookups of :meth:`get_async` not answered yet fail."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            pipeline.close()
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def __enter__(self) -> QueryableStateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ routing and retries
    def _with_retries(self, attempt: Callable[[Routes], Any], timeout: float | None) -> Any:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        reason = ""
        while True:
            try:
                routes = self.routes
                if routes is None or not routes.serving:
                    routes = self.routes = self._read_routes()
                return attempt(routes)
            except (_Retry, StateUnavailableError) as error:
                reason = str(error)
                self.routes = None
            if time.monotonic() >= deadline:
                raise StateUnavailableError(f"no answer within {self.timeout if timeout is None else timeout:g} s: "
                                            f"{reason}")
            time.sleep(RETRY_S)

    def _read_routes(self) -> Routes:
        try:
            return Routes.from_document(self._fetch())
        except RestError as error:
            if error.status == 401:
                raise QueryUnauthorizedError(f"the job's driver refused the REST token: {error.detail}") from None
            if error.status == 404:
                raise QueryableStateError(str(error.detail)) from None
            raise _Retry(f"the job's driver did not answer: {error.detail}") from None

    def _exchange(self, routes: Routes, requests: dict[tuple[str, int], Request]) -> dict[tuple[str, int], Any]:
        """Send every request (one per worker), then read every answer."""
        sent = {address: self._send(routes, address, request) for address, request in requests.items()}
        return {address: self._answer(address, connection, requests[address].request_id)
                for address, connection in sent.items()}

    def _ask(self, routes: Routes, address: tuple[str, int], request: Request) -> Any:
        """:meth:`_exchange` of one request."""
        return self._answer(address, self._send(routes, address, request), request.request_id)

    def _send(self, routes: Routes, address: tuple[str, int], request: Request) -> WorkerConnection:
        connection = self._connections.get(address) or self._connection(routes, address)
        try:
            connection.send(request_frame(routes.token, encode(request)))
        except OSError as error:
            self._drop(address)
            raise _Retry(f"worker {address[0]}:{address[1]} is gone ({error})") from None
        return connection

    def _answer(self, address: tuple[str, int], connection: WorkerConnection, request_id: int) -> Any:
        try:
            answer = connection.receive(request_id)
        except (OSError, EOFError) as error:
            self._drop(address)
            raise _Retry(f"worker {address[0]}:{address[1]} did not answer ({error})") from None
        if type(answer) is QueryFailed:
            _raise(answer)
        return answer

    def _connection(self, routes: Routes, address: tuple[str, int]) -> WorkerConnection:
        connection = self._connections.get(address)
        if connection is None:
            host, name = routes.local_sockets.get(address, (None, None))
            try:  # (self._host is None with transport="tcp": no host matches)
                connection = WorkerConnection(address, self.timeout, name if host == self._host else None)
            except OSError as error:
                raise _Retry(f"cannot reach worker {address[0]}:{address[1]} ({error})") from None
            self._connections[address] = connection
        return connection

    def _drop(self, address: tuple[str, int]) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()


class _Pipeline:
    """The thread behind :meth:`QueryableStateClient.get_async`: it takes every lookup queued
    while its previous request was out, asks them with one :meth:`~QueryableStateClient.get_many`
    per (state, level), and answers their futures. ``client``: a client of the same job that only
    this thread uses."""

    def __init__(self, client: QueryableStateClient) -> None:
        self.client = client
        self.queue: queue.SimpleQueue[tuple[str, Any, Any, str, Future[Any]] | None] = queue.SimpleQueue()
        self.closed = False
        self.thread = threading.Thread(target=self._run, name="epochal-query-pipeline", daemon=True)
        self.thread.start()

    def submit(self, state: str, key: Any, default: Any, level: str) -> Future[Any]:
        future: Future[Any] = Future()
        if self.closed:
            future.set_exception(QueryableStateError("the QueryableStateClient is closed"))
            return future
        self.queue.put((state, key, default, level, future))
        return future

    def close(self) -> None:
        self.closed = True
        self.queue.put(None)
        self.thread.join(self.client.timeout + 5)

    def _run(self) -> None:
        try:
            while (first := self.queue.get()) is not None:
                batch = [first]
                try:
                    while (item := self.queue.get_nowait()) is not None:
                        batch.append(item)
                    else:
                        self.closed = True
                except queue.Empty:
                    pass
                self._answer(batch)
                if self.closed:
                    break
        finally:
            self.client.close()
            closed = QueryableStateError("the QueryableStateClient was closed before the lookup was answered")
            try:
                while (item := self.queue.get_nowait()) is not None:
                    item[4].set_exception(closed)
            except queue.Empty:
                pass

    def _answer(self, batch: list[tuple[str, Any, Any, str, Future[Any]]]) -> None:
        groups: dict[tuple[str, str], list[tuple[Any, Any, Future[Any]]]] = {}
        for state, key, default, level, future in batch:
            if future.set_running_or_notify_cancel():
                groups.setdefault((state, level), []).append((key, default, future))
        for (state, level), lookups in groups.items():
            try:
                values = self.client.get_many(state, dict.fromkeys(k for k, _, _ in lookups), level=level)
            except Exception as error:  # each future gets what get() would have raised
                for _, _, future in lookups:
                    future.set_exception(error)
                continue
            for key, default, future in lookups:
                future.set_result(values.get(key, default))


def _raise(answer: QueryFailed) -> None:
    if answer.retriable:
        raise _Retry(answer.detail)
    if answer.code == UNAUTHORIZED:
        raise QueryUnauthorizedError(answer.detail)
    if answer.code == UNKNOWN_STATE:
        raise UnknownQueryableStateError(answer.detail)
    if answer.code == BAD_KEY:
        raise QueryKeyTypeError(answer.detail)
    raise QueryableStateError(answer.detail)


def _check_level(level: str) -> str:
    if level not in LEVELS:
        raise ValueError(f"unknown isolation level {level!r}: use {READ_UNCOMMITTED!r} or {READ_COMMITTED!r}")
    return level


def _hashable(key: Any) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def _route_source(job: Any, address: str | None, token: str | None) -> Callable[[], dict[str, Any]]:
    """How the client reads the job's routes: from the REST server at ``address``, from the
    registry's entry of ``job``, or, for a JobClient of this process without one, its JobMaster."""
    if address is not None:
        if token is None:
            raise ValueError("a QueryableStateClient given an address needs the driver's token")
        client = RestClient(address, token)
        name = str(job)
        return lambda: client.get(job_path(name, "queryable"))
    jobmaster = getattr(job, "_jobmaster", None)
    if jobmaster is not None:  # a job of this process: its JobMaster answers directly
        return lambda: routes_of(jobmaster)
    reference = str(job)
    from epochal.control.job_registry import Registry
    from epochal.rest import names

    try:
        entry = names.resolve(reference, Registry().entries())
    except names.UnknownJob:
        raise QueryableStateError(f"no running job {reference!r} in the registry (epochal list); give "
                                  f"address= and token= for a job of another machine") from None
    except names.AmbiguousJob as error:
        raise QueryableStateError(str(error)) from None
    client = RestClient(entry.address, entry.token)
    return lambda: client.get(job_path(entry.job_id, "queryable"))
