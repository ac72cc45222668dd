"""The output side of a CEC stage instance: its persisted queue, and what leaves it for whom.

:class:`StageOutput` appends each output batch as one frame to the instance's queue (an
:class:`~epochal.cec.output_log.OutputLog` written by a
:class:`~epochal.cec.log_writer.LogWriter`, or a :class:`MemoryQueue` when nothing is
persisted) and, once a frame is durable, sends each consumer its part, as
:class:`~epochal.cec.replay.OutputChannels` decides: at once, or later from the queue
(:meth:`StageOutput.replay_step`) for a consumer that is behind or asked for a replay. It also
deletes the segments no consumer needs any more and refuses a replay of output it deleted
(:class:`QueueLost`).

A frame's payload pickles ``(meta, parts, items)``: ``meta`` is how far the instance had read
(a window stage's: :func:`~epochal.cec.tuples.window_frame_meta`), ``parts`` per consumer (or
for the own sink) the pickled ``(indices, records)`` it gets (record ``k`` of a part has
sequence number ``item_seq(frame, indices[k])`` in its channel), and ``items`` a window's
control tuples as :func:`~epochal.cec.tuples.encode_items` stores them (what EC reconstruction
reads; the results are the parts' records).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import pickle
import shutil
import time
from collections.abc import Callable
from typing import Any

from epochal.cec.output_log import Frame, OutputLog
from epochal.cec.plan import Stage, targets_of
from epochal.cec.protocol import EndOfStream, StreamEvent
from epochal.cec.replay import OutputChannels
from epochal.cec.tuples import (
    ITEM_LAST,
    FullCheckpoint,
    Position,
    WindowCheckpoint,
    WindowChecks,
    WindowClosed,
    encode_items,
    split_seq,
)
from epochal.serialization import dumps


class QueueLost(RuntimeError):
    """A consumer asked for output this producer deleted: the consumer's own queue is gone."""


class Durable:
    """A frame of the output queue is on disk (from the writer thread, via the mailbox)."""

    __slots__ = ("frame",)

    def __init__(self, frame: Frame) -> None:
        self.frame = frame


