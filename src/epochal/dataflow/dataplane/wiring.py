"""Wiring one worker's part of the execution graph: subtasks, their channels, barrier handlers.

:func:`wire_worker` opens the subtasks that slot sharing placed on a worker (restoring their
state), creates an output channel per channel it produces (local, or over the peer connection)
and an input channel per channel it consumes (credit returned locally or over the peer), gives
each non-source subtask its barrier handling
(:class:`~epochal.dataflow.dataplane.subtask_barriers.SubtaskBarriers`) when the job
checkpoints, and describes every subtask to the worker machine (:class:`SubtaskInfo`). It owns
no running state: the result is handed to the worker's driver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from epochal.config import EXACTLY_ONCE, NONE, SYNCHRONOUS
from epochal.connectors.base import ReaderContext, assign_splits
from epochal.connectors.source_reader import SourceReader
from epochal.dataflow.checkpointing.alignment import AlignmentBuffer, AlignmentSpill
from epochal.dataflow.checkpointing.events import LoopShape, SubtaskInfo
from epochal.dataflow.dataplane.batch_sizing import INITIAL_SIZE, BatchSizer
from epochal.dataflow.dataplane.chains import edge_names
from epochal.dataflow.dataplane.channels import UNANNOUNCED, InputChannel, LocalTransport, OutputChannel
from epochal.dataflow.dataplane.subtask_barriers import SubtaskBarriers
from epochal.dataflow.dataplane.tasks import LoopRole, Subtask
from epochal.errors import RestoreError
from epochal.plan.execution import Deployment
from epochal.runtime.host.peers import PeerConnection
from epochal.runtime.operators.iteration import IterationHead
from epochal.state.snapshot import RestoreSource
from epochal.state.storage import CheckpointError

UNBOUNDED_CREDIT = 1 << 40

@dataclass
class WorkerCallbacks:
    """How the wired subtasks reach their worker's driver."""

    #: ``deliver_local(channel id, is_batch, item)``: a local producer's batch or event.
    deliver_local: Callable[[int, bool, Any], None]
    #: ``send_to_driver(collect id, payload)``: a collect sink's records.
    send_to_driver: Callable[..., None]
    #: ``on_aligned(subtask, checkpoint id, alignment seconds, savepoint target or None)``.
    on_aligned: Callable[[Subtask, int, float, Any], None]
    #: ``on_released(channels)``: alignment ended, these inputs are unblocked.
    on_released: Callable[[list[Any]], None]
    #: ``on_loop_closed(subtask, checkpoint id)``: the barrier came back around the loop.
    on_loop_closed: Callable[[Subtask, int], None]


@dataclass
class WiredWorker:
    """One worker's subtasks and channels, ready to run."""

    subtasks: list[Subtask] = field(default_factory=list)
    sources: list[Subtask] = field(default_factory=list)
    in_channels: dict[int, InputChannel] = field(default_factory=dict)
    out_channels: dict[int, OutputChannel] = field(default_factory=dict)
    infos: list[SubtaskInfo] = field(default_factory=list)
    spill: AlignmentSpill | None = None


