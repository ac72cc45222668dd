"""How an async I/O operator's requests run: an asyncio event loop thread, or daemon threads.

:class:`~epochal.runtime.operators.async_io.AsyncWaitOperator` issues each request as a call of
the user's ``fn``: an ``async def`` ``fn`` (or an object with an ``async def __call__``,
:func:`is_coroutine_function`) runs on one event loop in a daemon thread (:func:`serve_loop`);
a plain function on :class:`DaemonPool`'s threads. Both wait ``delay`` seconds first (a retry's
backoff).
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


def is_coroutine_function(fn: Any) -> bool:
    """Whether calling ``fn`` makes a coroutine: an ``async def`` function (or a partial of one),
    or an object whose ``__call__`` is ``async def``."""
    return inspect.iscoroutinefunction(fn) or (
        not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__))


async def call_async(fn: Callable[[Any], Any], record: Any, delay: float) -> Any:
    if delay:
        await asyncio.sleep(delay)
    return await fn(record)


def call_sync(fn: Callable[[Any], Any], record: Any, delay: float) -> Any:
    time.sleep(delay)
    return fn(record)


class DaemonPool:
    """Up to ``size`` daemon threads running submitted calls (a worker process can exit while a
    user's call hangs; ``concurrent.futures.ThreadPoolExecutor`` would join it at exit)."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self.jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.idle = 0  # threads waiting for a job that no submitted job has claimed yet
        self.lock = threading.Lock()

    def submit(self, call: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        with self.lock:
            if self.idle:
                self.idle -= 1
            elif len(self.threads) < self.size:
                thread = threading.Thread(target=self._work, name=f"{self.name}-{len(self.threads)}", daemon=True)
                self.threads.append(thread)
                thread.start()
        self.jobs.put((future, call))
        return future

    def _work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            future, call = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as error:
                    future.set_exception(error)
            with self.lock:
                self.idle += 1

    def shutdown(self) -> None:
        for _ in self.threads:
            self.jobs.put(None)


def serve_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The event loop thread: run until stopped, then cancel what is left and close."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))
        loop.close()
