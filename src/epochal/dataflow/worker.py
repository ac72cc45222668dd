"""The worker's driver: one long-lived Spark task that hosts subtasks and runs them in a mailbox loop.

Life of a worker (see docs/architecture.md):

1. open a data port, connect to the JobMaster, prove the job token, register;
2. receive the deployment (the execution graph) and the peers' addresses;
3. open one TCP connection to every other worker (token checked before any unpickling);
4. report ready, wait for start, then run the mailbox loop until the job finishes, is
   cancelled, or fails.

The protocol decisions (phases and deadlines, when each subtask snapshots, loop probes and
back-edge logs, what to report) belong to the pure :class:`~epochal.dataflow.worker_machine.WorkerMachine`.
This driver owns what the machine may not: the sockets (:mod:`epochal.runtime.host.links`), the
threads, the clock, the operators and the data path. It feeds the machine events and carries
out the instructions it returns (``_DO``, dispatched by type).

One thread, the mailbox loop, runs all operators, so user code never sees concurrency.
Helper threads only read sockets (turning frames into mailbox events), send heartbeats and
upload snapshots. A worker process imports no driver code (``epochal.control``,
``epochal.api``); fault injection reaches it as the deployment's hook (:mod:`epochal.runtime.host.hooks`).
"""

from __future__ import annotations

import queue
import time
from typing import Any, cast

import cloudpickle

from epochal.config import FORK, HEAP, NONE, SYNCHRONOUS
from epochal.connectors.memory import CollectPayload
from epochal.dataflow.checkpointing.events import (
    AbortAlignment,
    Capture,
    EmitBarrier,
    FinishSubtask,
    LoopClosed,
    NotifyAborted,
    NotifyComplete,
    SendProbe,
    SnapshotHeld,
    StartAlignment,
    SubtaskAligned,
    SubtaskFinished,
    SubtaskKey,
    UploadWithLog,
)
from epochal.dataflow.checkpointing.messages import Decline, SavepointTarget
from epochal.dataflow.checkpointing.uploads import Uploader, add_back_edge_log, capture, capture_forked
from epochal.dataflow.dataplane.datapath import DataPath, alignment_stats, key_of
from epochal.dataflow.dataplane.tasks import Subtask
from epochal.dataflow.dataplane.wiring import WorkerCallbacks, wire_worker
from epochal.dataflow.protocol import (
    Built,
    Collect,
    ConnectAndBuild,
    FinishSources,
    FirstRecord,
    Instruction,
    StartProcessing,
    WorkerDrained,
)
from epochal.dataflow.queries.server import KeyedSource, QueryServer
from epochal.dataflow.worker_machine import WorkerMachine, WorkerPhase
from epochal.errors import RestoreError
from epochal.messages import Dispatch, Failed, ToJobMaster
from epochal.plan.execution import Deployment
from epochal.runtime.host.events import Registered
from epochal.runtime.host.links import Bootstrap
from epochal.runtime.host.mailbox import MailboxEvent, PeerCredit, PeerData, PeerEvent
from epochal.runtime.host.memory_limit import OUT_OF_MEMORY
from epochal.runtime.host.reports import PeerLost, WorkerStopped
from epochal.runtime.host.shell import WorkerShell, register_shell_executors
from epochal.runtime.operators.inband import CheckpointBarrier, LoopProbe
from epochal.state.snapshot import RestoreSource
from epochal.state.storage import CheckpointStorage, SavepointStorage, storage_of

__all__ = ["Bootstrap", "PeerLost", "RestoreError", "Worker", "WorkerStopped"]

#: The data path's own mailbox events (everything else goes to the machine).
_DATA = Dispatch("worker data path")
#: The driver's executors: instruction type -> method.
_DO = Dispatch("worker instructions")


