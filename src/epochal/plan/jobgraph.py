"""Logical graph -> job graph: resolve partitioning into edges and chain operators.

Chaining fuses an operator into its predecessor's subtask (a plain function call, no channel)
when the edge between them is forward, both have the same parallelism, the operator has
exactly one input, and neither disabled chaining. Each chain becomes one :class:`JobVertex`;
the edges that remain between vertices become channels. Every operator gets a uid
(:func:`assign_uids`), which names its state in checkpoints and is matched on restore.

Loops (``iterate`` / ``close_with``) make the graph cyclic. Their back-edges are found by a
depth-first search from the sources (an edge to a node still on the search stack), which must
be exactly the loops' tail -> head edges; each loop's body is what lies on a path from its head
to its tail, and every edge inside it is tagged with the loop, for snapshots (papers/000
Algorithm 2) and termination detection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from epochal.connectors.base import Source
from epochal.errors import PlanError
from epochal.plan.event_time import check_event_time, describe_origins, is_event_time
from epochal.plan.logical import LogicalGraph, Transformation
from epochal.plan.partitioners import ForwardPartitioner, Partitioner, RebalancePartitioner

if TYPE_CHECKING:
    from epochal.runtime.operators.base import Operator


@dataclass
class ChainedNode:
    """One operator inside a vertex's chain (a tree: a node may feed several)."""

    node_id: int
    operation: str
    name: str
    uid: str
    operator: Operator
    children: list[int] = field(default_factory=list)
    out_edges: list[int] = field(default_factory=list)
    collect_id: str | None = None
    #: chained child -> the side output tag it consumes (children not listed take the main output)
    child_tags: dict[int, str] = field(default_factory=dict)


@dataclass
class JobEdge:
    """A network (or in-worker) edge between two vertices."""

    id: int
    source_vertex: int
    source_node: int
    target_vertex: int
    partitioner: Partitioner
    #: A loop's tail -> head edge (in memory, unbounded credit, logged during snapshots).
    back_edge: bool = False
    #: The loop this edge lies inside (body edges and the back-edge), else None.
    loop: int | None = None
    #: Which input of the consumer (a two-input operator's 0 or 1; 0 for every other one).
    input_index: int = 0
    #: The producer's side output this edge carries (None: its main output).
    side_tag: str | None = None


@dataclass
class Loop:
    """One iteration: its head and tail vertices (equal parallelism, so co-located)."""

    id: int
    head_vertex: int
    tail_vertex: int
    parallelism: int
    #: Vertices on a path from head to tail, head and tail included.
    vertices: list[int] = field(default_factory=list)


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
    loops: list[Loop] = field(default_factory=list)
    #: One line per event-time operator: where its watermarks come from (``describe``).
    event_time: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """A readable plan, one vertex per line, like Flink's plan view."""
        lines = []
        for vertex in self.vertices:
            inputs = ", ".join(
                f"{self.edges[e].partitioner.strategy}{' back-edge' if self.edges[e].back_edge else ''} from "
                f"#{self.edges[e].source_vertex}" for e in vertex.in_edges)
            lines.append(f"#{vertex.id} {vertex.name} (parallelism {vertex.parallelism})"
                         + (f" <- {inputs}" if inputs else ""))
        if self.event_time:
            lines += ["event time:", *(f"  {line}" for line in self.event_time)]
        return "\n".join(lines)


