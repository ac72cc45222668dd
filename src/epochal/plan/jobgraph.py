"""Logical graph -> job graph: resolve partitioning into edges and chain operators.

Chaining fuses an operator into its predecessor's subtask (a plain function call, no channel)
when the edge between them is forward, both have the same parallelism, the operator has
exactly one input, and neither disabled chaining. Each chain becomes one :class:`JobVertex`;
the edges that remain between vertices become channels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epochal.connectors.base import Source
from epochal.errors import PlanError
from epochal.plan.logical import LogicalGraph, Transformation
from epochal.plan.partitioners import ForwardPartitioner, Partitioner, RebalancePartitioner
from epochal.runtime.operators import Operator


@dataclass
class ChainedNode:
    """One operator inside a vertex's chain (a tree: a node may feed several)."""

    node_id: int
    kind: str
    name: str
    uid: str
    operator: Operator
    children: list[int] = field(default_factory=list)
    out_edges: list[int] = field(default_factory=list)
    collect_id: str | None = None


@dataclass
class JobEdge:
    """A network (or in-worker) edge between two vertices."""

    id: int
    source_vertex: int
    source_node: int
    target_vertex: int
    partitioner: Partitioner


@dataclass
class JobVertex:
    """A chain of operators that runs as ``parallelism`` subtasks."""

    id: int
    name: str
    parallelism: int
    head: int
    nodes: list[int]
    source: Source | None = None
    in_edges: list[int] = field(default_factory=list)
    out_edges: list[int] = field(default_factory=list)


@dataclass
class JobGraph:
    """Vertices, edges and the chained operators, plus the key-group count."""

    vertices: list[JobVertex]
    edges: list[JobEdge]
    nodes: dict[int, ChainedNode]
    max_parallelism: int

    def describe(self) -> str:
        """A readable plan, one vertex per line, like Flink's plan view."""
        lines = []
        for vertex in self.vertices:
            inputs = ", ".join(
                f"{self.edges[e].partitioner.kind} from #{self.edges[e].source_vertex}" for e in vertex.in_edges)
            lines.append(f"#{vertex.id} {vertex.name} (parallelism {vertex.parallelism})"
                         + (f" <- {inputs}" if inputs else ""))
        return "\n".join(lines)


def _resolve_input(graph: LogicalGraph, input_id: int) -> tuple[Transformation, Partitioner | None]:
    """Walk up through virtual partitioning nodes to the physical producer."""
    partitioner: Partitioner | None = None
    node = graph[input_id]
    while node.is_virtual:
        if partitioner is None:
            partitioner = node.partitioner
        node = graph[node.inputs[0]]
    return node, partitioner


def build_job_graph(graph: LogicalGraph, default_parallelism: int, max_parallelism: int) -> JobGraph:
    """Turn the recorded transformations into a chained job graph, validating as it goes."""
    sinks = graph.sink_ids()
    if not sinks:
        raise PlanError("the job has no sink: add one with collect(), print(), sink_to(...) or a file sink")

    # Keep only what some sink depends on.
    needed: set[int] = set()
    stack = list(sinks)
    while stack:
        node_id = stack.pop()
        if node_id not in needed:
            needed.add(node_id)
            stack.extend(graph[node_id].inputs)
    physical = [n for n in graph.nodes if n.id in needed and not n.is_virtual]

    parallelism: dict[int, int] = {}
    uids: dict[str, int] = {}
    for node in physical:
        p = node.parallelism or default_parallelism
        if not 1 <= p <= max_parallelism:
            raise PlanError(f"operator '{node.name}' has parallelism {p}; it must be between 1 and "
                            f"max_parallelism ({max_parallelism})")
        parallelism[node.id] = p
        uid = node.uid or f"{node.kind}-{node.id}"
        if uid in uids:
            raise PlanError(f"uid '{uid}' is used by two operators ('{graph[uids[uid]].name}' and "
                            f"'{node.name}'); uids must be unique")
        uids[uid] = node.id
        node.uid = uid

    # Logical edges producer -> consumer with their partitioner.
    logical_edges: list[tuple[int, int, Partitioner]] = []
    inputs_of: dict[int, list[int]] = {n.id: [] for n in physical}
    for node in physical:
        for input_id in node.inputs:
            producer, partitioner = _resolve_input(graph, input_id)
            same = parallelism[producer.id] == parallelism[node.id]
            if partitioner is None:
                partitioner = ForwardPartitioner() if same else RebalancePartitioner()
            elif partitioner.is_forward and not same:
                raise PlanError(
                    f"forward() between '{producer.name}' (parallelism {parallelism[producer.id]}) and "
                    f"'{node.name}' (parallelism {parallelism[node.id]}) needs equal parallelism; "
                    "use rebalance() or set the same parallelism")
            inputs_of[node.id].append(len(logical_edges))
            logical_edges.append((producer.id, node.id, partitioner))

    def chained_to_producer(node: Transformation) -> bool:
        if node.kind == "source" or len(inputs_of[node.id]) != 1 or not node.chaining:
            return False
        producer_id, _, partitioner = logical_edges[inputs_of[node.id][0]]
        return (partitioner.is_forward and graph[producer_id].chaining
                and parallelism[producer_id] == parallelism[node.id])

    nodes: dict[int, ChainedNode] = {}
    vertex_of: dict[int, int] = {}
    vertices: list[JobVertex] = []
    for node in physical:
        assert node.operator is not None or node.source is not None
        nodes[node.id] = ChainedNode(node.id, node.kind, node.name, node.uid or "",
                                     node.operator or Operator(), collect_id=node.collect_id)
        nodes[node.id].operator.name = node.name
        nodes[node.id].operator.uid = node.uid or ""
        if chained_to_producer(node):
            producer_id = logical_edges[inputs_of[node.id][0]][0]
            vertex = vertices[vertex_of[producer_id]]
            vertex.nodes.append(node.id)
            nodes[producer_id].children.append(node.id)
            vertex_of[node.id] = vertex.id
        else:
            vertex = JobVertex(id=len(vertices), name="", parallelism=parallelism[node.id], head=node.id,
                               nodes=[node.id], source=node.source)
            vertices.append(vertex)
            vertex_of[node.id] = vertex.id

    edges: list[JobEdge] = []
    for producer_id, consumer_id, partitioner in logical_edges:
        if vertex_of[producer_id] == vertex_of[consumer_id]:
            continue  # chained
        edge = JobEdge(len(edges), vertex_of[producer_id], producer_id, vertex_of[consumer_id], partitioner)
        edges.append(edge)
        nodes[producer_id].out_edges.append(edge.id)
        vertices[edge.source_vertex].out_edges.append(edge.id)
        vertices[edge.target_vertex].in_edges.append(edge.id)

    for vertex in vertices:
        vertex.name = " -> ".join(nodes[n].name for n in vertex.nodes)
    return JobGraph(vertices, edges, nodes, max_parallelism)
