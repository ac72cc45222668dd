"""Starting a job under CEC or CRB: the driver side of the ``cec`` job kind.

:func:`execute_async` is what ``Environment.execute_async`` runs for a job with
``enable_cec`` or ``enable_crb``, given its :class:`~epochal.control.jobspec.JobSpec`: it
plans the job's stages (:func:`~epochal.cec.plan.build_stages`, a
:class:`~epochal.errors.PlanError` for what CEC cannot run), ships them, and launches one Spark
task per stage instance with :class:`~epochal.cec.coordination.CecCoordination` on the
JobMaster, which replaces a lost worker while the others keep running.
"""

from __future__ import annotations

import uuid
from typing import Any

from epochal.cec.coordination import CecCoordination
from epochal.cec.plan import CecDeployment, build_stages
from epochal.cec.policy import CecSettings
from epochal.config import CecConfig
from epochal.control.client import JobClient
from epochal.control.jobspec import JobSpec
from epochal.control.launch import launch
from epochal.control.restart import NoRestart
from epochal.errors import PlanError
from epochal.plan.execution import build_execution_graph, ship_module_by_value
from epochal.rest.outline import EdgeOutline, JobOutline, VertexOutline
from epochal.rest.server import serve
from epochal.runtime.host.hooks import FaultInjector
from epochal.serialization import dumps_by_value


def execute_async(spec: JobSpec) -> JobClient:
    """Ship and start ``spec``'s job as a ``cec`` job; returns at once. The client's ``kind``
    attribute is the job's :class:`CecCoordination` (its recovery history). Raises
    :class:`PlanError` for what CEC cannot run (high availability, checkpoints besides CEC, a
    ``restore_from``, a dataflow that is not a pipeline of sources, stateless operators, window
    aggregates and sinks)."""
    config = spec.cec
    if config is None:
        raise ValueError(f"job '{spec.name}' has no CEC settings (enable_cec or enable_crb)")
    _check(spec, config)
    job_name = spec.name
    graph = build_execution_graph(spec.job_graph)
    stages = build_stages(graph)
    settings = CecSettings(config.q_target, config.u_target, config.interval, config.period, config.g_check,
                           config.g_open, config.dedup)
    job_id = uuid.uuid4().hex[:12]
    deployment = CecDeployment(job_name, job_id, stages, spec.engine, config.mode, settings, config.log_dir,
                               FaultInjector.of(list(spec.faults)), config.commit_interval, config.snapshot_interval,
                               segment_bytes=config.segment_bytes, fsync=config.fsync,
                               persist=config.persist and config.mode != "native")
    for node in spec.logical_graph.nodes:
        for fn in node.functions:
            if fn is not None:
                ship_module_by_value(fn)
                ship_module_by_value(type(fn))
    try:
        blob = dumps_by_value(deployment)
    except Exception as error:
        raise PlanError(f"the job cannot be shipped to the workers: {type(error).__name__}: {error}") from error
    coordination = CecCoordination(deployment.num_workers)
    outline = JobOutline("cec", spec.parallelism,
                         tuple(VertexOutline(stage.index, stage.name, stage.parallelism) for stage in stages),
                         tuple(EdgeOutline(stage.upstream, stage.index, partitioner.strategy) for stage in stages
                               if stage.upstream is not None
                               and (partitioner := stages[stage.upstream].partitioner) is not None))
    return JobClient(serve(spec.engine, outline, lambda: launch(
        spec.spark.get(), spec.engine, job_name=job_name, job_id=job_id, deployment=blob,
        num_workers=deployment.num_workers, restart=NoRestart(), kind=coordination)))


def _check(spec: JobSpec, config: CecConfig) -> None:
    """What a CEC (or CRB) job cannot be combined with: a :class:`PlanError` saying why."""
    mode = config.mode.upper()
    if spec.ha is not None:
        raise PlanError(
            f"a {mode} job cannot run with high availability: it has no job-wide "
            "checkpoint a new leader could resume from (each worker persists its own output and window "
            "checkpoints, and a lost worker is rebuilt from its live producers' replay, which needs the "
            "other workers running; a driver's loss takes every worker with it). Use checkpoints "
            "(enable_checkpointing) for a job that must survive its driver")
    if spec.checkpoint.enabled:
        raise PlanError("a job recovers either by checkpoints (enable_checkpointing) or by "
                        f"{mode} (enable_{config.mode}), not both")
    if spec.restore_from is not None:
        raise PlanError(f"a {mode} job rebuilds from its workers' output queues; it cannot restore_from a checkpoint")


def recoveries(client: Any) -> list[dict[str, Any]]:
    """The recoveries of a CEC job (see :attr:`CecCoordination.history`)."""
    return list(client.kind.history)
