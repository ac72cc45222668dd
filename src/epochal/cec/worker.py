"""The CEC worker's driver: the body a Spark task runs for one stage instance of a ``cec`` job.

It registers like any worker (:class:`~epochal.runtime.host.shell.WorkerShell`), then serves its
machine (:class:`~epochal.cec.worker_machine.CecWorkerMachine`) and does the work of its stage
(:mod:`epochal.cec.plan`): read its source splits or its input channels (positions, dedup by
sequence number, replays, trims and credit are the pure :class:`~epochal.cec.input_channels.InputChannels`'s;
the producer side is :class:`~epochal.cec.replay.OutputChannels`), run the stateless operators and the window aggregate
(:class:`~epochal.cec.aggregate.WindowAggregate`), and hand every output batch to its
:class:`~epochal.cec.output.StageOutput` (the persisted queue; only durable frames leave, to the
consumers or to the own sink, :class:`~epochal.cec.sink.SinkCommitter`). Consumers tell their
producers what they will never need again, once what makes it so is durable.

A replacement (``Deploy(joining=True)``) rebuilds from the queue its predecessor left
(:func:`~epochal.cec.rebuild.rebuild`), asks its producers to replay after that point, and waits
for its consumers to say where they stand.
"""

from __future__ import annotations

import os
import pickle
import queue
import time
from typing import Any

import cloudpickle

from epochal.cec.aggregate import WindowAggregate
from epochal.cec.background import BackgroundPath
from epochal.cec.input_channels import InputChannels, ToProducer
from epochal.cec.open_windows import NOTHING
from epochal.cec.output import Durable, ExtentFrames, StageOutput, remove_queue
from epochal.cec.output_log import OutputLog
from epochal.cec.parts import make_parts, queue_writer
from epochal.cec.plan import CecDeployment, Stage, run_chain
from epochal.cec.protocol import (
    DATA,
    BeginProcessing,
    Credit,
    EndOfStream,
    FirstInput,
    InputDone,
    ReplayRequest,
    ReportFinished,
    SetUp,
    SetUpWorker,
    StreamEvent,
    TrimRequest,
)
from epochal.cec.rebuild import rebuild
from epochal.cec.replay import OutputChannels
from epochal.cec.sink import SinkCommitter
from epochal.cec.tuples import window_frame_meta
from epochal.cec.worker_machine import CecPhase, CecWorkerMachine
from epochal.connectors.source_reader import SourceReader
from epochal.messages import Dispatch, Finished
from epochal.runtime.host.events import Registered
from epochal.runtime.host.links import Bootstrap
from epochal.runtime.host.mailbox import PeerClosed, PeerEvent, PeerJoined
from epochal.runtime.host.shell import WorkerShell, register_shell_executors

_DO = Dispatch("cec worker instructions")


