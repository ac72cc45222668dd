"""The window aggregate of CEC (papers/002 §II-III): per-key windows checkpointed one by one,
in the operator's own output, and rebuilt after a crash from that output plus a replay.

:class:`WindowAggregate` is a pure machine: input tuples in (``process(channel, seq, record)``,
each with its channel's sequence number), output items out (:meth:`take`), in the order they go
to the operator's persisted output queue. Windows have a shape
(:class:`~epochal.runtime.windows.shapes.TimeWindows` or
:class:`~epochal.runtime.windows.shapes.CountWindows`, tumbling or sliding) and an
AggregateFunction (create/add/merge/result). Its fault-tolerance ``mode``:

- ``"cec"``: a G_open (:class:`~epochal.cec.tuples.WindowCheckpoint`) after a window's opening
  tuple (except for a window that closes with that very tuple, a count window of size 1: it
  would be of no use to a reconstruction), G_checks when :meth:`check_next` is called (the
  background path, under the :class:`~epochal.cec.policy.CheckpointPolicy`), and when a window
  closes its result with an R (:class:`~epochal.cec.tuples.WindowClosed`) if it has a footprint
  (a window that never had one needs no R: reconstruction has nothing of it to skip, so its
  result goes out as without fault tolerance). :meth:`restore` loads an eventual checkpoint; input
  replayed from T is then *caught up*: a tuple the crashed instance had read (covered by the EC's
  newest position) only goes into restored windows whose footprint does not cover it, and opens or
  closes nothing (every opening and closing it caused is in the output already); newer tuples wait
  until every channel caught up, so the rebuilt instance continues one consistent execution.
- ``"crb"`` (the paper's baseline): no per-window control tuples; :meth:`snapshot` writes one
  :class:`~epochal.cec.tuples.FullCheckpoint` of every open window at once, and an R after every
  result. :meth:`restore_full` loads the newest one and replays everything after it,
  suppressing the results of windows whose R is already in the output.
- ``"none"``: results only (what a job without fault tolerance needs).

:meth:`take` hands over an :class:`~epochal.cec.tuples.OutputBatch`: the results, the control
tuples, N and the position after the last input tuple (what one stream event of the output
queue records).

Time windows close when the watermark (per channel the newest event time minus
``out_of_orderness`` minus 1; the minimum over channels that have not ended) reaches their end;
a tuple for a window already closed is late and dropped (counted). Count windows close with their
``size``-th tuple; at the end of the input open time windows close, partial count windows do not.
Results are ``(key, start, value)`` for time windows and ``(key, value)`` for count windows.
"""

from __future__ import annotations

import copy
import heapq
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Literal

from epochal.cec.eventual import EventualCheckpoint
from epochal.cec.open_windows import NEVER, NOTHING, OpenWindow, fullest_first
from epochal.cec.policy import CecSettings, CheckpointPolicy
from epochal.cec.tuples import FullCheckpoint, OutputBatch, Position, WindowCheckpoint, WindowChecks, WindowClosed
from epochal.runtime.operators.aggregates import BUILTIN_FUNCTIONS
from epochal.runtime.windows.shapes import CountWindows, TimeWindows

Mode = Literal["cec", "crb", "none"]


