"""Running a graph program on Spark: the driver side of a ``graph`` job.

:func:`run_graph` checks the program against the graph, partitions it (hash or Fennel) and writes
one partition file per worker, then starts a job of kind ``graph``: one Spark task per worker
(:class:`~epochal.graph.worker.GraphWorker`), the JobMaster holding the global barrier through
:class:`~epochal.graph.coordination.GraphCoordination`. With ``fault_tolerance="checkpoint"`` (the
Imitator-CKPT baseline) workers write their changed vertex state every ``checkpoint_interval``
supersteps, and a lost worker restarts the job from the latest complete checkpoint (the
environment's restart strategy decides how often; the default allows 3 restarts). Results are
assembled from the workers' result files into a :class:`~epochal.graph.local.GraphResult`.

Given a :class:`~epochal.graph.model.Graph`, the graph is partitioned on the driver, so it must
fit the driver's memory. Given a :class:`~epochal.graph.executors.sources.GraphSource` (files or
DataFrames), it is read, checked and partitioned by Spark tasks
(:func:`~epochal.graph.executors.stages.load_on_executors`), the workers write their results as
Parquet (and Graphalytics text with ``output_dir``), and the driver holds only sizes: the limit is
the executors' memory. In a cluster ``work_dir`` must be a location every executor can read
(HDFS, S3, a shared mount).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from typing import TYPE_CHECKING

from epochal.control import spark as spark_support
from epochal.control.client import JobClient
from epochal.control.ha.leadership import JobEndedElsewhere
from epochal.control.jobspec import JobSpec, JobSpecSource, default_spec
from epochal.control.launch import launch
from epochal.control.restart import FixedDelayRestart, NoRestart, RestartStrategy
from epochal.control.running import wait
from epochal.errors import EpochalError, PlanError
from epochal.filesystems import is_uri, join, resolve
from epochal.graph import ha as graph_ha
from epochal.graph.coordination import GraphCoordination
from epochal.graph.deployment import GraphDeployment, read_result, serialize, write_partition
from epochal.graph.executors.sources import GraphSource
from epochal.graph.local import GraphResult, in_id_order, program_layout
from epochal.graph.model import Graph
from epochal.graph.partition import build_partitions, replication_of
from epochal.graph.placement import partition
from epochal.graph.program import VectorProgram, VertexProgram
from epochal.graph.recovery import RECOVERY_MODES, ReplicationSettings
from epochal.graph.replica_plan import replicated_partitions
from epochal.graph.replica_recovery import ReplicaRecovery
from epochal.rest.outline import JobOutline
from epochal.rest.server import serve
from epochal.runtime.host.hooks import Fault, FaultInjector
from epochal.state.storage import CheckpointStorage
from epochal.validation import check_number

if TYPE_CHECKING:
    from epochal.control.ha.fencing import Leadership

FAULT_TOLERANCE = ("none", "checkpoint", "replication")


def run_graph(graph: Graph | GraphSource, program: VectorProgram | VertexProgram, *, parallelism: int = 2,
              partitioner: str = "hash", fault_tolerance: str = "none", checkpoint_interval: int = 1,
              full_checkpoint_every: int = 8, work_dir: str | None = None, environment: JobSpecSource | None = None,
              restart: RestartStrategy | None = None, timeout: float | None = None,
              faults: list[Fault] | None = None, kill_worker: int | None = None,
              kill_at_superstep: int | None = None, job_name: str = "graph job", recovery: str = "rebirth",
              replicas: int = 1, selfish: bool = True, ft_replicas: bool = True, result_dir: str | None = None,
              output_dir: str | None = None) -> GraphResult:
    """Run ``program`` on ``graph`` with ``parallelism`` Spark tasks and return every vertex's result.

    ``graph`` is a :class:`Graph` in the driver's memory, or a
    :class:`~epochal.graph.executors.sources.GraphSource` that Spark tasks load and partition on the
    executors (nothing of the graph passes through the driver). Then the workers write the
    result as Parquet into ``result_dir`` (default: ``result`` in the job's directory under
    ``work_dir`` or a temporary directory, kept after the call; ``GraphResult.to_dataframe``
    reads it) and, with ``output_dir``, as Graphalytics text part files; ``GraphResult.load``
    holds the loading's :class:`~epochal.graph.executors.stages.LoadStatistics`. A user's own
    ``check`` of a vertex program needs the whole graph and is then not called.

    ``fault_tolerance``: ``"none"`` (a lost worker fails the job, or restarts it from superstep 0
    under ``restart``), ``"checkpoint"`` (restart from the latest checkpoint, written every
    ``checkpoint_interval`` supersteps, a full one every ``full_checkpoint_every`` checkpoints),
    ``"replication"`` (Imitator, papers/003: every vertex has ``replicas`` extra copies on other
    workers, kept in sync by the supersteps' own messages; up to ``replicas`` workers lost at once
    are recovered while the others keep running, by ``recovery="rebirth"`` (a new Spark task takes
    each lost worker's place) or ``"migration"`` (the survivors take over its vertices).
    ``selfish`` synchronises the FT replicas of vertices nobody reads only in the last superstep
    (programs that allow it: PageRank); ``ft_replicas=False`` exists only to show FT replicas
    are needed). Replication needs a vector program.
    ``environment``: where the job's settings come from (an ``Environment``: its Spark session,
    engine config, restart strategy and high availability; its streams play no part); by default
    those of an ``Environment(parallelism)``.
    ``faults`` crash chosen workers (``Fault("superstep" | "barrier", worker=w, superstep=s)``);
    ``kill_worker`` and ``kill_at_superstep`` are the command line's shorthand for one
    ``Fault("superstep", ...)`` in the first attempt (SIGKILL after computing, before the barrier).

    Raises :class:`~epochal.graph.model.GraphInputError` for input the program cannot run on, and
    what :meth:`Environment.execute` raises for a failed, timed-out or interrupted job.
    """
    check_number(parallelism, "parallelism", integer=True)
    check_number(checkpoint_interval, "checkpoint_interval (supersteps)", integer=True)
    check_number(timeout, "timeout (seconds)", optional=True)
    if fault_tolerance not in FAULT_TOLERANCE:
        raise PlanError(f"fault_tolerance must be one of {', '.join(FAULT_TOLERANCE)}, not {fault_tolerance!r}")
    settings = None
    if fault_tolerance == "replication":
        settings = _replication_settings(program, parallelism, recovery, replicas, selfish, ft_replicas)
    if (kill_worker is None) != (kill_at_superstep is None):
        raise PlanError("kill_worker and kill_at_superstep go together")
    if kill_worker is not None:
        if not 0 <= kill_worker < parallelism:
            raise PlanError(f"kill_worker must be a worker index below the parallelism {parallelism}")
        faults = [*(faults or []), Fault("superstep", worker=kill_worker, superstep=kill_at_superstep)]
    if output_dir is not None:
        from epochal.graph.output import check_output_dir

        check_output_dir(output_dir)
    if isinstance(graph, Graph):
        program.check(graph)
    spec = environment.job_spec(job_name, streams=False) if environment is not None else \
        default_spec(job_name, parallelism)
    temporary = work_dir is None
    job_id = uuid.uuid4().hex[:12]
    if spec.ha is not None:  # the same job id, and so the same work directory, for every leader
        if isinstance(graph, GraphSource):
            raise PlanError("a graph loaded on the executors (a GraphSource) cannot run with high availability yet: "
                            "pass a Graph, or run it without enable_high_availability")
        job_id = graph_ha.check(spec.ha, fault_tolerance, work_dir, job_name)
        assert work_dir is not None
        if (ended := graph_ha.ended_elsewhere(spec.ha, job_id, job_name)) is not None:
            return _ended_elsewhere(ended, join(work_dir, job_id), program, parallelism)
    spark = spec.spark.get()
    if work_dir is None and not spark_support.is_local(spark):
        raise PlanError("a graph job on a cluster needs work_dir=, a directory every executor can read "
                         "(an HDFS, S3 or shared path): the driver writes the partitions there")
    root = tempfile.mkdtemp(prefix="epochal-graph-") if work_dir is None else work_dir
    work_uri = join(root, job_id)
    keep = None
    try:
        if isinstance(graph, GraphSource):
            keep = result_dir or join(work_uri, "result")
            return _run_loaded_on_executors(graph, program, spec, parallelism, partitioner, fault_tolerance,
                                            checkpoint_interval, full_checkpoint_every, work_uri, restart, timeout,
                                            faults, job_name, job_id, settings, keep, output_dir)
        return _run(graph, program, spec, parallelism, partitioner, fault_tolerance, checkpoint_interval,
                    full_checkpoint_every, work_uri, restart, timeout, faults, job_name, job_id, settings)
    except (EpochalError, KeyboardInterrupt) as error:  # shown from the user's call, without the frames
        raise error.with_traceback(None) from None      # of epochal's internals
    finally:
        if temporary and not is_uri(root):
            if keep is not None and keep.startswith(root):  # the results stay; everything else goes
                for entry in os.listdir(work_uri) if os.path.isdir(work_uri) else []:
                    if join(work_uri, entry) != keep:
                        path = os.path.join(work_uri, entry)
                        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
            else:
                shutil.rmtree(root, ignore_errors=True)


def _run(graph: Graph, program: VectorProgram | VertexProgram, spec: JobSpec, parallelism: int,
         partitioner: str, fault_tolerance: str, checkpoint_interval: int, full_checkpoint_every: int,
         work_uri: str, restart: RestartStrategy | None, timeout: float | None, faults: list[Fault] | None,
         job_name: str, job_id: str, settings: ReplicationSettings | None) -> GraphResult:
    owner = partition(graph, parallelism, partitioner)
    directions, adjacency = program_layout(program)

    fs, path = resolve(work_uri)
    fs.create_dir(path, recursive=True)
    replication = None
    if settings is None:
        parts = build_partitions(graph, owner, parallelism, directions, adjacency)
    else:
        parts, plan = replicated_partitions(graph, owner, parallelism, directions, adjacency, settings.k,
                                            settings.selfish and getattr(program, "selfish_safe", False),
                                            settings.ft_replicas)
        replication = ReplicaRecovery(settings, graph.vertices, owner, plan.mirrors, parallelism)
    for part in parts:
        write_partition(work_uri, part)
    factor = replication_of(parts)
    del parts
    storage = CheckpointStorage(join(work_uri, "checkpoints")) if fault_tolerance == "checkpoint" else None
    deployment = GraphDeployment(job_name, job_id, program, parallelism, graph.num_vertices, work_uri, spec.engine,
                                 storage.uri if storage is not None else None, FaultInjector.of(faults or []),
                                 replication=settings, directed=graph.directed)
    coordination = GraphCoordination(job_name, program, parallelism, storage,
                                     checkpoint_interval if storage is not None else 0, full_checkpoint_every,
                                     replication)
    strategy = restart if restart is not None else spec.restart
    if restart is None and fault_tolerance == "checkpoint" and isinstance(strategy, NoRestart):
        strategy = FixedDelayRestart(attempts=3, delay=0.0)  # what checkpoints are for
    blob = serialize(deployment)
    started = time.monotonic()

    def start(fence: Leadership | None = None) -> JobClient:
        return JobClient(serve(spec.engine, JobOutline("graph", parallelism), lambda: launch(
            spec.spark.get(), spec.engine, job_name=job_name, job_id=job_id, deployment=blob, num_workers=parallelism,
            restart=strategy, kind=coordination, fence=fence)))

    if spec.ha is None:
        client, _ = wait(start, job_name, timeout)
    else:
        fingerprint = graph_ha.fingerprint(graph, program, parallelism, partitioner, checkpoint_interval,
                                           full_checkpoint_every)
        try:
            client, _ = wait(lambda: graph_ha.submit(spec, job_name, fingerprint, blob, coordination, factor, start),
                             job_name, timeout)
        except JobEndedElsewhere as ended:  # another driver ran it to its end: its results are in work_dir
            return _ended_elsewhere(ended, work_uri, program, parallelism)
    duration = time.monotonic() - started
    results = [read_result(work_uri, w) for w in coordination.live_workers()]
    ids, values = in_id_order([r["ids"] for r in results], [r["values"] for r in results], program)
    halted = coordination.halted
    assert halted is not None
    return GraphResult(ids, values, halted.superstep, halted.reason, factor,
                       coordination.supersteps.history, duration, client.restarts(), coordination.timings,
                       coordination.restores, replication.history if replication is not None else [])


def _ended_elsewhere(ended: JobEndedElsewhere, work_uri: str, program: VectorProgram | VertexProgram,
                     parallelism: int) -> GraphResult:
    """The result of an HA graph job another driver ran to its end: read from the result files its
    workers left in the shared work directory (a failed or cancelled job raises as it did there)."""
    ended.result()  # FAILED and CANCELLED raise
    details = ended.record.details
    results = [read_result(work_uri, w) for w in range(parallelism)]  # checkpoints: no worker is retired
    ids, values = in_id_order([r["ids"] for r in results], [r["values"] for r in results], program)
    return GraphResult(ids, values, int(details.get("supersteps", -1)),
                       f"ended under another driver ({details.get('halt_reason', '?')}): {ended.where}",
                       float(details.get("replication_factor", 0.0)))


def _run_loaded_on_executors(source: GraphSource, program: VectorProgram | VertexProgram, spec: JobSpec,
                             parallelism: int, partitioner: str, fault_tolerance: str, checkpoint_interval: int,
                             full_checkpoint_every: int, work_uri: str, restart: RestartStrategy | None,
                             timeout: float | None, faults: list[Fault] | None, job_name: str, job_id: str,
                             settings: ReplicationSettings | None, result_dir: str, output_dir: str | None
                             ) -> GraphResult:
    """:func:`run_graph` of a graph that Spark tasks load: partitions written by the executors,
    results written by the workers; the driver holds sizes (and, with replication, how many
    vertices have each distinct owner and mirror workers, for the JobMaster's recovery machine)."""
    from epochal.graph.executors.stages import check_program, load_on_executors
    from epochal.graph.output import publish_worker_parts

    directions, adjacency = program_layout(program)
    fs, path = resolve(work_uri)
    fs.create_dir(path, recursive=True)
    source_vertex = getattr(program, "source", None)
    lookups = [int(source_vertex)] if isinstance(source_vertex, int) else []
    replicated = None if settings is None else (
        settings.k, settings.selfish and getattr(program, "selfish_safe", False), settings.ft_replicas)
    stats = load_on_executors(spec.spark.get(), source, parallelism, work_uri, partitioner=partitioner,
                              directions=directions, adjacency=adjacency, replication=replicated, lookups=lookups)
    check_program(program, stats)
    replication = None
    if settings is not None:
        assert stats.patterns is not None and stats.pattern_counts is not None
        replication = ReplicaRecovery(settings, None, stats.patterns[:, 0], stats.patterns[:, 1:], parallelism,
                                      stats.pattern_counts)
    storage = CheckpointStorage(join(work_uri, "checkpoints")) if fault_tolerance == "checkpoint" else None
    staged_results, staged_text = join(work_uri, "results-staged"), join(work_uri, "text-staged")
    deployment = GraphDeployment(job_name, job_id, program, parallelism, stats.num_vertices, work_uri, spec.engine,
                                 storage.uri if storage is not None else None, FaultInjector.of(faults or []),
                                 replication=settings, directed=source.directed, result_dir=staged_results,
                                 text_dir=staged_text if output_dir is not None else None)
    coordination = GraphCoordination(job_name, program, parallelism, storage,
                                     checkpoint_interval if storage is not None else 0, full_checkpoint_every,
                                     replication)
    strategy = restart if restart is not None else spec.restart
    if restart is None and fault_tolerance == "checkpoint" and isinstance(strategy, NoRestart):
        strategy = FixedDelayRestart(attempts=3, delay=0.0)
    blob = serialize(deployment)
    started = time.monotonic()
    client, _ = wait(lambda: JobClient(launch(spec.spark.get(), spec.engine, job_name=job_name, job_id=job_id,
                                              deployment=blob, num_workers=parallelism, restart=strategy,
                                              kind=coordination)), job_name, timeout)
    duration = time.monotonic() - started
    live = coordination.live_workers()
    publish_worker_parts(staged_results, result_dir, live, parquet=True)
    if output_dir is not None:
        publish_worker_parts(staged_text, output_dir, live, parquet=False)
    halted = coordination.halted
    assert halted is not None
    return GraphResult(None, None, halted.superstep, halted.reason, stats.replication_factor,
                       coordination.supersteps.history, duration, client.restarts(), coordination.timings,
                       coordination.restores, replication.history if replication is not None else [],
                       result_dir=result_dir, load=stats)


def _replication_settings(program: VectorProgram | VertexProgram, parallelism: int, recovery: str, replicas: int,
                          selfish: bool, ft_replicas: bool) -> ReplicationSettings:
    """Check the replication knobs against the job; raises :class:`PlanError` saying what to change."""
    if recovery not in RECOVERY_MODES:
        raise PlanError(f"recovery must be one of {', '.join(RECOVERY_MODES)}, not {recovery!r}")
    check_number(replicas, "replicas (tolerated simultaneous worker failures)", integer=True)
    if replicas < 1:
        raise PlanError(f"replication needs replicas >= 1 (tolerated failures), not {replicas}")
    if parallelism < replicas + 1:
        raise PlanError(f"tolerating {replicas} lost worker(s) needs at least {replicas + 1} workers; "
                        f"the parallelism is {parallelism}")
    if not isinstance(program, VectorProgram):
        raise PlanError(f"replication fault tolerance needs a vector program (a VectorProgram); "
                        f"{type(program).__name__} is a vertex program: use fault_tolerance='checkpoint'")
    return ReplicationSettings(replicas, recovery, selfish, ft_replicas)
