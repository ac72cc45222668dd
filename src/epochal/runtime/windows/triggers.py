"""Triggers of the general window operator: when a window's contents are emitted (Flink's
``Trigger`` and ``TriggerResult``).

A trigger is asked, per key and window, what to do when a record lands in the window
(:meth:`Trigger.on_element`), when a timer it registered fires (:meth:`Trigger.on_event_time`,
:meth:`Trigger.on_processing_time`), when session windows merge (:meth:`Trigger.on_merge`) and
when the window is cleaned up (:meth:`Trigger.clear`). The answer is a :class:`TriggerResult`:
``CONTINUE`` (nothing), ``FIRE`` (emit the window's result and keep its contents), ``PURGE``
(drop the contents) or ``FIRE_AND_PURGE``. Triggers are stateless objects shared by every key and
window: what they remember lives in the per-window state of their context
(``ctx.get_partitioned_state(descriptor)``) and in the timers they register through it.

Timestamps are those of the window's clock: event times (the user's ``timestamp(record)``
unit) for event-time windows; seconds of the wall clock (``time.time()``) for processing-time ones.
"""

from __future__ import annotations

import operator as _op
from enum import IntEnum
from typing import Any

from epochal.errors import PlanError
from epochal.state.descriptors import ReducingStateDescriptor
from epochal.validation import check_number


class TriggerResult(IntEnum):
    """What the window operator does with a window after asking its trigger (bit 1: fire, bit 2:
    purge, so ``result & FIRE`` and ``result & PURGE`` test them)."""

    CONTINUE = 0
    FIRE = 1
    PURGE = 2
    FIRE_AND_PURGE = 3

    @property
    def is_fire(self) -> bool:
        return bool(self & 1)

    @property
    def is_purge(self) -> bool:
        return bool(self & 2)


CONTINUE = TriggerResult.CONTINUE
FIRE = TriggerResult.FIRE
PURGE = TriggerResult.PURGE
FIRE_AND_PURGE = TriggerResult.FIRE_AND_PURGE


