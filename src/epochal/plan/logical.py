"""The logical graph: what the user's DataStream calls recorded, before any planning.

Each call on a DataStream appends one :class:`Transformation`. Partitioning calls
(``key_by``, ``rebalance``, ...) append *virtual* transformations that only say how the next
edge is partitioned; planning folds them into edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from epochal.connectors.base import Source
from epochal.plan.partitioners import Partitioner

if TYPE_CHECKING:
    from epochal.runtime.operators.base import Operator


@dataclass
class Transformation:
    """One node of the logical graph.

    A node is a source node (``source`` set, and ``operator`` the operator its records pass
    through first: the identity), an operator node (``operator`` only: map, sink, union, ...)
    or a virtual node: a partitioning node (``partitioner`` only), or a side output's
    (``side_tag`` only: the records its producer emitted under that tag). The API layer creates the operators;
    planning only arranges them.
    """

    id: int
    operation: str
    name: str
    inputs: list[int]
    source: Source | None = None
    operator: Operator | None = None
    partitioner: Partitioner | None = None
    parallelism: int | None = None
    #: Set by ``.uid()``; otherwise planning derives one (see ``plan.jobgraph.assign_uids``).
    uid: str | None = None
    #: True once the user chose the name (``.name()``, ``sink_to(name=...)``): the default uid
    #: is then derived from it, so it survives unrelated edits of the program.
    user_named: bool = False
    chaining: bool = True
    #: The user function(s) inside, for clear "cannot be serialised" errors at submit time.
    functions: list[Any] = field(default_factory=list)
    #: Set on sinks that collect to the driver: the key of their results.
    collect_id: str | None = None
    #: ``final_results()``: a keyed aggregation emits only final values at the end of the input.
    final_results: bool = False
    #: Set on the virtual node of ``side_output(tag)``: the id of the tag its records carry.
    side_tag: str | None = None

    @property
    def is_virtual(self) -> bool:
        return self.partitioner is not None or self.side_tag is not None


@dataclass
class LogicalGraph:
    """All transformations of one environment, in creation order (inputs always come first)."""

    nodes: list[Transformation] = field(default_factory=list)
    #: ``"streaming"`` (every update) or ``"batch"``: bounded input, keyed aggregations emit only
    #: their final values (``Environment.set_runtime_mode``).
    runtime_mode: str = "streaming"

    def add(self, operation: str, name: str, inputs: list[int], **fields: Any) -> Transformation:
        node = Transformation(id=len(self.nodes), operation=operation, name=name, inputs=inputs, **fields)
        self.nodes.append(node)
        return node

    def __getitem__(self, node_id: int) -> Transformation:
        return self.nodes[node_id]

    def sink_ids(self) -> list[int]:
        return [n.id for n in self.nodes if n.operation == "sink"]
