"""Timers, firing and per-window state of the general window operator
(:class:`~epochal.runtime.windows.operator.WindowOperator`, which subclasses :class:`WindowTimers`).

A window's timer is one :class:`~epochal.runtime.operators.timers.TimerQueue` timer of its key at that time
(the queue's table ``__timers__``) plus the window's entry in ``"window-timers"``: key ->
``{(0 event | 1 processing, time): (window, ...)}``; both are managed keyed state, so timers are
in checkpoints and move with their key group. When the queue hands out a due timer of a key, each
window waiting for it calls its trigger (``on_event_time`` / ``on_processing_time``), fires
and/or purges, and is cleaned up if the time is its cleanup time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from epochal.runtime.operators.aggregates import MISSING
from epochal.runtime.operators.base import Operator
from epochal.runtime.operators.timers import EVENT_TIME, PROCESSING_TIME, TimeDomain, TimerDriven, TimerQueue
from epochal.runtime.windows.assigners import GLOBAL_WINDOW, WindowAssigner
from epochal.runtime.windows.context import (
    WINDOW_STATE_PREFIX,
    WINDOW_STATE_TYPES,
    ProcessWindowFunction,
    WindowContext,
    drop_window,
)
from epochal.runtime.windows.triggers import CONTINUE, FIRE, PURGE, Trigger

_DOMAINS = (EVENT_TIME, PROCESSING_TIME)
_END_OF_TIME = float("inf")


class WindowTimers(TimerDriven, Operator):
    """The timer side of the window operator; the subclass sets the attributes below in its
    constructor and ``open`` and implements :meth:`_emit`."""

    assigner: WindowAssigner
    trigger: Trigger
    function: ProcessWindowFunction | None
    backend: Any
    clock: Callable[[], float]
    ctx: WindowContext
    watermark: Any
    #: whether the windows follow event time (else the clock, or none for global windows)
    event_time: bool
    #: inline EventTimeTrigger handling (no trigger calls)
    fast: bool
    lateness: Any
    cleanup_domain: TimeDomain
    #: the managed tables (owned_table views): contents, sessions (merging only), window timers
    contents: Any
    sessions: Any
    window_timers: Any
    timers: TimerQueue | None
    #: per-window state objects by descriptor name, and their tables by table name
    states: dict[str, Any]
    state_tables: dict[str, Any]
    #: what the call in progress emits
    _out: list[Any]
    #: copy-on-write of contents (see WindowOperator)
    unshared: set[Any] | None

    def _emit(self, key: Any, group: int, window: Any, acc: Any) -> None:
        raise NotImplementedError

    def _forget(self, key: Any, window: Any) -> None:
        """``window``'s contents are gone: no copy-on-write entry for them."""
        if self.unshared is not None:
            self.unshared.discard((key, window))

    def _cleanup_time(self, window: Any) -> Any:
        """When ``window``'s state goes (in ``cleanup_domain``), or None: never."""
        if self.event_time:
            return window[1] - 1 + self.lateness
        return None if window is GLOBAL_WINDOW else window[1]

    # ------------------------------------------------------------------ timers
    def register_timer(self, domain: TimeDomain, time: Any, key: Any, group: int, window: Any) -> None:
        """A timer of ``window`` of ``key`` at ``time``: one TimerQueue timer per key and time, the
        windows waiting for it in ``"window-timers"``."""
        slot = (0 if domain is EVENT_TIME else 1, time)
        entries = self.window_timers[group]
        registered = entries.get(key)
        if registered is None:
            registered = {}
        else:
            windows = registered.get(slot)
            if windows is not None:
                if window not in windows:
                    registered[slot] = (*windows, window)
                    entries[key] = registered
                return
        registered[slot] = (window,)
        entries[key] = registered
        self.timers.register(domain, time, key, group)  # type: ignore[union-attr]

    def delete_timer(self, domain: TimeDomain, time: Any, key: Any, group: int, window: Any) -> None:
        """Remove ``window``'s timer at ``time``, if it has one."""
        slot = (0 if domain is EVENT_TIME else 1, time)
        entries = self.window_timers[group]
        registered = entries.get(key)
        windows = None if registered is None else registered.get(slot)
        if windows is None or window not in windows:
            return
        if len(windows) > 1:
            registered[slot] = tuple(w for w in windows if w != window)
        else:
            del registered[slot]
            self.timers.delete(domain, time, key, group)  # type: ignore[union-attr]
        if registered:
            entries[key] = registered
        else:
            del entries[key]

    def _fire(self, domain: TimeDomain, limit: Any) -> list[Any]:
        """Run every timer of ``domain`` due at ``limit``, in order of time."""
        timers = self.timers
        assert timers is not None
        first = timers.next_timestamp(domain)
        if first is None or first > limit:
            return []
        out: list[Any] = []
        self._out = out
        code = 0 if domain is EVENT_TIME else 1
        table = self.window_timers
        on_timer = self._on_timer
        inline = self.fast and self.sessions is None
        for time, key, group in timers.pop_due(domain, limit):
            entries = table[group]
            registered = entries.get(key)
            windows = None if registered is None else registered.pop((code, time), None)
            if windows is None:
                continue
            if registered:
                entries[key] = registered
            else:
                del entries[key]
            if inline:
                self._event_timer(time, key, group, windows)
            else:
                for window in windows:
                    on_timer(code, time, key, group, window)
        return out

    def _event_timer(self, time: Any, key: Any, group: int, windows: tuple[Any, ...]) -> None:
        """The EventTimeTrigger's timer at ``time`` for non-merging ``windows`` of ``key``, inline:
        a window fires at its ``max_timestamp()`` and is cleaned up ``lateness`` later."""
        entries = self.contents[group]
        contents = entries.get(key)
        changed = False
        lateness = self.lateness
        for window in windows:
            last = window[1] - 1
            if contents is not None:
                acc = contents.get(window, MISSING)
                if acc is not MISSING:
                    if time == last:
                        self._emit(key, group, window, acc)
                    if time == last + lateness:
                        del contents[window]
                        changed = True
                        self._forget(key, window)
            if time == last + lateness and (self.function is not None or self.state_tables):
                self._clear_window(key, group, window)
        if changed:
            if contents:
                entries[key] = contents
            else:
                del entries[key]

    def _on_timer(self, code: int, time: Any, key: Any, group: int, window: Any) -> None:
        if self.sessions is not None:
            sessions = self.sessions[group].get(key)
            if not sessions or window not in sessions:
                return  # merged away
        if self.fast:
            result = FIRE if code == 0 and time == window[1] - 1 else CONTINUE
        else:
            ctx = self.ctx
            ctx.current_key, ctx.group, ctx.current_window = key, group, window
            self.backend.set_current_key(key, group)
            trigger = self.trigger
            result = (trigger.on_event_time(time, window, ctx) if code == 0 else
                      trigger.on_processing_time(time, window, ctx)) or CONTINUE
        entries = self.contents[group]
        contents = entries.get(key)
        changed = False
        if result and contents is not None:
            acc = contents.get(window, MISSING)
            if acc is not MISSING:
                if result & FIRE:
                    self._emit(key, group, window, acc)
                if result & PURGE:
                    del contents[window]
                    changed = True
                    self._forget(key, window)
        cleanup_code = 0 if self.cleanup_domain is EVENT_TIME else 1
        if code == cleanup_code and time == self._cleanup_time(window):
            if contents is not None and window in contents:
                del contents[window]
                changed = True
                self._forget(key, window)
            self._clear_window(key, group, window)
        if changed:
            if contents:
                entries[key] = contents
            else:
                del entries[key]

    def _clear_window(self, key: Any, group: int, window: Any) -> None:
        """Everything about ``window`` of ``key`` goes, but its contents (the caller's)."""
        ctx = self.ctx
        ctx.current_key, ctx.group, ctx.current_window = key, group, window
        self.backend.set_current_key(key, group)
        if not self.fast:  # the EventTimeTrigger's one timer fired at or before the cleanup
            self.trigger.clear(window, ctx)
        if self.function is not None:
            self.function.clear(ctx)
        for groups in self.state_tables.values():
            drop_window(groups, group, key, window)
        if self.sessions is not None:
            entries = self.sessions[group]
            sessions = entries.get(key)
            if sessions is not None:
                remaining = tuple(s for s in sessions if s != window)
                if remaining:
                    entries[key] = remaining
                else:
                    del entries[key]

    def end_input(self) -> list[Any]:
        """Time runs out: every timer pending fires, event time first (see the module doc)."""
        self.watermark = _END_OF_TIME
        timers = self.timers
        assert timers is not None
        out: list[Any] = []
        for code, domain in enumerate(_DOMAINS):
            heap = timers.heaps[code]
            if heap:
                out += self._fire(domain, max(entry[0] for entry in heap))
        return out

    # ------------------------------------------------------------------ per-window state
    def window_state(self, descriptor: Any) -> Any:
        """The per-window state object of ``descriptor`` (scoped to the context's key and window)."""
        state = self.states.get(descriptor.name)
        if state is None:
            state_class = WINDOW_STATE_TYPES.get(descriptor.state_type)
            if state_class is None or descriptor.ttl is not None:
                raise TypeError(f"per-window state takes a Value/List/Reducing/AggregatingStateDescriptor without "
                                f"ttl, got {descriptor!r}")
            from epochal.state.descriptors import MapStateDescriptor

            name = WINDOW_STATE_PREFIX + descriptor.name
            self.backend.get_state(MapStateDescriptor(name))
            groups = self.state_tables[name] = self.backend.owned_table(name)
            state = self.states[descriptor.name] = state_class(groups, self.ctx, descriptor)
        elif state.descriptor.state_type != descriptor.state_type:
            raise TypeError(f"per-window state '{descriptor.name}' is {state.descriptor.state_type} state, not "
                            f"{descriptor.state_type} state")
        return state
