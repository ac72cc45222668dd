"""The process operator: a user's :class:`ProcessFunction` with its context, side outputs and,
on keyed streams, timers (Flink's ``ProcessOperator`` and ``KeyedProcessOperator``).

On a keyed stream the operator keeps a :class:`~epochal.runtime.operators.timers.TimerQueue` over managed
keyed state; a watermark fires the event-time timers it reaches, the worker's clock the
processing-time ones (``on_processing_time``), each with its key set as the current key. The
end of a bounded input fires every event-time timer left; processing-time timers left are
dropped (Flink's behaviour).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from epochal.errors import UserFunctionError, note_record
from epochal.runtime.operators.base import Operator, keys_of
from epochal.runtime.operators.functions import ProcessContext, ProcessFunction, RuntimeContext
from epochal.runtime.operators.inband import NO_WATERMARK
from epochal.runtime.operators.timers import EVENT_TIME, TIMERS, TimeDomain, TimerDriven, TimerQueue

_END_OF_TIME = float("inf")


class ProcessOperator(TimerDriven, Operator):
    """Runs a :class:`ProcessFunction`; on keyed streams it sets ``ctx.current_key`` per record
    and per firing timer. ``timestamp(record)``, if given, is what ``ctx.timestamp()`` returns
    while the record is processed."""

    def __init__(self, function: ProcessFunction | Any, key_selector: Callable[[Any], Any] | None,
                 timestamp: Callable[[Any], Any] | None = None) -> None:
        #: a ProcessFunction, or a two-input operator's function (its subclasses')
        self.function: Any = function
        self.key_selector = key_selector
        self.timestamp = timestamp
        self.keyed = key_selector is not None
        self.processing_time = self.keyed
        self.ctx: ProcessContext | None = None
        self.backend: Any = None
        self.timers: TimerQueue | None = None
        self.watermark: Any = NO_WATERMARK
        self.side: list[tuple[str, Any]] = []

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        from epochal.state.descriptors import MapStateDescriptor

        self.backend = context.keyed_state
        if self.keyed and self.backend is not None:
            self.backend.get_state(MapStateDescriptor(TIMERS))  # declares the timers' managed state
            self.timers = TimerQueue(self.backend.owned_table(TIMERS))
        self.ctx = ProcessContext(context, self.side, self if self.timers is not None else None)
        self.function.open(context)

    def process_batch(self, batch: list[Any]) -> list[Any]:
        return self._run(batch, self.function.process_element, self.key_selector)

    def _run(self, batch: list[Any], process: Callable[[Any, ProcessContext], Iterable[Any] | None],
             key_selector: Callable[[Any], Any] | None) -> list[Any]:
        """``process(record, ctx)`` for every record, with its key set on keyed streams."""
        out: list[Any] = []
        extend = out.extend
        ctx = self.ctx
        assert ctx is not None
        timestamp = self.timestamp
        backend = self.backend
        record = None
        try:
            if key_selector is None or backend is None:
                for record in batch:
                    if timestamp is not None:
                        ctx.event_time = timestamp(record)
                    produced = process(record, ctx)
                    if produced is not None:
                        extend(produced)
                return out
            keys, groups = keys_of(key_selector, batch, backend.max_parallelism, self.name)
            backend.prefetch(keys, groups)  # an external backend reads the batch's keys at once
            set_key = backend.set_current_key
            for record, key, group in zip(batch, keys, groups, strict=True):
                ctx.current_key = key
                ctx.group = group
                set_key(key, group)
                if timestamp is not None:
                    ctx.event_time = timestamp(record)
                produced = process(record, ctx)
                if produced is not None:
                    extend(produced)
        except UserFunctionError:
            raise  # (the key selector's, which names its record)
        except Exception as error:
            note_record(error, record)
            raise
        return out

    def _fire(self, domain: TimeDomain, limit: Any) -> list[Any]:
        """Call ``on_timer`` for every timer of ``domain`` due at ``limit``, oldest first."""
        timers, ctx = self.timers, self.ctx
        if timers is None or ctx is None:
            return []
        next_timestamp = timers.next_timestamp(domain)
        if next_timestamp is None or next_timestamp > limit:
            return []
        out: list[Any] = []
        on_timer = self.function.on_timer
        set_key = self.backend.set_current_key
        ctx.domain = domain
        try:
            for timestamp, key, group in timers.pop_due(domain, limit):
                ctx.current_key = key
                ctx.group = group
                ctx.event_time = timestamp
                set_key(key, group)
                produced: Iterable[Any] | None = on_timer(timestamp, ctx)
                if produced is not None:
                    out.extend(produced)
        finally:
            ctx.domain = None
            ctx.event_time = None
        return out

    def end_input(self) -> list[Any]:
        self.watermark = _END_OF_TIME
        return self._fire(EVENT_TIME, _END_OF_TIME)

    def close(self) -> None:
        self.function.close()
