"""Test sinks: :class:`TestSink` collects a job's records into a list the test reads afterwards.

Owns the in-process record store behind it. The sink object is pickled into the job like every
sink, so its writers find the list through a process-wide registry keyed by the sink's id: this
works wherever the job runs in the test's own process (:func:`epochal.testing.run_locally`, the
:class:`~epochal.testing.OperatorHarness`). On Spark the writers run in executor processes,
which cannot reach the test's list: there a writer fails at once with a clear error; use
``collect()`` on Spark.
"""

from __future__ import annotations

import os
import threading
import uuid
import weakref
from typing import Any

from epochal.connectors.base import AT_LEAST_ONCE, Sink, SinkContext, SinkWriter


class _Store:
    """What one :class:`TestSink` received: all records in arrival order, and per subtask."""

    def __init__(self, into: list[Any]) -> None:
        self.records = into
        self.by_subtask: dict[int, list[Any]] = {}
        self.lock = threading.Lock()


_STORES: weakref.WeakValueDictionary[str, _Store] = weakref.WeakValueDictionary()


class _TestSinkWriter(SinkWriter):
    def __init__(self, store: _Store, subtask: int) -> None:
        self.store = store
        self.subtask = subtask
        self.mine = store.by_subtask.setdefault(subtask, [])

    def write_batch(self, records: list[Any]) -> None:
        with self.store.lock:
            self.store.records.extend(records)
            self.mine.extend(records)


class TestSink(Sink):
    """Collects every record it is given, in order, into ``records`` (or into the list ``into``).

    ``guarantee`` is ``at_least_once``: a record is appended when its batch reaches the writer,
    so a failed run shows what was written before the failure, and a restarted job would append
    the records after its restored checkpoint again. ``by_subtask`` holds each subtask's records.
    """

    __test__ = False  # not a pytest test class
    guarantee = AT_LEAST_ONCE

    def __init__(self, into: list[Any] | None = None) -> None:
        self.sink_id = uuid.uuid4().hex
        self.pid = os.getpid()
        self._store: _Store | None = _Store(into if into is not None else [])
        _STORES[self.sink_id] = self._store

    def __getstate__(self) -> dict[str, Any]:
        return {"sink_id": self.sink_id, "pid": self.pid, "_store": None}

    def _lookup(self) -> _Store | None:
        if self._store is None:
            self._store = _STORES.get(self.sink_id)
        return self._store

    @property
    def records(self) -> list[Any]:
        """Every record written so far, in the order the writers received them."""
        store = self._lookup()
        return store.records if store is not None else []

    @property
    def by_subtask(self) -> dict[int, list[Any]]:
        """Subtask index -> the records that subtask's writer received."""
        store = self._lookup()
        return store.by_subtask if store is not None else {}

    def clear(self) -> None:
        """Forget everything collected (e.g. between two runs of the same job)."""
        store = self._lookup()
        if store is not None:
            store.records.clear()
            store.by_subtask.clear()

    def create_writer(self, context: SinkContext) -> SinkWriter:
        store = self._lookup()
        if store is None or os.getpid() != self.pid:
            raise RuntimeError(
                f"TestSink '{context.operator_name}' collects into a list of the process that created it, and this "
                "writer runs in another process: run the job with epochal.testing.run_locally(env), or use "
                "collect() to get records back from Spark")
        return _TestSinkWriter(store, context.subtask_index)