def _resolve_input(graph: LogicalGraph, input_id: int) -> tuple[Transformation, Partitioner | None, str | None]:
    """Walk up through virtual nodes to the physical producer: (producer, the partitioner
    nearest the consumer, the side output tag if the input is a side output)."""
    partitioner: Partitioner | None = None
    tag: str | None = None
    node = graph[input_id]
    while node.is_virtual:
        if partitioner is None:
            partitioner = node.partitioner
        if node.side_tag is not None:
            tag = node.side_tag
        node = graph[node.inputs[0]]
    return node, partitioner, tag


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
    if graph.runtime_mode == "batch":
        unbounded = [n.name for n in physical if n.source is not None and not n.source.bounded]
        if unbounded:
            raise PlanError(f"runtime mode 'batch' needs bounded sources; {', '.join(unbounded)} never ends: give "
                            "it an end (e.g. from_generator(count=...)) or use set_runtime_mode('streaming')")
    for node in physical:
        if is_event_time(node):
            check_event_time(graph, node)
    for node in physical:
        if hasattr(node.operator, "final_only"):
            node.operator.final_only = node.final_results or graph.runtime_mode == "batch"  # type: ignore[union-attr]

    tails = {}
    for node in physical:
        if node.operation == "iteration_head":
            if len(node.inputs) != 2:
                raise PlanError(f"loop '{node.name}' was opened with iterate() but never closed: call "
                                "close_with(feedback) on the stream iterate() returned")
            tails[_resolve_input(graph, node.inputs[1])[0].id] = node
    parallelism: dict[int, int] = {}
    for node in physical:
        if node.id in tails:  # a tail runs beside its head: same parallelism, same workers
            node.parallelism = parallelism[tails[node.id].id]
        p = node.parallelism or default_parallelism
        if not 1 <= p <= max_parallelism:
            raise PlanError(f"operator '{node.name}' has parallelism {p}; it must be between 1 and "
                            f"max_parallelism ({max_parallelism})")
        parallelism[node.id] = p
    uid_of = assign_uids(physical)

    # Logical edges producer -> consumer with their partitioner.
    logical_edges: list[tuple[int, int, Partitioner]] = []
    #: per logical edge: (the consumer's input index, the producer's side output tag or None)
    edge_ends: list[tuple[int, str | None]] = []
    inputs_of: dict[int, list[int]] = {n.id: [] for n in physical}
    for node in physical:
        two_inputs = node.operator is not None and node.operator.input_count == 2
        for position, input_id in enumerate(node.inputs):
            producer, partitioner, tag = _resolve_input(graph, input_id)
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
            edge_ends.append((position if two_inputs else 0, tag))

    def chained_to_producer(node: Transformation) -> bool:
        if node.operation == "source" or len(inputs_of[node.id]) != 1 or not node.chaining:
            return False
        producer_id, _, partitioner = logical_edges[inputs_of[node.id][0]]
        return (partitioner.is_forward and graph[producer_id].chaining
                and parallelism[producer_id] == parallelism[node.id])

    nodes: dict[int, ChainedNode] = {}
    vertex_of: dict[int, int] = {}
    vertices: list[JobVertex] = []
    for node in physical:
        if node.operator is None:  # the API gives every node that runs, sources included, an operator
            raise PlanError(f"node '{node.name}' ({node.operation}) has no operator")
        nodes[node.id] = ChainedNode(node.id, node.operation, node.name, uid_of[node.id],
                                     node.operator, collect_id=node.collect_id)
        nodes[node.id].operator.name = node.name
        nodes[node.id].operator.uid = uid_of[node.id]
        if chained_to_producer(node):
            producer_id = logical_edges[inputs_of[node.id][0]][0]
            vertex = vertices[vertex_of[producer_id]]
            vertex.nodes.append(node.id)
            nodes[producer_id].children.append(node.id)
            tag = edge_ends[inputs_of[node.id][0]][1]
            if tag is not None:
                nodes[producer_id].child_tags[node.id] = tag
            vertex_of[node.id] = vertex.id
        else:
            vertex = JobVertex(id=len(vertices), name="", parallelism=parallelism[node.id], head=node.id,
                               nodes=[node.id], source=node.source)
            vertices.append(vertex)
            vertex_of[node.id] = vertex.id

    back_edges = _find_back_edges(physical, logical_edges)
    loop_nodes = _loop_bodies(graph, physical, logical_edges, back_edges, tails)
    loop_of_node = {n: loop_id for loop_id, members in loop_nodes.items() for n in members}

    edges: list[JobEdge] = []
    for index, (producer_id, consumer_id, partitioner) in enumerate(logical_edges):
        if vertex_of[producer_id] == vertex_of[consumer_id]:
            continue  # chained
        loop = loop_of_node.get(producer_id)
        if loop is None or loop_of_node.get(vertices[vertex_of[consumer_id]].head) != loop:
            loop = None
        input_index, tag = edge_ends[index]
        edge = JobEdge(len(edges), vertex_of[producer_id], producer_id, vertex_of[consumer_id], partitioner,
                       back_edge=index in back_edges, loop=loop, input_index=input_index, side_tag=tag)
        edges.append(edge)
        nodes[producer_id].out_edges.append(edge.id)
        vertices[edge.source_vertex].out_edges.append(edge.id)
        vertices[edge.target_vertex].in_edges.append(edge.id)

    for vertex in vertices:
        vertex.name = " -> ".join(nodes[n].name for n in vertex.nodes)
    loops = []
    for tail_id, head in tails.items():
        loop_id = head.operator.loop_id  # type: ignore[union-attr]
        members = sorted({vertex_of[n] for n in loop_nodes[loop_id]})
        loops.append(Loop(loop_id, vertex_of[head.id], vertex_of[tail_id], parallelism[head.id], members))
    event_time = [f"#{vertex_of[n.id]} '{n.name}': {describe_origins(graph, n)}" for n in physical if is_event_time(n)]
    return JobGraph(vertices, edges, nodes, max_parallelism, sorted(loops, key=lambda loop: loop.id), event_time)


