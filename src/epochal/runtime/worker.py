"""The worker: one long-lived Spark task that hosts subtasks and runs them in a mailbox loop.

Life of a worker (see docs/architecture.md):

1. open a data port, connect to the JobMaster, prove the job token, register;
2. receive the deployment (the execution graph) and the peers' addresses;
3. open one TCP connection to every other worker (token checked before any unpickling);
4. report ready, wait for start, then run the mailbox loop until the job finishes, is
   cancelled, or fails.

One thread, the mailbox loop, runs all operators, so user code never sees concurrency.
Helper threads only read sockets (turning frames into mailbox events, :mod:`epochal.runtime.mailbox`),
send heartbeats and upload snapshots. Control messages are the typed ones of
:mod:`epochal.messages`; the mailbox dispatches events and messages by type (``_MAILBOX``).

A worker process imports no driver code (``epochal.control``, ``epochal.api``); fault injection
reaches it as the deployment's hook (:mod:`epochal.runtime.hooks`).
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar, cast

import cloudpickle

from epochal.config import EXACTLY_ONCE, NONE, SYNCHRONOUS
from epochal.connectors.base import assign_splits
from epochal.messages import (
    Ack,
    Cancel,
    CheckpointAbort,
    CheckpointComplete,
    Collect,
    CollectPayload,
    Committed,
    Decline,
    Deploy,
    Dispatch,
    EndLoop,
    Failed,
    Finished,
    Heartbeat,
    LoopReady,
    LoopVote,
    Metrics,
    Processing,
    Ready,
    Register,
    Reject,
    Shutdown,
    Start,
    StartLoopProbe,
    Stop,
    ToJobMaster,
    ToWorker,
    TriggerCheckpoint,
)
from epochal.plan.execution import Deployment
from epochal.runtime import protocol
from epochal.runtime.alignment import AlignmentBuffer, AlignmentSpill
from epochal.runtime.barriers import BarrierHandler
from epochal.runtime.channels import InputChannel, LocalTransport, OutputChannel, PeerConnection
from epochal.runtime.events import CheckpointBarrier, EndOfPartition, LoopProbe
from epochal.runtime.hooks import HookPoint, WorkerHook
from epochal.runtime.iteration import IterationHead
from epochal.runtime.mailbox import (
    JobMasterLost,
    MailboxEvent,
    PeerClosed,
    PeerCredit,
    PeerData,
    PeerEvent,
    SnapshotUpload,
)
from epochal.runtime.operators import UserFunctionError
from epochal.runtime.tasks import LoopRole, SourceReader, Subtask, edge_names
from epochal.state.snapshot import RestoreSource, handle_bytes, materialize
from epochal.state.storage import CheckpointError, CheckpointStorage

#: Credit of a loop's back-edge channel: in effect unbounded (see runtime/iteration.py).
UNBOUNDED_CREDIT = 1 << 40
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The worker's handlers: mailbox event or control message type -> handler (see ``_handle``).
_MAILBOX = Dispatch("worker mailbox")
_Wanted = TypeVar("_Wanted", bound=ToWorker)


@dataclass(frozen=True)
class Bootstrap:
    """What a Spark task needs to find its JobMaster; travels in the Spark task closure."""

    jobmaster_host: str
    jobmaster_port: int
    token: bytes
    job_id: str
    registration_timeout: float
    #: Interface the worker's data port listens on: loopback for Spark local mode.
    bind_host: str = ""
    #: Job attempt this Spark job belongs to (0 first, +1 per restart).
    job_attempt: int = 0


class WorkerStopped(Exception):
    """The JobMaster told this worker to stop (cancel, rejection, or the driver went away)."""


class PeerLost(Exception):
    """A data connection to another worker broke before this worker finished."""

    def __init__(self, peer: int, reason: str) -> None:
        super().__init__(f"lost the connection to worker {peer}: {reason}")
        self.peer = peer


class RestoreFailed(Exception):
    """Restoring state raised a :class:`CheckpointError` (a missing, truncated or corrupt state
    file): every attempt would fail the same way, so the JobMaster fails the job at once."""

    def __init__(self, error: CheckpointError, checkpoint_id: int | None) -> None:
        super().__init__(str(error))
        self.path = error.path
        self.checkpoint_id = checkpoint_id


def user_traceback(error: BaseException) -> str:
    """The traceback of a user function's exception without epochal's own frames."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR)]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(error), error)
    return "".join(lines)