def wire_worker(worker: int, deployment: Deployment, mode: str, peers: dict[int, PeerConnection],
                callbacks: WorkerCallbacks, job_attempt: int, restore: RestoreSource | None) -> WiredWorker:
    """Create worker ``worker``'s subtasks, their channels, and open their operators.

    Raises :class:`~epochal.errors.RestoreError` when restored state is damaged."""
    graph = deployment.graph
    job = graph.job
    config = deployment.config
    wired = WiredWorker()
    local = LocalTransport(callbacks.deliver_local)
    aligned = mode in (EXACTLY_ONCE, SYNCHRONOUS)
    if aligned:
        wired.spill = AlignmentSpill(config.alignment_memory_bytes, config.alignment_max_bytes,
                                     config.alignment_spill_dir)
    timed = config.batch_time is not None  # batches sized by time too (batch_sizing)
    initial_size = INITIAL_SIZE if timed else UNANNOUNCED
    for channel in graph.channels:
        if graph.worker_of(channel.producer) == worker:
            consumer = graph.worker_of(channel.consumer)
            transport = local if consumer == worker else peers[consumer]
            # a loop's back-edge never runs out of credit: a loop cannot deadlock on itself
            credit = UNBOUNDED_CREDIT if job.edges[channel.edge].back_edge else config.channel_credits
            wired.out_channels[channel.id] = OutputChannel(channel.id, credit, transport,
                                                           edge_names(job, channel.edge), initial_size)
    loop_of_vertex = {v: loop for loop in job.loops for v in loop.vertices}
    for vertex_id, index in graph.subtasks_of_worker(worker):
        vertex = job.vertices[vertex_id]
        subtask = Subtask(vertex_id, index, vertex.parallelism, vertex.name)
        try:
            subtask.open(job.nodes, vertex.nodes, job.max_parallelism, callbacks.send_to_driver,
                         attempt=job_attempt, checkpointing=mode != NONE, restore=restore,
                         state_backend=deployment.state_backend, job=(deployment.job_name, deployment.job_id))
        except CheckpointError as error:
            raise RestoreError(str(error), error.path, restore.checkpoint_id if restore else None) from error
        loop = loop_of_vertex.get(vertex_id)
        if loop is not None:
            head = subtask.runners[0].operator if vertex_id == loop.head_vertex else None
            subtask.loop = LoopRole(loop.id, head if isinstance(head, IterationHead) else None)
        for edge_id, output in subtask.connect_outputs(job, graph.outputs, wired.out_channels, config.batch_size):
            if subtask.loop is not None and job.edges[edge_id].loop == subtask.loop.loop_id:
                subtask.loop.loop_outputs.append(output)
        for channel_id in graph.inputs[(vertex_id, index)]:
            channel = graph.channels[channel_id]
            producer = graph.worker_of(channel.producer)
            if producer == worker:
                give = wired.out_channels[channel_id].add_credit
            else:
                give = partial(peers[producer].send_credit, channel_id)
            input_channel = InputChannel(channel_id, subtask, give,
                                         AlignmentBuffer(wired.spill) if wired.spill is not None else None)
            edge = job.edges[channel.edge]
            input_channel.back_edge = edge.back_edge
            input_channel.input_index = edge.input_index
            if subtask.loop is not None and not edge.back_edge:
                if edge.loop == subtask.loop.loop_id:
                    subtask.loop.loop_inputs.add(channel_id)
                else:
                    subtask.loop.external_inputs.add(channel_id)
            wired.in_channels[channel_id] = input_channel
            subtask.inputs.append(input_channel)
        if config.batch_time is not None:  # a source's read: batch_time of its chain's work; a channel's
            # credits' worth of batches: batch_time of its consumer's
            target = config.batch_time if vertex.source is not None else config.batch_time / config.channel_credits
            subtask.sizer = BatchSizer(config.batch_size, target)
        if vertex.source is not None:
            context = ReaderContext(vertex.name, index, vertex.parallelism, restored=restore is not None)
            splits = assign_splits(graph.splits[vertex_id], index, vertex.parallelism)
            subtask.attach_source(SourceReader(splits, vertex.source, context))
            wired.sources.append(subtask)
        elif mode != NONE:
            subtask.barriers = SubtaskBarriers(
                subtask.inputs, aligned=aligned, on_aligned=partial(callbacks.on_aligned, subtask),
                on_released=callbacks.on_released, on_loop_closed=partial(callbacks.on_loop_closed, subtask))
        wired.subtasks.append(subtask)
        wired.infos.append(_describe(subtask))
    return wired


def _describe(subtask: Subtask) -> SubtaskInfo:
    role = subtask.loop
    shape = None if role is None else LoopShape(role.loop_id, role.head is not None,
                                                frozenset(role.loop_inputs), frozenset(role.external_inputs))
    return SubtaskInfo((subtask.vertex_id, subtask.index), source=subtask.reader is not None,
                       barriers=subtask.barriers is not None, loop=shape)
