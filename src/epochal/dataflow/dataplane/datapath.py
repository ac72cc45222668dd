"""A worker's data path: moving batches from input channels and sources through the operators.

:class:`DataPath` owns the ready queue of input channels, round-robin processing with a batch
budget, alignment blocking (a blocked channel's deliveries go to its alignment buffer and its
credit is returned; a released channel replays its buffer first), source polling, and the count
of records processed. It is the only per-record code of a worker and so stays free of protocol
decisions: protocol moments it meets (a subtask finished, a loop input ended, a probe or
feedback reached a loop subtask, alignment buffers overflowed) become events for the worker
machine, handed to ``feed``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from time import perf_counter
from typing import Any

from epochal.dataflow.checkpointing.alignment import AlignmentSpill
from epochal.dataflow.checkpointing.events import (
    AlignmentOverflow,
    Feedback,
    InputEnded,
    ProbeArrived,
    SubtaskFinished,
    SubtaskKey,
)
from epochal.dataflow.dataplane.channels import InputChannel, OutputChannel
from epochal.dataflow.dataplane.tasks import Subtask
from epochal.dataflow.dataplane.wiring import WiredWorker
from epochal.runtime.operators.inband import NO_WATERMARK, EndOfPartition, LoopProbe


def key_of(subtask: Subtask) -> SubtaskKey:
    """The worker machine's name of ``subtask``."""
    return (subtask.vertex_id, subtask.index)


def subtask_metrics(subtask: Subtask) -> dict[str, Any]:
    """What the REST API's vertex view shows of ``subtask`` (sent with heartbeats): its event time
    (the input watermark; a source's its reader's; None before any), whether output waits for
    credit now (backpressure, sampled at each heartbeat), the records a source read, its busy
    seconds so far (None where batches are not timed: ``batch_time=None``), each operator's
    records in and out of its main output, by uid, and a source's progress where it knows
    (``source_progress``: done and total in its ``progress_unit``, :meth:`SourceReader.progress`)."""
    watermark = subtask.watermark if subtask.source_watermark == NO_WATERMARK else subtask.source_watermark
    sizer = subtask.sizer
    out = {"watermark": None if watermark == NO_WATERMARK else watermark, "backpressured": subtask.backlogged,
           "records_read": subtask.records_read, "busy_s": None if sizer is None else sizer.busy_s,
           "operators": {runner.uid: (runner.records_in, runner.records_out) for runner in subtask.runners}}
    try:
        progress = subtask.reader.progress() if subtask.reader is not None else None
    except Exception:  # noqa: BLE001 - a source's own code: the heartbeat must go on without it
        progress = None
    if progress is not None:
        out["source_progress"] = progress
    return out


def alignment_stats(subtask: Subtask) -> dict[str, int]:
    """Bytes ``subtask``'s inputs buffered and spilled during the alignment that just ended."""
    buffered = spilled = 0
    for channel in subtask.inputs:
        if channel.buffered is not None:
            b, s = channel.buffered.reset_stats()
            buffered, spilled = buffered + b, spilled + s
    return {"buffered_bytes": buffered, "spilled_bytes": spilled}


