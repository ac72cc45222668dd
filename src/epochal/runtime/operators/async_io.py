"""Async I/O: enrich records from an external service without a lookup per record stalling
the pipeline (Flink's ``AsyncWaitOperator``, ``AsyncDataStream.orderedWait``/``unorderedWait``).

:class:`AsyncWaitOperator` runs ``fn(record)`` for up to ``capacity`` records at once and emits
each result as a record (``flat=True``, ``async_flat_map``: the records of the returned iterable).

Threads. An ``async def`` ``fn`` (or an object with an ``async def __call__``) runs on one asyncio
event loop in a daemon thread, started in ``open`` and stopped in ``close``; a plain function runs
on up to ``capacity`` daemon threads. An ``fn`` object's ``open(context)`` / ``close()`` (plain or
``async def``) run once per subtask, async ones on the event loop (create HTTP sessions there).
Results travel back through a queue: emitting happens on the processing thread only.

Capacity. At most ``capacity`` requests are queued (issued, not emitted; in ordered mode a result
waiting behind a slower earlier one holds its slot, as in Flink). When the queue is full,
``process_batch`` blocks the processing thread until a slot frees, returning what completed.

Order. ``ordered=True``: results leave in input order; ``ordered=False``: as they complete, never
across a watermark. The runtime forwards a watermark as soon as ``on_watermark`` returns, so
``on_watermark`` waits until every request issued before it was emitted (Flink's rule that
watermarks bound reordering; simple, at the price of waiting for the slowest request at each
watermark). Results are emitted from every call, and from ``on_processing_time``, which the
worker calls every :data:`POLL_INTERVAL` seconds while requests are in flight.

Timeouts, failures. ``timeout`` (wall-clock seconds by ``time.monotonic``, not a harness's
processing-time clock) covers a request from its first attempt to its last retry. Past it the job
fails with :class:`AsyncTimeoutError` naming the operator and the record, unless
``on_timeout(record)`` gives a fallback result (Flink's ``timeout()`` override). An exception of
``fn`` is retried ``retries`` times, ``retry_backoff * 2**k`` seconds before retry ``k`` (from 0),
then raised as itself (with a note naming the record) on the processing thread, where the runtime
wraps it in ``UserFunctionError``. Timeouts are not retried. A timed-out coroutine is cancelled; a
plain function cannot be and keeps its thread until it returns (give it its own timeout).

Checkpoints, exactly-once. The runtime forwards the barrier of checkpoint *n* and calls
:meth:`~AsyncWaitOperator.prepare_snapshot` with no operator call in between, after every record
before the barrier went through ``process_batch``. Each such record is then in one of two places:

1. its result was emitted, by a call that returned before the barrier: it is downstream before
   the barrier, part of checkpoint *n* there (an exactly-once sink commits it with epoch *n*). A
   request leaves the queue only in the call that returns its result: none is taken, not emitted;
2. it is still queued: in flight, completed but not yet collected, completed and waiting behind
   an earlier one (ordered mode), or restored and not issued yet.

``prepare_snapshot`` puts the *input records* of group 2, in input order, into the operator list
state :data:`IN_FLIGHT_STATE` ('split'). Their results are not kept, even complete ones: they were
not emitted before the barrier, so the restored run must produce them. After a restore ``open``
re-issues them before any new input (the excess over ``capacity`` as slots free), and upstream
replays what followed the barrier: every record's result reaches the committed output once (group
1 from the old run, the rest from the new). Input order holds across a restore within each
restored list (with another parallelism a subtask gets a contiguous part of the old lists). Not
exactly-once: the *calls* (a request in flight at a failure is made again) and their answers (a
lookup may answer differently the second time); use idempotent lookups.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import queue
import reprlib
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from epochal.runtime.operators.async_requests import (
    DaemonPool,
    call_async,
    call_sync,
    is_coroutine_function,
    serve_loop,
)
from epochal.runtime.operators.base import Operator
from epochal.runtime.operators.functions import RuntimeContext

#: Operator list state ('split'): input records of requests whose results were not emitted at a barrier.
IN_FLIGHT_STATE = "async-in-flight"
#: Seconds between the worker's polls for completed results while requests are in flight.
POLL_INTERVAL = 0.002
#: Longest single sleep of the processing thread while it waits for a slot or a drain.
_MAX_WAIT = 0.05
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 120


class AsyncTimeoutError(TimeoutError):
    """A request of an async I/O operator did not complete within the operator's ``timeout``."""


@dataclass(eq=False, slots=True)
class _Request:
    """One input record's request: ``attempt`` counts the attempts started; ``output`` holds
    the records of a completed (``done``) request until they are emitted."""

    seq: int
    record: Any
    deadline: float
    attempt: int = 0
    future: Future[Any] | None = None
    done: bool = False
    output: list[Any] = field(default_factory=list)


