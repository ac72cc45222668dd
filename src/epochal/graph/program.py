"""Vertex programs: what a user writes to run on a graph, per vertex or per partition.

Two forms, both executed in supersteps separated by a global barrier (papers/003 §2.1, BSP):

- :class:`VertexProgram`, the Pregel form: ``compute(vertex, messages)`` runs for every active
  vertex, reads and updates ``vertex.value``, sends messages along out-edges or to any vertex id,
  adds to global aggregators, and votes to halt; a message reactivates a halted vertex. An
  optional combiner merges messages to the same vertex before they travel.
- :class:`VectorProgram`, the partition form the built-in algorithms use: ``compute`` gets the
  whole partition (CSR over table slots, numpy arrays) and the *table* of values of its masters
  and replicas as of the previous superstep, and returns its masters' new values at once. The
  engine sends only changed values to the replicas (dynamic computation) and tells the next
  superstep which table values changed.

Both may declare ``aggregators`` (name -> ``"sum"``, ``"min"`` or ``"max"``): partial values a
superstep reports are combined by the coordinator and visible to every vertex in the next
superstep (``ctx.aggregates``); ``max_supersteps`` bounds the run and ``converged`` is a global
convergence test on those aggregates. A job halts when the bound is reached, when ``converged``
says so, or when no vertex is active and nothing was sent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from epochal.graph.model import Graph
from epochal.graph.partition import Partition

#: How partial aggregates combine.
AGGREGATE_OPS: dict[str, Callable[[Any, Any], Any]] = {"sum": lambda a, b: a + b, "min": min, "max": max}


def combine_aggregates(kinds: dict[str, str], parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Global aggregates from the partial ones of each worker (missing names are skipped)."""
    out: dict[str, Any] = {}
    for part in parts:
        for name, value in part.items():
            op = AGGREGATE_OPS[kinds.get(name, "sum")]
            out[name] = value if name not in out else op(out[name], value)
    return out


@dataclass
class SuperstepContext:
    """What a superstep may read besides the graph: numbering, sizes, last superstep's aggregates."""

    superstep: int
    num_vertices: int
    worker: int
    num_workers: int
    #: global aggregates of the previous superstep
    aggregates: dict[str, Any] = field(default_factory=dict)
    #: vector programs: which table slots changed value in the previous superstep
    changed: np.ndarray | None = None
    #: the program's last superstep (its bound): selfish vertices' FT replicas are synchronised
    final: bool = False


@dataclass
class StepResult:
    """A vector program's superstep on one partition."""

    #: the new value of every master (same length as ``part.ids``)
    values: np.ndarray
    #: masters still active (a job with none active anywhere and nothing sent has converged);
    #: None: the number of masters whose value changed
    active: int | None = None
    #: partial aggregates of this partition
    aggregates: dict[str, Any] = field(default_factory=dict)


class VectorProgram:
    """A vertex program over whole partitions (see the module docstring).

    Contract: ``init`` and ``compute`` are deterministic functions of their arguments (a
    superstep replayed after a failure must give the same values); they must not keep state
    between supersteps outside the returned values, which are what checkpoints save.
    """

    #: which neighbours' values a vertex reads: "in" or "both" (in and out)
    directions: ClassVar[str] = "in"
    #: whether every table vertex carries its out-neighbour ids (``Partition.table_out_ids``)
    adjacency: ClassVar[bool] = False
    aggregators: ClassVar[dict[str, str]] = {}
    #: the most supersteps after ``init`` (None: until convergence)
    #: a vertex's new value depends only on what it reads, never on its own previous value, and
    #: the program halts only at ``max_supersteps``: then vertices nobody reads (selfish, papers/003
    #: §4.3) need not be synchronised with their FT replicas before the last superstep
    selfish_safe: ClassVar[bool] = False
    max_supersteps: int | None = None

    def check(self, graph: Graph) -> None:
        """Refuse a graph this program cannot run on (raise :class:`GraphInputError` with one clear
        message: a missing source vertex, a negative weight); called before anything runs."""

    def init(self, part: Partition, ctx: SuperstepContext) -> StepResult:
        """Superstep 0: every master's initial value."""
        raise NotImplementedError

    def compute(self, part: Partition, table: np.ndarray, ctx: SuperstepContext) -> StepResult:
        """One superstep: new master values from the table (masters and replicas) of the last one."""
        raise NotImplementedError

    def converged(self, aggregates: dict[str, Any], superstep: int) -> bool:
        """A global convergence test on the aggregates of ``superstep`` (default: never)."""
        return False

    def result(self, part: Partition, values: np.ndarray) -> np.ndarray:
        """The output value of every master (default: its value)."""
        return values


class Vertex:
    """The vertex a :class:`VertexProgram`'s ``compute`` runs for (one object reused by the engine)."""

    __slots__ = ("_engine", "_slot", "id", "superstep", "value", "halted")

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._slot = 0
        self.id = 0
        self.superstep = 0
        self.value: Any = None
        self.halted = False

    @property
    def num_vertices(self) -> int:
        return int(self._engine.num_vertices)

    @property
    def out_edges(self) -> list[tuple[int, float | None]]:
        """``(target id, weight or None)`` of every out-edge."""
        return self._engine.out_edges(self._slot)

    @property
    def out_degree(self) -> int:
        return int(self._engine.part.out_degree[self._slot])

    def send(self, target: int, message: Any) -> None:
        """Deliver ``message`` to vertex ``target`` in the next superstep."""
        self._engine.send(int(target), message)

    def send_to_out_neighbours(self, message: Any) -> None:
        for target, _ in self._engine.out_edges(self._slot):
            self._engine.send(target, message)

    def vote_to_halt(self) -> None:
        """Inactive until a message arrives."""
        self.halted = True

    def aggregate(self, name: str, value: Any) -> None:
        """Add ``value`` to global aggregator ``name`` (visible in the next superstep)."""
        self._engine.aggregate(name, value)

    def aggregated(self, name: str, default: Any = None) -> Any:
        """The global value of aggregator ``name`` from the previous superstep."""
        return self._engine.ctx.aggregates.get(name, default)


class VertexProgram:
    """A Pregel-style program: ``compute(vertex, messages)`` per active vertex.

    ``combiner``: ``"sum"``, ``"min"``, ``"max"`` or a function ``(a, b) -> c``, associative and
    commutative; messages to one vertex are then merged into one before delivery.
    """

    combiner: ClassVar[str | Callable[[Any, Any], Any] | None] = None
    aggregators: ClassVar[dict[str, str]] = {}
    max_supersteps: int | None = None

    def check(self, graph: Graph) -> None:
        """Refuse a graph this program cannot run on (see :meth:`VectorProgram.check`)."""

    def initial_value(self, vertex_id: int, properties: dict[str, Any]) -> Any:
        """A vertex's value before superstep 0."""
        return None

    def compute(self, vertex: Vertex, messages: list[Any]) -> None:
        raise NotImplementedError

    def converged(self, aggregates: dict[str, Any], superstep: int) -> bool:
        return False

    def result(self, vertex_id: int, value: Any) -> Any:
        """The output of a vertex (default: its value)."""
        return value


Program = VectorProgram | VertexProgram