class Trigger:
    """Base of triggers; subclass it for your own (every method has a do-nothing default).

    ``ctx`` (a :class:`~epochal.runtime.windows.context.WindowContext`) is scoped to the key and
    the window: ``ctx.register_event_time_timer(t)`` / ``register_processing_time_timer(t)`` (and
    ``delete_...``) schedule :meth:`on_event_time` / :meth:`on_processing_time` for this window,
    ``ctx.get_partitioned_state(descriptor)`` is state of this key and window (Value, List,
    Reducing, Aggregating), ``ctx.current_watermark()`` and ``ctx.current_processing_time()``
    read the clocks. Returning ``None`` means ``CONTINUE``.

    Contract: timers and per-window state a trigger creates are its to delete in :meth:`clear`
    (the operator calls it when the window is cleaned up, and for windows merged away).
    """

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult | None:
        """``element`` (with ``timestamp``: its event time, or the processing time for
        processing-time windows) was added to ``window``."""
        return CONTINUE

    def on_event_time(self, time: Any, window: Any, ctx: Any) -> TriggerResult | None:
        """An event-time timer at ``time`` that this trigger registered for ``window`` fired."""
        return CONTINUE

    def on_processing_time(self, time: float, window: Any, ctx: Any) -> TriggerResult | None:
        """A processing-time timer at ``time`` that this trigger registered for ``window`` fired."""
        return CONTINUE

    def can_merge(self) -> bool:
        """Whether the trigger supports merging (session) windows, i.e. implements :meth:`on_merge`."""
        return False

    def on_merge(self, window: Any, ctx: Any) -> None:
        """Windows merged into ``window`` (``ctx.merge_partitioned_state(descriptor)`` merges their
        state into it); re-register the timers ``window`` needs. Their :meth:`clear` follows."""
        raise NotImplementedError(f"{type(self).__name__} does not support merging windows")

    def clear(self, window: Any, ctx: Any) -> None:
        """Delete the timers and per-window state this trigger holds for ``window``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class EventTimeTrigger(Trigger):
    """Fires once the watermark reaches the window's ``max_timestamp()`` (``end - 1``), and again
    for every record that arrives later within the allowed lateness (a late firing). The default
    trigger of event-time windows."""

    @classmethod
    def create(cls) -> EventTimeTrigger:
        return cls()

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        fire_at = window.max_timestamp()
        if fire_at <= ctx.current_watermark():
            return FIRE  # the watermark is past the window: a late firing
        ctx.register_event_time_timer(fire_at)
        return CONTINUE

    def on_event_time(self, time: Any, window: Any, ctx: Any) -> TriggerResult:
        return FIRE if time == window.max_timestamp() else CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        fire_at = window.max_timestamp()
        if fire_at > ctx.current_watermark():
            ctx.register_event_time_timer(fire_at)

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    """Fires when the wall clock reaches the window's ``end`` (Flink fires at ``end - 1`` ms; here
    clocks count seconds, so a window ``[start, end)`` is complete when the clock reads ``end``).
    The default trigger of processing-time windows; it never fires a global window."""

    @classmethod
    def create(cls) -> ProcessingTimeTrigger:
        return cls()

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        if window.end is not None:
            ctx.register_processing_time_timer(window.end)
        return CONTINUE

    def on_processing_time(self, time: float, window: Any, ctx: Any) -> TriggerResult:
        return FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        if window.end > ctx.current_processing_time():
            ctx.register_processing_time_timer(window.end)

    def clear(self, window: Any, ctx: Any) -> None:
        if window.end is not None:
            ctx.delete_processing_time_timer(window.end)


class NeverTrigger(Trigger):
    """Never fires: the default trigger of :class:`~epochal.runtime.windows.assigners.GlobalWindows`,
    which need a trigger of their own (e.g. ``CountTrigger``)."""

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        pass


class CountTrigger(Trigger):
    """Fires each time the window has received ``count`` more records (the count lives in the
    window's state, ``"count"``); never purges: wrap it in :class:`PurgingTrigger` for tumbling
    count windows."""

    def __init__(self, count: int) -> None:
        check_number(count, "CountTrigger count", integer=True)
        self.count = count
        self.state = ReducingStateDescriptor("count", reduce_fn=_op.add)

    @classmethod
    def of(cls, count: int) -> CountTrigger:
        return cls(count)

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        seen = ctx.get_partitioned_state(self.state)
        seen.add(1)
        if seen.get() >= self.count:
            seen.clear()
            return FIRE
        return CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        ctx.merge_partitioned_state(self.state)

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.get_partitioned_state(self.state).clear()

    def __repr__(self) -> str:
        return f"CountTrigger({self.count})"


class PurgingTrigger(Trigger):
    """``trigger``, with every ``FIRE`` turned into ``FIRE_AND_PURGE``: each firing emits only
    what arrived since the last one."""

    def __init__(self, trigger: Trigger) -> None:
        if not isinstance(trigger, Trigger):
            raise PlanError(f"PurgingTrigger.of() takes a Trigger, got {type(trigger).__name__}")
        self.trigger = trigger

    @classmethod
    def of(cls, trigger: Trigger) -> PurgingTrigger:
        return cls(trigger)

    @staticmethod
    def _purging(result: TriggerResult | None) -> TriggerResult:
        return FIRE_AND_PURGE if result is not None and result & FIRE else (result or CONTINUE)

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.trigger.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: Any, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.trigger.on_event_time(time, window, ctx))

    def on_processing_time(self, time: float, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.trigger.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.trigger.can_merge()

    def on_merge(self, window: Any, ctx: Any) -> None:
        self.trigger.on_merge(window, ctx)

    def clear(self, window: Any, ctx: Any) -> None:
        self.trigger.clear(window, ctx)

    def __repr__(self) -> str:
        return f"PurgingTrigger({self.trigger!r})"


def may_use_processing_time(trigger: Trigger) -> bool:
    """Whether ``trigger`` may register processing-time timers (then the worker polls the
    operator's clock): not the built-in event-time, count and never triggers (exactly those
    classes, not subclasses), and a PurgingTrigger as the trigger it wraps; any other may."""
    if type(trigger) is PurgingTrigger:
        return may_use_processing_time(trigger.trigger)
    return type(trigger) not in (EventTimeTrigger, CountTrigger, NeverTrigger)
