"""A dataflow job with high availability of the driver (papers/001 §4.5; docs/high_availability.md).

:func:`execute_async` is what :func:`epochal.dataflow.job.execute_async` runs for a spec with
``ha`` set: it checks what HA needs of a dataflow job (checkpoints, which a new leader resumes
from), and leads the job through the runner every kind shares (:func:`epochal.control.ha.leadership.lead`):
the same job for every driver is the same :func:`plan_fingerprint`; as leader it starts the job
with :func:`epochal.dataflow.job.start`, resuming from the HA store's latest completed checkpoint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from epochal.control.client import JobClient
from epochal.control.ha.fencing import Leadership
from epochal.control.ha.leadership import HaJob, lead
from epochal.control.jobspec import JobSpec
from epochal.errors import PlanError
from epochal.plan.jobgraph import JobGraph
from epochal.rest import server as rest_server
from epochal.serialization import dumps_by_value


def plan_fingerprint(job: JobGraph, runtime_mode: str) -> str:
    """What makes two plans the same job: vertices, edges, operators (uid, operation), parallelism,
    key groups and runtime mode; not the code of user functions."""
    operators = sorted((n.uid, n.operation) for n in job.nodes.values())
    text = f"{job.describe()}\n{operators}\nmax_parallelism={job.max_parallelism}\nmode={runtime_mode}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def execute_async(spec: JobSpec, start: Callable[[JobSpec, Leadership], JobClient]) -> JobClient:
    """Wait until this driver leads the dataflow job (a standby meanwhile), then start it with
    ``start``; returns its client. Raises :class:`~epochal.control.ha.leadership.JobEndedElsewhere`
    if the job ended under another driver."""
    if not spec.checkpoint.enabled:
        raise PlanError("high availability resumes a job from its checkpoints: call "
                        "env.enable_checkpointing(interval) too")
    plan = spec.job_graph
    fingerprint = plan_fingerprint(plan, spec.logical_graph.runtime_mode)
    warm_up = rest_server.prepare if spec.engine.rest_enabled else None
    return lead(spec, HaJob("dataflow", fingerprint, lambda: dumps_by_value(plan),
                            lambda leadership: start(spec, leadership), warm_up=warm_up))
