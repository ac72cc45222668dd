"""The local runner: runs a job's plan in this process, without Spark or Java, for fast tests.

Owns one thing: a thin, single-threaded driver that composes the real runtime. It plans the job
as ``execute`` does (``env.plan()``, ``build_execution_graph``), gives every simulated worker its
own copy of the deployment (by default through the same serialisation as the Spark deployment),
wires each worker's subtasks and channels with the workers' own
:func:`~epochal.dataflow.dataplane.wiring.wire_worker` and runs them through each worker's real
:class:`~epochal.dataflow.dataplane.datapath.DataPath` (the only code that moves records on a
worker: round robin over ready channels, source polling, credit, flushing); channels between
simulated workers are in-memory connections (:class:`_InProcessPeer`) that pickle batches as a
TCP connection would. Watermarks, end of input, backpressure and sinks behave as on workers.

What it does not do: checkpoints, restarts, failure detection, networking, Spark. It runs as
with checkpointing off (transactional sinks commit when their input ends) and refuses unbounded
sources. A loop (``iterate``) ends when the whole job is quiescent, which one thread can observe
directly instead of running the workers' probe protocol. It is a testing aid for your own
functions and jobs: every guarantee of epochal (exactly-once state and output, recovery,
rescaling) is proven on real Spark workers by the chaos suite (``tests/chaos``,
:class:`epochal.testing.Fault`), never by this runner.
"""

from __future__ import annotations

import copy
import pickle
import time
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from epochal.config import NONE
from epochal.control.client import JobResult
from epochal.dataflow.collect import CollectLedger
from epochal.dataflow.dataplane.datapath import DataPath
from epochal.dataflow.dataplane.tasks import Subtask
from epochal.dataflow.dataplane.wiring import WorkerCallbacks, wire_worker
from epochal.errors import JobFailedError, PlanError, UserFunctionError
from epochal.plan.execution import Deployment, ExecutionGraph, build_execution_graph, serialize_deployment
from epochal.runtime.host import frames as protocol
from epochal.runtime.host.peers import unpicklable_record
from epochal.runtime.windows.time_windows import WatermarkGenerator
from epochal.tracebacks import UserTraceback

if TYPE_CHECKING:
    from epochal.api.environment import Environment


@dataclass
class LocalResult(JobResult):
    """A :class:`~epochal.JobResult` of a local run; ``get(handle)`` reads a ``collect()`` sink."""

    def get(self, handle: Any) -> list[Any]:
        """The records of a ``collect()`` handle (or its collect id)."""
        return self.collected.get(getattr(handle, "collect_id", handle), [])


class _InProcessPeer:
    """Simulated worker ``me``'s connection to simulated worker ``peer``: what a
    :class:`~epochal.runtime.host.peers.PeerConnection` carries, handed over in memory. Batches
    are pickled and unpickled as on TCP (when the runner serialises), so records that could not
    cross workers on Spark fail here too; events and credit are delivered as they are."""

    def __init__(self, runner: LocalRunner, peer: int, serialize: bool) -> None:
        self.runner, self.peer, self.serialize = runner, peer, serialize

    def send_batch(self, channel: int, batch: list[Any]) -> None:
        if self.serialize:
            try:
                batch = protocol.loads(protocol.dumps(batch))
            except Exception as error:
                raise unpicklable_record(batch, error) from error
        self.runner.paths[self.peer].deliver_local(channel, True, batch)

    def send_event(self, channel: int, event: Any) -> None:
        self.runner.paths[self.peer].deliver_local(channel, False, event)

    def send_credit(self, channel: int, credit: int, batch_size: int = 0) -> None:
        self.runner.paths[self.peer].out_channels[channel].add_credit(credit, batch_size)


def run_locally(env: Environment, job_name: str = "local job", **options: Any) -> LocalResult:
    """Run ``env``'s job in this process (see :class:`LocalRunner` for ``options``); afterwards
    ``handle.get()`` of every ``collect()`` works as after ``env.execute``."""
    return LocalRunner(env, **options).run(job_name)


