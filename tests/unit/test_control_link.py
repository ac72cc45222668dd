"""The worker's control link ends its reader thread when it is closed, even while the JobMaster
keeps its end open: Spark reuses Python workers for later tasks, and a reader left blocked in
the socket would stay behind in the worker process, one per task."""

from __future__ import annotations

import socket
import threading
import time

from epochal.runtime.host.links import ControlLink


def readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "epochal-control" and t.is_alive()]


def test_closing_the_link_ends_its_reader_while_the_driver_keeps_the_connection_open():
    before = len(readers())
    events: list[object] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        link = ControlLink("127.0.0.1", listener.getsockname()[1], b"t" * 32, 0, events.append)
        accepted, _ = listener.accept()  # the JobMaster's end: open, silent
        try:
            assert len(readers()) == before + 1
            link.close()
            deadline = time.monotonic() + 5
            while len(readers()) > before and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(readers()) == before, "the reader thread is still blocked in the closed link"
        finally:
            accepted.close()
