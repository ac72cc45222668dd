"""A CEC job's plan: its stages, one worker per stage instance, and the channels between them.

A job runs under CEC (or its baseline CRB) as the job kind ``cec``. Its job graph
(:mod:`epochal.plan.jobgraph`, chaining included) must be a pipeline: each vertex has at most
one input and one output edge, and holds, in order, a source or an input, stateless operators
(``map``, ``filter``, ``flat_map``; watermark generators only tell the window their lateness
bound), at most one window aggregate (at its head: the keyed edge ends there), stateless
operators after it, and a sink or an output edge. Each vertex is a :class:`Stage`; unlike the
dataflow runtime's slot sharing, every stage instance is a worker of its own (worker
``first_worker + subtask``), so that losing a worker loses one operator instance, as in
papers/002, and only that instance is rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from epochal.cec.policy import CecSettings
from epochal.config import EngineConfig
from epochal.connectors.base import Sink, SourceSplit, assign_splits
from epochal.errors import PlanError, UserFunctionError
from epochal.plan.execution import ExecutionGraph
from epochal.plan.keygroups import key_groups_of
from epochal.plan.partitioners import CustomPartitioner, KeyGroupPartitioner, Partitioner, RebalancePartitioner
from epochal.runtime.host.hooks import WorkerHook
from epochal.runtime.operators.aggregates import CountAggregate, CountFunction, RollingFunction
from epochal.runtime.operators.base import FilterOperator, FlatMapOperator, MapOperator, Operator, SinkOperator
from epochal.runtime.windows.count_windows import CountWindowOperator
from epochal.runtime.windows.shapes import CountWindows, TimeWindows
from epochal.runtime.windows.time_windows import FunctionAggregate, TimeWindowOperator, WatermarkGenerator

#: Recovery modes of a ``cec`` job: CEC itself, the paper's baseline, and none (``native``).
MODES = ("cec", "crb", "native")
_STATELESS = (MapOperator, FilterOperator, FlatMapOperator)


@dataclass
class WindowSpec:
    """The window aggregate of a stage."""

    shape: TimeWindows | CountWindows
    function: Any
    key: Callable[[Any], Any]
    timestamp: Callable[[Any], Any] | None
    out_of_orderness: Any = 0


@dataclass
class Stage:
    """One vertex of the pipeline, run by ``parallelism`` workers from ``first_worker`` on."""

    index: int
    name: str
    parallelism: int
    first_worker: int
    #: per subtask, the source splits it reads (None: the stage reads an input edge)
    splits: list[list[SourceSplit]] | None = None
    pre: list[Operator] = field(default_factory=list)
    window: WindowSpec | None = None
    post: list[Operator] = field(default_factory=list)
    sink: Sink | None = None
    sink_name: str = ""
    upstream: int | None = None
    forward_in: bool = False
    downstream: int | None = None
    partitioner: Partitioner | None = None

    def worker(self, subtask: int) -> int:
        return self.first_worker + subtask


@dataclass
class CecDeployment:
    """Everything a worker of a ``cec`` job needs; shipped as one cloudpickled blob."""

    job_name: str
    job_id: str
    stages: list[Stage]
    config: EngineConfig
    mode: str = "cec"
    settings: CecSettings = field(default_factory=CecSettings)
    #: where every worker keeps its persisted output queue: ``<log_root>/<job id>/w<worker>``
    log_root: str = ""
    hook: WorkerHook | None = None
    #: seconds between a sink's commits
    commit_interval: float = 0.5
    #: CRB: seconds between full checkpoints of every window
    snapshot_interval: float = 1.0
    segment_bytes: int = 16 << 20
    fsync: bool = False
    max_outstanding: int = 8
    #: False: frames are forwarded unwritten (a benchmark baseline; nothing can be rebuilt)
    persist: bool = True

    @property
    def num_workers(self) -> int:
        last = self.stages[-1]
        return last.first_worker + last.parallelism

    def locate(self, worker: int) -> tuple[Stage, int]:
        """The stage and subtask worker ``worker`` runs."""
        for stage in self.stages:
            if stage.first_worker <= worker < stage.first_worker + stage.parallelism:
                return stage, worker - stage.first_worker
        raise ValueError(f"worker {worker} is not part of this job")

    def producers(self, stage: Stage, subtask: int) -> list[int]:
        """The workers whose output ``stage``'s ``subtask`` reads (its input channels, in order)."""
        if stage.upstream is None:
            return []
        up = self.stages[stage.upstream]
        return [up.worker(subtask)] if stage.forward_in else [up.worker(i) for i in range(up.parallelism)]

    def consumers(self, stage: Stage, subtask: int) -> list[int]:
        """The workers reading ``stage``'s ``subtask`` (empty: its output goes to its own sink)."""
        if stage.downstream is None:
            return []
        down = self.stages[stage.downstream]
        return [down.worker(subtask)] if down.forward_in else [down.worker(i) for i in range(down.parallelism)]