class Worker:
    """Runs the subtasks that slot sharing places on worker ``index``; ``task_attempt`` is Spark's
    attempt number of the task running it (the job attempt comes with the bootstrap)."""

    def __init__(self, bootstrap: Bootstrap, index: int, task_attempt: int = 0) -> None:
        self.bootstrap = bootstrap
        self.index = index
        self.task_attempt = task_attempt
        self.mailbox: queue.SimpleQueue[MailboxEvent] = queue.SimpleQueue()
        self.control: socket.socket | None = None
        self.control_lock = threading.Lock()
        self.listener: socket.socket | None = None
        self.peers: dict[int, PeerConnection] = {}
        self.subtasks: list[Subtask] = []
        self.sources: list[Subtask] = []
        self.in_channels: dict[int, InputChannel] = {}
        self.out_channels: dict[int, OutputChannel] = {}
        self.ready: deque[InputChannel] = deque()
        self.deployment: Deployment | None = None
        self.started = time.monotonic()
        self.records_processed = 0
        self.reported_finished = False
        self.stopped = threading.Event()
        self.job_attempt = bootstrap.job_attempt
        self.restore: RestoreSource | None = None
        self.storage: CheckpointStorage | None = None
        self.mode = NONE
        self.halted_sources: set[int] = set()  # checkpoint ids halting sources (synchronous mode)
        self.expected_checkpoints: list[int] = []
        self.uploads: queue.SimpleQueue[SnapshotUpload | None] = queue.SimpleQueue()
        #: The deployment's hook (fault injection) and the points it asked for on this worker.
        self.hook: WorkerHook | None = None
        self.hook_points: frozenset[str] = frozenset()
        self.processing_started = 0.0
        self.spill: AlignmentSpill | None = None

    # ------------------------------------------------------------------ control connection
    def send_control(self, message: ToJobMaster) -> None:
        """Send one message to the JobMaster (thread safe: mailbox, heartbeat and uploader send)."""
        payload = protocol.dumps(message)
        with self.control_lock:
            protocol.send_frame(self.control, protocol.CONTROL, 0, payload)  # type: ignore[arg-type]

    def _control_reader(self) -> None:
        try:
            stream = self.control.makefile("rb")  # type: ignore[union-attr]
            while True:
                frame = protocol.read_frame(stream)
                if frame is None:
                    break
                self.mailbox.put(protocol.loads(frame[2]))  # a ToWorker message
        except (OSError, protocol.ProtocolError):
            pass
        self.mailbox.put(JobMasterLost("the driver closed the control connection"))

    def _heartbeat_loop(self, interval: float) -> None:
        while not self.stopped.wait(interval):
            try:
                self.send_control(Heartbeat(self.metrics()))
            except OSError:
                return

    def _await_control(self, wanted: type[_Wanted], timeout: float) -> _Wanted:
        """Wait for a control message of type ``wanted`` before the mailbox loop runs; other
        control messages are skipped, a :class:`~epochal.messages.Stop` stops the worker."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerStopped(f"no '{wanted.__name__}' from the JobMaster within {timeout:.0f} s")
            try:
                event = self.mailbox.get(timeout=remaining)
            except queue.Empty:
                continue
            if isinstance(event, wanted):
                return event
            if isinstance(event, Stop):
                raise WorkerStopped(event.reason)
            if isinstance(event, JobMasterLost):
                raise WorkerStopped(event.reason)
            if isinstance(event, PeerClosed):
                raise PeerLost(event.peer, event.reason)
            if not isinstance(event, ToWorker):
                self._handle(event)  # early data from a faster peer

    # ------------------------------------------------------------------ set-up
    def _register(self) -> Deployment:
        b = self.bootstrap
        self.listener = socket.create_server((b.bind_host, 0), backlog=64)
        self.control = socket.create_connection((b.jobmaster_host, b.jobmaster_port), timeout=30)
        self.control.settimeout(None)
        protocol.configure_socket(self.control)
        protocol.send_frame(self.control, protocol.HELLO, 0, protocol.hello_payload(b.token, self.index))
        threading.Thread(target=self._control_reader, name="epochal-control", daemon=True).start()
        self.send_control(Register(
            worker=self.index, task_attempt=self.task_attempt, job_attempt=self.job_attempt, pid=os.getpid(),
            host=self.control.getsockname()[0], data_port=self.listener.getsockname()[1],
            hostname=socket.gethostname()))
        message = self._await_control(Deploy, b.registration_timeout + 30)
        self.peer_addresses: dict[int, tuple[str, int]] = message.peers
        deployment: Deployment = cloudpickle.loads(message.deployment)
        self.mode = deployment.checkpoint.mode if deployment.checkpoint.enabled else NONE
        if deployment.storage_uri:
            self.storage = CheckpointStorage(deployment.storage_uri)
        restore = message.restore
        if restore is not None:
            self.restore = RestoreSource(CheckpointStorage(restore.storage), restore.checkpoint_id, restore.metadata)
        if deployment.hook is not None:
            self.hook = deployment.hook
            self.hook_points = deployment.hook.points(self.index, self.job_attempt)
        return deployment

    def _connect_peers(self, timeout: float) -> None:
        """One connection per pair: connect to lower-numbered workers, accept higher ones."""
        token = self.bootstrap.token
        sockets: dict[int, socket.socket] = {}
        for peer, (host, port) in sorted(self.peer_addresses.items()):
            if peer < self.index:
                sock = socket.create_connection((host, port), timeout=timeout)
                sock.settimeout(None)
                protocol.configure_socket(sock)
                protocol.send_frame(sock, protocol.HELLO, 0, protocol.hello_payload(token, self.index))
                sockets[peer] = sock
        expected = {p for p in self.peer_addresses if p > self.index}
        deadline = time.monotonic() + timeout
        assert self.listener is not None
        while expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"workers {sorted(expected)} did not connect within {timeout:.0f} s")
            self.listener.settimeout(remaining)
            sock, _ = self.listener.accept()
            try:
                sock.settimeout(5)
                peer = protocol.check_hello(protocol.read_frame(sock.makefile("rb", buffering=0)), token)
                if peer not in expected:
                    raise protocol.ProtocolError(f"unexpected worker index {peer}")
            except (OSError, protocol.ProtocolError):
                sock.close()  # a stray or foreign connection: ignore it and keep waiting
                continue
            sock.settimeout(None)
            protocol.configure_socket(sock)
            sockets[peer] = sock
            expected.discard(peer)
        self.listener.close()  # nobody else may connect once the mesh is complete
        self.listener = None
        for peer, sock in sockets.items():
            self.peers[peer] = PeerConnection(peer, sock, self.mailbox.put)

    def _build(self, deployment: Deployment) -> None:
        """Create this worker's subtasks, their channels and open their operators."""
        graph = deployment.graph
        job = graph.job
        config = deployment.config
        local = LocalTransport(self._deliver_local)
        aligned = self.mode in (EXACTLY_ONCE, SYNCHRONOUS)
        if aligned:
            self.spill = AlignmentSpill(config.alignment_memory_bytes, config.alignment_max_bytes,
                                        config.alignment_spill_dir)
        for channel in graph.channels:
            producer_worker = graph.worker_of(channel.producer)
            consumer_worker = graph.worker_of(channel.consumer)
            if producer_worker == self.index:
                transport = local if consumer_worker == self.index else self.peers[consumer_worker]
                # a loop's back-edge never runs out of credit: a loop cannot deadlock on itself
                credit = UNBOUNDED_CREDIT if job.edges[channel.edge].back_edge else config.channel_credits
                self.out_channels[channel.id] = OutputChannel(channel.id, credit, transport,
                                                              edge_names(job, channel.edge))
        loop_of_vertex = {v: loop for loop in job.loops for v in loop.vertices}
        for vertex_id, index in graph.subtasks_of_worker(self.index):
            vertex = job.vertices[vertex_id]
            subtask = Subtask(vertex_id, index, vertex.parallelism, vertex.name)
            try:
                subtask.open(job.nodes, vertex.nodes, job.max_parallelism, self._send_to_driver,
                             attempt=self.job_attempt, checkpointing=self.mode != NONE, restore=self.restore)
            except CheckpointError as error:
                raise RestoreFailed(error, self.restore.checkpoint_id if self.restore else None) from error
            loop = loop_of_vertex.get(vertex_id)
            if loop is not None:
                head = subtask.runners[0].operator if vertex_id == loop.head_vertex else None
                subtask.loop = LoopRole(loop.id, head if isinstance(head, IterationHead) else None)
            for edge_id, output in subtask.connect_outputs(job, graph.outputs, self.out_channels, config.batch_size):
                if subtask.loop is not None and job.edges[edge_id].loop == subtask.loop.loop_id:
                    subtask.loop.loop_outputs.append(output)
            for channel_id in graph.inputs[(vertex_id, index)]:
                channel = graph.channels[channel_id]
                producer_worker = graph.worker_of(channel.producer)
                if producer_worker == self.index:
                    give = self.out_channels[channel_id].add_credit
                else:
                    give = partial(self.peers[producer_worker].send_credit, channel_id)
                input_channel = InputChannel(channel_id, subtask, give,
                                             AlignmentBuffer(self.spill) if self.spill is not None else None)
                edge = job.edges[channel.edge]
                input_channel.back_edge = edge.back_edge
                if subtask.loop is not None and not edge.back_edge:
                    if edge.loop == subtask.loop.loop_id:
                        subtask.loop.loop_inputs.add(channel_id)
                    else:
                        subtask.loop.external_inputs.add(channel_id)
                self.in_channels[channel_id] = input_channel
                subtask.inputs.append(input_channel)
            if vertex.source is not None:
                subtask.attach_source(SourceReader(assign_splits(graph.splits[vertex_id], index, vertex.parallelism)))
                self.sources.append(subtask)
            elif self.mode != NONE:
                subtask.barriers = BarrierHandler(
                    subtask.inputs, aligned=aligned, on_aligned=partial(self._on_aligned, subtask),
                    on_released=self._schedule_buffered,
                    back_edges=[c for c in subtask.inputs if c.back_edge],
                    on_loop_closed=partial(self._on_loop_closed, subtask))
            self.subtasks.append(subtask)

    # ------------------------------------------------------------------ mailbox loop
    def _deliver_local(self, channel_id: int, is_batch: bool, item: Any) -> None:
        channel = self.in_channels[channel_id]
        channel.queue.append((is_batch, item))
        if not channel.scheduled:
            channel.scheduled = True
            self.ready.append(channel)

    def _handle(self, event: MailboxEvent) -> None:
        """Dispatch one mailbox event or control message by its type (unknown ones are ignored)."""
        _MAILBOX.handlers.get(type(event), Worker._ignore)(self, event)

    @_MAILBOX.on(PeerData)
    def _on_data(self, event: PeerData) -> None:
        self._deliver_local(event.channel, True, event.batch)

    @_MAILBOX.on(PeerEvent)
    def _on_event(self, event: PeerEvent) -> None:
        self._deliver_local(event.channel, False, event.event)

    @_MAILBOX.on(PeerCredit)
    def _on_credit(self, event: PeerCredit) -> None:
        self.out_channels[event.channel].add_credit(event.credit)

    @_MAILBOX.on(PeerClosed)
    def _on_peer_closed(self, event: PeerClosed) -> None:
        if not self._all_finished():
            raise PeerLost(event.peer, event.reason)

    @_MAILBOX.on(JobMasterLost)
    def _on_jobmaster_lost(self, event: JobMasterLost) -> None:
        raise WorkerStopped(event.reason)

    @_MAILBOX.on(TriggerCheckpoint)
    def _on_trigger(self, message: TriggerCheckpoint) -> None:
        self._trigger_checkpoint(message.checkpoint_id)

    @_MAILBOX.on(CheckpointComplete)
    def _on_complete(self, message: CheckpointComplete) -> None:
        self._checkpoint_complete(message.checkpoint_id)

    @_MAILBOX.on(CheckpointAbort)
    def _on_abort(self, message: CheckpointAbort) -> None:
        self._checkpoint_aborted(message.checkpoint_id)

    @_MAILBOX.on(StartLoopProbe)
    def _on_start_probe(self, message: StartLoopProbe) -> None:
        self._start_probe(message.loop, message.round)

    @_MAILBOX.on(EndLoop)
    def _on_end_loop(self, message: EndLoop) -> None:
        self._end_loop(message.loop)

    @_MAILBOX.on(Cancel, Shutdown)
    def _on_stop(self, message: Cancel | Shutdown) -> None:
        raise WorkerStopped(message.reason)

    @_MAILBOX.on(Deploy, Start, Reject)
    def _ignore(self, event: Any) -> None:
        """Messages that only answer a starting worker (see ``_await_control``); a running
        worker ignores them."""

    def _drain_mailbox(self, timeout: float | None) -> bool:
        """Handle queued events; wait up to ``timeout`` for the first one if none is queued."""
        get = self.mailbox.get_nowait
        try:
            event = get() if timeout is None else self.mailbox.get(timeout=timeout)
        except queue.Empty:
            return False
        handlers = _MAILBOX.handlers
        ignore = Worker._ignore
        handlers.get(type(event), ignore)(self, event)
        for _ in range(10_000):
            try:
                event = get()
            except queue.Empty:
                break
            handlers.get(type(event), ignore)(self, event)
        return True

    def _run_inputs(self, budget: int) -> bool:
        """Process up to ``budget`` queued batches, round robin over ready input channels.

        A channel blocked by barrier alignment is not processed: what it delivered is moved into
        its alignment buffer and its credit returned. An unblocked channel replays its buffer
        before its queue."""
        worked = False
        ready = self.ready
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
                    self._on_feedback(subtask, item)
                subtask.on_batch(item)
                if credit:
                    channel.return_credit(1)
                budget -= 1
            elif type(item) is LoopProbe:
                self._on_probe(subtask, channel, item)
            else:
                subtask.on_event(channel, item)
                if subtask.loop is not None and type(item) is EndOfPartition:
                    self._on_loop_input_ended(subtask)
                if subtask.finished:
                    self._snapshot_finished(subtask)
            worked = True
            if channel.queue or buffered:
                ready.append(channel)
            else:
                channel.scheduled = False
        return worked

    def _buffer_blocked(self, channel: InputChannel) -> None:
        """Move a blocked channel's queue into its alignment buffer and return the credit."""
        queue_, buffer = channel.queue, channel.buffered
        batches = 0
        while queue_:
            is_batch, item = queue_.popleft()
            buffer.add(is_batch, item)
            batches += is_batch
        channel.scheduled = False
        if batches:
            channel.return_credit(batches)
        spill = self.spill
        if spill is not None and spill.over_limit:
            self._give_up_alignment(channel.subtask, spill)

    def _give_up_alignment(self, subtask: Subtask, spill: AlignmentSpill) -> None:
        """Blocked inputs hold more than ``alignment_max_bytes``: decline the pending checkpoint
        and release the alignment (its buffers are replayed), rather than fill the disk."""
        barriers = subtask.barriers
        checkpoint_id = barriers.pending if barriers is not None else None
        if barriers is None or checkpoint_id is None:
            return
        reason = (f"alignment of {subtask.name}#{subtask.index} buffered {spill.buffered} bytes, more than "
                  f"alignment_max_bytes={spill.max_bytes}")
        barriers.abort(checkpoint_id, reason)
        self.send_control(Decline(checkpoint_id, self.index, reason))

    def _schedule_buffered(self, channels: list[InputChannel]) -> None:
        """Alignment ended: unblocked channels with buffered or queued data become ready."""
        for channel in channels:
            channel.buffered.reset_stats()  # counted by _on_aligned, or void for an aborted alignment
            if (channel.buffered or channel.queue) and not channel.scheduled:
                channel.scheduled = True
                self.ready.append(channel)

    def _run_sources(self, batch_size: int) -> bool:
        worked = False
        if self.halted_sources:
            return False  # synchronous checkpoint in progress: sources wait for its completion
        for subtask in self.sources:
            if not subtask.finished and not subtask.backlogged:
                count = subtask.poll_source(batch_size)
                self.records_processed += count
                if subtask.finished:
                    self._snapshot_finished(subtask)
                worked = worked or count > 0 or subtask.finished
        return worked

    # ------------------------------------------------------------------ loops
    def _on_feedback(self, subtask: Subtask, batch: list[Any]) -> None:
        """A loop head received records over its back-edge: log them for every snapshot in
        progress (Algorithm 2) and note that the loop was not quiet in this probe round."""
        role = subtask.loop
        assert role is not None
        role.dirty = True
        if role.logs:
            for log in role.logs.values():
                log.extend(batch)
            self._fault("back_edge_log", max(role.logs))

    def _on_probe(self, subtask: Subtask, channel: InputChannel, probe: LoopProbe) -> None:
        role = subtask.loop
        if role is None:
            return
        if channel.back_edge:  # the probe came around: vote for this round
            if role.head is not None and probe.round == role.probe_round:
                self.send_control(LoopVote(role.loop_id, probe.round, subtask.index, quiet=not role.dirty))
            return
        role.probes.setdefault(probe.round, set()).add(channel.id)
        self._forward_probes(subtask)

    def _forward_probes(self, subtask: Subtask) -> None:
        """Pass a probe round on once every loop input delivered it and every input from outside
        the loop ended (nothing can enter the loop any more)."""
        role = subtask.loop
        assert role is not None
        channels = self.in_channels
        if not all(channels[c].ended for c in role.external_inputs):
            return
        for probe_round in sorted(role.probes):
            arrived = role.probes[probe_round]
            if not all(c in arrived or channels[c].ended for c in role.loop_inputs):
                return
            del role.probes[probe_round]
            for output in role.loop_outputs:
                output.send_event(LoopProbe(role.loop_id, probe_round))

    def _on_loop_input_ended(self, subtask: Subtask) -> None:
        role = subtask.loop
        assert role is not None
        if role.probes:
            self._forward_probes(subtask)
        if role.head is None or role.ready_sent or subtask.finished:
            return
        if all(c.ended for c in subtask.inputs if not c.back_edge):
            # nothing more enters the loop: termination detection may begin, and checkpoints
            # can no longer arrive as barriers, so the head starts the expected ones itself
            role.ready_sent = True
            self.send_control(LoopReady(role.loop_id, subtask.index))
            if subtask.barriers is not None:
                for checkpoint_id in self.expected_checkpoints:
                    if checkpoint_id > subtask.last_snapshot:
                        subtask.barriers.start(checkpoint_id)

    def _loop_heads(self, loop_id: int) -> list[Subtask]:
        return [s for s in self.subtasks if s.loop is not None and s.loop.head is not None
                and s.loop.loop_id == loop_id and not s.finished]

    def _start_probe(self, loop_id: int, probe_round: int) -> None:
        for subtask in self._loop_heads(loop_id):
            role = subtask.loop
            assert role is not None
            role.dirty = False
            role.probe_round = probe_round
            for output in role.loop_outputs:
                output.send_event(LoopProbe(loop_id, probe_round))

    def _end_loop(self, loop_id: int) -> None:
        """The loop is empty and nothing can enter it: the heads end it (end of partition goes
        around, the tail's comes back and the head's back-edge ends)."""
        for subtask in self._loop_heads(loop_id):
            subtask.finish()
            self._snapshot_finished(subtask)

    def _replay_back_edge_logs(self) -> None:
        """After a restore, loop heads re-emit their logged in-transit records before new input."""
        for subtask in self.subtasks:
            head = subtask.loop.head if subtask.loop is not None else None
            if head is not None and head.replay:
                records, head.replay = head.replay, []
                self.records_processed += len(records)
                subtask.on_batch(records)

    # ------------------------------------------------------------------ checkpoints
    def _fault(self, point: str, checkpoint_id: int | None = None) -> None:
        """Tell the hook (fault injection in chaos tests) that this worker reached ``point``."""
        if point in self.hook_points:
            self.hook.reached(HookPoint(  # type: ignore[union-attr]
                point, self.index, self.job_attempt, checkpoint_id, time.monotonic() - self.processing_started,
                self.records_processed))

    def _trigger_checkpoint(self, checkpoint_id: int) -> None:
        """The coordinator starts ``checkpoint_id``: sources snapshot their positions and emit the
        barrier; finished subtasks snapshot their final state; the rest wait for barriers."""
        self.expected_checkpoints.append(checkpoint_id)
        if self.mode == SYNCHRONOUS:
            self.halted_sources.add(checkpoint_id)
        for subtask in self.subtasks:
            if subtask.finished:
                self._snapshot_finished(subtask)
            elif subtask.reader is not None:
                subtask.broadcast_event(CheckpointBarrier(checkpoint_id, time.time()))
                self._snapshot(subtask, checkpoint_id, 0.0)
            elif subtask.loop is not None and subtask.loop.head is not None and subtask.barriers is not None:
                subtask.barriers.start(checkpoint_id)  # only if no barrier can bring it any more

    def _on_aligned(self, subtask: Subtask, checkpoint_id: int, alignment: float) -> None:
        self._fault("alignment", checkpoint_id)
        subtask.broadcast_event(CheckpointBarrier(checkpoint_id, time.time()))
        buffered = spilled = 0
        for channel in subtask.inputs:
            if channel.buffered is not None:
                b, s = channel.buffered.reset_stats()
                buffered, spilled = buffered + b, spilled + s
        stats = {"buffered_bytes": buffered, "spilled_bytes": spilled}
        role = subtask.loop
        if role is not None and role.head is not None and self.deployment.config.iteration_log:  # type: ignore[union-attr]
            # Algorithm 2: the state copy is taken now; the snapshot is complete when the
            # back-edge log is (the barrier came back around the loop)
            role.held[checkpoint_id] = self._capture(subtask, checkpoint_id, alignment, stats)
            role.logs[checkpoint_id] = []
            return
        self._snapshot(subtask, checkpoint_id, alignment, stats)

    def _on_loop_closed(self, subtask: Subtask, checkpoint_id: int) -> None:
        """Barrier ``checkpoint_id`` came back to a loop head: its log joins the held state copy."""
        role = subtask.loop
        assert role is not None and role.head is not None
        log = role.logs.pop(checkpoint_id, [])
        held = role.held.pop(checkpoint_id, None)
        if held is None:
            return
        parts = role.head.log_state(log, self.deployment.graph.job.max_parallelism)  # type: ignore[union-attr]
        mine = held.captured[role.head.uid]
        if parts["keyed"]:
            mine["keyed"] = {**(mine.get("keyed") or {}), **parts["keyed"]}
        if parts["operator"]:
            mine["operator"] = {**(mine.get("operator") or {}), **parts["operator"]}
        held.stats["loop_log_records"] = len(log)
        self._submit_upload(held)

    def _snapshot_finished(self, subtask: Subtask) -> None:
        """A finished subtask's state is final: it answers every expected checkpoint with it."""
        for checkpoint_id in self.expected_checkpoints:
            if checkpoint_id > subtask.last_snapshot:
                self._snapshot(subtask, checkpoint_id, 0.0)

    def _capture(self, subtask: Subtask, checkpoint_id: int, alignment: float,
                 alignment_stats: dict[str, int] | None = None) -> SnapshotUpload:
        """The synchronous part of a snapshot, as an upload job."""
        started = time.monotonic()
        captured = subtask.capture(checkpoint_id)
        sync = time.monotonic() - started
        self._fault("after_sync", checkpoint_id)
        stats: dict[str, float] = {"alignment_s": alignment, "sync_s": sync, **(alignment_stats or {})}
        if subtask.reader is not None:
            stats["source_records"] = subtask.records_read  # what this snapshot's positions cover
        return SnapshotUpload(checkpoint_id, subtask.vertex_id, subtask.index, captured, stats)

    def _snapshot(self, subtask: Subtask, checkpoint_id: int, alignment: float,
                  alignment_stats: dict[str, int] | None = None) -> None:
        self._submit_upload(self._capture(subtask, checkpoint_id, alignment, alignment_stats))

    def _submit_upload(self, job: SnapshotUpload) -> None:
        if self.mode == SYNCHRONOUS:
            self._upload(job)  # the baseline writes state on the processing thread
        else:
            self.uploads.put(job)

    def _upload_loop(self) -> None:
        while True:
            job = self.uploads.get()
            if job is None:
                return
            self._upload(job)

    def _upload(self, job: SnapshotUpload) -> None:
        """Asynchronous part: serialise and write the captured state, then acknowledge."""
        checkpoint_id = job.checkpoint_id
        started = time.monotonic()
        try:
            if "during_upload" in self.hook_points:
                self._fault_during_upload(checkpoint_id, job.subtask)
            handles = materialize(self.storage, checkpoint_id, job.subtask, job.captured)  # type: ignore[arg-type]
        except Exception as error:
            self.send_control(Decline(checkpoint_id, self.index, f"{type(error).__name__}: {error}"))
            return
        stats = {**job.stats, "async_s": time.monotonic() - started, "bytes": handle_bytes(handles)}
        self.send_control(Ack(checkpoint_id, job.vertex, job.subtask, self.index, handles, stats))
        self._fault("after_ack", checkpoint_id)

    def _fault_during_upload(self, checkpoint_id: int, index: int) -> None:
        """Write part of the snapshot, then crash: the checkpoint must never complete."""
        self.storage.write_file(checkpoint_id, f"partial-{self.index}-{index}", b"partial")  # type: ignore[union-attr]
        self._fault("during_upload", checkpoint_id)

    def _checkpoint_complete(self, checkpoint_id: int) -> None:
        self.expected_checkpoints = [c for c in self.expected_checkpoints if c > checkpoint_id]
        self.halted_sources = {c for c in self.halted_sources if c > checkpoint_id}
        self._fault("before_commit", checkpoint_id)
        for subtask in self.subtasks:
            subtask.notify_complete(checkpoint_id)
        if self.reported_finished:
            self.send_control(Committed(checkpoint_id, self.index))

    def _checkpoint_aborted(self, checkpoint_id: int) -> None:
        self.expected_checkpoints = [c for c in self.expected_checkpoints if c != checkpoint_id]
        self.halted_sources.discard(checkpoint_id)
        for subtask in self.subtasks:
            subtask.notify_aborted(checkpoint_id)
            if subtask.loop is not None:
                subtask.loop.logs.pop(checkpoint_id, None)
                subtask.loop.held.pop(checkpoint_id, None)

    def _flush(self) -> None:
        for subtask in self.subtasks:
            if not subtask.finished:
                subtask.flush()

    def _all_finished(self) -> bool:
        return all(s.finished for s in self.subtasks)

    def _drained(self) -> bool:
        return not any(c.pending for c in self.out_channels.values())

    def _loop(self) -> None:
        config = self.deployment.config  # type: ignore[union-attr]
        batch_size = config.batch_size
        buffer_timeout = config.buffer_timeout
        last_flush = time.monotonic()
        self.processing_started = last_flush
        self._replay_back_edge_logs()
        timed_fault = "time" in self.hook_points or "records" in self.hook_points
        processing_reported = False
        while True:
            if timed_fault:
                self._fault("time")
                self._fault("records")
            worked = self._drain_mailbox(None)
            worked = self._run_inputs(32) or worked
            worked = self._run_sources(batch_size) or worked
            if not processing_reported and self.records_processed:
                processing_reported = True  # the JobMaster times recovery up to the first record
                self.send_control(Processing(self.index))
            now = time.monotonic()
            if not worked or now - last_flush >= buffer_timeout:
                self._flush()
                last_flush = now
            if not self.reported_finished and self._all_finished() and self._drained():
                self.reported_finished = True
                self.send_control(Finished(self.metrics()))
            if not worked:
                idle_sources = any(not s.finished for s in self.sources)
                self._drain_mailbox(0.005 if idle_sources else 0.2)

    # ------------------------------------------------------------------ driver-facing
    def _send_to_driver(self, collect_id: str | None, payload: CollectPayload) -> None:
        # only collect sinks send, and each has a collect id
        self.send_control(Collect(cast(str, collect_id), self.index, payload))

    def metrics(self) -> Metrics:
        """A snapshot of counters, sent with heartbeats and at the end."""
        operators = {}
        counters: dict[str, int] = {"late_records_dropped": 0}
        for subtask in list(self.subtasks):
            for runner in subtask.runners:
                operators[f"{runner.name}#{subtask.index}"] = runner.records_in
                for name, value in runner.operator.counters().items():
                    counters[name] = counters.get(name, 0) + value
        pending = sum(len(c.pending) for c in list(self.out_channels.values()))
        queued = sum(len(c.queue) for c in list(self.in_channels.values()))
        return {
            "worker": self.index, "pid": os.getpid(), "records_processed": self.records_processed,
            "source_records": sum(s.records_read for s in list(self.sources)), **counters,
            "operators": operators, "pending_batches": pending, "queued_batches": queued,
            "rss_bytes": _rss_bytes(), "uptime": time.monotonic() - self.started,
            "bytes_sent": sum(p.bytes_sent for p in list(self.peers.values())),
            "alignment_buffered_bytes": self.spill.buffered_total if self.spill is not None else 0,
            "alignment_spilled_bytes": self.spill.spilled_total if self.spill is not None else 0,
        }

    def _report_failure(self, failure: Failed) -> None:
        try:
            self.send_control(failure)
        except OSError:
            return
        try:  # give the JobMaster a moment to cancel everyone, so peers do not report us as lost
            self._await_control(Cancel, 5.0)
        except Exception:
            pass

    def run(self) -> dict[str, Any]:
        """Run until the job ends; returns a summary for the Spark task result."""
        status = "finished"
        try:
            self.deployment = self._register()
            self._connect_peers(self.deployment.config.connect_timeout)
            for peer in self.peers.values():
                peer.start()
            self._build(self.deployment)
            self.send_control(Ready(self.index))
            self._await_control(Start, self.deployment.config.connect_timeout + 30)
            threading.Thread(target=self._heartbeat_loop, args=(self.deployment.config.heartbeat_interval,),
                             name="epochal-heartbeat", daemon=True).start()
            threading.Thread(target=self._upload_loop, name="epochal-uploader", daemon=True).start()
            self._loop()
        except WorkerStopped as stop:
            status = "finished" if self.reported_finished else f"stopped: {stop}"
        except UserFunctionError as error:
            status = "failed"
            self._report_failure(Failed("user", f"{type(error.error).__name__}: {error.error}", self.index,
                                        operator=error.operator, where=error.where,
                                        traceback=user_traceback(error.error)))
        except RestoreFailed as error:
            status = "failed"
            self._report_failure(Failed("restore", str(error), self.index, file=error.path,
                                        checkpoint_id=error.checkpoint_id))
        except PeerLost as error:
            status = "failed"
            self._report_failure(Failed("peer_lost", str(error), self.index, peer=error.peer))
        except Exception as error:  # an epochal bug or an environment problem
            status = "failed"
            if self.control is not None:
                self._report_failure(Failed("internal", f"{type(error).__name__}: {error}", self.index,
                                            traceback=traceback.format_exc()))
            else:
                raise
        finally:
            self.stopped.set()
            self.uploads.put(None)
            self._close()
        return {"worker": self.index, "attempt": self.task_attempt, "status": status, "metrics": self.metrics()}

    def _close(self) -> None:
        for subtask in self.subtasks:
            subtask.close()
        for peer in self.peers.values():
            peer.close()
        if self.spill is not None:
            self.spill.close()
        for sock in (self.listener, self.control):
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass


def _rss_bytes() -> int:
    """Resident memory of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def run_worker_partition(bootstrap: Bootstrap, _: Any) -> Any:
    """Spark entry point: ``mapPartitions`` calls this once per task; it runs one worker."""
    from pyspark import TaskContext

    context = TaskContext.get()
    index = context.partitionId() if context is not None else 0
    task_attempt = context.attemptNumber() if context is not None else 0
    summary = Worker(bootstrap, index, task_attempt).run()
    return iter([summary])
