"""Freeing what a finished subtask held in memory, in the background.

A PostgreSQL backend's read cache holds up to millions of keys and values (``cache_entries``
per subtask). Once its task ends they are garbage, and CPython frees them object by object:
1.5-1.9 s for 2 M cached entries in a worker's fragmented heap. PySpark's daemon runs
``gc.collect()`` in a reused Python worker right after each task, before the worker reads its
next one, while Spark already counts the process idle: after a failure, the next attempt's task
that Spark hands to the surviving worker's process waited for that collection, which made
recovery grow with the cache (docs/state_backends.md).

:func:`release_later` takes such containers over instead: they stay alive (so the collection
after the task finds nothing large to free) and one daemon thread empties them, one
``clear()`` per container (the cache is split by key group and state: tens of thousands of
entries, milliseconds each), sleeping :data:`PAUSE_S` after every :data:`SLICE` entries, so the
next task starts at once and shares the interpreter with the freeing a few milliseconds at a
time. The memory is freed a little later; the CPU it costs is the same (``popitem`` in slices
instead would cost 10 x a ``clear()``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

#: entries freed between two pauses
SLICE = 20_000
#: the pause between two slices, in which other threads run
PAUSE_S = 0.002

_lock = threading.Lock()
_pending: deque[dict[Any, Any] | set[Any]] = deque()
_thread: threading.Thread | None = None


def release_later(containers: Iterable[dict[Any, Any] | set[Any]]) -> int:
    """Empty ``containers`` from a background thread; returns how many entries they held.

    The caller promises that nothing reads or writes them any more (they are emptied in place,
    so whoever still holds one sees it shrink), and drops its own references to them after the
    call. Returns at once; :func:`pending_entries` tells what is left to free.
    """
    global _thread
    handed = 0
    with _lock:
        for container in containers:
            if container:
                _pending.append(container)
                handed += len(container)
        if _pending and _thread is None:
            _thread = threading.Thread(target=_free, name="epochal-release", daemon=True)
            _thread.start()
    return handed


def pending_entries() -> int:
    """Entries handed to :func:`release_later` and not yet freed."""
    with _lock:
        return sum(len(container) for container in _pending)


def _free() -> None:
    """The release thread: empty the pending containers one ``clear()`` each (one hold of the
    interpreter lock), pausing whenever :data:`SLICE` entries were freed since the last pause;
    end when none is left."""
    global _thread
    since_pause = 0
    while True:
        with _lock:
            if not _pending:
                _thread = None
                return
            container = _pending[0]
        since_pause += len(container)
        container.clear()
        with _lock:
            _pending.popleft()
        if since_pause >= SLICE:
            time.sleep(PAUSE_S)
            since_pause = 0


def _after_fork_in_child() -> None:
    """A forked child (a heap backend's snapshot) has no release thread and frees nothing."""
    global _lock, _pending, _thread
    _lock = threading.Lock()
    _pending = deque()
    _thread = None


os.register_at_fork(after_in_child=_after_fork_in_child)