class CecWorker(WorkerShell):
    """Runs one stage instance of a CEC job."""

    instructions = _DO
    gc_thresholds = (50_000, 20, 100)

    def __init__(self, bootstrap: Bootstrap, index: int, task_attempt: int = 0) -> None:
        super().__init__(bootstrap, index, task_attempt)
        self.machine = CecWorkerMachine(index)
        self.deployment: CecDeployment | None = None
        self.stage: Stage | None = None
        self.output: StageOutput | None = None
        #: the input channels' protocol (one channel per producer)
        self.inputs = InputChannels(index, [])
        self.inputs_ended = False
        self.source: SourceReader | None = None
        self.source_done = False
        self.next_read = 0.0  # a source reads again then (a partial batch lingers for buffer_timeout)
        self.records_read = 0
        self.aggregate: WindowAggregate | None = None
        self.sink: SinkCommitter | None = None
        self.sink_fed = -1  # the newest own frame given to the own sink
        self.extent = ExtentFrames("cec")
        self.processing = self.done_reported = False
        self.next_commit = self.next_trim = 0.0
        #: a window stage's G_checks (CEC) or snapshots (CRB), and their pauses of the input
        self.background: BackgroundPath | None = None
        #: whether input records were processed (the machine hears of the first: a replacement
        #: reports it, the end of its recovery)
        self.input_seen = False
        self.counters = {"records_in": 0, "records_out": 0, "frames": 0, "bytes_logged": 0, "replayed_frames": 0,
                         "queued_frames": 0}

    # ------------------------------------------------------------------ events
    def _handle(self, event: Any) -> None:
        kind = type(event)
        if kind is Durable:
            self._on_durable(event)
        elif kind is PeerEvent:
            self._on_peer(event.event)
        elif kind is PeerJoined:
            self._install_peer(event)
            self._to_producers(self.inputs.producer_replaced(event.peer))  # tell it where I stand
        elif kind is PeerClosed:
            output = self.output
            if self._current_peer(event) and output is not None and event.peer in output.channels.of:
                output.channels.lost(event.peer)  # its replacement will ask for what it lacks
        else:
            self._feed(event)

    def _serve(self) -> None:
        self._feed(Registered(time.monotonic(), self.bootstrap.registration_timeout + 30))
        while True:
            busy = self.processing and self._has_work()
            wait = min(0.05, max(0.0, self.next_read - time.monotonic())) if self.source else 0.05
            for _ in range(64):
                try:
                    event = self.mailbox.get_nowait() if busy else self.mailbox.get(timeout=wait)
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
        out.update({"source_records": self.records_read} if self.source is not None else {})
        if self.deployment is not None and self.stage is not None:
            # the stage instance as a subtask of the job's outline (a vertex per stage): its records
            # in and out, which the REST API turns into rates per worker, as a dataflow subtask's
            _, subtask = self.deployment.locate(self.index)
            out["subtasks"] = {f"{self.stage.index}/{subtask}": {
                "records": (self.counters["records_in"], self.counters["records_out"])}}
        if self.aggregate is not None:
            pauses = self.background
            out.update(self.aggregate.metrics(), checkpoint_pause_s=pauses.pause_s if pauses else 0.0,
                       checkpoint_pause_max_s=pauses.pause_max_s if pauses else 0.0)
        return out

    def _close_body(self) -> None:
        if self.output is not None:
            self.output.writer.close()
        if self.sink is not None:
            self.sink.close()
        if self.source is not None:
            self.source.close()
        if getattr(self, "finished_cleanly", False) and self.deployment:  # nobody replays from it now
            remove_queue(self.deployment.log_root, self.deployment.job_id, self.index)

    def _send(self, peer: int, event: Any) -> bool:
        """Send ``event`` to ``peer``; a dead peer is not this worker's failure (it is replaced)."""
        connection = self.peers.get(peer)
        if connection is None:
            return False
        try:
            connection.send_event(DATA, event)
            return True
        except OSError:
            return False

    def _to_producers(self, instructions: list[ToProducer]) -> None:
        for instruction in instructions:
            self._send(instruction.producer, instruction.event)

    # ------------------------------------------------------------------ set-up and recovery
    @_DO.on(SetUpWorker)
    def _set_up(self, instruction: SetUpWorker) -> None:
        message = instruction.deploy
        deployment: CecDeployment = cloudpickle.loads(message.deployment)
        self.deployment = deployment
        self._use_hook(deployment.hook)
        stage, subtask = deployment.locate(self.index)
        self.stage = stage
        self._connect_mesh(message.peers, deployment.config.connect_timeout, joining=message.joining,
                           replaceable=True, num_workers=deployment.num_workers)
        started = time.monotonic()
        directory = os.path.join(deployment.log_root, deployment.job_id, f"w{self.index}")
        producers = deployment.producers(stage, subtask)
        channels = len(producers)
        self.inputs = InputChannels(self.index, producers)
        post: Any = self.mailbox.put  # a frame on disk is an event of the worker's mailbox
        parts = make_parts(deployment, stage, subtask, channels, directory, self.bootstrap.incarnation, post)
        log, self.aggregate, self.source, self.sink = parts.log, parts.aggregate, parts.source, parts.sink
        if self.aggregate is not None:
            self.background = BackgroundPath(self.aggregate, deployment.mode, deployment.snapshot_interval)
        opened = time.monotonic() - started
        phases: dict[str, float] = {}
        self.extent = ExtentFrames(deployment.mode)
        if message.joining:
            persisted = log if isinstance(log, OutputLog) else None
            rebuilt = rebuild(persisted, channels, deployment.mode, self.aggregate, self.source, self.sink)
            self.inputs = InputChannels(self.index, producers, rebuilt.after)
            self.records_read, phases = rebuilt.records_read, rebuilt.phases
            if self.sink is not None and self.sink.committed is not None and log is not None:
                self.sink_fed = self.sink.committed  # own frames after it go to the sink again
            self._to_producers(self.inputs.replay_all())
            if self.aggregate is not None and isinstance(log, OutputLog) and log.frames:
                self.extent.restored(list(self.aggregate.windows), log.frames[0].seq)
        elif isinstance(log, OutputLog) and log.frames:
            raise RuntimeError(f"the output queue {directory} of a new job is not empty")
        if log is not None:
            writer = queue_writer(log, deployment.max_outstanding, post)
            self.output = StageOutput(self.index, stage, log, writer,
                                      OutputChannels(deployment.consumers(stage, subtask), live=not message.joining),
                                      self._send, self.counters)
        phases.update(open_s=opened, total_s=time.monotonic() - started)
        self._feed(SetUp(time.monotonic(), deployment.config.connect_timeout + 30, phases))

    @_DO.on(BeginProcessing)
    def _begin(self, instruction: BeginProcessing) -> None:
        self.processing = True
        self.processing_started = time.monotonic()
        if self.background is not None:
            self.background.start(self.processing_started)
        self._start_heartbeats(self.deployment.config.heartbeat_interval)  # type: ignore[union-attr]
        if self.sink is not None and self.output is not None:
            self._feed_own_sink()

    def _first_input(self) -> None:
        self.input_seen = True
        self._feed(FirstInput())

    @_DO.on(ReportFinished)
    def _report_finished(self, instruction: ReportFinished) -> None:
        self.send_control(Finished(self.metrics()))
        self.finished_cleanly = True

    # ------------------------------------------------------------------ input
    def _on_peer(self, event: Any) -> None:
        kind, output = type(event), self.output
        if kind is StreamEvent:
            self._on_stream_event(event)
        elif kind is ReplayRequest:
            if output is not None and event.consumer in output.channels.of:
                output.request(event.consumer, event.after)
        elif kind is Credit and output is not None:
            output.channels.credit(event.consumer, event.frames)
        elif kind is TrimRequest and output is not None:
            output.channels.trim(event.consumer, event.through)
        elif kind is EndOfStream:
            self.inputs.end_of_stream(event.producer, event.last)
            self._maybe_inputs_ended()

    def _on_stream_event(self, event: StreamEvent) -> None:
        indices, records = pickle.loads(event.blob)
        credit, deliver = self.inputs.stream_event(event.producer, event.frame_seq, indices)
        self._to_producers(credit)
        if deliver is None:
            return  # a frame seen before (sent again after a replay)
        channel, seqs = deliver.channel, deliver.seqs
        if len(seqs) != len(records):
            records = [records[k] for k in deliver.positions]
        self.counters["records_in"] += len(records)
        if records and not self.input_seen:
            self._first_input()
        stage = self.stage
        if self.aggregate is not None:
            self.aggregate.now = time.monotonic()
            process = self.aggregate.process
            for seq, record in zip(seqs, records, strict=True):
                process(channel, seq, record)
            process(channel, deliver.end, NOTHING)
            self._emit_aggregate()
            if self.aggregate.mode == "cec":
                self._checkpoint(time.monotonic())
        elif self.output is not None:
            positions = self.inputs.positions
            self.inputs.emitted(self.output.emit(run_chain(stage.pre, records), positions, None))  # type: ignore[union-attr]
        elif self.sink is not None:
            self.sink.write(run_chain(stage.pre, records))  # type: ignore[union-attr]
        self._maybe_inputs_ended()
        if "records" in self.hook_points:
            self._reach("records")

    def _maybe_inputs_ended(self) -> None:
        if not self.inputs.ended:
            return
        if self.aggregate is not None and not self.inputs_ended:
            for channel in range(len(self.inputs.producers)):
                self.aggregate.end_channel(channel)
            self.aggregate.end_input()
            self._emit_aggregate()
        self.inputs_ended = self.source_done = True

    def _read_source(self) -> None:
        source, output, config = self.source, self.output, self.deployment.config  # type: ignore[union-attr]
        assert source is not None and output is not None
        batch = source.read(config.batch_size)
        if batch is None:
            self.source_done = True
            return
        # a partial batch (a paced or slow source): the next read lingers, so that records gather
        self.next_read = time.monotonic() + config.buffer_timeout if len(batch) < config.batch_size else 0.0
        if not batch:
            return
        self.records_read += len(batch)
        self.counters["records_in"] += len(batch)
        if not self.input_seen:
            self._first_input()
        # the frame's sequence number is the records read: a replacement resumes from its meta
        output.emit(run_chain(self.stage.pre, batch), (source.positions(), self.records_read), None,  # type: ignore[union-attr]
                    seq=self.records_read)
        if "records" in self.hook_points:
            self._reach("records")

    # ------------------------------------------------------------------ output
    def _emit_aggregate(self) -> None:
        aggregate, output = self.aggregate, self.output
        assert aggregate is not None and output is not None
        batch = aggregate.take()
        if not batch.records and not batch.control:
            return
        records = run_chain(self.stage.post, batch.records) if batch.records else []  # type: ignore[union-attr]
        if aggregate.mode == "none":  # results only, nothing to rebuild from
            output.emit(records, None, None)
            return
        seq = output.emit(records, window_frame_meta(batch, len(records)), batch.control)
        self.extent.emitted(seq, batch.control)

    def _on_durable(self, event: Durable) -> None:
        output = self.output
        assert output is not None
        frame = event.frame
        self._to_producers(self.inputs.durable(frame.seq))
        full = self.extent.durable(frame.seq)
        if full is not None:  # CRB: input before a durable full checkpoint is never replayed
            self._to_producers(self.inputs.trim_now(full.seqs))
        if "log_write" in self.hook_points:
            self._reach("log_write", self.counters["frames"])
        output.durable(frame)
        if self.sink is not None:
            self._feed_own_sink()

    def _feed_own_sink(self) -> None:
        """Give the own sink every durable frame after the newest it had (from the queue)."""
        assert self.output is not None and self.sink is not None
        self.sink_fed = self.output.feed(self.sink, self.sink_fed)

    # ------------------------------------------------------------------ the work loop
    def _has_work(self) -> bool:
        return (self.source is not None and not self.source_done and time.monotonic() >= self.next_read) or \
            (self.output is not None and bool(self.output.channels.behind()))

    def _work(self, now: float) -> None:
        if "time" in self.hook_points:
            self._reach("time")
        output, aggregate, deployment = self.output, self.aggregate, self.deployment
        assert deployment is not None
        if output is not None:
            output.replay_step(self.done_reported)
        if self.source is not None and not self.source_done and output is not None and output.room() \
                and now >= self.next_read:
            self._read_source()
        if aggregate is not None:
            self._checkpoint(now)
        if now >= self.next_commit:
            self.next_commit = now + deployment.commit_interval
            self._commit_sink()
        if now >= self.next_trim:
            self.next_trim = now + 1.0
            self._trim()
        self._maybe_done()

    def _checkpoint(self, now: float) -> None:
        """The window stage's background path (also after input events), see :mod:`epochal.cec.background`."""
        background, output = self.background, self.output
        if background is None or output is None:
            return
        started = time.monotonic()
        if not background.run(now, time.monotonic, output.writer.full):
            return
        self._emit_aggregate()
        background.paused(time.monotonic() - started)
        if background.mode == "cec" and "g_check" in self.hook_points:
            self._reach("g_check", background.aggregate.stats["g_check"])

    def _commit_sink(self) -> None:
        sink = self.sink
        if sink is not None and sink.dirty:
            sink.commit(self.sink_fed if self.output is not None else list(self.inputs.positions))

    def _trim(self) -> None:
        """Tell producers what this instance will never ask for again (once the output that
        makes it so is durable), and delete own segments no consumer needs."""
        aggregate, output, deployment = self.aggregate, self.output, self.deployment
        assert deployment is not None
        if aggregate is not None and deployment.mode == "cec" and output is not None:
            if aggregate.catch_up is None and self.inputs.producers:
                self.inputs.trim_when_durable(output.next_seq - 1, aggregate.replay_floor())
        elif self.sink is not None and output is None and self.sink.committed is not None:
            self._to_producers(self.inputs.trim_now(self.sink.committed))
        if output is not None:  # own segments: what its extent (and its sink's input) no longer needs
            extent = self.extent if aggregate is not None and deployment.persist else None
            output.trim_own(extent, self.sink.committed if self.sink is not None else None, self.sink is not None)

    def _maybe_done(self) -> None:
        if self.done_reported or not self.source_done:
            return
        output = self.output
        if output is not None:
            output.writer.flush()
            while output.parts:  # durable callbacks still in the mailbox
                self._handle(self.mailbox.get())
            if not output.caught_up_all():
                return  # consumers still lack frames
        if self.sink is not None:
            if output is not None:
                self._feed_own_sink()
            self._commit_sink()
        if output is not None:
            output.end()
        self.done_reported = True
        self._feed(InputDone(dict(self.counters)))


register_shell_executors(_DO)
