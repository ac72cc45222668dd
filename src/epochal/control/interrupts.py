"""Ctrl-C while a job starts or runs: one clean KeyboardInterrupt, no Py4J tracebacks.

PySpark installs a SIGINT handler that calls into the JVM from inside the signal handler; if
the main thread is in a Py4J call at that moment the call breaks and Py4J logs tracebacks.
:func:`deferred_interrupts` holds a Ctrl-C back during such calls; :func:`plain_interrupts`
turns it into a plain KeyboardInterrupt while the driver only waits, so the caller cancels
its own job instead of every Spark job of the session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any


class _Deferral:
    """State of the (possibly nested) :func:`deferred_interrupts` blocks of the main thread."""

    depth = 0
    pending = False


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) back while the main thread talks to the JVM, raise it afterwards.

    A KeyboardInterrupt raised inside a Py4J call breaks the call, and PySpark's own SIGINT
    handler makes a second Py4J call from inside the signal handler while the first is still
    reading its answer ("reentrant call"): Py4J then logs several tracebacks through the root
    logger. Held back, the Ctrl-C is raised as one KeyboardInterrupt when the innermost block
    ends; a second Ctrl-C is raised at once. A SparkContext started inside the block installs
    PySpark's handler: that request is kept for the end of the outermost block instead of
    replacing the hold. Outside the main thread this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _Deferral.depth:  # nested: the outer block's handler holds the Ctrl-C
        _Deferral.depth += 1
        try:
            yield
        finally:
            _Deferral.depth -= 1
        if _Deferral.pending:
            _Deferral.pending = False
            raise KeyboardInterrupt
        return

    def hold(signum: int, frame: Any) -> None:
        if _Deferral.pending:
            raise KeyboardInterrupt
        _Deferral.pending = True

    install = signal.signal
    previous: list[Any] = [install(signal.SIGINT, hold)]
    pid = os.getpid()

    def keep_for_later(signum: Any, handler: Any) -> Any:
        # a forked child (PySpark's JVM launcher ignores SIGINT in its preexec_fn) sets it for real
        if signum != signal.SIGINT or os.getpid() != pid or threading.current_thread() is not threading.main_thread():
            return install(signum, handler)
        replaced, previous[0] = previous[0], handler
        return replaced

    signal.signal = keep_for_later  # type: ignore[assignment]
    _Deferral.depth, _Deferral.pending = 1, False
    try:
        yield
    finally:
        _Deferral.depth = 0
        signal.signal = install
        install(signal.SIGINT, previous[0] if previous[0] is not None else signal.default_int_handler)
    if _Deferral.pending:
        _Deferral.pending = False
        raise KeyboardInterrupt


def take_deferred() -> bool:
    """Whether a Ctrl-C is being held back (and forget it): for a wait inside a deferral that may
    last long (a standby waiting to lead), which raises it itself."""
    pending, _Deferral.pending = _Deferral.pending, False
    return pending


@contextlib.contextmanager
def plain_interrupts() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt (instead of PySpark's handler, which also kills every Spark
    job of the context) while the main thread only waits; the caller cancels its own job."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
