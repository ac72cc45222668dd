"""Starting a job under CEC or CRB: the driver side of the ``cec`` job kind.

:func:`execute_async` is what ``Environment.execute_async`` runs for a job with
``enable_cec`` or ``enable_crb``: it plans the job's stages (:func:`~epochal.cec.plan.build_stages`,
a :class:`~epochal.errors.PlanError` for what CEC cannot run), ships them, and launches one
Spark task per stage instance with :class:`~epochal.cec.coordination.CecCoordination` on the
JobMaster, which replaces a lost worker while the others keep running.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from epochal.cec.coordination import CecCoordination
from epochal.cec.plan import CecDeployment, build_stages
from epochal.cec.policy import CecSettings
from epochal.control.client import JobClient
from epochal.control.launch import launch
from epochal.control.restart import NoRestart
from epochal.errors import PlanError
from epochal.plan.execution import build_execution_graph, ship_module_by_value
from epochal.rest.outline import EdgeOutline, JobOutline, VertexOutline
from epochal.rest.server import serve
from epochal.runtime.host.hooks import Fault, FaultInjector
from epochal.serialization import dumps_by_value

if TYPE_CHECKING:
    from epochal.api.environment import Environment


def execute_async(env: Environment, job_name: str, faults: list[Fault] | None = None) -> JobClient:
    """Plan, ship and start ``env``'s job as a ``cec`` job; returns at once. The client's
    ``kind`` attribute is the job's :class:`CecCoordination` (its recovery history)."""
    config = env.cec_config
    assert config is not None
    graph = build_execution_graph(env.plan())
    stages = build_stages(graph)
    settings = CecSettings(config.q_target, config.u_target, config.interval, config.period, config.g_check,
                           config.g_open, config.dedup)
    job_id = uuid.uuid4().hex[:12]
    deployment = CecDeployment(job_name, job_id, stages, env.config, config.mode, settings, config.log_dir,
                               FaultInjector.of(faults or []), config.commit_interval, config.snapshot_interval,
                               segment_bytes=config.segment_bytes, fsync=config.fsync,
                               persist=config.persist and config.mode != "native")
    for node in env.graph.nodes:
        for fn in node.functions:
            if fn is not None:
                ship_module_by_value(fn)
                ship_module_by_value(type(fn))
    try:
        blob = dumps_by_value(deployment)
    except Exception as error:
        raise PlanError(f"the job cannot be shipped to the workers: {type(error).__name__}: {error}") from error
    coordination = CecCoordination(deployment.num_workers)
    outline = JobOutline("cec", env.parallelism,
                         tuple(VertexOutline(stage.index, stage.name, stage.parallelism) for stage in stages),
                         tuple(EdgeOutline(stage.upstream, stage.index, partitioner.strategy) for stage in stages
                               if stage.upstream is not None
                               and (partitioner := stages[stage.upstream].partitioner) is not None))
    return JobClient(serve(env.config, outline, lambda: launch(
        env.spark, env.config, job_name=job_name, job_id=job_id, deployment=blob,
        num_workers=deployment.num_workers, restart=NoRestart(), kind=coordination)))


def recoveries(client: Any) -> list[dict[str, Any]]:
    """The recoveries of a CEC job (see :attr:`CecCoordination.history`)."""
    return list(client.kind.history)
