"""The local runner: runs a job's plan in this process, without Spark or Java, for fast tests.

Owns one thing: a thin, single-threaded driver around the real runtime pieces. It plans the job
as ``execute`` does (``env.plan()``, ``build_execution_graph``), gives every simulated worker its
own copy of the plan (by default through the same cloudpickle serialisation as the Spark
deployment), builds every subtask of every vertex at its parallelism with the real
:class:`~epochal.runtime.tasks.Subtask`, :class:`~epochal.runtime.tasks.ChainRunner`,
:class:`~epochal.runtime.tasks.EdgeOutput` and :class:`~epochal.runtime.tasks.SourceReader`,
real keyed and operator state, and in-memory credit-based channels
(:mod:`epochal.runtime.channels`), then schedules them the way a worker's mailbox loop does
(``runtime/worker.py``: ``_build``, ``_run_inputs``, ``_run_sources``): watermarks, end of
input, backpressure and sinks behave as on workers.

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
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from epochal.connectors.base import assign_splits
from epochal.control.client import JobResult
from epochal.control.collect import CollectLedger
from epochal.errors import JobFailedError, PlanError
from epochal.plan.execution import Deployment, ExecutionGraph, build_execution_graph, serialize_deployment
from epochal.runtime import protocol
from epochal.runtime.chains import edge_names
from epochal.runtime.channels import InputChannel, LocalTransport, OutputChannel, unpicklable_record
from epochal.runtime.operators import UserFunctionError
from epochal.runtime.source_reader import SourceReader
from epochal.runtime.tasks import Subtask
from epochal.runtime.windows import WatermarkGenerator
from epochal.runtime.wiring import UNBOUNDED_CREDIT
from epochal.tracebacks import UserTraceback

if TYPE_CHECKING:
    from epochal.api.environment import Environment


@dataclass
class LocalResult(JobResult):
    """A :class:`~epochal.JobResult` of a local run; ``get(handle)`` reads a ``collect()`` sink."""

    def get(self, handle: Any) -> list[Any]:
        """The records of a ``collect()`` handle (or its collect id)."""
        return self.collected.get(getattr(handle, "collect_id", handle), [])


class _PicklingTransport(LocalTransport):
    """An in-memory channel between two simulated workers: batches are pickled and unpickled as
    on a TCP connection, so records that could not cross workers on Spark fail here too."""

    def send_batch(self, channel: int, batch: list[Any]) -> None:
        try:
            payload = protocol.dumps(batch)
        except Exception as error:
            raise unpicklable_record(batch, error) from error
        self.deliver_local(channel, True, protocol.loads(payload))


def run_locally(env: Environment, job_name: str = "local job", **options: Any) -> LocalResult:
    """Run ``env``'s job in this process (see :class:`LocalRunner` for ``options``); afterwards
    ``handle.get()`` of every ``collect()`` works as after ``env.execute``."""
    return LocalRunner(env, **options).run(job_name)


class LocalRunner:
    """Runs a bounded job's plan in one process with the real operators, chains and state.

    Args:
        env: the environment whose streams to run (as ``env.execute`` would).
        batch_size: records per source read and per channel batch (default: the environment's);
            small values interleave subtasks more finely.
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
        """Forget the subtasks and channels of an earlier run (a runner may run its job again)."""
        self.subtasks: list[Subtask] = []
        self.sources: list[Subtask] = []
        self.worker_of: dict[int, int] = {}  # id(subtask) -> simulated worker
        self.in_channels: dict[int, InputChannel] = {}
        self.out_channels: dict[int, OutputChannel] = {}
        self.ready: deque[InputChannel] = deque()
        self.loop_heads: set[int] = set()
        self.records_processed: dict[int, int] = {}
        self.ledger = CollectLedger([n.collect_id for n in self.env.graph.nodes if n.collect_id])
        self._current: Subtask | None = None

    # ------------------------------------------------------------------ set-up
    def _plans(self, graph: ExecutionGraph, job_id: str) -> list[ExecutionGraph]:
        """One copy of the execution graph per simulated worker, as each Spark task gets one."""
        if not self.serialize:
            return [copy.deepcopy(graph) for _ in range(graph.num_workers)]
        functions: dict[str, list[Any]] = {}
        for node in self.env.graph.nodes:
            functions.setdefault(node.name, []).extend(f for f in node.functions if f is not None)
        deployment = Deployment(self.job_name, job_id, graph, self.env.config)
        blob = serialize_deployment(deployment, functions)
        return [pickle.loads(blob).graph for _ in range(graph.num_workers)]

    def _build(self, plans: list[ExecutionGraph]) -> None:
        """Create every subtask with its channels, mirroring ``Worker._build`` for each worker."""
        config = self.env.config
        plain = LocalTransport(self._deliver)
        crossing = _PicklingTransport(self._deliver) if self.serialize else plain
        first = plans[0]
        for channel in first.channels:  # every output channel first: consumers return credit to them
            job = plans[first.worker_of(channel.producer)].job
            same_worker = first.worker_of(channel.producer) == first.worker_of(channel.consumer)
            credit = UNBOUNDED_CREDIT if job.edges[channel.edge].back_edge else config.channel_credits
            self.out_channels[channel.id] = OutputChannel(channel.id, credit, plain if same_worker else crossing,
                                                          edge_names(job, channel.edge))
        for worker, graph in enumerate(plans):
            job = graph.job
            self.loop_heads.update(loop.head_vertex for loop in job.loops)
            for node in job.nodes.values():
                if isinstance(node.operator, WatermarkGenerator) and self.watermark_interval is not None:
                    node.operator.interval = self.watermark_interval
            for vertex_id, index in graph.subtasks_of_worker(worker):
                self._build_subtask(graph, vertex_id, index, worker)

    def _build_subtask(self, graph: ExecutionGraph, vertex_id: int, index: int, worker: int) -> None:
        job = graph.job
        vertex = job.vertices[vertex_id]
        subtask = Subtask(vertex_id, index, vertex.parallelism, vertex.name)
        self.subtasks.append(subtask)  # closed at the end even if opening fails
        self.worker_of[id(subtask)] = worker
        self._current = subtask
        subtask.open(job.nodes, vertex.nodes, job.max_parallelism, self._to_driver, attempt=0,
                     checkpointing=False, restore=None)
        subtask.connect_outputs(job, graph.outputs, self.out_channels, self.batch_size)
        for channel_id in graph.inputs[(vertex_id, index)]:
            channel = InputChannel(channel_id, subtask, self.out_channels[channel_id].add_credit)
            channel.back_edge = job.edges[graph.channels[channel_id].edge].back_edge
            channel.input_index = job.edges[graph.channels[channel_id].edge].input_index
            self.in_channels[channel_id] = channel
            subtask.inputs.append(channel)
        if vertex.source is not None:
            subtask.attach_source(SourceReader(assign_splits(graph.splits[vertex_id], index, vertex.parallelism)))
            self.sources.append(subtask)

    def _to_driver(self, collect_id: str | None, payload: Any) -> None:
        """What a worker sends the JobMaster from a ``collect()`` sink: published as it arrives."""
        self.ledger.receive(collect_id or "", payload)

    # ------------------------------------------------------------------ scheduling
    def _deliver(self, channel_id: int, is_batch: bool, item: Any) -> None:
        channel = self.in_channels[channel_id]
        channel.queue.append((is_batch, item))
        if not channel.scheduled:
            channel.scheduled = True
            self.ready.append(channel)

    def _count(self, subtask: Subtask, records: int) -> None:
        worker = self.worker_of[id(subtask)]
        self.records_processed[worker] = self.records_processed.get(worker, 0) + records

    def _run_inputs(self) -> bool:
        """One round robin over the ready input channels (a subtask waiting for credit waits)."""
        worked = False
        ready = self.ready
        for _ in range(len(ready)):
            if not ready:
                break
            channel = ready.popleft()
            subtask = channel.subtask
            if subtask.backlogged:
                ready.append(channel)
                continue
            self._current = subtask
            is_batch, item = channel.queue.popleft()
            if is_batch:
                self._count(subtask, len(item))
                subtask.on_batch(item, channel.input_index)
                channel.return_credit(1)
            else:
                subtask.on_event(channel, item)
            worked = True
            if channel.queue:
                ready.append(channel)
            else:
                channel.scheduled = False
        return worked

    def _run_sources(self) -> tuple[bool, bool]:
        """Poll every live source subtask once: (whether anything happened, whether one is live)."""
        worked = live = False
        for subtask in self.sources:
            if subtask.finished:
                continue
            live = True
            if subtask.backlogged:
                continue
            self._current = subtask
            count = subtask.poll_source(self.batch_size)
            self._count(subtask, count)
            worked = worked or count > 0 or subtask.finished
        return worked, live

    def _flush(self) -> bool:
        """Send partly filled batches; True if there were any."""
        sent = False
        for subtask in self.subtasks:
            if not subtask.finished and any(buffer for output in subtask.outputs for buffer in output.buffers):
                self._current = subtask
                subtask.flush()
                sent = True
        return sent

    def _end_quiet_loops(self) -> bool:
        """Nothing runs anywhere and every loop input from outside ended: the loops are empty,
        so their heads end them (the workers decide this with probe rounds, see control/loops.py)."""
        ended = False
        for subtask in self.subtasks:
            if subtask.vertex_id in self.loop_heads and not subtask.finished and \
                    all(c.ended for c in subtask.inputs if not c.back_edge):
                self._current = subtask
                subtask.finish()
                ended = True
        return ended

    def _loop(self) -> None:
        idle_since: float | None = None
        while True:
            now = time.time()
            for subtask in self.subtasks:
                if subtask.timed:
                    self._current = subtask
                    subtask.on_processing_time(now)
            worked = self._run_inputs()
            source_worked, live = self._run_sources()
            if worked or source_worked or self._flush():
                idle_since = None
                continue
            if all(s.finished for s in self.subtasks):
                return
            if live:  # sources have nothing right now (a PAUSE, an idle custom source)
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
            self._build(self._plans(graph, job_id))
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
        subtask = self._current
        where = f" (subtask {subtask.index} of '{subtask.name}')" if subtask is not None else ""
        cause = error.error
        shown = UserTraceback.of(cause).format()
        return JobFailedError(f"job '{self.job_name}' failed: {error.where}{where} raised "
                              f"{type(cause).__name__}: {cause}\n{shown}".rstrip(), operator=error.operator,
                              worker=self.worker_of.get(id(subtask)) if subtask is not None else None, kind="user")

    def _metrics(self, workers: int) -> dict[int, dict[str, Any]]:
        """Per simulated worker, the counters a worker reports (``JobResult`` reads them)."""
        metrics: dict[int, dict[str, Any]] = {
            w: {"worker": w, "records_processed": self.records_processed.get(w, 0), "source_records": 0,
                "late_records_dropped": 0, "operators": {}} for w in range(workers)}
        for subtask in self.subtasks:
            entry = metrics[self.worker_of[id(subtask)]]
            entry["source_records"] += subtask.records_read
            for runner in subtask.runners:
                entry["operators"][f"{runner.name}#{subtask.index}"] = runner.records_in
                for name, value in runner.operator.counters().items():
                    entry[name] = entry.get(name, 0) + value
        return metrics
