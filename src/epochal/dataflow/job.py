"""Starting a dataflow job: the driver side of the ``dataflow`` job kind.

:func:`execute_async` is what ``Environment.execute_async`` runs for a job that recovers by
checkpoints (or not at all), given the job's :class:`~epochal.control.jobspec.JobSpec`: it turns
the spec's plan (the chained job graph) into the execution graph, checks a ``restore_from``
checkpoint against it, ships the deployment, and launches one Spark task per worker with
:class:`~epochal.dataflow.coordination.DataflowCoordination` on the JobMaster, which owns the
job's checkpoints, loops and ``collect()`` sinks.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import uuid
from typing import TYPE_CHECKING, Any

from epochal.config import POSTGRES
from epochal.connectors.base import JobSettings, Sink
from epochal.connectors.memory import PrintSink
from epochal.control.client import JobClient
from epochal.control.ha.orphans import discard_orphans
from epochal.control.jobspec import JobSpec
from epochal.control.launch import launch
from epochal.control.sink_claims import SinkClaims
from epochal.dataflow import ha as dataflow_ha
from epochal.dataflow.checkpointing.coordinator import CheckpointCoordinator
from epochal.dataflow.checkpointing.restore import check_restore
from epochal.dataflow.coordination import DataflowCoordination
from epochal.errors import PlanError
from epochal.plan.execution import Deployment, build_execution_graph, serialize_deployment
from epochal.plan.jobgraph import JobGraph
from epochal.rest.outline import EdgeOutline, JobOutline, OperatorOutline, VertexOutline
from epochal.rest.server import serve
from epochal.runtime.host.hooks import FaultInjector
from epochal.state.checkpoint_dirs import find_restore_point, job_directory
from epochal.state.fencing import LeaderFence
from epochal.state.storage import CheckpointStorage

if TYPE_CHECKING:
    from epochal.control.ha.fencing import Leadership

_log = logging.getLogger("epochal")


def execute_async(spec: JobSpec) -> JobClient:
    """Ship and start ``spec``'s job as a ``dataflow`` job; returns at once with its client. With
    ``spec.ha`` this driver first waits to lead the job (:mod:`epochal.dataflow.ha`: a standby
    meanwhile; :class:`~epochal.control.ha.leadership.JobEndedElsewhere` if it ended elsewhere)."""
    if spec.ha is not None:
        return dataflow_ha.execute_async(spec, start)
    return start(spec, None)


def start(spec: JobSpec, leadership: Leadership | None) -> JobClient:
    """Check ``spec``'s job (connectors, state backend, its ``restore_from`` checkpoint), ship its
    deployment and launch it; returns at once.

    ``leadership``: this driver leads the job with high availability (:mod:`epochal.dataflow.ha`):
    the job keeps its id, resumes from the completed checkpoints the HA store names (before any
    ``restore_from``), takes checkpoint ids past every earlier leader's, and its checkpoint
    writes, deletions and sink commits are fenced by the leader's epoch."""
    job = spec.job_graph
    job_name, restore_from = spec.name, spec.restore_from
    _validate_connectors(spec, job)
    _validate_state_backend(spec)
    job_id = leadership.services.job_id if leadership is not None else uuid.uuid4().hex[:12]
    operators = {n.uid: {"name": n.name, "operation": n.operation} for n in job.nodes.values()}
    checkpoint = spec.checkpoint
    storage_uri = f"{job_directory(checkpoint.storage, job_name)}/{job_id}" if checkpoint.enabled else ""
    pointer = leadership.pointer if leadership is not None else None
    if pointer is not None:
        if restore_from is not None:
            _log.warning("job '%s' resumes from its latest checkpoint (%d) in the HA store, not from %s",
                         job_name, pointer.latest, restore_from)
        # its own run directory: resumed as a restarted job is; another one: restored from it
        restore_from = None if pointer.storage == storage_uri else f"{pointer.storage}/chk-{pointer.latest}"
    restore = None if restore_from is None else _checked_restore(spec, restore_from, operators)
    graph = build_execution_graph(job, restore["metadata"].get("split_layout") if restore else None)
    state_backend = spec.state_backend
    if state_backend.kind == POSTGRES:  # the namespace of a job started without a checkpoint; what MVCC keeps
        state_backend = dataclasses.replace(state_backend, namespace=state_backend.namespace or job_name,
                                            retained=checkpoint.retained)
    fence = None
    if leadership is not None and leadership.fencing:
        fence = LeaderFence(storage_uri)
        fence.raise_to(leadership.epoch)  # before anything runs: the deposed leader's workers commit no more
    deployment = Deployment(job_name, job_id, graph, spec.engine, checkpoint, storage_uri,
                            hook=FaultInjector.of(list(spec.faults)), state_backend=state_backend, fence=fence)
    functions: dict[str, list[Any]] = {}
    for node in spec.logical_graph.nodes:
        functions.setdefault(node.name, []).extend(f for f in node.functions if f is not None)
    blob = serialize_deployment(deployment, functions)

    coordinator = None
    if checkpoint.enabled:
        storage = CheckpointStorage(storage_uri)
        first_id = (restore["checkpoint_id"] + 1) if restore else 1
        if leadership is None:
            completed = storage.completed()
        else:  # the HA store's word, not a listing (a deposed leader may have written metadata it was refused)
            completed = list(pointer.ids) if pointer is not None and restore is None else []
            first_id = max(first_id, leadership.first_id)
        coordinator = CheckpointCoordinator(
            checkpoint, storage, job_name,
            subtasks={(v.id, i): v.name for v in job.vertices for i in range(v.parallelism)},
            vertex_parallelism={v.id: v.parallelism for v in job.vertices},
            max_parallelism=spec.max_parallelism, split_layout=graph.split_layout,
            first_id=first_id, operators=operators, completed=completed)
        coordinator.job_id = job_id
        if leadership is not None:
            leadership.attach(coordinator)
            discard_orphans(storage, leadership, pointer, below=first_id)  # what deposed leaders left
    coordination = DataflowCoordination(
        graph.num_workers, coordinator, restore, loops={loop.id: loop.parallelism for loop in graph.job.loops},
        collect_ids=[n.collect_id for n in spec.logical_graph.nodes if n.collect_id])
    state_claim = None
    if state_backend.kind == POSTGRES:  # one running job per state namespace; nothing left prepared
        from epochal.state.postgres.claims import JobStateClaim
        from epochal.state.snapshot import RestoreSource

        restored = None if restore is None else RestoreSource(
            CheckpointStorage(restore["storage"]), restore["checkpoint_id"], restore["metadata"])
        state_claim = JobStateClaim(state_backend, [n.uid for n in job.nodes.values() if n.operator.keyed],
                                    restored, spec.max_parallelism, job_id, job_name, takeover=leadership is not None)
    claims = SinkClaims(job_id, job_name, _sink_locations(job), takeover=leadership is not None)
    claims.acquire()  # before anything is submitted: a second writer is refused with nothing written

    def ended() -> None:
        try:
            if state_claim is not None:
                state_claim.end(coordinator.latest_completed if coordinator is not None else None)
        finally:
            claims.release()

    try:
        if state_claim is not None:
            state_claim.acquire()
        shape = outline(job, spec.parallelism)
        jobmaster = serve(spec.engine, shape, lambda: launch(
            spec.spark.get(), spec.engine, job_name=job_name, job_id=job_id, deployment=blob,
            num_workers=graph.num_workers, restart=copy.deepcopy(spec.restart), kind=coordination, on_end=ended,
            fence=leadership))
    except BaseException:
        if state_claim is not None:
            state_claim.release()
        claims.release()
        raise
    claims.renew_while_held()
    return JobClient(jobmaster, source_records=shape.source_records, sources=shape.progress_sources(),
                     prints=any(isinstance(sink, PrintSink) for sink in _sinks(job)))