class LocalRunner:
    """Runs a bounded job's plan in one process with the real operators, chains and state.

    Args:
        env: the environment whose streams to run (as ``env.execute`` would).
        batch_size: records per source read and per channel batch (default: the environment's);
            small values interleave subtasks more finely. Batches are sized by count only
            (``batch_time`` does not apply), so runs are deterministic.
        watermark_interval: seconds between watermarks of ``with_watermarks`` (default 0: after
            every batch, so event time advances deterministically; ``None`` keeps the job's).
        serialize: give each simulated worker a copy of the plan made by the same cloudpickle
            serialisation as a Spark deployment (unpicklable functions fail as on Spark), and pickle
            batches that cross workers. ``False`` deep-copies instead: functions are shared, so a
            closure over a test's list sees what the job does to it.
        idle_timeout: seconds sources may return nothing (and nothing else runs) before the run
            fails as stalled.
    """

    def __init__(self, env: Environment, *, batch_size: int | None = None, watermark_interval: float | None = 0.0,
                 serialize: bool = True, idle_timeout: float = 10.0) -> None:
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise PlanError(f"batch_size must be a positive int, got {batch_size!r}")
        self.env = env
        self.batch_size = batch_size or env.config.batch_size
        self.watermark_interval = watermark_interval
        self.serialize = serialize
        self.idle_timeout = idle_timeout
        self.job_name = "local job"
        self._reset()

    def _reset(self) -> None:
        """Forget the workers of an earlier run (a runner may run its job again)."""
        #: each simulated worker's data path (its subtasks, channels and scheduling)
        self.paths: list[DataPath] = []
        #: the simulated worker whose data path runs now (its ``current`` subtask raised, if one did)
        self.running = 0
        self.loop_heads: set[int] = set()
        self.ledger = CollectLedger([n.collect_id for n in self.env.graph.nodes if n.collect_id])

    @property
    def subtasks(self) -> list[Subtask]:
        return [subtask for path in self.paths for subtask in path.subtasks]

    # ------------------------------------------------------------------ set-up
    def _deployments(self, graph: ExecutionGraph, job_id: str) -> list[Deployment]:
        """One copy of the deployment per simulated worker, as each Spark task gets one."""
        config = replace(self.env.config, batch_size=self.batch_size, batch_time=None)  # count only: deterministic
        deployment = Deployment(self.job_name, job_id, graph, config)
        if not self.serialize:
            return [copy.deepcopy(deployment) for _ in range(graph.num_workers)]
        functions: dict[str, list[Any]] = {}
        for node in self.env.graph.nodes:
            functions.setdefault(node.name, []).extend(f for f in node.functions if f is not None)
        blob = serialize_deployment(deployment, functions)
        return [pickle.loads(blob) for _ in range(graph.num_workers)]

    def _build(self, deployments: list[Deployment]) -> None:
        """Wire every simulated worker as a worker wires itself (checkpointing off)."""
        self.paths = [DataPath(lambda event: None) for _ in deployments]  # no worker machine: no protocol
        for worker, deployment in enumerate(deployments):
            job = deployment.graph.job
            self.loop_heads.update(loop.head_vertex for loop in job.loops)
            for node in job.nodes.values():
                if isinstance(node.operator, WatermarkGenerator) and self.watermark_interval is not None:
                    node.operator.interval = self.watermark_interval
            path = self.paths[worker]
            peers: Any = {w: _InProcessPeer(self, w, self.serialize) for w in range(len(deployments)) if w != worker}
            callbacks = WorkerCallbacks(path.deliver_local, self._to_driver, lambda subtask, cid, secs, savepoint: None,
                                        path.schedule_buffered, lambda subtask, cid: None)
            path.attach(wire_worker(worker, deployment, NONE, peers, callbacks, 0, None))

    def _to_driver(self, collect_id: str | None, payload: Any) -> None:
        """What a worker sends the JobMaster from a ``collect()`` sink: published as it arrives."""
        self.ledger.receive(collect_id or "", payload)

    # ------------------------------------------------------------------ scheduling
    def _end_quiet_loops(self) -> bool:
        """Nothing runs anywhere and every loop input from outside ended: the loops are empty,
        so their heads end them (the workers decide this with probe rounds, see dataflow/loops.py)."""
        ended = False
        for worker, path in enumerate(self.paths):
            self.running = worker
            for subtask in path.subtasks:
                if subtask.vertex_id in self.loop_heads and not subtask.finished and \
                        all(c.ended for c in subtask.inputs if not c.back_edge):
                    path.current = subtask
                    subtask.finish()
                    ended = True
        return ended

    def _flush(self) -> bool:
        flushed = False
        for worker, path in enumerate(self.paths):
            self.running = worker
            flushed = path.flush() or flushed
        return flushed

    def _loop(self) -> None:
        idle_since: float | None = None
        while True:
            now = time.time()
            worked = False
            for worker, path in enumerate(self.paths):  # each worker's loop, as ``Worker._loop`` runs it
                self.running = worker
                if path.timed:
                    path.run_processing_time(now)
                worked = path.run_inputs(32) or worked
                worked = path.run_sources(self.batch_size) or worked
            if worked or self._flush():
                idle_since = None
                continue
            if all(path.finished for path in self.paths):
                return
            if any(not s.finished for path in self.paths for s in path.sources):
                # sources have nothing right now (a PAUSE, an idle custom source)
                now = time.monotonic()
                idle_since = idle_since or now
                if now - idle_since > self.idle_timeout:
                    raise RuntimeError(f"local run of '{self.job_name}' stalled: its sources returned no records "
                                       f"for {self.idle_timeout:g} s and nothing else could run")
                time.sleep(0.0005)
                continue
            if self._end_quiet_loops():
                continue
            waiting = [f"{s.name}#{s.index}" for s in self.subtasks if not s.finished]
            raise RuntimeError(f"local run of '{self.job_name}' stalled with nothing left to run; unfinished "
                               f"subtasks: {', '.join(waiting)} (an epochal bug: please report it)")

    # ------------------------------------------------------------------ running
    def run(self, job_name: str = "local job") -> LocalResult:
        """Run the job to the end and return its result (also set as ``env.last_result``).

        Raises:
            PlanError: as ``env.execute`` would (no sink, bad parallelism, unpicklable function),
                or a source is unbounded.
            JobFailedError: a user function raised (its exception is the ``__cause__``), or a
                record that must cross workers cannot be pickled.
        """
        self.job_name = job_name
        self._reset()
        job = self.env.plan()
        for vertex in job.vertices:
            if vertex.source is not None and not vertex.source.bounded:
                raise PlanError(f"run_locally runs bounded jobs, and source '{vertex.name}' is unbounded: bound it "
                                "for the test (e.g. from_sequence(0, end), from_generator(fn, count=n), TestSource)")
        started = time.monotonic()
        job_id = f"local-{uuid.uuid4().hex[:8]}"
        graph = build_execution_graph(job)
        try:
            self._build(self._deployments(graph, job_id))
            self._loop()
        except UserFunctionError as error:
            raise self._failure(error) from error.error
        finally:
            for subtask in self.subtasks:
                subtask.close()
        result = LocalResult(job_name, job_id, time.monotonic() - started,
                             collected={k: list(v) for k, v in self.ledger.published.items()},
                             metrics=self._metrics(graph.num_workers))
        self.env.last_result = result
        return result

    def _failure(self, error: UserFunctionError) -> JobFailedError:
        worker = self.running if self.paths else None
        subtask = self.paths[worker].current if worker is not None else None
        where = f" (subtask {subtask.index} of '{subtask.name}')" if subtask is not None else ""
        cause = error.error
        shown = UserTraceback.of(cause).format()
        on = f" on record {error.record}" if error.record else ""
        return JobFailedError(f"job '{self.job_name}' failed: {error.where}{where} raised "
                              f"{type(cause).__name__}: {cause}{on}\n{shown}".rstrip(), operator=error.operator,
                              worker=worker, category="user")

    def _metrics(self, workers: int) -> dict[int, dict[str, Any]]:
        """Per simulated worker, the counters a worker reports (``JobResult`` reads them)."""
        return {w: {"worker": w, **path.counters()} for w, path in enumerate(self.paths)}