class MemoryQueue:
    """The output queue when nothing is persisted (``persist=False``, ``native``): frames are
    "durable" at once and kept in memory until no consumer needs them (a benchmark baseline:
    a lost worker cannot be rebuilt). It is its own writer."""

    def __init__(self, post: Callable[[Durable], None]) -> None:
        self.post = post
        self.frames: list[Frame] = []
        self.payloads: dict[int, bytes] = {}
        self.last_seq = -1

    def submit(self, seq: int, min_ts: float, max_ts: float, payload: bytes) -> None:
        frame = Frame(seq, min_ts, max_ts, -1, 0, len(payload))
        self.frames.append(frame)
        self.payloads[seq] = payload
        self.last_seq = seq
        self.post(Durable(frame))

    def full(self) -> bool:
        """Never: nothing waits for a disk."""
        return False

    def find(self, *, seq: int) -> int:
        return bisect.bisect_left(self.frames, seq, key=lambda f: f.seq)

    def read(self, frame: Frame) -> bytes:
        return self.payloads[frame.seq]

    def trim(self, before_seq: int) -> int:
        cut = self.find(seq=before_seq)
        for frame in self.frames[:cut]:
            del self.payloads[frame.seq]
        del self.frames[:cut]
        return cut

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class StageOutput:
    """The queue and channels of one stage instance (worker ``worker``); ``send(peer, event)``
    sends on the peer connection and returns False when the peer is gone."""

    def __init__(self, worker: int, stage: Stage, log: OutputLog | MemoryQueue, writer: Any,
                 channels: OutputChannels, send: Callable[[int, Any], bool], counters: dict[str, int]) -> None:
        self.worker = worker
        self.stage = stage
        self.log = log
        self.writer = writer
        self.channels = channels
        self.send = send
        self.counters = counters
        self.parts: dict[int, list[bytes]] = {}  # frames submitted, not yet durable
        self.unfed: dict[int, bytes] = {}  # durable frames' parts the own sink has not had yet
        self.next_seq = log.last_seq + 1
        self.last_durable = log.last_seq
        self.rebalanced = 0
        self.last_ts = log.frames[-1].max_ts if log.frames else 0.0
        #: the newest frame deleted from the queue (-1: none): older output is gone
        self.trimmed_through = -1

    def emit(self, records: list[Any], meta: Any, items: list[Any] | None, seq: int | None = None) -> int:
        """Append one frame: ``records`` for the consumers (or the own sink); returns its seq."""
        consumers = self.channels.consumers
        if consumers:
            targets = targets_of(self.stage.partitioner, records, len(consumers), self.rebalanced)
            self.rebalanced += len(records)
            split: list[tuple[list[int], list[Any]]] = [([], []) for _ in consumers]
            for k, (record, target) in enumerate(zip(records, targets, strict=True)):
                split[target][0].append(k)
                split[target][1].append(record)
            parts = [dumps(part) for part in split]
        else:
            parts = [dumps((list(range(len(records))), records))]
        seq = self.next_seq if seq is None else seq
        self.next_seq = seq + 1
        payload = dumps((meta, parts, encode_items(items) if items is not None else None))
        self.parts[seq] = parts
        self.counters["records_out"] += len(records)
        self.counters["frames"] += 1
        self.counters["bytes_logged"] += len(payload)
        # the frame's time: when it was produced (never going back), so find(ts=...) finds the
        # output of a moment, e.g. to replay what came after it
        self.last_ts = max(self.last_ts, time.time())
        self.writer.submit(seq, self.last_ts, self.last_ts, payload)
        return seq

    def durable(self, frame: Frame) -> None:
        """``frame`` is on disk: send it to the consumers that are current (or keep it for the
        own sink, which :meth:`feed` gives it to)."""
        self.last_durable = frame.seq
        parts = self.parts.pop(frame.seq, None)
        consumers = self.channels.consumers
        if not consumers and parts is not None:
            self.unfed[frame.seq] = parts[0]
        for consumer in self.channels.durable(frame.seq):
            index = consumers.index(consumer)
            blob = parts[index] if parts is not None else self.stored_part(frame, index)
            self.send(consumer, StreamEvent(self.worker, frame.seq, blob))

    def request(self, consumer: int, after: int) -> None:
        """``consumer`` wants everything after ``after``; output it needs must not be gone."""
        frame, index = split_seq(after)
        if self.trimmed_through >= (frame + 1 if index == ITEM_LAST else frame):
            raise QueueLost(
                f"worker {consumer} asked worker {self.worker} ({self.stage.name!r}) for its output after "
                f"sequence number {after}, but that output was deleted once every consumer had confirmed it: "
                "the worker asking lost its own persisted output queue (was the executor's disk or the log_dir "
                "lost?). A CEC job cannot rebuild that worker; run the job again from its sources")
        self.channels.request(consumer, after)

    def frames_after(self, seq: int) -> list[Frame]:
        """Durable frames with a sequence number above ``seq``."""
        log = self.log
        out = []
        for frame in log.frames[log.find(seq=seq + 1):]:
            if frame.seq > self.last_durable:
                break
            out.append(frame)
        return out

    def stored_part(self, frame: Frame, index: int) -> bytes:
        """Part ``index`` of ``frame`` as the queue stores it: the pickled ``(indices, records)``."""
        blob: bytes = pickle.loads(self.log.read(frame))[1][index]
        return blob

    def feed(self, sink: Any, after: int) -> int:
        """Write every durable frame after ``after`` to the instance's own ``sink`` (a
        :class:`~epochal.cec.sink.SinkCommitter`); returns the newest frame written."""
        unfed = self.unfed
        for frame in self.frames_after(after):
            blob = unfed.pop(frame.seq, None)
            sink.write(pickle.loads(blob if blob is not None else self.stored_part(frame, 0))[1])
            after = frame.seq
        if isinstance(self.log, MemoryQueue):
            self.log.trim(after + 1)  # nothing else needs them
        return after

    def replay_step(self, done: bool, frames: int = 8) -> None:
        """Send consumers that are behind their next few frames from the queue; ``done``: the
        instance's output is complete, so one that caught up is told the stream ended."""
        channels = self.channels
        for consumer in channels.behind():
            index = channels.consumers.index(consumer)
            sent, after = channels.replay_from(consumer)
            after_frame, after_index = split_seq(after) if after >= 0 else (-1, -1)
            for frame in self.frames_after(sent)[:frames]:
                blob = self.stored_part(frame, index)  # sent as stored
                if frame.seq == after_frame:  # the frame it had part of: only what came later
                    indices, records = pickle.loads(blob)
                    keep = [i for i, k in enumerate(indices) if k > after_index]
                    blob = dumps(([indices[i] for i in keep], [records[i] for i in keep]))
                self.send(consumer, StreamEvent(self.worker, frame.seq, blob))
                channels.replayed(consumer, frame.seq)
                # a replay someone asked for, or frames held back while it was out of credit
                self.counters["replayed_frames" if channels.of[consumer].replaying else "queued_frames"] += 1
                if consumer not in channels.behind():
                    break
            if channels.of[consumer].sent >= self.last_durable:
                channels.caught_up(consumer)
                if done:  # a replaced consumer: it has everything again
                    self.send(consumer, EndOfStream(self.worker, self.last_durable))

    def room(self) -> bool:
        """Back-pressure: produce more only while the slowest consumer is close behind."""
        if not self.channels.consumers:
            return True
        log = self.log
        return len(log.frames) - log.find(seq=self.channels.slowest() + 1) < 4 * self.channels.window

    def trim_own(self, extent: ExtentFrames | None, committed: int | None, has_sink: bool) -> None:
        """Delete own segments nothing needs: not the frames a rebuild reads (the window stage's
        ``extent``), nor those after its own sink's newest commit (``committed``: fed to the sink
        again after a crash), nor what a consumer lacks (:meth:`trim`)."""
        needed = extent.needed_from(self.last_durable) if extent is not None else None
        if has_sink:
            first = committed + 1 if committed is not None else 0
            needed = first if needed is None else min(needed, first)
        self.trim(needed)

    def trim(self, needed_from: int | None = None) -> None:
        """Delete whole segments below what every consumer confirmed and below frame
        ``needed_from`` (what the instance needs itself: a window's extent, its own sink)."""
        bounds = [self.channels.trim_before()] if self.channels.consumers else []
        if needed_from is not None:
            bounds.append(needed_from)
        if not bounds:
            return
        log = self.log
        before = min(bounds)
        kept = log.find(seq=before)
        last_removable = log.frames[kept - 1].seq if kept else -1
        if log.trim(before) and log.frames:
            self.trimmed_through = max(self.trimmed_through, min(last_removable, log.frames[0].seq - 1))

    def caught_up_all(self) -> bool:
        """Every consumer was sent every durable frame."""
        return all(not self.channels.of[c].waiting and self.channels.of[c].sent >= self.last_durable
                   for c in self.channels.consumers)

    def end(self) -> None:
        for consumer in self.channels.consumers:
            self.send(consumer, EndOfStream(self.worker, self.last_durable))


