"""The graph worker's driver: the body a Spark task runs for a ``graph`` job (papers/003 §2.1).

It registers with the JobMaster like any worker (:class:`~epochal.runtime.host.shell.WorkerShell`),
connects to its peers, reads its partition file, restores its checkpointed state if the attempt
restores one, and then serves its machine (:class:`~epochal.graph.worker_machine.GraphWorkerMachine`):
it computes supersteps with the partition's engine (:mod:`epochal.graph.engine`), sends each peer
its exchange over the peer connection, commits, writes checkpoint files, and at the halt writes
its results. Every protocol decision is the machine's; this module owns the sockets, files and
the engine.
"""

from __future__ import annotations

import time
from typing import Any, cast

import cloudpickle
import numpy as np

from epochal.errors import UserFunctionError
from epochal.graph import checkpoints
from epochal.graph.deployment import GraphDeployment, read_partition, write_result
from epochal.graph.engine import Engine, Exchange, VectorEngine, make_engine
from epochal.graph.local import program_layout
from epochal.graph.partition import Partition
from epochal.graph.program import SuperstepContext
from epochal.graph.protocol import (
    Assemble,
    Assembled,
    CheckpointFileWritten,
    Commit,
    CommitResync,
    Compute,
    Computed,
    ConnectAndLoad,
    ExchangeArrived,
    Loaded,
    PeerRejoined,
    RecoveryArrived,
    Rewind,
    SendRecovery,
    SendResync,
    StartHeartbeats,
    WriteCheckpointFile,
    WriteOutput,
)
from epochal.graph.recovery import (
    Migration,
    RecoveryBatch,
    migration_assemble,
    migration_start,
    moves_of,
    rebirth_assemble,
    rebirth_batches,
)
from epochal.graph.worker_machine import GraphPhase, GraphWorkerMachine
from epochal.messages import Dispatch, Finished
from epochal.runtime.host.events import Registered
from epochal.runtime.host.links import Bootstrap
from epochal.runtime.host.mailbox import PeerClosed, PeerEvent, PeerJoined
from epochal.runtime.host.shell import WorkerShell, register_shell_executors
from epochal.state.storage import CheckpointStorage

#: Peer-connection channels: a superstep's exchange, a resync after a restore, a recovery batch.
SUPERSTEP_CHANNEL, RESYNC_CHANNEL, RECOVERY_CHANNEL = 0, 1, 2
_NO_INT = np.zeros(0, dtype=np.int64)
#: the arrays of a partition without vertices (a replacement's shell, before it recovers)
_EMPTY_PARTITION = (_NO_INT, _NO_INT, np.zeros(1, dtype=np.int64), _NO_INT, None, np.zeros(1, dtype=np.int64), _NO_INT,
                    None, _NO_INT, _NO_INT)
_DO = Dispatch("graph worker instructions")


