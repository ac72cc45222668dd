"""Session windows in the general window operator: merging a record's window into the key's
sessions (Flink's ``MergingWindowSet``, without its state-window indirection: a merged session's
contents are re-keyed to the new window, since a key's windows live in one state value anyway).

When a record's window ``[t, t + gap)`` intersects (or touches) sessions of its key, they become
one session covering them all: the trigger's ``on_merge`` runs for it (``merge_partitioned_state``
combines the merged sessions' trigger state), then each merged session's trigger is cleared, its
cleanup timer and per-window state deleted, and the contents are merged in order of start
(``merge`` of the AggregateFunction, the reduce function re-applied, lists concatenated).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from epochal.runtime.operators.timers import EVENT_TIME
from epochal.runtime.windows.assigners import merge_into_sessions
from epochal.runtime.windows.context import drop_window
from epochal.runtime.windows.timers import WindowTimers


class SessionMerging(WindowTimers):
    """The merging half of :class:`~epochal.runtime.windows.operator.WindowOperator`."""

    aggregate: Callable[[Any, Any], Any] | None
    merge: Callable[[Any, Any], Any] | None

    def _times(self, batch: list[Any]) -> Any:
        raise NotImplementedError

    def _late(self, record: Any) -> None:
        raise NotImplementedError

    def _element(self, record: Any, timestamp: Any, key: Any, group: int, window: Any, contents: dict[Any, Any],
                 fresh: bool) -> None:
        raise NotImplementedError

    def _merging_batch(self, batch: list[Any], keys: list[Any], key_groups: list[int]) -> None:
        """Session windows: each record's window absorbs the key's sessions it intersects."""
        assign = self.assigner.assign_windows
        event_time = self.event_time
        late_end = self.watermark - self.lateness + 1
        table = self.contents
        sessions_table = self.sessions
        element = self._element
        for record, key, group, timestamp in zip(batch, keys, key_groups, self._times(batch), strict=True):
            session_entries = sessions_table[group]
            sessions = before = session_entries.get(key, ())
            entries = table[group]
            contents = entries.get(key)
            had = contents is not None
            if contents is None:
                contents = {}
            skipped = True
            for window in assign(record, timestamp):
                result, members, after = merge_into_sessions(sessions, window)
                if event_time and result[1] <= late_end:
                    continue  # a new session that is late already (a merged one never is)
                sessions = after
                skipped = False
                merged = bool(members) and result is not members[0]
                if merged:
                    self._merge(key, group, result, members, contents)
                element(record, timestamp, key, group, result, contents, merged)
            if sessions is not before:
                session_entries[key] = sessions
            if contents:
                entries[key] = contents
            elif had:
                del entries[key]
            if skipped and event_time and timestamp + self.lateness <= self.watermark:
                self._late(record)

    def _merge(self, key: Any, group: int, result: Any, members: list[Any], contents: dict[Any, Any]) -> None:
        """Sessions ``members`` of ``key`` merged into ``result``: the trigger's ``on_merge``, then
        their triggers, cleanup timers and per-window state are cleared and their contents merged
        (in order of start) into ``result``'s."""
        ctx = self.ctx
        fast = self.fast  # the EventTimeTrigger, inline: its timers are deleted here, set by _element
        trigger = self.trigger
        if not fast:
            ctx.current_key, ctx.group, ctx.current_window, ctx.merged = key, group, result, members
            self.backend.set_current_key(key, group)
            trigger.on_merge(result, ctx)
            ctx.merged = []
        for window in members:
            if fast:
                self.delete_timer(EVENT_TIME, window[1] - 1, key, group, window)
            else:
                ctx.current_window = window
                trigger.clear(window, ctx)
            cleanup = self._cleanup_time(window)
            if cleanup is not None:
                self.delete_timer(self.cleanup_domain, cleanup, key, group, window)
            for groups in self.state_tables.values():
                drop_window(groups, group, key, window)
            self._forget(key, window)
        parts = [contents.pop(window) for window in members if window in contents]
        if not parts:
            return
        if self.aggregate is None:
            contents[result] = [record for part in parts for record in part]
        else:
            merge = self.merge
            assert merge is not None
            acc = parts[0] if self.unshared is None else copy.deepcopy(parts[0])
            for part in parts[1:]:
                acc = merge(acc, part)
            contents[result] = acc
        if self.unshared is not None:
            self.unshared.add((key, result))