class AsyncWaitOperator(Operator):
    """Runs ``fn(record)`` concurrently for up to ``capacity`` records (see the module docstring).

    Args:
        fn: ``async def fn(record)`` or a plain ``fn(record)``; returns the output record, or with
            ``flat=True`` an iterable of output records (None: none).
        capacity: most requests in the queue at once (a positive int); also the thread pool's size.
        timeout: seconds a request may take, retries included.
        ordered: results in input order (True) or as they complete, within watermarks (False).
        on_timeout: ``fn(record)`` giving the result of a timed-out request; None: fail the job.
        retries: further attempts after ``fn`` raised; ``retry_backoff``: seconds before the
            first retry, doubling for each next one.
        flat: results are iterables of records (``async_flat_map``).

    Counters: ``async_requests`` (records issued, re-issued ones after a restore included),
    ``async_retries``, ``async_timeouts``, ``async_max_in_flight`` (largest queue seen).
    """

    processing_time = True

    def __init__(self, fn: Callable[[Any], Any], capacity: int = 100, timeout: float = 10.0, ordered: bool = True,
                 on_timeout: Callable[[Any], Any] | None = None, retries: int = 0, retry_backoff: float = 0.1,
                 flat: bool = False) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.fn = fn
        self.capacity = capacity
        self.timeout = float(timeout)
        self.ordered = ordered
        self.on_timeout = on_timeout
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.flat = flat
        self.requests_issued = 0
        self.retries_done = 0
        self.timeouts = 0
        self.max_in_flight = 0
        self._pool: DaemonPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ life cycle
    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        """Start the event loop or thread pool, run ``fn.open(context)`` if it has one, then
        re-issue the restored in-flight records (before any new input)."""
        # Runtime state is created here: the operator is pickled and deep-copied before it opens.
        self._label = f"async I/O operator '{context.operator_name or self.name}'"
        self._pending: OrderedDict[int, _Request] = OrderedDict()
        self._backlog: deque[Any] = deque()
        self._completed: queue.SimpleQueue[tuple[_Request, int, Future[Any]]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._seq = 0
        self._is_async = is_coroutine_function(self.fn)
        thread_name = f"epochal-async-{context.operator_name}-{context.subtask_index}"
        self._pool = None if self._is_async else DaemonPool(self.capacity, thread_name)
        hooks = [getattr(self.fn, name, None) for name in ("open", "close")]
        if self._is_async or any(is_coroutine_function(hook) for hook in hooks):
            loop = self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=serve_loop, args=(loop,), name=thread_name, daemon=True)
            self._loop_thread.start()
        if callable(hooks[0]):
            self._run_hook(hooks[0], context)
        self._state = context.get_list_state(IN_FLIGHT_STATE, "split")
        self._backlog.extend(self._state)
        self._state.clear()
        self._issue_backlog()

    def close(self) -> None:
        """Cancel what is in flight, run ``fn.close()``, stop the event loop and the threads."""
        pending = getattr(self, "_pending", None)
        try:
            for request in (pending or {}).values():
                if request.future is not None:
                    request.future.cancel()
            closer = getattr(self.fn, "close", None)
            if pending is not None and callable(closer):
                self._run_hook(closer)
        finally:
            loop, thread = self._loop, self._loop_thread
            self._loop = self._loop_thread = None
            if loop is not None and thread is not None:
                try:
                    loop.call_soon_threadsafe(loop.stop)
                except RuntimeError:  # already closed
                    pass
                thread.join(2.0)
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None

    def _run_hook(self, hook: Callable[..., Any], *args: Any) -> None:
        if is_coroutine_function(hook):
            assert self._loop is not None
            asyncio.run_coroutine_threadsafe(hook(*args), self._loop).result(timeout=max(self.timeout, 30.0))
        else:
            hook(*args)

    # ------------------------------------------------------------------ the runtime's calls
    def process_batch(self, batch: list[Any]) -> list[Any]:
        """Issue a request per record, waiting for a slot whenever the queue is full; returns
        the results that completed meanwhile."""
        out: list[Any] = []
        self._poll(out)
        for record in batch:
            if self._backlog or len(self._pending) >= self.capacity:
                self._wait(self._has_room, out)
            self._issue(record)
        return out

    def on_processing_time(self, now: float) -> list[Any]:
        """Emit what completed (``now`` is not used: timeouts read ``time.monotonic``)."""
        out: list[Any] = []
        self._poll(out)
        return out

    def next_processing_time(self) -> float | None:
        if not self._pending and not self._backlog:
            return None
        return time.time() + (0.0 if not self._completed.empty() else POLL_INTERVAL)

    def on_watermark(self, watermark: Any) -> list[Any]:
        """Emit the results of every record before the watermark (waiting for them) first."""
        return self._drain()

    def end_input(self) -> list[Any]:
        """Wait for every request and emit its result."""
        return self._drain()

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        """The input records whose results were not emitted, in input order, into operator state."""
        self._state[:] = [request.record for request in self._pending.values()] + list(self._backlog)

    def counters(self) -> dict[str, int]:
        return {"async_requests": self.requests_issued, "async_retries": self.retries_done,
                "async_timeouts": self.timeouts, "async_max_in_flight": self.max_in_flight}

    # ------------------------------------------------------------------ requests
    def _has_room(self) -> bool:
        return not self._backlog and len(self._pending) < self.capacity

    def _drained(self) -> bool:
        return not self._pending and not self._backlog

    def _drain(self) -> list[Any]:
        out: list[Any] = []
        self._wait(self._drained, out)
        return out

    def _issue(self, record: Any) -> None:
        request = _Request(self._seq, record, time.monotonic() + self.timeout)
        self._seq += 1
        self._pending[request.seq] = request
        self.requests_issued += 1
        self.max_in_flight = max(self.max_in_flight, len(self._pending))
        self._submit(request)

    def _issue_backlog(self) -> bool:
        issued = False
        while self._backlog and len(self._pending) < self.capacity:
            self._issue(self._backlog.popleft())
            issued = True
        return issued

    def _submit(self, request: _Request) -> None:
        """Start the next attempt of ``request`` (a retry after its backoff)."""
        request.attempt += 1
        attempt = request.attempt
        delay = self.retry_backoff * 2 ** (attempt - 2) if attempt > 1 else 0.0
        future: Future[Any]
        if self._is_async:
            assert self._loop is not None
            future = asyncio.run_coroutine_threadsafe(call_async(self.fn, request.record, delay), self._loop)
        else:
            assert self._pool is not None
            future = self._pool.submit(functools.partial(call_sync, self.fn, request.record, delay))
        request.future = future
        completed, wake = self._completed, self._wake

        def on_done(finished: Future[Any]) -> None:  # on the loop's or a pool thread
            completed.put((request, attempt, finished))
            wake.set()

        future.add_done_callback(on_done)

    def _poll(self, out: list[Any]) -> bool:
        """Collect completions, retry failures, expire requests, emit what may leave, fill
        free slots from the backlog; True if anything changed. Raises a final failure."""
        progressed = False
        while True:
            try:
                request, attempt, future = self._completed.get_nowait()
            except queue.Empty:
                break
            if request.done or attempt != request.attempt or future.cancelled():
                continue  # a timed-out request's late answer, or an attempt replaced by a retry
            progressed = True
            error = future.exception()
            if error is None:
                self._finish(request, self._result(request, future.result()), out)
            elif isinstance(error, Exception) and request.attempt <= self.retries:
                self.retries_done += 1
                self._submit(request)
            else:
                error.add_note(f"{self._label}: fn raised for record {_repr.repr(request.record)} "
                               f"(attempt {request.attempt} of {self.retries + 1})")
                raise error
        progressed = self._expire(out) or progressed
        if self.ordered:
            pending = self._pending
            while pending:
                head = next(iter(pending.values()))
                if not head.done:
                    break
                pending.popitem(last=False)
                out.extend(head.output)
                progressed = True
        return self._issue_backlog() or progressed

    def _result(self, request: _Request, value: Any) -> list[Any]:
        """The output records of one completed request."""
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()
            raise TypeError(f"{self._label}: fn returned {type(value).__name__} for record "
                            f"{_repr.repr(request.record)}; a coroutine function must be declared 'async def' "
                            "(a plain function returning a coroutine runs on a thread, where nothing awaits it)")
        if not self.flat:
            return [value]
        return [] if value is None else list(value)

    def _finish(self, request: _Request, output: list[Any], out: list[Any]) -> None:
        request.done = True
        request.output = output
        if not self.ordered:  # unordered: leaves at once (the queue holds only what is after the last watermark)
            del self._pending[request.seq]
            out.extend(output)

    def _expire(self, out: list[Any]) -> bool:
        """Time out the requests past their deadline (deadlines rise with the queue's order)."""
        now = time.monotonic()
        expired = []
        for request in self._pending.values():
            if request.done:
                continue
            if request.deadline > now:
                break
            expired.append(request)
        for request in expired:
            if request.future is not None:
                request.future.cancel()
            self.timeouts += 1
            if self.on_timeout is None:
                raise AsyncTimeoutError(
                    f"{self._label}: the request for record {_repr.repr(request.record)} did not complete within "
                    f"{self.timeout:g} s ({request.attempt} attempt(s)); pass on_timeout=fn(record) to emit a "
                    "fallback result instead of failing the job, or give a larger timeout")
            self._finish(request, self._result(request, self.on_timeout(request.record)), out)
        return bool(expired)

    def _wait(self, condition: Callable[[], bool], out: list[Any]) -> None:
        """Block the processing thread until ``condition()``, emitting into ``out`` meanwhile."""
        while not condition():
            self._wake.clear()
            if self._poll(out):
                continue
            self._wake.wait(self._wait_time())

    def _wait_time(self) -> float:
        """Until the earliest deadline of a request in flight, at most ``_MAX_WAIT``."""
        for request in self._pending.values():
            if not request.done:
                return min(_MAX_WAIT, max(0.0, request.deadline - time.monotonic()))
        return _MAX_WAIT