def outline(job: JobGraph, parallelism: int) -> JobOutline:
    """The job's vertices and their chained operators, the edges between them, and the records
    its sources will read (when every source knows), as the REST API shows them."""
    sizes = [v.source.size_hint() for v in job.vertices if v.source is not None]
    return JobOutline("dataflow", parallelism, tuple(
        VertexOutline(v.id, v.name, v.parallelism,
                      tuple(OperatorOutline(job.nodes[n].uid, job.nodes[n].name) for n in v.nodes),
                      v.source.progress_unit if v.source is not None else None)
        for v in job.vertices), tuple(
        EdgeOutline(e.source_vertex, e.target_vertex, e.partitioner.strategy, e.back_edge, e.side_tag)
        for e in job.edges), sum(s for s in sizes if s is not None) if sizes and None not in sizes else None)


def _sink_locations(job: Any) -> dict[str, str]:
    """Directory -> sink name, of every sink that claims one (see :mod:`epochal.control.sink_claims`)."""
    locations: dict[str, str] = {}
    for sink in _sinks(job):
        location = sink.claim_location()
        if location is not None:
            locations[location] = type(sink).__name__
    return locations


def _sinks(job: Any) -> list[Sink]:
    return [sink for node in job.nodes.values() if isinstance(sink := getattr(node.operator, "sink", None), Sink)]