class Worker(WorkerShell):
    """Runs the subtasks that slot sharing places on worker ``index``; ``task_attempt`` is Spark's
    attempt number of the task running it (the job attempt comes with the bootstrap)."""

    instructions = _DO

    def __init__(self, bootstrap: Bootstrap, index: int, task_attempt: int = 0) -> None:
        super().__init__(bootstrap, index, task_attempt)
        self.machine = WorkerMachine(index)
        self.data = DataPath(self._feed)
        self.by_key: dict[SubtaskKey, Subtask] = {}
        self.uploader: Uploader | None = None
        self.forked_snapshots = False  # snapshots taken by fork() (StateBackendConfig.snapshot)
        self.deployment: Deployment | None = None
        self.restore: RestoreSource | None = None
        self.storage: CheckpointStorage | None = None
        self.mode = NONE
        #: answers queries of the queryable states (docs/queryable_state.md), polled between batches
        self.queries: QueryServer | None = None

    @property
    def reported_finished(self) -> bool:
        return self.machine.reported_finished

    def _finished(self) -> bool:
        return self.machine.reported_finished

    def _records(self) -> int:
        return self.data.records_processed

    # ------------------------------------------------------------------ events and instructions
    def _handle(self, event: MailboxEvent) -> None:
        """The data path's events are handled here; every other event goes to the machine."""
        handler = _DATA.handlers.get(type(event))
        if handler is not None:
            handler(self, event)
        else:
            self._execute(self.machine.handle(event))

    def _execute(self, instructions: list[Instruction]) -> None:
        for instruction in instructions:
            _DO.handlers[type(instruction)](self, instruction)

    # ------------------------------------------------------------------ set-up
    def _serve(self) -> None:
        self._feed(Registered(time.monotonic(), self.bootstrap.registration_timeout + 30))
        self._pump(lambda: self.machine.phase is WorkerPhase.RUNNING)
        self._loop()

    @_DO.on(ConnectAndBuild)
    def _connect_and_build(self, instruction: ConnectAndBuild) -> None:
        message = instruction.deploy
        deployment: Deployment = cloudpickle.loads(message.deployment)
        self.deployment = deployment
        config = deployment.config
        self._limit_memory(config.worker_memory_limit_bytes)  # before restoring or building any state
        self.mode = deployment.checkpoint.mode if deployment.checkpoint.enabled else NONE
        if deployment.storage_uri:
            self.storage = CheckpointStorage(deployment.storage_uri)
        if message.restore is not None:
            point = message.restore
            self.restore = RestoreSource(storage_of(point.storage, point.metadata), point.checkpoint_id,
                                         point.metadata)
        self._use_hook(deployment.hook)
        self._connect_mesh(message.peers, config.connect_timeout)
        callbacks = WorkerCallbacks(self.data.deliver_local, self._send_to_driver, self._on_aligned,
                                    self.data.schedule_buffered, self._on_loop_closed)
        wired = wire_worker(self.index, deployment, self.mode, self.peers, callbacks, self.job_attempt, self.restore)
        self.data.attach(wired)
        self.by_key = {key_of(s): s for s in wired.subtasks}
        self._serve_queries(deployment)
        self.uploader = Uploader(self.index, self.storage, self.send_control, self._reach, self.hook_points,
                                 synchronous=self.mode == SYNCHRONOUS,
                                 written=lambda vertex, index, checkpoint_id, handles:
                                 self.by_key[(vertex, index)].snapshot_written(checkpoint_id, handles))
        backend = deployment.state_backend  # (RocksDB writes hard-linked files from a thread)
        self.forked_snapshots = backend.kind == HEAP and backend.snapshot == FORK and self.mode != SYNCHRONOUS
        self._feed(Built(time.monotonic(), config.connect_timeout + 30, tuple(wired.infos), self.mode,
                            config.iteration_log))

    def _serve_queries(self, deployment: Deployment) -> None:
        """The query server, its keyed operators (and, after a restore, their restored state as the
        committed view); it answers between batches from now on."""
        keyed = [KeyedSource(runner.uid, subtask.index, subtask.parallelism, runner.keyed_state)
                 for subtask in self.data.subtasks for runner in subtask.runners if runner.keyed_state is not None]
        if not keyed:  # nothing to query here
            return
        self.queries = QueryServer(self.bootstrap.token, self.index, self.bootstrap.bind_host,
                                   deployment.graph.job.max_parallelism, self.mailbox)
        self.queries.attach(keyed, self.restore.checkpoint_id if self.restore is not None else None)
        self.data.safe_point = self.queries.poll

    @_DO.on(StartProcessing)
    def _start_processing(self, instruction: StartProcessing) -> None:
        if self.queries is not None:
            self.queries.serving()
        self._start_heartbeats(self.deployment.config.heartbeat_interval)  # type: ignore[union-attr]
        self.uploader.start()  # type: ignore[union-attr]

    # ------------------------------------------------------------------ data path events
    @_DATA.on(PeerData)
    def _on_data(self, event: PeerData) -> None:
        self.data.deliver_local(event.channel, True, event.batch)

    @_DATA.on(PeerEvent)
    def _on_event(self, event: PeerEvent) -> None:
        self.data.deliver_local(event.channel, False, event.event)

    @_DATA.on(PeerCredit)
    def _on_credit(self, event: PeerCredit) -> None:
        self.data.out_channels[event.channel].add_credit(event.credit, event.batch_size)

    def _drain_mailbox(self, timeout: float | None) -> bool:
        """Handle queued events; wait up to ``timeout`` for the first one if none is queued."""
        get = self.mailbox.get_nowait
        try:
            event = get() if timeout is None else self.mailbox.get(timeout=timeout)
        except queue.Empty:
            return False
        handle = self._handle
        handle(event)
        for _ in range(10_000):
            try:
                event = get()
            except queue.Empty:
                break
            handle(event)
        return True

    # ------------------------------------------------------------------ the subtasks' instructions
    @_DO.on(EmitBarrier)
    def _do_barrier(self, instruction: EmitBarrier) -> None:
        self.by_key[instruction.key].broadcast_event(CheckpointBarrier(instruction.checkpoint_id, time.time(),
                                                                       instruction.savepoint))

    @_DO.on(StartAlignment)
    def _do_start_alignment(self, instruction: StartAlignment) -> None:
        self.by_key[instruction.key].barriers.start(instruction.checkpoint_id)  # type: ignore[union-attr]

    @_DO.on(AbortAlignment)
    def _do_abort_alignment(self, instruction: AbortAlignment) -> None:
        self.by_key[instruction.key].barriers.abort(instruction.checkpoint_id, instruction.reason)  # type: ignore[union-attr]

    @_DO.on(SendProbe)
    def _do_probe(self, instruction: SendProbe) -> None:
        for output in self.by_key[instruction.key].loop.loop_outputs:  # type: ignore[union-attr]
            output.send_event(LoopProbe(instruction.loop_id, instruction.round))

    @_DO.on(FinishSubtask)
    def _do_finish(self, instruction: FinishSubtask) -> None:
        self.by_key[instruction.key].finish()

    @_DO.on(NotifyComplete)
    def _do_complete(self, instruction: NotifyComplete) -> None:
        fence = self.deployment.fence if self.deployment is not None else None
        if fence is not None and instruction.leader_epoch is not None and not fence.admits(instruction.leader_epoch):
            raise WorkerStopped(f"the commit of checkpoint {instruction.checkpoint_id} was refused: its leader (epoch "
                                f"{instruction.leader_epoch}) was superseded by epoch {fence.newest()}; this worker "
                                "of the deposed leader commits nothing more")
        for subtask in self.data.subtasks:
            subtask.notify_complete(instruction.checkpoint_id, instruction.savepoint)
        if self.queries is not None:
            self.queries.checkpoint_completed(instruction.checkpoint_id, instruction.savepoint)

    @_DO.on(FinishSources)
    def _do_finish_sources(self, instruction: FinishSources) -> None:
        """Stop with drain: every source ends its input now, as if its splits were exhausted."""
        for subtask in self.data.sources:
            if not subtask.finished:
                subtask.finish()
                self._feed(SubtaskFinished(key_of(subtask)))

    @_DO.on(NotifyAborted)
    def _do_aborted(self, instruction: NotifyAborted) -> None:
        if self.uploader is not None:  # its uploads not yet written are dropped or abandoned
            self.uploader.abort(instruction.checkpoint_id)
        for subtask in self.data.subtasks:
            subtask.notify_aborted(instruction.checkpoint_id)
        if self.queries is not None:
            self.queries.checkpoint_aborted(instruction.checkpoint_id)

    # ------------------------------------------------------------------ snapshots
    def _on_aligned(self, subtask: Subtask, checkpoint_id: int, alignment: float,
                    savepoint: SavepointTarget | None = None) -> None:
        self._feed(SubtaskAligned(key_of(subtask), checkpoint_id, alignment, alignment_stats(subtask), savepoint))

    def _on_loop_closed(self, subtask: Subtask, checkpoint_id: int) -> None:
        self._feed(LoopClosed(key_of(subtask), checkpoint_id))

    @_DO.on(Capture)
    def _do_capture(self, instruction: Capture) -> None:
        """The synchronous part of a snapshot, then its upload (or a hold at a loop head)."""
        subtask = self.by_key[instruction.key]
        storage = self.storage
        if instruction.savepoint is not None:  # written whole to the savepoint's own directory
            storage = self.uploader.savepoints.setdefault(  # type: ignore[union-attr]
                instruction.checkpoint_id, SavepointStorage(instruction.savepoint.location))
        if self.forked_snapshots and not instruction.hold:  # (a loop head holds its copy for its log)
            viewed = 0.0
            if self.queries is not None and instruction.savepoint is None:
                viewed = self._queryable_snapshot(subtask, instruction.checkpoint_id, {})
            forked = capture_forked(subtask, instruction, storage,  # type: ignore[arg-type]
                                    lambda point: self._reach(point, instruction.checkpoint_id))
            forked.stats["sync_s"] += viewed
            self._reach("after_sync", instruction.checkpoint_id)
            self.uploader.submit(forked)  # type: ignore[union-attr]
            return
        upload = capture(subtask, instruction)
        if self.queries is not None and instruction.savepoint is None:
            upload.stats["sync_s"] += self._queryable_snapshot(subtask, instruction.checkpoint_id, upload.captured)
        self._reach("after_sync", instruction.checkpoint_id)
        if instruction.hold:
            self._feed(SnapshotHeld(instruction.key, upload))
        else:
            self.uploader.submit(upload)  # type: ignore[union-attr]

    def _queryable_snapshot(self, subtask: Subtask, checkpoint_id: int, captured: dict[str, Any]) -> float:
        """At the barrier: the subtask's queryable states become checkpoint ``checkpoint_id``'s
        pending committed view. Returns the seconds it took (part of the snapshot's synchronous
        part: the processing thread waited for it)."""
        started = time.monotonic()
        self.queries.snapshot_taken(checkpoint_id,  # type: ignore[union-attr]
                                    [(r.keyed_state, r.uid) for r in subtask.runners if r.keyed_state is not None],
                                    captured)
        return time.monotonic() - started

    @_DO.on(UploadWithLog)
    def _do_upload_with_log(self, instruction: UploadWithLog) -> None:
        head = self.by_key[instruction.key].loop.head  # type: ignore[union-attr]
        assert head is not None
        add_back_edge_log(instruction.upload, head, instruction.log,
                          self.deployment.graph.job.max_parallelism)  # type: ignore[union-attr]
        self.uploader.submit(instruction.upload)  # type: ignore[union-attr]

    # ------------------------------------------------------------------ the mailbox loop
    def _loop(self) -> None:
        config = self.deployment.config  # type: ignore[union-attr]
        batch_size, buffer_timeout = config.batch_size, config.buffer_timeout
        data, machine, queries = self.data, self.machine, self.queries
        last_flush = self.processing_started = time.monotonic()
        data.replay_back_edge_logs()
        timed = [p for p in ("time", "records") if p in self.hook_points]
        processing_reported = False
        while True:
            for point in timed:
                self._reach(point)
            worked = self._drain_mailbox(None)
            if queries is not None:
                queries.poll()
            worked = data.run_inputs(32) or worked
            if not machine.sources_halted:  # else a synchronous checkpoint is in progress
                worked = data.run_sources(batch_size) or worked
            if data.timed:
                data.run_processing_time(time.time())
            if not processing_reported and data.records_processed:
                processing_reported = True
                self._feed(FirstRecord())
            now = time.monotonic()
            if not worked or now - last_flush >= buffer_timeout:
                data.flush()
                last_flush = now
            if not machine.reported_finished and data.finished:
                self._feed(WorkerDrained(self.metrics()))
            if not worked:
                idle_sources = any(not s.finished for s in data.sources)
                timeout = 0.005 if idle_sources else 0.2
                due = data.next_processing_time() if data.timed else None
                if due is not None:  # a timer, an async result: wake for it
                    timeout = max(0.0, min(timeout, due - time.time()))
                if queries is not None:  # wakes for a mailbox event or a query (handled next turn)
                    queries.wait(timeout)
                else:
                    self._drain_mailbox(timeout)

    # ------------------------------------------------------------------ driver-facing
    def send_control(self, message: ToJobMaster) -> None:
        """Send one message to the JobMaster (thread safe). A checkpoint that would be declined
        because an allocation failed under the memory limit (in a forked snapshot child or the
        uploader) fails the job instead: the limit was exceeded, and a decline that is tolerated
        would only repeat."""
        limit = self.memory_limit
        if isinstance(message, Decline) and limit is not None and limit.active \
                and any(text in message.reason for text in OUT_OF_MEMORY):
            where = f"the snapshot of checkpoint {message.checkpoint_id} ({message.reason})"
            message = Failed("internal", str(limit.exceeded(where)), self.index)
        super().send_control(message)

    def _send_to_driver(self, collect_id: str | None, payload: CollectPayload) -> None:
        # only collect sinks send, and each has a collect id
        self.send_control(Collect(cast(str, collect_id), self.index, payload))

    def metrics(self) -> dict[str, Any]:
        """A snapshot of counters, sent with heartbeats and at the end."""
        queries = self.queries
        return {**super().metrics(), **self.data.counters(),
                **({"queryable": queries.routes} if queries is not None else {})}

    def _close_body(self) -> None:
        if self.queries is not None:
            self.queries.close()
        if self.uploader is not None:
            self.uploader.stop()
        for subtask in self.data.subtasks:
            subtask.close()
        if self.data.spill is not None:
            self.data.spill.close()


register_shell_executors(_DO)
