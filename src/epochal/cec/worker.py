"""The CEC worker's driver: the body a Spark task runs for one stage instance of a ``cec`` job.

It registers like any worker (:class:`~epochal.runtime.shell.WorkerShell`), then serves its
machine (:class:`~epochal.cec.worker_machine.CecWorkerMachine`) and does the work of its stage
(:mod:`epochal.cec.plan`): read its source splits or its input channels, run the stateless
operators and the window aggregate (:class:`~epochal.cec.aggregate.WindowAggregate`), and append
every output to its persisted output queue (:class:`~epochal.cec.output_log.OutputLog`,
asynchronously through :class:`~epochal.cec.log_writer.LogWriter`). Only durable frames leave
the worker: to its consumers (:class:`~epochal.cec.replay.OutputChannels` decides when) or to
its own sink (:class:`~epochal.cec.sink.SinkCommitter`).

A frame's payload pickles ``(meta, items, parts)``: ``meta`` says how far the instance had read
(a source: its split positions and the records read, which is also the frame's sequence number;
a stage with inputs: per channel the last sequence number read), ``items`` is a window
aggregate's whole output (results and control tuples, what EC reconstruction reads), and
``parts`` holds, per consumer (or for the own sink), the pickled ``(indices, records)`` it gets.

A replacement (``Deploy(joining=True)``) opens the queue the lost instance left (local disk
survives the process), rebuilds its state from it (a window stage: the eventual checkpoint, or
CRB's newest full checkpoint; a source: its split positions; its sink: the newest commit
decision), asks its producers to replay after that point, and waits for its consumers to say
where they stand.
"""

from __future__ import annotations

import os
import pickle
import queue
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

from epochal.cec.aggregate import NOTHING, WindowAggregate
from epochal.cec.eventual import reconstruct, reconstruct_full
from epochal.cec.log_writer import LogWriter
from epochal.cec.messages import DATA, Credit, EndOfStream, ReplayRequest, Resumed, StreamEvent, TrimRequest
from epochal.cec.output_log import Frame, OutputLog
from epochal.cec.plan import CecDeployment, Stage, targets_of
from epochal.cec.replay import OutputChannels
from epochal.cec.sink import SinkCommitter
from epochal.cec.tuples import ITEM_LAST, WindowResult, item_seq, split_seq
from epochal.cec.worker_machine import (
    BeginProcessing,
    CecPhase,
    CecWorkerMachine,
    InputDone,
    ReportFinished,
    SetUp,
    SetUpWorker,
)
from epochal.connectors.base import SinkContext
from epochal.messages import Dispatch, Finished, KindReport
from epochal.runtime.links import Bootstrap
from epochal.runtime.mailbox import PeerClosed, PeerEvent, PeerJoined
from epochal.runtime.operators import Operator, UserFunctionError
from epochal.runtime.shell import WorkerShell, register_shell_executors
from epochal.runtime.source_reader import SourceReader
from epochal.runtime.worker_events import Registered, Tick
from epochal.serialization import dumps

_DO = Dispatch("cec worker instructions")


class QueueLost(RuntimeError):
    """A consumer asked for output this producer deleted: the consumer's own queue is gone."""


class _Durable:
    """A frame of the output queue is on disk (from the writer thread, via the mailbox)."""

    __slots__ = ("frame",)

    def __init__(self, frame: Frame) -> None:
        self.frame = frame


class _MemoryQueue:
    """The output queue when nothing is persisted (``persist=False``, ``native``): frames are
    "durable" at once and kept in memory until no consumer needs them (a benchmark baseline:
    a lost worker cannot be rebuilt). It is its own writer."""

    def __init__(self, worker: CecWorker) -> None:
        self.worker = worker
        self.frames: list[Frame] = []
        self.payloads: dict[int, bytes] = {}
        self.last_seq = -1

    def submit(self, seq: int, min_ts: float, max_ts: float, payload: bytes) -> None:
        frame = Frame(seq, min_ts, max_ts, -1, 0, len(payload))
        self.frames.append(frame)
        self.payloads[seq] = payload
        self.last_seq = seq
        self.worker.mailbox.put(_Durable(frame))  # type: ignore[arg-type]

    def find(self, *, seq: int) -> int:
        import bisect

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