def default_uid(node: Transformation, ordinal: int) -> tuple[str, str]:
    """The uid of ``node`` and how it was chosen. ``ordinal`` counts the earlier operators of the
    same operation in the job.

    The user's ``.uid()`` wins. Otherwise a name the user gave gives ``<operation>:<name>``, and an
    unnamed operator gets ``<operation>-<ordinal>``. So adding, say, a ``map`` before a keyed ``sum``
    changes neither the sum's uid nor any other operator's but those of the unnamed maps after it.
    """
    if node.uid:
        return node.uid, "set with .uid()"
    if node.user_named:
        return f"{node.operation}:{node.name}", "from its .name()"
    return f"{node.operation}-{ordinal}", f"by position: {_ordinal_text(ordinal)} {node.operation} of the job"


def _ordinal_text(ordinal: int) -> str:
    number = ordinal + 1
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def assign_uids(physical: list[Transformation]) -> dict[int, str]:
    """Node id -> uid for the operators of a job (in creation order); a uid used twice fails.

    Uids identify operator state in checkpoints, so they must be unique and should not move
    when the program changes elsewhere; see :func:`default_uid`.
    """
    ordinals: dict[str, int] = {}
    uid_of: dict[int, str] = {}
    owners: dict[str, tuple[Transformation, str]] = {}
    for node in physical:
        ordinal = ordinals.get(node.operation, 0)
        ordinals[node.operation] = ordinal + 1
        uid, how = default_uid(node, ordinal)
        if uid in owners:
            other, other_how = owners[uid]
            raise PlanError(
                f"uid '{uid}' is used by two operators: '{other.name}' ({other.operation}, uid {other_how}) and "
                f"'{node.name}' ({node.operation}, uid {how}); uids identify state on restore and must be unique. "
                "Give one of them a distinct .name() or .uid()")
        owners[uid] = (node, how)
        uid_of[node.id] = uid
    return uid_of


def _find_back_edges(physical: list[Transformation], logical_edges: list[tuple[int, int, Partitioner]]) -> set[int]:
    """Indices of the edges that close a cycle: depth-first search from the sources in creation
    order; an edge to a node that is still on the search stack is a back-edge."""
    out: dict[int, list[int]] = {n.id: [] for n in physical}
    for index, (producer, _, _) in enumerate(logical_edges):
        out[producer].append(index)
    state: dict[int, int] = {}  # 1 on the stack, 2 done
    back: set[int] = set()
    for root in [n.id for n in physical if n.operation == "source"]:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(out[root]))]
        while stack:
            node_id, edges = stack[-1]
            for index in edges:
                consumer = logical_edges[index][1]
                if state.get(consumer) == 1:
                    back.add(index)
                elif consumer not in state:
                    state[consumer] = 1
                    stack.append((consumer, iter(out[consumer])))
                    break
            else:
                state[node_id] = 2
                stack.pop()
    return back


def _loop_bodies(graph: LogicalGraph, physical: list[Transformation],
                 logical_edges: list[tuple[int, int, Partitioner]], back_edges: set[int],
                 tails: dict[int, Transformation]) -> dict[int, set[int]]:
    """Loop id -> the nodes on a path from its head to its tail; checks the back-edges found
    are exactly the tail -> head edges and that loops neither nest nor overlap."""
    expected = {i for i, (producer, consumer, _) in enumerate(logical_edges)
                if producer in tails and tails[producer].id == consumer}
    for index in back_edges - expected:
        producer, consumer, _ = logical_edges[index]
        raise PlanError(f"the dataflow has a cycle through '{graph[producer].name}' -> '{graph[consumer].name}' "
                        "that is not a loop declared with iterate()/close_with(); cycles are only possible "
                        "through iterate()")
    for index in expected - back_edges:
        raise PlanError(f"the feedback of '{graph[logical_edges[index][1]].name}' is also reachable from outside "
                        "its loop without passing its head; feed back a stream computed inside the loop only")
    forward: dict[int, list[int]] = {n.id: [] for n in physical}
    backward: dict[int, list[int]] = {n.id: [] for n in physical}
    for index, (producer, consumer, _) in enumerate(logical_edges):
        if index not in back_edges:
            forward[producer].append(consumer)
            backward[consumer].append(producer)

    def reach(start: int, adjacency: dict[int, list[int]]) -> set[int]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in adjacency[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    bodies: dict[int, set[int]] = {}
    owner: dict[int, str] = {}
    for tail_id, head in tails.items():
        body = reach(head.id, forward) & reach(tail_id, backward)
        for node_id in body:
            if node_id in owner or (graph[node_id].operation == "iteration_head" and node_id != head.id):
                raise PlanError(f"'{graph[node_id].name}' lies inside two loops ('{head.name}' and "
                                f"'{owner.get(node_id, graph[node_id].name)}'); nested or overlapping loops "
                                "are not supported")
            owner[node_id] = head.name
        bodies[head.operator.loop_id] = body  # type: ignore[union-attr]
    return bodies
