"""The live progress line of a job run from a terminal (``env.execute`` and the other blocking calls).

While the call waits, a thread redraws one line on standard error every :data:`INTERVAL_S`
(``rich`` renders it; the line is rewritten in place with a carriage return)::

    ⠼ wordcount running 0:03 · 41,250 records · 15,012/s · sources 69% · 12 checkpoints · 1 restart

records read by the sources (each once, as ``JobResult.records_processed``) and their rate over the
last seconds, how far the sources are where they know their size (``Source.size_hint``: a
collection, a generator or sequence with a count; or their splits' progress, ``Source.progress_unit``:
a text file's bytes; :mod:`epochal.control.source_progress`), completed checkpoints and restarts, after the
job's status and the time since it started. The line is removed when the call returns, so what stays on the terminal is
the job's own output.

It is drawn only where a person watches: standard error is a terminal, and
``EngineConfig.progress`` (``Environment(progress=...)``, ``execute(progress=...)``,
``EPOCHAL_PROGRESS``) is not False. By default (None) a job with a ``print()`` sink is left
without it, since the workers' lines would land in the middle of it; ``progress=True`` draws it
anyway. Piped or redirected output never gets it.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from typing import IO, Any

from epochal.control.client import JobClient

#: Seconds between two redraws.
INTERVAL_S = 0.5
#: Seconds after the start before the first (a job that ends sooner shows nothing).
FIRST_S = 1.0
#: Seconds of readings the rate is measured over.
RATE_WINDOW_S = 3.0
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def wanted(setting: bool | None, prints: bool, stream: IO[str] | None = None) -> bool:
    """Whether to draw the line: ``stream`` (standard error) is a terminal and ``setting``
    (``EngineConfig.progress``) allows it: True always, None unless the job ``prints`` to the console."""
    stream = sys.stderr if stream is None else stream
    if setting is False or (setting is None and prints):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class ProgressLine:
    """The line of one job; :meth:`start` it once the job runs, :meth:`stop` it when the call returns."""

    def __init__(self, client: JobClient, job_name: str, stream: IO[str] | None = None) -> None:
        from rich.console import Console

        self.client = client
        self.job_name = job_name
        self.stream = sys.stderr if stream is None else stream
        self.console = Console(file=self.stream, highlight=False, force_terminal=True, soft_wrap=True)
        self.readings: collections.deque[tuple[float, int]] = collections.deque()
        self.started = time.monotonic()
        self.drawn = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="epochal-progress", daemon=True)

    def start(self) -> ProgressLine:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop redrawing and remove the line."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2 * INTERVAL_S)
        if self.drawn:
            self._write("\r\x1b[2K")

    def _run(self) -> None:
        if self._stop.wait(FIRST_S):
            return
        frame = 0
        while not self._stop.is_set() and not self.client.done:
            try:
                text = self.render(frame)
            except Exception:  # noqa: BLE001 - the line must never disturb the job
                text = None
            if text is not None and not self._stop.is_set():
                self._write(f"\r\x1b[2K{text}")
                self.drawn = True
            frame += 1
            self._stop.wait(INTERVAL_S)

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self._stop.set()  # the terminal went away

    def numbers(self) -> dict[str, Any]:
        """What the line shows now: status, records read and per second, sources' share read
        (None: unknown), checkpoints, restarts, seconds since the start."""
        client = self.client
        now = time.monotonic()
        records = client.records_read()
        readings = self.readings
        readings.append((now, records))
        while len(readings) > 2 and now - readings[0][0] > RATE_WINDOW_S:
            readings.popleft()
        first_time, first_records = readings[0]
        rate = (records - first_records) / (now - first_time) if now - first_time >= 0.4 else None
        return {"status": client.status.value, "records": records, "rate": rate, "share": client.source_share(),
                "checkpoints": sum(1 for c in client.checkpoint_stats() if c["status"] == "completed"),
                "restarts": len(client.restarts()), "elapsed": now - self.started}

    def render(self, frame: int = 0) -> str:
        """The line, as terminal text (colours and all), cut to the terminal's width."""
        from rich.text import Text

        n = self.numbers()
        minutes, seconds = divmod(int(n["elapsed"]), 60)
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(f"{SPINNER[frame % len(SPINNER)]} ", style="cyan")
        line.append(self.job_name, style="bold")
        line.append(f" {n['status']}", style="green" if n["status"] == "running" else "yellow")
        line.append(f" {minutes}:{seconds:02d}", style="dim")
        line.append(f" · {n['records']:,} records")
        if n["rate"] is not None:
            line.append(f" · {n['rate']:,.0f}/s")
        if n["share"] is not None:
            line.append(f" · sources {n['share']:.0%}")
        line.append(f" · {n['checkpoints']} checkpoint{'s' * (n['checkpoints'] != 1)}")
        line.append(f" · {n['restarts']} restart{'s' * (n['restarts'] != 1)}",
                    style="red" if n["restarts"] else "")
        line.truncate(max(self.console.width - 1, 20), overflow="ellipsis")
        with self.console.capture() as captured:
            self.console.print(line, end="")
        return captured.get()