class DataPath:
    """Runs one worker's subtasks over their channels; ``feed(event)`` reaches the worker machine."""

    def __init__(self, feed: Callable[[Any], None]) -> None:
        self.feed = feed
        self.subtasks: list[Subtask] = []
        self.sources: list[Subtask] = []
        self.in_channels: dict[int, InputChannel] = {}
        self.out_channels: dict[int, OutputChannel] = {}
        self.spill: AlignmentSpill | None = None
        self.ready: deque[InputChannel] = deque()
        self.records_processed = 0
        #: subtasks with operators that act on the wall clock (timers, async I/O)
        self.timed: list[Subtask] = []
        #: the subtask the data path last called into (the one that raised, when a call raises)
        self.current: Subtask | None = None
        #: called between two batches, when no operator is changing its state (the worker's
        #: query server answers queries there); None: nothing to do
        self.safe_point: Callable[[], None] | None = None

    def attach(self, wired: WiredWorker) -> None:
        """Take over the wired subtasks and channels (once, before anything is processed)."""
        self.subtasks, self.sources, self.spill = wired.subtasks, wired.sources, wired.spill
        self.in_channels, self.out_channels = wired.in_channels, wired.out_channels
        self.timed = [subtask for subtask in self.subtasks if subtask.timed]

    def run_processing_time(self, now: float) -> None:
        """Let every subtask's wall-clock operators do what is due at ``now`` (``time.time()``)."""
        for subtask in self.timed:
            self.current = subtask
            subtask.on_processing_time(now)

    def next_processing_time(self) -> float | None:
        """The earliest wall-clock time some subtask has work at, or None."""
        times = [t for t in (s.next_processing_time() for s in self.timed) if t is not None]
        return min(times) if times else None

    def deliver_local(self, channel_id: int, is_batch: bool, item: Any) -> None:
        """A batch or in-band event for input ``channel_id`` (from a local producer or a peer)."""
        channel = self.in_channels[channel_id]
        channel.queue.append((is_batch, item))
        if not channel.scheduled:
            channel.scheduled = True
            self.ready.append(channel)

    def run_inputs(self, budget: int) -> bool:
        """Process up to ``budget`` queued batches, round robin over ready input channels.

        A channel blocked by barrier alignment is not processed: what it delivered is moved into
        its alignment buffer and its credit returned. An unblocked channel replays its buffer
        before its queue."""
        worked = False
        ready = self.ready
        feed = self.feed
        for _ in range(len(ready)):
            if budget <= 0 or not ready:
                break
            channel = ready.popleft()
            if channel.blocked:
                self._buffer_blocked(channel)
                continue
            subtask = channel.subtask
            if subtask.backlogged:
                ready.append(channel)
                continue
            self.current = subtask
            buffered = channel.buffered
            if buffered:
                is_batch, item = buffered.pop()
                credit = 0  # returned when it was buffered
            else:
                is_batch, item = channel.queue.popleft()
                credit = 1
            if is_batch:
                self.records_processed += len(item)
                if channel.back_edge:
                    feed(Feedback(key_of(subtask), item))
                if subtask.sizer is None:
                    subtask.on_batch(item, channel.input_index)
                    if credit:
                        channel.return_credit(1, 0)
                else:  # timed: the batch size it wants goes back with the credit
                    started = perf_counter()
                    subtask.on_batch(item, channel.input_index)
                    wanted = subtask.observe(len(item), perf_counter() - started)
                    if credit:
                        channel.return_credit(1, wanted)
                budget -= 1
                if self.safe_point is not None:
                    self.safe_point()
            elif type(item) is LoopProbe:
                feed(ProbeArrived(key_of(subtask), channel.id, item.round, channel.back_edge))
            else:
                subtask.on_event(channel, item)
                if subtask.loop is not None and type(item) is EndOfPartition:
                    feed(InputEnded(key_of(subtask), channel.id, subtask.finished))
                if subtask.finished:
                    feed(SubtaskFinished(key_of(subtask)))
            worked = True
            if channel.queue or buffered:
                ready.append(channel)
            else:
                channel.scheduled = False
        return worked

    def _buffer_blocked(self, channel: InputChannel) -> None:
        """Move a blocked channel's queue into its alignment buffer and return the credit; past
        ``alignment_max_bytes`` the pending checkpoint is declined rather than fill the disk."""
        queue_, buffer = channel.queue, channel.buffered
        batches = 0
        while queue_:
            is_batch, item = queue_.popleft()
            buffer.add(is_batch, item)
            batches += is_batch
        channel.scheduled = False
        if batches:
            channel.return_credit(batches, channel.subtask.wanted_batch_size())
        spill, subtask = self.spill, channel.subtask
        if spill is not None and spill.over_limit and subtask.barriers is not None \
                and subtask.barriers.pending is not None:
            reason = (f"alignment of {subtask.name}#{subtask.index} buffered {spill.buffered} bytes, more than "
                      f"alignment_max_bytes={spill.max_bytes}")
            self.feed(AlignmentOverflow(key_of(subtask), subtask.barriers.pending, reason))

    def schedule_buffered(self, channels: list[InputChannel]) -> None:
        """Alignment ended: unblocked channels with buffered or queued data become ready."""
        for channel in channels:
            channel.buffered.reset_stats()  # counted by alignment_stats, or void for an aborted alignment
            if (channel.buffered or channel.queue) and not channel.scheduled:
                channel.scheduled = True
                self.ready.append(channel)

    def run_sources(self, batch_size: int) -> bool:
        """Poll every source subtask that is not finished or backlogged for one batch of at most
        ``batch_size`` records (fewer where its measured cost says so: ``Subtask.read_size``)."""
        worked = False
        for subtask in self.sources:
            if not subtask.finished and not subtask.backlogged:
                self.current = subtask
                started = perf_counter()
                count = subtask.poll_source(subtask.read_size(batch_size))
                if count and subtask.sizer is not None:
                    subtask.sizer.observe(count, perf_counter() - started)
                self.records_processed += count
                if count and self.safe_point is not None:
                    self.safe_point()
                if subtask.finished:
                    self.feed(SubtaskFinished(key_of(subtask)))
                worked = worked or count > 0 or subtask.finished
        return worked

    def replay_back_edge_logs(self) -> None:
        """After a restore, loop heads re-emit their logged in-transit records before new input."""
        for subtask in self.subtasks:
            head = subtask.loop.head if subtask.loop is not None else None
            if head is not None and head.replay:
                self.current = subtask
                records, head.replay = head.replay, []
                self.records_processed += len(records)
                subtask.on_batch(records)

    def flush(self) -> bool:
        """Send every partly filled output batch; returns whether there was any."""
        sent = False
        for subtask in self.subtasks:
            if not subtask.finished and any(buffer for output in subtask.outputs for buffer in output.buffers):
                self.current = subtask
                subtask.flush()
                sent = True
        return sent

    @property
    def finished(self) -> bool:
        """Every subtask finished and every output drained."""
        return all(s.finished for s in self.subtasks) and not any(c.pending for c in self.out_channels.values())

    def counters(self) -> dict[str, Any]:
        """The data path's part of the worker's metrics."""
        operators = {}
        counters: dict[str, int] = {"late_records_dropped": 0}
        for subtask in list(self.subtasks):
            for runner in subtask.runners:
                operators[f"{runner.name}#{subtask.index}"] = runner.records_in
                for name, value in runner.operator.counters().items():
                    counters[name] = counters.get(name, 0) + value
        spill = self.spill
        return {
            "records_processed": self.records_processed,
            "source_records": sum(s.records_read for s in list(self.sources)), **counters, "operators": operators,
            "pending_batches": sum(len(c.pending) for c in list(self.out_channels.values())),
            "queued_batches": sum(len(c.queue) for c in list(self.in_channels.values())),
            "alignment_buffered_bytes": spill.buffered_total if spill is not None else 0,
            "alignment_spilled_bytes": spill.spilled_total if spill is not None else 0,
            "subtasks": {f"{subtask.vertex_id}/{subtask.index}": subtask_metrics(subtask)
                         for subtask in list(self.subtasks)},
            # per subtask sized by time: the records per batch its measured cost allows now
            "batch_sizes": {f"{s.name}#{s.index}": s.sizer.size for s in list(self.subtasks) if s.sizer is not None},
        }
