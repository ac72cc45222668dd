"""``async_map`` and ``async_flat_map``: enrich a stream from an external service with many
requests in flight (Flink's ``AsyncDataStream.orderedWait`` / ``unorderedWait``).

Thin: they check the arguments (a :class:`~epochal.errors.PlanError` at the call for a bad one)
and add one :class:`~epochal.runtime.operators.async_io.AsyncWaitOperator` node to the stream's graph, as
the DataStream methods do. The operator's docstring (``epochal.runtime.operators.async_io``) says how
requests run, time out, retry, and take part in checkpoints; docs/async_io.md is the guide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from epochal.api.fields import check_callable
from epochal.errors import PlanError
from epochal.runtime.operators.async_io import AsyncWaitOperator
from epochal.validation import check_number

if TYPE_CHECKING:  # imported where used: datastream.py may import this module at its top
    from epochal.api.datastream import DataStream

__all__ = ["async_flat_map", "async_map"]


def async_map(stream: DataStream, fn: Callable[[Any], Any], capacity: int = 100, timeout: float = 10.0,
              ordered: bool = True, on_timeout: Callable[[Any], Any] | None = None, retries: int = 0,
              retry_backoff: float = 0.1) -> DataStream:
    """One output record per input record: ``fn(record)``, with up to ``capacity`` calls in flight.

    Args:
        stream: the input stream (keyed or not; the result is not keyed).
        fn: ``async def fn(record)`` (run on an asyncio event loop of the worker) or a plain
            ``fn(record)`` (run on ``capacity`` threads); its return value is the output record.
        capacity: most requests in flight per subtask; when full, the subtask waits for one.
        timeout: seconds a request may take, retries included; then the job fails with an
            ``AsyncTimeoutError`` naming the record, unless ``on_timeout`` is given.
        ordered: emit results in input order (True) or as they complete (False; never across a
            watermark).
        on_timeout: ``on_timeout(record)`` is the result of a request that timed out.
        retries: how many times a call that raised is tried again before the job fails with its
            exception; ``retry_backoff`` seconds before the first retry, doubling after.

    Requests in flight at a checkpoint are part of it and issued again after a restore, so with
    an exactly-once sink every record's result is committed once (the call itself may be made
    twice: use idempotent lookups). Returns the stream of results (operation ``async_map``).
    """
    operator = _operator("async_map", stream, fn, capacity, timeout, ordered, on_timeout, retries, retry_backoff,
                         flat=False)
    return stream._add("async_map", "AsyncMap", operator, [fn, on_timeout])


def async_flat_map(stream: DataStream, fn: Callable[[Any], Iterable[Any] | None], capacity: int = 100,
                   timeout: float = 10.0, ordered: bool = True, on_timeout: Callable[[Any], Any] | None = None,
                   retries: int = 0, retry_backoff: float = 0.1) -> DataStream:
    """As :func:`async_map`, but ``fn(record)`` (and ``on_timeout(record)``) return an iterable of
    output records (None: none), emitted together (operation ``async_flat_map``)."""
    operator = _operator("async_flat_map", stream, fn, capacity, timeout, ordered, on_timeout, retries,
                         retry_backoff, flat=True)
    return stream._add("async_flat_map", "AsyncFlatMap", operator, [fn, on_timeout])


def _operator(method: str, stream: Any, fn: Any, capacity: Any, timeout: Any, ordered: Any, on_timeout: Any,
              retries: Any, retry_backoff: Any, flat: bool) -> AsyncWaitOperator:
    """Check the arguments of ``method`` and build its operator."""
    from epochal.api.datastream import DataStream

    if not isinstance(stream, DataStream):
        raise PlanError(f"{method}() takes a DataStream first, got {type(stream).__name__}: {stream!r}")
    check_callable(fn, method)
    check_number(capacity, f"{method} capacity", integer=True)
    check_number(timeout, f"{method} timeout (seconds)")
    if not isinstance(ordered, bool):
        raise PlanError(f"{method} ordered must be True or False, got {type(ordered).__name__} {ordered!r}")
    if on_timeout is not None and not callable(on_timeout):
        raise PlanError(f"{method}(on_timeout=...) takes a function of the record or None, "
                        f"got {type(on_timeout).__name__}: {on_timeout!r}")
    check_number(retries, f"{method} retries", integer=True, strict=False)
    check_number(retry_backoff, f"{method} retry_backoff (seconds)", strict=False)
    return AsyncWaitOperator(fn, capacity=int(capacity), timeout=float(timeout), ordered=ordered,
                             on_timeout=on_timeout, retries=int(retries), retry_backoff=float(retry_backoff),
                             flat=flat)
