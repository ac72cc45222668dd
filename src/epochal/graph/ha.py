"""A graph job with high availability of the driver (docs/high_availability.md, "Graph jobs").

:func:`submit` is what :func:`~epochal.graph.job.run_graph` runs instead of launching the job
itself once ``enable_high_availability`` is on: the driver joins the job's election through the
runner every kind shares (:func:`epochal.control.ha.leadership.lead`), waits as a standby, and as leader
resumes from the superstep checkpoint the HA store names (read here, handed to the coordinator
with :meth:`~epochal.graph.coordination.GraphCoordination.resume`). Its checkpoint metadata
writes are fenced by its epoch and each completed one becomes the job's latest in the HA store,
as a dataflow job's are. What HA needs of a graph job, checked by :func:`check`: the checkpoint
fault tolerance (what a new leader resumes from) and a ``work_dir`` every driver reaches (the
partitions and checkpoints live under ``<work_dir>/<job id>``, the same for every leader).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from epochal.config import HighAvailabilityConfig
from epochal.control.client import JobClient
from epochal.control.ha.fencing import Leadership
from epochal.control.ha.leadership import HaJob, JobEndedElsewhere, lead, stable_job_id
from epochal.control.ha.orphans import discard_orphans
from epochal.control.ha.stores import open_services
from epochal.control.jobspec import JobSpec
from epochal.errors import HighAvailabilityError, PlanError
from epochal.graph.coordination import GraphCoordination
from epochal.graph.model import Graph
from epochal.graph.program import VectorProgram, VertexProgram
from epochal.rest import server as rest_server
from epochal.state.storage import CheckpointStorage


def check(config: HighAvailabilityConfig, fault_tolerance: str, work_dir: str | None, job_name: str) -> str:
    """The job id of an HA graph job; raises :class:`PlanError` for what HA cannot run."""
    if fault_tolerance != "checkpoint":
        raise PlanError(f"a graph job with high availability resumes from its superstep checkpoints: run it with "
                        f"fault_tolerance='checkpoint' (not {fault_tolerance!r})")
    if work_dir is None:
        raise PlanError("a graph job with high availability needs work_dir=, a directory every driver of the job "
                        "can reach: its partitions and checkpoints are kept there for the next leader")
    return config.job_id or stable_job_id(job_name)


def ended_elsewhere(config: HighAvailabilityConfig, job_id: str, job_name: str) -> JobEndedElsewhere | None:
    """The job's end if another driver already ran it to its end (asked before this driver starts
    Spark: such a driver only reads the results back), else None."""
    services = open_services(config.uri, job_id, session_timeout=config.lease_timeout,
                             connect_timeout=config.connect_timeout)
    try:
        record = services.result()
    finally:
        services.close()
    return None if record is None else JobEndedElsewhere(job_name, job_id, record)


def fingerprint(graph: Graph, program: VectorProgram | VertexProgram, parallelism: int, partitioner: str,
                checkpoint_interval: int, full_every: int) -> str:
    """What makes two drivers run the same graph job: the program's class and settings, the graph's
    sizes and direction, parallelism, partitioner and checkpointing; not the program's code."""
    settings = sorted((k, repr(v)) for k, v in vars(program).items() if not k.startswith("_"))
    text = (f"{type(program).__module__}.{type(program).__qualname__} {settings} vertices={graph.num_vertices} "
            f"edges={graph.num_edges} directed={graph.directed} parallelism={parallelism} "
            f"partitioner={partitioner} every={checkpoint_interval}/{full_every}")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def submit(spec: JobSpec, job_name: str, job_fingerprint: str, blob: bytes, coordination: GraphCoordination,
           replication_factor: float, launch_job: Callable[[Leadership], JobClient]) -> JobClient:
    """Lead the graph job (waiting as a standby first), resume ``coordination`` from the latest
    completed superstep checkpoint in the HA store, and launch it with ``launch_job`` (given the
    leadership, the fence of its checkpoint I/O). Raises
    :class:`~epochal.control.ha.leadership.JobEndedElsewhere` when the job ended under another driver (its
    stored details: ``supersteps``, ``halt_reason`` and ``replication_factor``)."""
    assert spec.ha is not None and coordination.storage is not None
    storage: CheckpointStorage = coordination.storage

    def start(leadership: Leadership) -> JobClient:
        pointer = leadership.pointer
        if pointer is not None:
            if pointer.storage != storage.uri:
                raise HighAvailabilityError(
                    f"job '{job_name}' resumes from checkpoints in {pointer.storage}, but this driver's work_dir puts "
                    f"them in {storage.uri}: every driver of the job must use the same work_dir")
            coordination.resume(pointer.latest, storage.read_metadata(pointer.latest))
        chains = coordination.chains.values()  # the files of earlier checkpoints the resumed one reads
        discard_orphans(storage, leadership, pointer, referenced={int(entry[0]) for c in chains for entry in c})
        return launch_job(leadership)

    def details() -> dict[str, Any]:
        halted = coordination.halted
        return {} if halted is None else {"supersteps": halted.superstep, "halt_reason": halted.reason,
                                          "replication_factor": replication_factor}

    warm_up = rest_server.prepare if spec.engine.rest_enabled else None
    return lead(spec, HaJob("graph", job_fingerprint, lambda: blob, start, details, warm_up=warm_up))