def _chain(operators: list[Operator], records: list[Any]) -> list[Any]:
    for operator in operators:
        try:
            records = operator.process_batch(records)
        except UserFunctionError:
            raise
        except Exception as error:
            raise UserFunctionError(operator.name or type(operator).__name__, error) from error
    return records


class CecWorker(WorkerShell):
    """Runs one stage instance of a CEC job."""

    def __init__(self, bootstrap: Bootstrap, index: int, task_attempt: int = 0) -> None:
        super().__init__(bootstrap, index, task_attempt)
        self.machine = CecWorkerMachine(index)
        self.deployment: CecDeployment | None = None
        self.stage: Stage | None = None
        self.subtask = 0
        self.log: OutputLog | None = None
        self.writer: LogWriter | None = None
        self.parts: dict[int, list[bytes] | None] = {}  # frames submitted, not yet durable
        self.metas: dict[int, Any] = {}  # a stateless stage's input position per frame not yet durable
        #: trims to send once the frame holding what they rely on is durable: (frame, per channel)
        self.pending_trim: tuple[int, list[int]] | None = None
        #: the newest frame deleted from the output queue (-1: none): older output is gone
        self.trimmed_through = -1
        #: a replacement reports its first input once (recovery time: kill -> first record)
        self.resume_pending = False
        self.next_seq = 0
        self.last_durable = -1
        self.channels = OutputChannels([])
        self.producers: list[int] = []
        self.received: list[int] = []
        self.frames_seen: list[int] = []
        self.ended: list[int | None] = []
        self.source: SourceReader | None = None
        self.source_done = False
        self.records_read = 0
        self.aggregate: WindowAggregate | None = None
        self.sink: SinkCommitter | None = None
        self.sink_fed = -1  # the newest own frame given to the own sink
        self.processing = False
        self.done_reported = False
        self.next_commit = self.next_trim = self.next_snapshot = 0.0
        self.rebalanced = 0
        self.counters = {"records_in": 0, "records_out": 0, "frames": 0, "bytes_logged": 0, "replayed_frames": 0}

    # ------------------------------------------------------------------ events
    def _handle(self, event: Any) -> None:
        kind = type(event)
        if kind is _Durable:
            self._on_durable(event.frame)
        elif kind is PeerEvent:
            self._on_peer(event.event)
        elif kind is PeerJoined:
            self._install_peer(event)
            self._peer_joined(event.peer)
        elif kind is PeerClosed:
            if self._current_peer(event) and event.peer in self.channels.of:
                self.channels.lost(event.peer)  # its replacement will ask for what it lacks
        else:
            self._feed(event)

    def _tick(self, now: float) -> None:
        self._feed(Tick(now))

    def _feed(self, event: Any) -> None:
        for instruction in self.machine.handle(event):
            _DO.handlers[type(instruction)](self, instruction)

    def _serve(self) -> None:
        self._feed(Registered(time.monotonic(), self.bootstrap.registration_timeout + 30))
        while True:
            busy = self.processing and self._has_work()
            for _ in range(64):
                try:
                    event = self.mailbox.get_nowait() if busy else self.mailbox.get(timeout=0.05)
                except queue.Empty:
                    break
                self._handle(event)
                busy = True
            now = time.monotonic()
            self._tick(now)
            if self.processing:
                self._work(now)

    def _finished(self) -> bool:
        return self.machine.phase in (CecPhase.FINISHED, CecPhase.DONE)

    def _records(self) -> int:
        return self.counters["records_in"]

    def metrics(self) -> dict[str, Any]:
        out = {**super().metrics(), **self.counters}
        if self.aggregate is not None:
            out.update({f"window_{k}": v for k, v in self.aggregate.stats.items()})
            out["open_windows"] = len(self.aggregate.windows)
            out["window_response_s"] = self.aggregate.response_s  # summed over window_results
        return out

    def _close_body(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.sink is not None:
            self.sink.close()
        if self.source is not None:
            self.source.close()

    def _send(self, peer: int, event: Any) -> bool:
        """Send ``event`` to ``peer``; a peer that died is not this worker's failure (the JobMaster
        replaces it, and its replacement asks for what it lacks)."""
        connection = self.peers.get(peer)
        if connection is None:
            return False
        try:
            connection.send_event(DATA, event)
            return True
        except OSError:
            return False

    # ------------------------------------------------------------------ set-up and recovery
    @_DO.on(SetUpWorker)
    def _set_up(self, instruction: SetUpWorker) -> None:
        message = instruction.deploy
        deployment: CecDeployment = cloudpickle.loads(message.deployment)
        self.deployment = deployment
        self._use_hook(deployment.hook)
        stage, subtask = deployment.locate(self.index)
        self.stage, self.subtask = stage, subtask
        self._connect_mesh(message.peers, deployment.config.connect_timeout, joining=message.joining,
                           replaceable=True, num_workers=deployment.num_workers)
        started = time.monotonic()
        phases: dict[str, float] = {}
        directory = os.path.join(deployment.log_root, deployment.job_id, f"w{self.index}")
        self.producers = deployment.producers(stage, subtask)
        channels = len(self.producers)
        self.received = [-1] * channels
        self.frames_seen = [-1] * channels
        self.ended = [None] * channels
        consumers = deployment.consumers(stage, subtask)
        self.channels = OutputChannels(consumers, live=not message.joining)
        if (stage.downstream is not None or stage.window is not None or stage.upstream is None) \
                and not deployment.persist:
            self.log = self.writer = _MemoryQueue(self)  # type: ignore[assignment]
        elif stage.downstream is not None or stage.window is not None or stage.upstream is None:
            self.log = OutputLog.open(os.path.join(directory, "out"), deployment.segment_bytes, deployment.fsync)
            self.next_seq = self.log.last_seq + 1
            self.last_durable = self.log.last_seq
        phases["open_s"] = time.monotonic() - started
        if stage.window is not None:
            spec = stage.window
            mode = "none" if deployment.mode == "native" else deployment.mode
            self.aggregate = WindowAggregate(spec.shape, spec.function, spec.key, channels, mode,  # type: ignore[arg-type]
                                             deployment.settings, spec.timestamp, spec.out_of_orderness)
        if stage.splits is not None:
            self.source = SourceReader(stage.splits[subtask])
        if stage.sink is not None:
            context = SinkContext(stage.sink_name, subtask, stage.parallelism, lambda payload: None,
                                  self.bootstrap.incarnation, True)
            self.sink = SinkCommitter(stage.sink, context, os.path.join(directory, "commits"))
        if message.joining:
            self.resume_pending = True
            self._recover(phases)
        elif self.log is not None and self.log.frames:
            raise RuntimeError(f"the output queue {directory} of a new job is not empty")
        if self.log is not None and deployment.persist:
            self.writer = LogWriter(self.log, deployment.max_outstanding, lambda f: self.mailbox.put(_Durable(f)))  # type: ignore[arg-type]
        phases["total_s"] = time.monotonic() - started
        self._feed(SetUp(time.monotonic(), deployment.config.connect_timeout + 30, phases))

    def _recover(self, phases: dict[str, float]) -> None:
        """Rebuild this instance from what the lost one left on disk (papers/002 §II.B-C)."""
        log = self.log
        started = time.monotonic()
        after: list[int] = list(self.received)
        if self.aggregate is not None and log is not None:
            items = (item for _, payload in log.read_backwards() for item in reversed(pickle.loads(payload)[1]))
            if self.deployment.mode == "cec":  # type: ignore[union-attr]
                ec = reconstruct(items)
                phases["reconstruct_s"] = time.monotonic() - started
                phases["extent"] = float(ec.extent)
                loaded = time.monotonic()
                self.aggregate.restore(ec)
                phases["load_s"] = time.monotonic() - loaded
                phases["windows"] = float(len(ec.windows))
                start = ec.replay_after or ec.newest
            else:
                restore = reconstruct_full(items)
                phases["reconstruct_s"] = time.monotonic() - started
                phases["extent"] = float(restore.extent)
                self.aggregate.restore_full(restore.checkpoint, restore.results_after)
                phases["windows"] = float(len(self.aggregate.windows))
                start = restore.checkpoint.position if restore.checkpoint is not None else None
            if start is not None:
                after = list(start.seqs)
                self.received = list(after)
        elif log is not None and log.frames:
            meta = pickle.loads(log.read(log.frames[-1]))[0]
            if self.source is not None:
                positions, self.records_read = meta
                self.source.restore(positions)
            else:
                after = list(meta)
                self.received = list(after)
        elif self.sink is not None and self.sink.committed is not None and self.producers:
            after = list(self.sink.committed)
            self.received = list(after)
        if self.sink is not None and self.sink.committed is not None and log is not None:
            self.sink_fed = self.sink.committed  # own frames after it go to the sink again
        for channel, producer in enumerate(self.producers):
            self._send(producer, ReplayRequest(self.index, after[channel]))
        phases["rebuild_s"] = time.monotonic() - started

    def _peer_joined(self, peer: int) -> None:
        """A replacement of ``peer`` connected: if it is one of my producers, tell it where I am."""
        if peer in self.producers:
            channel = self.producers.index(peer)
            self._send(peer, ReplayRequest(self.index, self.received[channel]))

    @_DO.on(BeginProcessing)
    def _begin(self, instruction: BeginProcessing) -> None:
        self.processing = True
        self.processing_started = time.monotonic()
        self._start_heartbeats(self.deployment.config.heartbeat_interval)  # type: ignore[union-attr]
        if self.sink is not None and self.log is not None:
            self._feed_own_sink()

    def _resumed(self) -> None:
        self.resume_pending = False
        self.send_control(KindReport(self.index, Resumed(self.index)))

    @_DO.on(ReportFinished)
    def _report_finished(self, instruction: ReportFinished) -> None:
        self.send_control(Finished(self.metrics()))

    # ------------------------------------------------------------------ input
    def _on_peer(self, event: Any) -> None:
        kind = type(event)
        if kind is StreamEvent:
            self._on_stream_event(event)
        elif kind is ReplayRequest:
            if event.consumer in self.channels.of:
                frame, index = split_seq(event.after)
                if self.trimmed_through >= (frame + 1 if index == ITEM_LAST else frame):
                    raise QueueLost(
                        f"worker {event.consumer} asked worker {self.index} ({self.stage.name!r}) for its output "  # type: ignore[union-attr]
                        f"after sequence number {event.after}, but that output was deleted once every consumer "
                        "had confirmed it: the worker asking lost its own persisted output queue (was the "
                        f"executor's disk or the log_dir {self.deployment.log_root!r} lost?). A CEC job cannot "
                        "rebuild that worker; run the job again from its sources")
                self.channels.request(event.consumer, event.after)
        elif kind is Credit:
            self.channels.credit(event.consumer, event.frames)
        elif kind is TrimRequest:
            self.channels.trim(event.consumer, event.through)
        elif kind is EndOfStream and event.producer in self.producers:
            self.ended[self.producers.index(event.producer)] = event.last
            self._maybe_inputs_ended()

    def _on_stream_event(self, event: StreamEvent) -> None:
        channel = self.producers.index(event.producer)
        self._send(event.producer, Credit(self.index, 1))
        if event.frame_seq <= self.frames_seen[channel]:
            return
        self.frames_seen[channel] = event.frame_seq
        indices, records = pickle.loads(event.blob)
        last = self.received[channel]
        seqs = [item_seq(event.frame_seq, k) for k in indices]
        fresh = [i for i, seq in enumerate(seqs) if seq > last]
        if len(fresh) != len(seqs):
            seqs, records = [seqs[i] for i in fresh], [records[i] for i in fresh]
        # the whole frame is in: the channel's position is its end, with records for me or not
        self.received[channel] = max(last, item_seq(event.frame_seq, ITEM_LAST))
        self.counters["records_in"] += len(records)
        if records and self.resume_pending:
            self._resumed()
        if self.aggregate is not None:
            self.aggregate.now = time.monotonic()
            process = self.aggregate.process
            for seq, record in zip(seqs, records, strict=True):
                process(channel, seq, record)
            process(channel, item_seq(event.frame_seq, ITEM_LAST), NOTHING)
            self._emit_aggregate()
        elif self.log is not None:
            out = _chain(self.stage.pre, records)  # type: ignore[union-attr]
            self._emit(out, tuple(self.received), None)
        elif self.sink is not None:
            self.sink.write(_chain(self.stage.pre, records))  # type: ignore[union-attr]
        self._maybe_inputs_ended()
        if "records" in self.hook_points:
            self._reach("records")

    def _maybe_inputs_ended(self) -> None:
        if not self.producers or any(end is None or seen < end
                                     for end, seen in zip(self.ended, self.frames_seen, strict=True)):
            return
        if self.aggregate is not None and not getattr(self, "_ended_input", False):
            self._ended_input = True
            for channel in range(len(self.producers)):
                self.aggregate.end_channel(channel)
            self.aggregate.end_input()
            self._emit_aggregate()
        self.source_done = True

    # ------------------------------------------------------------------ output
    def _emit_aggregate(self) -> None:
        aggregate = self.aggregate
        assert aggregate is not None
        items = aggregate.take()
        if not items:
            return
        if aggregate.mode == "none":  # results only, nothing to rebuild from
            results, logged = items, None
        else:
            results, logged = [item.value for item in items if isinstance(item, WindowResult)], items
        self._emit(_chain(self.stage.post, results) if results else [], None, logged)  # type: ignore[union-attr]

    def _emit(self, records: list[Any], meta: Any, items: list[Any] | None, seq: int | None = None) -> None:
        """Append one frame (``records`` for the consumers or the own sink) to the output queue."""
        stage = self.stage
        assert stage is not None and self.writer is not None
        consumers = self.channels.consumers
        if consumers:
            targets = targets_of(stage.partitioner, records, len(consumers), self.rebalanced)
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
        payload = dumps((meta, items, parts))
        self.parts[seq] = parts
        if meta is not None and self.source is None:
            self.metas[seq] = meta
        self.counters["records_out"] += len(records)
        self.counters["frames"] += 1
        self.counters["bytes_logged"] += len(payload)
        self.writer.submit(seq, 0.0, 0.0, payload)

    def _on_durable(self, frame: Frame) -> None:
        self.last_durable = frame.seq
        parts = self.parts.pop(frame.seq, None)
        meta = self.metas.pop(frame.seq, None)
        if meta is not None:  # a stateless stage never needs its input before a durable frame's
            self.pending_trim = (frame.seq, list(meta))
        pending = self.pending_trim
        if pending is not None and frame.seq >= pending[0]:
            self.pending_trim = None
            for channel, producer in enumerate(self.producers):
                self._send(producer, TrimRequest(self.index, pending[1][channel]))
        if "log_write" in self.hook_points:
            self._reach("log_write", self.counters["frames"])
        if self.sink is not None:
            self._feed_own_sink()
            return
        for consumer in self.channels.durable(frame.seq):
            blob = parts[self.channels.consumers.index(consumer)] if parts is not None else \
                pickle.loads(self.log.read(frame))[2][self.channels.consumers.index(consumer)]  # type: ignore[union-attr]
            self._send(consumer, StreamEvent(self.index, frame.seq, blob))

    def _feed_own_sink(self) -> None:
        """Give the own sink every durable frame after the newest it had (from the queue)."""
        log, sink = self.log, self.sink
        assert log is not None and sink is not None
        for frame in log.frames[log.find(seq=self.sink_fed + 1):]:
            if frame.seq > self.last_durable:
                break
            _, records = pickle.loads(pickle.loads(log.read(frame))[2][0])
            sink.write(records)
            self.sink_fed = frame.seq
        if isinstance(log, _MemoryQueue):
            log.trim(self.sink_fed + 1)

    # ------------------------------------------------------------------ the work loop
    def _has_work(self) -> bool:
        return (self.source is not None and not self.source_done) or bool(self.channels.behind())

    def _work(self, now: float) -> None:
        if "time" in self.hook_points:
            self._reach("time")
        self._replay_step()
        if self.source is not None and not self.source_done and self._room():
            self._read_source()
        aggregate = self.aggregate
        if aggregate is not None and self.deployment.mode == "cec":  # type: ignore[union-attr]
            clock: Callable[[], float] = time.monotonic
            checks = 0
            while aggregate.check_next(clock()):
                checks += 1
            if checks:
                self._emit_aggregate()
                if "g_check" in self.hook_points:
                    self._reach("g_check", aggregate.stats["g_check"])
        elif aggregate is not None and self.deployment.mode == "crb" and now >= self.next_snapshot:  # type: ignore[union-attr]
            self.next_snapshot = now + self.deployment.snapshot_interval  # type: ignore[union-attr]
            if aggregate.windows:
                aggregate.snapshot()
                self._emit_aggregate()
        if now >= self.next_commit:
            self.next_commit = now + self.deployment.commit_interval  # type: ignore[union-attr]
            self._commit_sink()
        if now >= self.next_trim:
            self.next_trim = now + 1.0
            self._trim()
        self._maybe_done()

    def _room(self) -> bool:
        """Back-pressure: read more only while the slowest consumer is close behind."""
        log = self.log
        if log is None or not self.channels.consumers:
            return True
        slowest = self.channels.slowest()
        return len(log.frames) - log.find(seq=slowest + 1) < 4 * self.channels.window

    def _read_source(self) -> None:
        source = self.source
        assert source is not None
        batch = source.read(self.deployment.config.batch_size)  # type: ignore[union-attr]
        if batch is None:
            self.source_done = True
            return
        if not batch:
            return
        self.records_read += len(batch)
        self.counters["records_in"] += len(batch)
        if self.resume_pending:
            self._resumed()
        out = _chain(self.stage.pre, batch)  # type: ignore[union-attr]
        # the frame's sequence number is the records read: a replacement resumes from its meta
        self._emit(out, (source.positions(), self.records_read), None, seq=self.records_read)
        if "records" in self.hook_points:
            self._reach("records")

    def _replay_step(self) -> None:
        """Send consumers that are behind their next frames from the queue (a few per step)."""
        log = self.log
        if log is None:
            return
        for consumer in self.channels.behind():
            index = self.channels.consumers.index(consumer)
            sent, after = self.channels.replay_from(consumer)
            position = log.find(seq=sent + 1)
            for frame in log.frames[position:position + 8]:
                if frame.seq > self.last_durable:
                    break
                indices, records = pickle.loads(pickle.loads(log.read(frame))[2][index])
                if frame.seq == split_seq(after)[0] if after >= 0 else False:
                    first = split_seq(after)[1]
                    keep = [i for i, k in enumerate(indices) if k > first]
                    indices, records = [indices[i] for i in keep], [records[i] for i in keep]
                self._send(consumer, StreamEvent(self.index, frame.seq, dumps((indices, records))))
                self.channels.replayed(consumer, frame.seq)
                self.counters["replayed_frames"] += 1
                if consumer not in self.channels.behind():
                    break
            if self.channels.of[consumer].sent >= self.last_durable:
                self.channels.caught_up(consumer)
                if self.done_reported:  # a replaced consumer: it has everything again
                    self._send(consumer, EndOfStream(self.index, self.last_durable))

    def _commit_sink(self) -> None:
        sink = self.sink
        if sink is None or not sink.dirty:
            return
        sink.commit(self.sink_fed if self.log is not None else list(self.received))

    def _trim(self) -> None:
        """Tell producers what this instance will never ask for again (once the output that
        makes it so is durable), and delete own segments no consumer needs."""
        aggregate = self.aggregate
        if aggregate is not None and self.deployment.mode == "cec":  # type: ignore[union-attr]
            # T of the EC as it stands: per channel the oldest footprint (or all read, none open)
            footprints = [w.footprint for w in aggregate.windows.values() if w.footprint is not None]
            through = [min(column) for column in zip(*footprints, strict=True)] if footprints \
                else list(aggregate.consumed)
            if aggregate.catch_up is None and self.producers:
                self.pending_trim = (self.next_seq - 1, through)
        elif self.sink is not None and self.log is None and self.sink.committed is not None:
            for channel, producer in enumerate(self.producers):
                self._send(producer, TrimRequest(self.index, self.sink.committed[channel]))
        if self.log is not None and self.channels.consumers and (aggregate is None or not self.deployment.persist):  # type: ignore[union-attr]
            log = self.log
            before = self.channels.trim_before()
            kept = log.find(seq=before)
            last_removable = log.frames[kept - 1].seq if kept else -1
            if log.trim(before) and log.frames:
                self.trimmed_through = max(self.trimmed_through, min(last_removable, log.frames[0].seq - 1))

    def _maybe_done(self) -> None:
        if self.done_reported or not self.source_done:
            return
        if self.writer is not None:
            self.writer.flush()
            while self.parts:  # durable callbacks still in the mailbox
                self._handle(self.mailbox.get())
        if any(self.channels.of[c].sent < self.last_durable or self.channels.of[c].waiting
               for c in self.channels.consumers):
            return  # consumers still lack frames
        if self.sink is not None:
            if self.log is not None:
                self._feed_own_sink()
            self._commit_sink()
        for consumer in self.channels.consumers:
            self._send(consumer, EndOfStream(self.index, self.last_durable))
        self.done_reported = True
        self._feed(InputDone(dict(self.counters)))


register_shell_executors(_DO)