class GraphWorker(WorkerShell):
    """Runs one partition of a graph job."""

    instructions = _DO

    def __init__(self, bootstrap: Bootstrap, index: int, task_attempt: int = 0) -> None:
        super().__init__(bootstrap, index, task_attempt)
        self.machine = GraphWorkerMachine(index)
        self.deployment: GraphDeployment | None = None
        self.engine: Engine | None = None
        self.storage: CheckpointStorage | None = None
        self.restored_at = -1
        self.supersteps = 0
        #: replication: recovery batches by epoch, and a migration in progress
        self.batches: dict[int, list[RecoveryBatch]] = {}
        self.migration: Migration | None = None
        self.recoveries: list[dict[str, float]] = []
        #: seconds spent committing since the last superstep was computed (reported with the next)
        self.commit_s = 0.0
        self.recovery_started = 0.0
        #: the current recovery's seconds by phase (reported with ``Recovered``)
        self.recovery_phases: dict[str, float] = {}

    # ------------------------------------------------------------------ events and instructions
    def _handle(self, event: Any) -> None:
        if type(event) is PeerEvent:
            if event.channel == RECOVERY_CHANNEL:
                batch = cast(RecoveryBatch, event.event)
                self.batches.setdefault(batch.epoch, []).append(batch)
                self._feed(RecoveryArrived(batch.epoch, batch.sender))
                return
            exchange = cast(Exchange, event.event)
            if exchange.epoch < self.machine.epoch:
                return  # computed before a recovery rolled the superstep back
            self.engine.receive(exchange)  # type: ignore[union-attr]  # held until the commit
            self._feed(ExchangeArrived(exchange.superstep, exchange.sender, event.channel == RESYNC_CHANNEL))
        elif type(event) is PeerJoined:
            self._install_peer(event)
            self._feed(PeerRejoined(event.peer))
        elif type(event) is PeerClosed and not self._current_peer(event):
            return  # the connection of a worker that was replaced since
        else:
            self._feed(event)

    def _serve(self) -> None:
        self._feed(Registered(time.monotonic(), self.bootstrap.registration_timeout + 30))
        self._pump(lambda: False)  # until a StopWorker or a failure ends the run

    def _finished(self) -> bool:
        return self.machine.phase is GraphPhase.HALTED or self.machine.halted_at is not None

    def _records(self) -> int:
        return self.supersteps

    def metrics(self) -> dict[str, Any]:
        part = getattr(self.engine, "part", None)
        return {**super().metrics(), "supersteps": self.supersteps, "recoveries": list(self.recoveries),
                "vertices": part.num_masters if part is not None else 0,
                "replicas": int(part.replica_ids.size) if part is not None else 0}

    def _send(self, peer: int, channel: int, event: Any) -> None:
        """Send ``event`` to ``peer``. With replication a peer that died mid-send is not this
        worker's failure: its connection's end reaches the machine, the JobMaster recovers it."""
        try:
            self.peers[peer].send_event(channel, event)
        except OSError:
            if not self.machine.replicated:
                raise

    # ------------------------------------------------------------------ set-up
    @_DO.on(ConnectAndLoad)
    def _connect_and_load(self, instruction: ConnectAndLoad) -> None:
        message = instruction.deploy
        deployment: GraphDeployment = cloudpickle.loads(message.deployment)
        self.deployment = deployment
        self._use_hook(deployment.hook)
        if deployment.checkpoint_uri:
            self.storage = CheckpointStorage(deployment.checkpoint_uri)
        replicated = deployment.replication is not None
        self._connect_mesh(message.peers, deployment.config.connect_timeout, joining=message.joining,
                           replaceable=replicated, num_workers=deployment.num_workers)
        timeout = deployment.config.connect_timeout + 30
        if message.joining:  # a replacement: its part comes from the survivors (papers/003 §5.1)
            self._feed(Loaded(time.monotonic(), timeout, deployment.num_workers, False, True, tuple(self.peers)))
            return
        part = read_partition(deployment.work_uri, self.index)
        engine = make_engine(part, deployment.program, deployment.num_vertices)
        self.engine = engine
        restored = message.restore is not None
        if message.restore is not None:
            point = message.restore
            storage = CheckpointStorage(point.storage)
            files = checkpoints.read_chain(storage, point.metadata["workers"][str(self.index)])
            if isinstance(engine, VectorEngine):
                engine.restore(*checkpoints.vector_state(files, part.num_masters))
            else:
                engine.restore(*checkpoints.vertex_state(files, part.num_masters))
            self.restored_at = point.checkpoint_id
        self._feed(Loaded(time.monotonic(), timeout, deployment.num_workers, restored, replicated))

    @_DO.on(SendResync)
    def _send_resync(self, instruction: SendResync) -> None:
        exchanges = self.engine.resync(self.restored_at)  # type: ignore[union-attr]
        for peer, exchange in exchanges.items():
            if not self.deployment.resync_replicas:  # type: ignore[union-attr]
                exchange = Exchange(exchange.superstep, exchange.sender)  # the mechanism switched off
            self.peers[peer].send_event(RESYNC_CHANNEL, exchange)

    @_DO.on(CommitResync)
    def _commit_resync(self, instruction: CommitResync) -> None:
        self.engine.commit_resync()  # type: ignore[union-attr]

    @_DO.on(StartHeartbeats)
    def _start(self, instruction: StartHeartbeats) -> None:
        self.processing_started = time.monotonic()
        self._start_heartbeats(self.deployment.config.heartbeat_interval)  # type: ignore[union-attr]

    # ------------------------------------------------------------------ supersteps
    @_DO.on(Compute)
    def _compute(self, instruction: Compute) -> None:
        command, deployment = instruction.command, self.deployment
        assert deployment is not None and self.engine is not None
        ctx = SuperstepContext(command.superstep, deployment.num_vertices, self.index, deployment.num_workers,
                               dict(command.aggregates), final=command.final)
        started = time.perf_counter()
        try:
            out, report = self.engine.step(ctx)
        except Exception as error:
            raise UserFunctionError(type(deployment.program).__name__, error,
                                    where=f"vertex program '{type(deployment.program).__name__}' "
                                          f"in superstep {command.superstep}") from error
        computed = time.perf_counter()
        for peer, exchange in out.items():
            exchange.epoch = self.machine.epoch
            self._send(peer, SUPERSTEP_CHANNEL, exchange)
        report.phases = {"compute": computed - started, "send": time.perf_counter() - computed,
                         "commit": self.commit_s}
        self.commit_s = 0.0
        self.supersteps += 1
        self._feed(Computed(command.superstep, report))

    @_DO.on(Commit)
    def _commit(self, instruction: Commit) -> None:
        started = time.perf_counter()
        self.engine.commit(instruction.superstep, instruction.undo)  # type: ignore[union-attr]
        self.commit_s += time.perf_counter() - started

    # ------------------------------------------------------------------ recovery (replication)
    @_DO.on(Rewind)
    def _rewind(self, instruction: Rewind) -> None:
        self.recovery_started = time.monotonic()
        if isinstance(self.engine, VectorEngine):
            self.engine.rewind(instruction.resume_at)
        self.recovery_phases = {"rewind_s": time.monotonic() - self.recovery_started}

    @_DO.on(SendRecovery)
    def _send_recovery(self, instruction: SendRecovery) -> None:
        command, engine = instruction.command, self.engine
        started = time.perf_counter()
        lost = set(command.lost)
        batches: dict[int, RecoveryBatch] = {}
        if command.mode == "migration":
            assert isinstance(engine, VectorEngine)
            moved_ids, moved_to = command.moved_ids, command.moved_to
            if moved_ids is None or moved_to is None:  # the JobMaster holds no vertex: find the moves here
                moved_ids, moved_to = moves_of(engine.part, lost, command.gone)
            self.migration = migration_start(engine.part, engine.table, engine.changed_table, lost, command.gone,
                                             moved_ids, moved_to, command.epoch)
            batches = self.migration.batches
        elif self.index not in lost:
            assert isinstance(engine, VectorEngine)
            batches = rebirth_batches(engine.part, engine.table, engine.changed_table, lost, command.epoch,
                                      command.routing_from)
        built = time.perf_counter()
        for peer in self.machine.live_peers - (lost if command.mode == "migration" else set()):
            batch = batches.get(peer, RecoveryBatch(command.epoch, self.index))
            self._send(peer, RECOVERY_CHANNEL, batch)
        self.recovery_phases.update(build_s=built - started, send_s=time.perf_counter() - built)

    @_DO.on(Assemble)
    def _assemble(self, instruction: Assemble) -> None:
        command, deployment = instruction.command, self.deployment
        assert deployment is not None
        started = time.perf_counter()
        received = self.batches.pop(command.epoch, [])
        self.batches = {e: b for e, b in self.batches.items() if e > command.epoch}
        if command.mode == "migration":
            assert self.migration is not None and isinstance(self.engine, VectorEngine)
            self.engine.install(*migration_assemble(self.migration, received))
            self.migration = None
        elif self.index in command.lost:
            directions, _ = program_layout(deployment.program)
            shell = Partition(self.index, deployment.num_workers, *_EMPTY_PARTITION, directed=deployment.directed,
                              directions=directions)
            part, table, changed = rebirth_assemble(self.index, shell, received)
            engine = make_engine(part, deployment.program, deployment.num_vertices)
            assert isinstance(engine, VectorEngine)
            engine.install(part, table, changed)
            self.engine = engine
        self.recoveries.append({"epoch": command.epoch, "seconds": time.monotonic() - self.recovery_started})
        phases, self.recovery_phases = {**self.recovery_phases, "assemble_s": time.perf_counter() - started}, {}
        self._feed(Assembled(command.epoch, phases))

    @_DO.on(WriteCheckpointFile)
    def _write_checkpoint(self, instruction: WriteCheckpointFile) -> None:
        assert self.storage is not None and self.engine is not None
        data = checkpoints.encode(self.engine.delta(full=instruction.full))
        handle = self.storage.write_file(instruction.superstep, checkpoints.file_name(self.index), data)
        self._feed(CheckpointFileWritten(instruction.superstep, handle))

    @_DO.on(WriteOutput)
    def _write_output(self, instruction: WriteOutput) -> None:
        assert self.deployment is not None and self.engine is not None
        deployment = self.deployment
        if deployment.result_dir is not None:  # a graph loaded on the executors: nothing for the driver
            from epochal.graph.output import write_worker_result

            write_worker_result(deployment.result_dir, deployment.text_dir, self.index, self.engine.part.ids,
                                self.engine.output())
        else:
            write_result(deployment.work_uri, self.index, self.engine.part.ids, self.engine.output())
        self.send_control(Finished(self.metrics()))


register_shell_executors(_DO)