class WindowAggregate:
    """Windows of ``shape`` per ``key(record)``, aggregated with ``function``, over ``channels``
    input channels (see the module docstring)."""

    def __init__(self, shape: TimeWindows | CountWindows, function: Any, key: Callable[[Any], Any],
                 channels: int, mode: Mode = "cec", settings: CecSettings | None = None,
                 timestamp: Callable[[Any], Any] | None = None, out_of_orderness: Any = 0) -> None:
        if isinstance(shape, TimeWindows) and timestamp is None:
            raise ValueError("time windows need timestamp(record)")
        self.shape = shape
        self.timed = isinstance(shape, TimeWindows)
        self.function = function
        self.copy_state = type(function) not in BUILTIN_FUNCTIONS.values()  # user accumulators may mutate
        self.key = key
        self.timestamp = timestamp
        self.out_of_orderness = out_of_orderness
        self.mode = mode
        self.settings = settings or CecSettings()
        self.policy = CheckpointPolicy(self.settings)
        self.windows: dict[Hashable, OpenWindow] = {}
        self.by_key: dict[Any, list[OpenWindow]] = {}  # count windows: a key's open windows, oldest first
        self.phase: dict[Any, int] = {}  # count windows: a key's tuples since its newest window opened
        self.by_start: dict[Any, list[Hashable]] = {}  # time windows: open windows by start
        self.starts: list[Any] = []  # heap of by_start's keys
        self.consumed = [-1] * channels
        self.received = [-1] * channels
        self.max_ts: list[Any] = [NEVER] * channels
        self.ended = [False] * channels
        self.watermark: Any = NEVER
        self.out: list[Any] = []  # results
        self.control: list[Any] = []  # control tuples
        #: after :meth:`restore`: per channel, the last tuple the crashed instance had read
        self.catch_up: list[int] | None = None
        self.held: deque[tuple[int, int, Any]] = deque()
        #: after :meth:`restore_full`: windows whose results are out already
        self.suppressed: set[Hashable] = set()
        self.stats = {"g_open": 0, "g_check": 0, "results": 0, "late": 0, "duplicates": 0, "caught_up": 0}
        #: the driver's current time, set before input when response times are wanted (Fig. 8:
        #: window open -> close); None: not measured. The machine reads no clock itself.
        self.now: float | None = None
        self.response_s = 0.0

    # ------------------------------------------------------------------ input
    def process(self, channel: int, seq: int, record: Any) -> None:
        """Tuple ``seq`` of input ``channel`` (sequence numbers increase per channel; one at or
        below what the channel already delivered is a re-sent duplicate and is dropped).
        ``record`` :data:`NOTHING`: the channel was read up to ``seq``, without a tuple."""
        if seq <= self.received[channel]:
            if record is not NOTHING:
                self.stats["duplicates"] += 1
            return
        self.received[channel] = seq
        if self.catch_up is None:
            self._take(channel, seq, record)
        elif seq <= self.catch_up[channel]:
            self._catch_up(channel, seq, record)
            if seq == self.catch_up[channel]:  # this channel is back where the crashed instance was
                self._maybe_caught_up()
        else:
            self.held.append((channel, seq, record))

    def end_channel(self, channel: int) -> None:
        """Input ``channel`` ended: it no longer holds the watermark back."""
        self.ended[channel] = True
        if self.catch_up is None:
            self._advance_watermark()

    def end_input(self) -> None:
        """Every input ended: open time windows close in order of start; partial count windows
        never do."""
        if self.timed:
            self._fire(lambda start: True)

    def take(self) -> OutputBatch:
        """The results and control tuples since the last call (each in output order), with N and
        the position now."""
        out, control = self.out, self.control
        self.out, self.control = [], []
        return OutputBatch(out, control, len(self.windows), self._position())

    def metrics(self) -> dict[str, Any]:
        """Its counters (``window_`` + :attr:`stats`), the windows open now, the summed
        response time of the closed windows (``window_response_s``, when :attr:`now` is set), and
        the extent now (``extent``: output tuples since the oldest open window's footprint, what
        an EC reconstruction would read back over; ``extent_input``: input tuples since then, what
        producers would replay): :meth:`CheckpointPolicy.extent`, O(1). The heartbeat thread
        calls it while the worker's thread changes the footprints: a read that met a change is
        left out of this report (the next one has it)."""
        try:
            extent: dict[str, int] = dict(zip(("extent", "extent_input"), self.policy.extent(), strict=True))
        except (RuntimeError, StopIteration):  # the footprints changed under the read
            extent = {}
        return {**{f"window_{k}": v for k, v in self.stats.items()}, "open_windows": len(self.windows),
                "window_response_s": self.response_s, **extent}

    # ------------------------------------------------------------------ the foreground path
    def _take(self, channel: int, seq: int, record: Any) -> None:
        self.consumed[channel] = seq
        if record is NOTHING:
            return
        self.policy.took()
        if self.timed:
            self._take_timed(channel, record)
        else:
            self._take_counted(channel, seq, record)

    def _take_timed(self, channel: int, record: Any) -> None:
        ts = self.timestamp(record)  # type: ignore[misc]
        if ts > self.max_ts[channel]:
            self.max_ts[channel] = ts
        key, function, shape, windows = self.key(record), self.function, self.shape, self.windows
        for start in shape.starts(ts):  # type: ignore[union-attr]
            if shape.closes(start, self.watermark):  # type: ignore[union-attr]
                self.stats["late"] += 1
                continue
            wid = (key, start)
            window = windows.get(wid)
            if window is None:
                window = windows[wid] = OpenWindow(key, start, function.add(record, function.create_accumulator()), 1,
                                                opened=self.now or 0.0)
                starting = self.by_start.get(start)
                if starting is None:
                    starting = self.by_start[start] = []
                    heapq.heappush(self.starts, start)
                starting.append(wid)
                self._g_open(wid, window)
            else:
                window.acc = function.add(record, window.acc)
                window.count += 1
        self._advance_watermark()

    def _take_counted(self, channel: int, seq: int, record: Any) -> None:
        key, function, windows = self.key(record), self.function, self.windows
        open_ = self.by_key.get(key)
        if open_ is None:
            open_ = self.by_key[key] = []
        phase = self.phase.get(key, 0)
        opened = None
        if phase == 0 or phase >= self.shape.step:
            wid = (key, channel, seq)
            opened = windows[wid] = OpenWindow(key, None, function.create_accumulator(), 0, opened=self.now or 0.0,
                                            wid=wid)
            open_.append(opened)
            phase = 0
        self.phase[key] = phase + 1
        size = self.shape.size
        full = 0
        for window in open_:
            window.acc = function.add(record, window.acc)
            window.count += 1
            if window.count >= size:
                full += 1
        if opened is not None and opened.count < size:  # (one that closes at once needs no G_open)
            self._g_open(opened.wid, opened)
        for _ in range(full):  # the oldest windows are the full ones
            self._close(open_.pop(0).wid)
        if not open_:
            del self.by_key[key], self.phase[key]  # none open: the key's next tuple opens one

    def _advance_watermark(self) -> None:
        live = [ts for ts, ended in zip(self.max_ts, self.ended, strict=True) if not ended]
        if not live:
            return
        watermark = min(live) - self.out_of_orderness - 1
        if watermark > self.watermark:
            self.watermark = watermark
            self._fire(lambda start: self.shape.closes(start, watermark))  # type: ignore[union-attr]

    def _fire(self, due: Callable[[Any], bool]) -> None:
        starts = self.starts
        while starts and due(starts[0]):
            for wid in self.by_start.pop(heapq.heappop(starts)):
                self._close(wid)

    def _close(self, wid: Hashable) -> None:
        window = self.windows.pop(wid)
        if self.now is not None:
            self.response_s += self.now - window.opened
        value = self.function.get_result(window.acc)
        record = (window.key, window.start, value) if self.timed else (window.key, value)
        self.policy.closed(wid)
        if wid in self.suppressed:  # CRB replay: its R is in the output already
            self.suppressed.discard(wid)
            return
        self.stats["results"] += 1
        self.out.append(record)
        if window.footprint is not None or self.mode == "crb":  # (none without fault tolerance)
            self.control.append(WindowClosed(wid))

    def _position(self) -> Position:
        return Position(tuple(self.consumed), self.watermark)

    def _g_open(self, wid: Hashable, window: OpenWindow) -> None:
        if self.mode != "cec" or not self.settings.g_open:
            return
        position = self._position()
        window.footprint = position.seqs
        acc = copy.deepcopy(window.acc) if self.copy_state else window.acc
        self.control.append(WindowCheckpoint("open", wid, (acc, window.count), position))
        self.stats["g_open"] += 1
        self.policy.opened(wid)

    # ------------------------------------------------------------------ the background path
    def check_next(self, now: float, limit: int = 64) -> int:
        """Emit the G_checks the policy wants now, at most ``limit``, as one
        :class:`~epochal.cec.tuples.WindowChecks`; returns how many (the driver calls this
        until 0, with a fresh ``now`` each time, so the CI slice bounds the work)."""
        if self.mode != "cec" or self.catch_up is not None:
            return 0
        wids = self.policy.next_checks(now, limit)
        if not wids:
            return 0
        position = self._position()
        seqs, windows = position.seqs, self.windows
        checked = [windows[wid] for wid in wids]
        for window in checked:
            window.footprint = seqs
        if self.copy_state:
            deepcopy = copy.deepcopy
            states = [(deepcopy(window.acc), window.count) for window in checked]
        else:
            states = [(window.acc, window.count) for window in checked]
        self.control.append(WindowChecks(wids, states, position))
        self.stats["g_check"] += len(wids)
        self.policy.checked_all(wids)
        return len(wids)

    def replay_floor(self) -> list[int]:
        """T of the eventual checkpoint as it stands: per channel the oldest position an open
        window's footprint holds (everything read, when no window is open). Input at or before
        it is never replayed again, once the footprints are durable.

        O(1): the policy keeps the open windows oldest footprint first, and positions only grow
        on every channel, so the first window there holds the minimum on every channel (the
        driver asks every second; a scan of ~100,000 windows took 90-165 ms)."""
        windows = self.windows
        for wid in self.policy.footprints:
            window = windows.get(wid)
            if window is not None and window.footprint is not None:
                return list(window.footprint)
        return list(self.consumed)

    def snapshot(self) -> None:
        """CRB: one checkpoint of every open window at once, into the output."""
        windows = {wid: (copy.deepcopy(w.acc) if self.copy_state else w.acc, w.count)
                   for wid, w in self.windows.items()}
        self.control.append(FullCheckpoint(windows, dict(self.phase), len(self.windows), self._position(),
                                       frozenset(self.suppressed)))

    # ------------------------------------------------------------------ recovery
    def restore(self, ec: EventualCheckpoint) -> None:
        """Load eventual checkpoint ``ec`` into this fresh instance; input is then replayed from
        ``ec.replay_after`` on every channel (see the module docstring)."""
        if ec.newest is None:
            return
        oldest_first = list(reversed(ec.footprints.values()))  # reconstruct met them newest first
        # (one pass over ~100,000 windows in their stored form: every attribute it needs is a local)
        windows, timed, copy_state, opened = self.windows, self.timed, self.copy_state, self.now or 0.0
        by_start, by_key, starts = self.by_start, self.by_key, self.starts
        everything = None if self.settings.dedup else (ec.replay_after or ec.newest).seqs
        deepcopy, make = copy.deepcopy, OpenWindow
        for _, wid, (acc, count), seqs, _ in oldest_first:
            if copy_state:
                acc = deepcopy(acc)  # the checkpoint stays as it was
            # covered: what its footprint holds (dedup off: every replayed tuple counts again)
            covered = seqs if everything is None else everything
            key = wid[0]
            if timed:
                start = wid[1]
                windows[wid] = make(key, start, acc, count, covered, opened)
                if start not in by_start:
                    by_start[start] = []
                    heapq.heappush(starts, start)
                by_start[start].append(wid)
            else:
                window = windows[wid] = make(key, None, acc, count, covered, opened, wid)
                open_ = by_key.get(key)
                if open_ is None:
                    by_key[key] = [window]
                else:
                    open_.append(window)  # ordered once caught up
        self.policy.restored([f[1] for f in oldest_first], ec.extent)
        start = ec.replay_after if ec.replay_after is not None else ec.newest
        self.consumed, self.received = list(start.seqs), list(start.seqs)
        self.watermark = ec.newest.watermark
        self.catch_up = list(ec.newest.seqs)
        self._maybe_caught_up()

    def restore_full(self, checkpoint: FullCheckpoint | None, results_after: set[Hashable]) -> None:
        """CRB: load ``checkpoint`` (None: start empty, replaying from the start); the windows of
        ``results_after`` closed after it, and their results are not emitted again."""
        self.suppressed = set(results_after)
        if checkpoint is None:
            return
        self.suppressed |= checkpoint.suppressed
        for wid, (acc, count) in checkpoint.windows.items():
            acc = copy.deepcopy(acc) if self.copy_state else acc
            window = self.windows[wid] = OpenWindow(wid[0], wid[1] if self.timed else None, acc,  # type: ignore[index]
                                                 count, opened=self.now or 0.0, wid=wid)
            if self.timed:
                start = wid[1]  # type: ignore[index]
                if start not in self.by_start:
                    self.by_start[start] = []
                    heapq.heappush(self.starts, start)
                self.by_start[start].append(wid)
            else:
                self.by_key.setdefault(wid[0], []).append(window)  # type: ignore[index]
        if not self.timed:
            for open_ in self.by_key.values():
                open_.sort(key=fullest_first)  # the oldest holds the most
        self.phase = dict(checkpoint.phase)
        self.consumed, self.received = list(checkpoint.position.seqs), list(checkpoint.position.seqs)
        self.watermark = checkpoint.position.watermark

    def _catch_up(self, channel: int, seq: int, record: Any) -> None:
        self.consumed[channel] = seq
        if record is NOTHING:
            return
        self.policy.took()
        self.stats["caught_up"] += 1
        key, function = self.key(record), self.function
        if self.timed:
            ts = self.timestamp(record)  # type: ignore[misc]
            if ts > self.max_ts[channel]:
                self.max_ts[channel] = ts
            windows = self.windows
            open_: list[OpenWindow | None] = [windows.get((key, start)) for start in self.shape.starts(ts)]  # type: ignore[union-attr]
        else:
            open_ = self.by_key.get(key, [])  # type: ignore[assignment]
        for window in open_:
            if window is not None and window.footprint is not None and seq > window.footprint[channel]:
                window.acc = function.add(record, window.acc)
                window.count += 1

    def _maybe_caught_up(self) -> None:
        catch_up = self.catch_up
        if catch_up is None or any(c < bound for c, bound in zip(self.consumed, catch_up, strict=True)):
            return
        self.catch_up = None
        if not self.timed:  # a key's windows, oldest (fullest) first; its phase: the newest one's count
            for key, open_ in self.by_key.items():
                open_.sort(key=fullest_first)
                self.phase[key] = open_[-1].count
        held, self.held = self.held, deque()
        for channel, seq, record in held:
            self._take(channel, seq, record)
        self._advance_watermark()
