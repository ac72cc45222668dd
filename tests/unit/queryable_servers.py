"""A query server polled as a worker's processing thread polls it, for the queryable-state unit tests."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from epochal.dataflow.queries.server import KeyedSource, QueryServer
from epochal.runtime.host.mailbox import Mailbox
from epochal.state.descriptors import ValueStateDescriptor
from epochal.state.heap.backend import HeapKeyedStateBackend

MAXP = 128


@contextlib.contextmanager
def polled_heap_server(restored: int | None) -> Iterator[tuple[HeapKeyedStateBackend, QueryServer]]:
    """A QueryServer of one heap backend (state "v", query name "values", every key group),
    restored from checkpoint ``restored`` (its committed view: the state as restored, empty),
    polled by a thread standing in for the processing thread; yields (backend, server)."""
    backend = HeapKeyedStateBackend(MAXP, range(MAXP))
    backend.get_state(ValueStateDescriptor("v", queryable="values"))
    server = QueryServer(b"j" * 32, 0, "127.0.0.1", MAXP, Mailbox())
    server.attach([KeyedSource("u", 0, 1, backend)], restored=restored)
    server.serving()
    stop = threading.Event()

    def processing_thread():
        while not stop.is_set():
            server.wait(0.01)
            server.poll()

    thread = threading.Thread(target=processing_thread, daemon=True)
    thread.start()
    try:
        yield backend, server
    finally:
        stop.set()
        thread.join()
        server.close()