def _validate_state_backend(spec: JobSpec) -> None:
    """The PostgreSQL backend: the server answers and has its tables (created if missing), and the
    non-MVCC variant gets what two-phase commit of its epochs needs."""
    backend = spec.state_backend
    if backend.kind != POSTGRES:
        return
    from epochal.state.postgres.schema import ensure_schema

    checkpoint = spec.checkpoint
    if not backend.mvcc and checkpoint.enabled and checkpoint.max_concurrent > 1:
        raise PlanError(f"set_state_backend('postgres') pre-commits each checkpoint epoch as a prepared transaction "
                        f"that holds its rows until the checkpoint completes, so checkpoints go one at a time: use "
                        f"enable_checkpointing(max_concurrent=1) (not {checkpoint.max_concurrent}), or mvcc=True")
    ensure_schema(backend.dsn or "", backend.table, backend.mvcc)


def _validate_connectors(spec: JobSpec, job: Any) -> None:
    """Let every source and sink check the job's settings (a Kafka sink's transaction timeout
    against the checkpoint interval and restart delay) before anything ships."""
    strategy = spec.restart
    delay = getattr(strategy, "max_delay", None)
    delay = getattr(strategy, "delay", 0.0) if delay is None else delay
    checkpoint = spec.checkpoint
    settings = JobSettings(checkpoint.interval if checkpoint.enabled else None, float(delay or 0.0), spec.parallelism)
    for vertex in job.vertices:
        if vertex.source is not None:
            vertex.source.validate(settings)
    for sink in _sinks(job):
        sink.validate(settings)


def _checked_restore(spec: JobSpec, restore_from: str, operators: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Read and check the checkpoint ``restore_from`` names against the job's operators."""
    point = find_restore_point(restore_from)
    restore_storage, checkpoint_id = point.storage, point.checkpoint_id
    if point.chosen is not None:  # the user named a directory: say which checkpoint it gave
        _log.warning("restoring %s (%s)", point.location, point.chosen)
    metadata = restore_storage.read_metadata(checkpoint_id)
    if metadata.get("max_parallelism") != spec.max_parallelism:
        raise PlanError(f"checkpoint {restore_from} was taken with max_parallelism "
                        f"{metadata.get('max_parallelism')}; this job has {spec.max_parallelism}. "
                        "Key groups cannot be remapped: use the same max_parallelism")
    location = restore_storage.location(checkpoint_id)
    skipped = check_restore(metadata, location, operators, spec.allow_non_restored_state)
    restore_storage.verify_files(checkpoint_id, metadata, set(operators))
    if skipped:
        _log.warning("restoring %s without the state of %s (allow_non_restored_state=True)", location,
                     ", ".join(f"uid '{s['uid']}' ({s['name'] or '?'}, {s['operation'] or '?'})" for s in skipped))
    return {"storage": restore_storage.uri, "checkpoint_id": checkpoint_id, "metadata": metadata,
            "non_restored_state": skipped}