class ExtentFrames:
    """Which frames of a window stage's queue its own rebuild still needs (papers/002 §II.B):
    under CEC the frames holding each open window's newest durable footprint (the oldest bounds
    the extent), under CRB the newest durable full checkpoint's. Footprints count only once
    their frame is durable, so nothing a crash would need is ever deleted."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.pending: dict[int, list[tuple[str, Any]]] = {}
        self.footprints: dict[Any, int] = {}
        self.full_frame: int | None = None

    def restored(self, windows: list[Any], frame: int) -> None:
        """After a rebuild: ``windows`` have footprints somewhere from ``frame`` on."""
        self.footprints.update(dict.fromkeys(windows, frame))

    def emitted(self, frame: int, items: list[Any]) -> None:
        entries: list[tuple[str, Any]] = []
        for item in items:
            if isinstance(item, WindowCheckpoint):
                entries.append(("footprint", item.window))
            elif isinstance(item, WindowChecks):
                entries.append(("footprints", item.windows))
            elif isinstance(item, WindowClosed):
                entries.append(("closed", item.window))
            elif isinstance(item, FullCheckpoint):
                entries.append(("full", item.position))
        if entries:
            self.pending[frame] = entries

    def durable(self, frame: int) -> Position | None:
        """Frame ``frame`` is on disk; returns the position of a full checkpoint it holds."""
        full = None
        for kind, value in self.pending.pop(frame, ()):
            if kind == "footprint":  # a G_open (one per window opened: no list, no fromkeys)
                self.footprints[value] = frame
            elif kind == "footprints":  # a run of G_checks
                self.footprints.update(dict.fromkeys(value, frame))
            elif kind == "closed":
                self.footprints.pop(value, None)
            else:
                self.full_frame, full = frame, value
        return full

    def needed_from(self, last_durable: int) -> int:
        """The oldest frame a rebuild would read now."""
        if self.mode == "crb":
            return self.full_frame if self.full_frame is not None else -1
        return min(self.footprints.values()) if self.footprints else last_durable


def remove_queue(log_root: str, job_id: str, worker: int) -> None:
    """Delete worker ``worker``'s queues once its job finished; the last one out removes the
    job's directory."""
    job = os.path.join(log_root, job_id)
    shutil.rmtree(os.path.join(job, f"w{worker}"), ignore_errors=True)
    with contextlib.suppress(OSError):
        os.rmdir(job)