def _unsupported(name: str, what: str) -> PlanError:
    return PlanError(f"'{name}' ({what}) cannot run under continuous eventual checkpointing: a CEC job is a "
                     "pipeline of sources, map/filter/flat_map, one window aggregate per stage (count or time "
                     "windows) and sinks. Run this job with enable_checkpointing(...) instead")


def _window_spec(operator: Operator, out_of_orderness: Any) -> WindowSpec:
    aggregate = operator.aggregate  # type: ignore[attr-defined]
    if isinstance(aggregate, FunctionAggregate):
        function = aggregate.function
    elif type(aggregate) is CountAggregate:
        function = CountFunction()
    else:
        function = RollingFunction(aggregate)
    timestamp = operator.timestamp if isinstance(operator, TimeWindowOperator) else None
    return WindowSpec(operator.windows, function, operator.key_selector, timestamp, out_of_orderness)  # type: ignore[attr-defined]


def build_stages(graph: ExecutionGraph) -> list[Stage]:
    """The stages of ``graph``, or a :class:`PlanError` saying what a CEC job cannot run."""
    job = graph.job
    lateness = max((node.operator.max_out_of_orderness for node in job.nodes.values()
                    if isinstance(node.operator, WatermarkGenerator)), default=0)
    stages: list[Stage] = []
    first = 0
    for vertex in job.vertices:
        if len(vertex.in_edges) > 1 or len(vertex.out_edges) > 1:
            raise _unsupported(vertex.name, "more than one input or output")
        stage = Stage(len(stages), vertex.name, vertex.parallelism, first)
        if vertex.source is not None:
            splits = graph.splits[vertex.id]
            stage.splits = [assign_splits(splits, i, vertex.parallelism) for i in range(vertex.parallelism)]
        for node_id in vertex.nodes:
            node = job.nodes[node_id]
            operator = node.operator
            if len(node.children) > 1 or (node.children and node.out_edges):
                raise _unsupported(node.name, "an operator feeding several others")
            if node.operation == "source" or isinstance(operator, WatermarkGenerator):
                continue
            if isinstance(operator, _STATELESS):
                (stage.post if stage.window is not None else stage.pre).append(operator)
            elif isinstance(operator, (TimeWindowOperator, CountWindowOperator)):
                if stage.window is not None or stage.pre:
                    raise _unsupported(node.name, "a window not at the head of its stage")
                stage.window = _window_spec(operator, lateness)
            elif isinstance(operator, SinkOperator):
                stage.sink, stage.sink_name = operator.sink, node.name
            else:
                raise _unsupported(node.name, node.operation)
        stages.append(stage)
        first += vertex.parallelism
    index_of = {vertex.id: i for i, vertex in enumerate(job.vertices)}
    for edge in job.edges:
        producer, consumer = stages[index_of[edge.source_vertex]], stages[index_of[edge.target_vertex]]
        if edge.partitioner.strategy == "broadcast":
            raise _unsupported(consumer.name, "a broadcast input: every record must reach exactly one consumer")
        producer.downstream, producer.partitioner = consumer.index, edge.partitioner
        consumer.upstream, consumer.forward_in = producer.index, edge.partitioner.is_forward
    for stage in stages:
        if stage.downstream is None and stage.sink is None:
            raise PlanError(f"stage '{stage.name}' of a CEC job ends without a sink")
        if stage.window is not None and stage.upstream is None:
            raise _unsupported(stage.name, "a window directly on a source: key_by(...) first")
    return stages


def targets_of(partitioner: Partitioner | None, records: list[Any], n: int, offset: int = 0) -> list[int]:
    """The consumer (0..n-1) of each record, as ``partitioner.split`` would send it; ``offset``:
    how many records this producer sent before (round robin continues from there)."""
    if partitioner is None or partitioner.is_forward or n == 1:
        return [0] * len(records)
    if isinstance(partitioner, KeyGroupPartitioner):
        owners = partitioner._owner_table(n)
        return [owners[g] for g in key_groups_of(list(map(partitioner.key_selector, records)),
                                                 partitioner.max_parallelism)]
    if isinstance(partitioner, RebalancePartitioner):
        return [(offset + k) % n for k in range(len(records))]
    if isinstance(partitioner, CustomPartitioner):
        out = [partitioner.partition(partitioner.key_selector(r), n) for r in records]
        bad = next((t for t in out if not 0 <= t < n), None)
        if bad is not None:
            raise ValueError(f"custom partitioner returned {bad!r}, expected an index in 0..{n - 1}")
        return out
    raise PlanError(f"a CEC job cannot use a {partitioner.strategy} edge: every record must go to exactly one consumer")


def run_chain(operators: list[Operator], records: list[Any]) -> list[Any]:
    """``records`` through a stage's stateless ``operators``; a user function that raises is a
    :class:`~epochal.runtime.operators.base.UserFunctionError` naming its operator."""
    for operator in operators:
        try:
            records = operator.process_batch(records)
        except UserFunctionError:
            raise
        except Exception as error:
            raise UserFunctionError(operator.name or type(operator).__name__, error) from error
    return records
