"""Job graph -> execution graph: subtasks, channels and their placement on workers.

Placement follows slot sharing: a job needs ``W = max(parallelism)`` workers and worker ``w``
hosts subtask ``w`` of every vertex whose parallelism exceeds ``w``. Every subtask therefore
has a stable id ``(vertex, index)`` that does not depend on which Spark task or executor runs
it, which is what checkpoints and restores key their state by.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import cloudpickle

from epochal.config import CheckpointConfig, EngineConfig, StateBackendConfig
from epochal.connectors.base import SourceSplit
from epochal.errors import PlanError
from epochal.plan.jobgraph import JobGraph
from epochal.serialization import dumps_by_value

if TYPE_CHECKING:
    from epochal.runtime.host.hooks import WorkerHook
    from epochal.state.fencing import LeaderFence


@dataclass(frozen=True)
class Channel:
    """A logical channel: one producer subtask to one consumer subtask over one job edge."""

    id: int
    edge: int
    producer: int
    consumer: int


@dataclass
class ExecutionGraph:
    """Channels of every edge and the splits of every source, for ``num_workers`` workers."""

    job: JobGraph
    num_workers: int
    channels: list[Channel]
    #: (edge id, producer subtask) -> channel ids ordered by consumer subtask
    outputs: dict[tuple[int, int], list[int]]
    #: (vertex id, subtask) -> input channel ids
    inputs: dict[tuple[int, int], list[int]]
    #: source vertex id -> all its splits (subtask i reads splits[i::parallelism])
    splits: dict[int, list[SourceSplit]] = field(default_factory=dict)
    #: source uid -> the parallelism its splits were cut for (recorded in checkpoints)
    split_layout: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def worker_of(subtask: int) -> int:
        """Worker hosting a subtask: slot sharing puts subtask i of every vertex on worker i."""
        return subtask

    def subtasks_of_worker(self, worker: int) -> list[tuple[int, int]]:
        """(vertex id, subtask index) pairs hosted by ``worker``."""
        return [(v.id, worker) for v in self.job.vertices if worker < v.parallelism]


def build_execution_graph(job: JobGraph, split_layout: dict[str, int] | None = None) -> ExecutionGraph:
    """Create channels for every edge and cut every source into splits.

    ``split_layout`` maps a source's uid to the parallelism its splits were cut for in the run
    a restore comes from: cutting them the same way keeps every recorded split position valid,
    whatever the new parallelism.
    """
    channels: list[Channel] = []
    outputs: dict[tuple[int, int], list[int]] = {}
    inputs: dict[tuple[int, int], list[int]] = {
        (v.id, i): [] for v in job.vertices for i in range(v.parallelism)}
    for edge in job.edges:
        producers = job.vertices[edge.source_vertex].parallelism
        consumers = job.vertices[edge.target_vertex].parallelism
        for producer in range(producers):
            targets = [producer] if edge.partitioner.is_forward else list(range(consumers))
            ids = []
            for consumer in targets:
                channel = Channel(len(channels), edge.id, producer, consumer)
                channels.append(channel)
                ids.append(channel.id)
                inputs[(edge.target_vertex, consumer)].append(channel.id)
            outputs[(edge.id, producer)] = ids
    graph = ExecutionGraph(job, max(v.parallelism for v in job.vertices), channels, outputs, inputs)
    for vertex in job.vertices:
        if vertex.source is not None:
            try:
                uid = job.nodes[vertex.head].uid
                cut_for = (split_layout or {}).get(uid, vertex.parallelism)
                graph.splits[vertex.id] = vertex.source.create_splits(cut_for)
                graph.split_layout[uid] = cut_for
            except PlanError:
                raise
            except Exception as error:
                if getattr(error, "__module__", "").startswith("epochal"):
                    raise
                raise PlanError(f"source '{vertex.name}' cannot be prepared: {type(error).__name__}: {error}") \
                    from error
    return graph


@dataclass
class Deployment:
    """Everything a worker needs to run its subtasks; shipped as one cloudpickled blob."""

    job_name: str
    job_id: str
    graph: ExecutionGraph
    config: EngineConfig
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    #: Root of this job's checkpoints (``<storage>/<job name>``); empty when checkpointing is off.
    storage_uri: str = ""
    #: Called at named points of the worker's protocol: fault injection for chaos tests
    #: (``epochal.testing.faults.FaultInjector``), else None.
    hook: WorkerHook | None = None
    #: the keyed-state backend and how its snapshots are taken
    state_backend: StateBackendConfig = field(default_factory=StateBackendConfig)
    #: with high availability, the leader epochs workers check before they commit (else None)
    fence: LeaderFence | None = None


_LIBRARY_DIRS = tuple(os.path.realpath(p) for p in {
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
    os.path.dirname(os.path.dirname(os.path.realpath(__file__))),
})


def ship_module_by_value(fn: Any) -> None:
    """Let functions from the user's own modules (scripts, tests, notebooks' helpers) run on
    executors that cannot import those modules: pickle such modules by value, not by name.
    Installed packages stay pickled by reference."""
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    if not isinstance(module, types.ModuleType) or module.__name__ == "__main__":
        return
    path = getattr(module, "__file__", None)
    if not path or os.path.realpath(path).startswith(_LIBRARY_DIRS):
        return
    try:
        cloudpickle.register_pickle_by_value(module)
    except ValueError:
        pass


def serialize_deployment(deployment: Deployment, functions: dict[str, list[Any]]) -> bytes:
    """Pickle the deployment, first checking each operator on its own so that an unpicklable
    function is reported with the operator's name rather than as a bare pickling error.

    ``functions`` maps operator names to the user objects inside them.
    """
    functions = {name: [fn for fn in fns if fn is not None] for name, fns in functions.items()}
    for fns in functions.values():
        for fn in fns:
            ship_module_by_value(fn)
            ship_module_by_value(type(fn))
    for name, fns in functions.items():
        for fn in fns:
            try:
                dumps_by_value(fn)
            except Exception as error:
                raise PlanError(
                    f"operator '{name}' cannot be shipped to the workers: its function {fn!r} is not "
                    f"serialisable ({type(error).__name__}: {error}). Functions must be picklable by "
                    "cloudpickle: create locks, sockets, files and clients inside the function or in "
                    "ProcessFunction.open(), not in the enclosing scope") from error
    for node in deployment.graph.job.nodes.values():
        try:
            dumps_by_value(node.operator)
        except Exception as error:
            raise PlanError(f"operator '{node.name}' cannot be shipped to the workers: "
                            f"{type(error).__name__}: {error}") from error
    try:
        return dumps_by_value(deployment)
    except Exception as error:
        raise PlanError(f"the job cannot be shipped to the workers: {type(error).__name__}: {error}") from error
