"""The built-in graph algorithms against independent oracles, run in one process at 1, 2 and 4
workers with both partitioners, on small random directed and undirected graphs with isolated
vertices, self-loops, vertices without out-edges and sparse 64-bit ids.

The oracles are networkx (BFS, SSSP, WCC) or the Graphalytics definitions written out with plain
Python sets and dicts over the networkx graph (PageRank, CDLP, LCC), and a dense numpy ALS.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import cloudpickle
import networkx as nx
import numpy as np
import pytest

from epochal.graph.algorithms import ALGORITHMS, ALS, BFS, CDLP, LCC, SSSP, WCC, PageRank
from epochal.graph.algorithms._checks import NegativeWeightError
from epochal.graph.algorithms._csr import row_mode, segment_reduce
from epochal.graph.algorithms.als import initial_factors
from epochal.graph.algorithms.bfs import UNREACHABLE
from epochal.graph.local import run_graph_locally
from epochal.graph.model import Graph, GraphInputError

WORKERS = [1, 2, 4]
PARTITIONERS = ["hash", "fennel"]
layouts = pytest.mark.parametrize(("workers", "partitioner"), [(w, p) for w in WORKERS for p in PARTITIONERS])
both_kinds = pytest.mark.parametrize("directed", [True, False], ids=["directed", "undirected"])


@dataclass
class Case:
    graph: Graph
    oracle: nx.DiGraph | nx.Graph
    source: int


def random_case(directed: bool, seed: int = 7, n: int = 48, m: int = 200, weighted: bool = False) -> Case:
    """A random graph whose edges touch only the first 85% of its vertices (the rest are isolated),
    whose sources are only the first 70% (the rest have no out-edges when directed), with a few
    self-loops, ids above 2^31 (and one negative id), and distinct edges (Graphalytics forbids
    repeated edges; for an undirected graph no pair appears in both orders)."""
    rng = np.random.default_rng(seed)
    ids = np.concatenate([[-(1 << 40) - 3], rng.choice(1 << 40, n - 1, replace=False) + (1 << 31)])
    ids = rng.permutation(ids)  # which vertices get edges does not follow id order
    touched = int(n * 0.85)
    src = rng.integers(0, int(n * 0.7), m)
    dst = rng.integers(0, touched, m)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if not directed:  # one orientation per pair, kept in a random direction
        lo, hi = np.minimum(src, dst), np.maximum(src, dst)
        pairs = np.unique(np.stack([lo, hi], axis=1), axis=0)
        flip = rng.random(len(pairs)) < 0.5
        src, dst = np.where(flip, pairs[:, 1], pairs[:, 0]), np.where(flip, pairs[:, 0], pairs[:, 1])
    else:
        pairs = np.unique(np.stack([src, dst], axis=1), axis=0)
        src, dst = pairs[:, 0], pairs[:, 1]
    loops = rng.choice(touched, 3, replace=False)
    src, dst = np.concatenate([src, loops]), np.concatenate([dst, loops])
    weights = rng.random(src.size) * 5 if weighted else None
    if weights is not None:
        weights[:4] = 0.0  # zero weights are allowed
    graph = Graph.from_edges(ids[src], ids[dst], vertices=ids, directed=directed, weights=weights)
    oracle: nx.DiGraph | nx.Graph = nx.DiGraph() if directed else nx.Graph()
    oracle.add_nodes_from(ids.tolist())
    for i, (s, d) in enumerate(zip(ids[src].tolist(), ids[dst].tolist(), strict=True)):
        oracle.add_edge(s, d, weight=None if weights is None else float(weights[i]))
    return Case(graph, oracle, int(ids[src[0]]))


def neighbours(g: nx.DiGraph | nx.Graph, v: int) -> set[int]:
    """N(v) = N_in(v) ∪ N_out(v) as a set."""
    return set(g.predecessors(v)) | set(g.successors(v)) if g.is_directed() else set(g.neighbors(v))


def out_neighbours(g: nx.DiGraph | nx.Graph, v: int) -> set[int]:
    return set(g.successors(v)) if g.is_directed() else set(g.neighbors(v))


def in_neighbours(g: nx.DiGraph | nx.Graph, v: int) -> set[int]:
    return set(g.predecessors(v)) if g.is_directed() else set(g.neighbors(v))


# ---------------------------------------------------------------- oracles for the Graphalytics definitions
def pagerank_oracle(g: nx.DiGraph | nx.Graph, iterations: int, d: float = 0.85) -> dict[int, float]:
    n = g.number_of_nodes()
    out = {v: out_neighbours(g, v) for v in g}
    rank = {v: 1.0 / n for v in g}
    for _ in range(iterations):
        sink = sum(rank[v] for v in g if not out[v])
        rank = {v: (1 - d) / n + d * sum(rank[u] / len(out[u]) for u in in_neighbours(g, v)) + d / n * sink
                for v in g}
    return rank


def cdlp_oracle(g: nx.DiGraph | nx.Graph, iterations: int) -> dict[int, int]:
    labels = {v: v for v in g}
    for _ in range(iterations):
        new = {}
        for v in g:
            if g.is_directed():
                heard = [labels[u] for u in g.predecessors(v)] + [labels[u] for u in g.successors(v)]
            else:
                heard = [labels[u] for u in set(g.neighbors(v))]
            if not heard:
                new[v] = labels[v]
                continue
            counts = Counter(heard)
            top = max(counts.values())
            new[v] = min(label for label, c in counts.items() if c == top)
        labels = new
    return labels


def lcc_oracle(g: nx.DiGraph | nx.Graph) -> dict[int, float]:
    result = {}
    for v in g:
        nbrs = neighbours(g, v) - {v}
        d = len(nbrs)
        links = sum(1 for u in nbrs for w in nbrs if u != w and g.has_edge(u, w))
        result[v] = links / (d * (d - 1)) if d >= 2 else 0.0
    return result


def assert_close(got: dict[int, float], want: dict[int, float], rel: float) -> None:
    assert got.keys() == want.keys()
    bad = {v: (got[v], want[v]) for v in want if not (got[v] == want[v] or abs(got[v] - want[v]) <= rel * abs(want[v]))}
    assert not bad, f"{len(bad)} vertices differ, e.g. {list(bad.items())[:3]}"


# ---------------------------------------------------------------- the Graphalytics algorithms
@both_kinds
@layouts
def test_bfs_gives_depths_along_out_edges(directed, workers, partitioner):
    case = random_case(directed)
    result = run_graph_locally(case.graph, BFS(case.source), workers, partitioner)
    depth = nx.single_source_shortest_path_length(case.oracle, case.source)
    assert result.values.dtype == np.int64
    assert result.as_dict() == {v: depth.get(v, UNREACHABLE) for v in case.oracle}
    assert result.halt_reason == "no active vertex and no message"
    assert 0 < sum(v == UNREACHABLE for v in result.as_dict().values()) < len(depth)


@both_kinds
@layouts
def test_sssp_gives_weighted_distances(directed, workers, partitioner):
    case = random_case(directed, seed=11, weighted=True)
    result = run_graph_locally(case.graph, SSSP(case.source), workers, partitioner)
    dist = nx.single_source_dijkstra_path_length(case.oracle, case.source, weight="weight")
    assert result.values.dtype == np.float64
    assert result.as_dict() == {v: dist.get(v, np.inf) for v in case.oracle}


@both_kinds
@layouts
def test_wcc_labels_each_component_with_its_smallest_id(directed, workers, partitioner):
    case = random_case(directed, seed=3, m=60)
    components = nx.weakly_connected_components(case.oracle) if directed else nx.connected_components(case.oracle)
    want = {v: min(c) for c in components for v in c}
    result = run_graph_locally(case.graph, WCC(), workers, partitioner)
    assert result.values.dtype == np.int64
    assert result.as_dict() == want
    assert len(set(want.values())) > 3


@both_kinds
@layouts
def test_pagerank_follows_the_graphalytics_formula(directed, workers, partitioner):
    case = random_case(directed, seed=5)
    result = run_graph_locally(case.graph, PageRank(iterations=12), workers, partitioner)
    assert result.supersteps == 12
    assert_close(result.as_dict(), pagerank_oracle(case.oracle, 12), rel=1e-9)


@both_kinds
@layouts
def test_cdlp_takes_the_most_frequent_smallest_label(directed, workers, partitioner):
    case = random_case(directed, seed=13, m=90)
    result = run_graph_locally(case.graph, CDLP(iterations=6), workers, partitioner)
    want = cdlp_oracle(case.oracle, 6)
    assert result.values.dtype == np.int64
    assert result.as_dict() == want
    assert len(set(want.values())) < len(want) - 10  # labels did propagate


@both_kinds
@layouts
def test_lcc_follows_the_graphalytics_definition(directed, workers, partitioner):
    case = random_case(directed, seed=17, n=30, m=160)
    result = run_graph_locally(case.graph, LCC(), workers, partitioner)
    want = lcc_oracle(case.oracle)
    assert result.values.dtype == np.float64
    assert_close(result.as_dict(), want, rel=1e-12)
    assert sum(0 < x < 1 for x in want.values()) > 5


# ---------------------------------------------------------------- ALS
def als_case(seed: int = 2, users: int = 14, items: int = 9, ratings: int = 60) -> tuple[Graph, np.ndarray,
                                                                                          np.ndarray, np.ndarray]:
    """A bipartite rating graph (ids above 2^31, one isolated vertex) and its dense matrix and mask."""
    rng = np.random.default_rng(seed)
    ids = (np.arange(users + items + 1, dtype=np.int64) * 104729 + (3 << 31))[rng.permutation(users + items + 1)]
    user_ids, item_ids = ids[:users], ids[users:users + items]
    cells = np.unique(np.stack([rng.integers(0, users, ratings), rng.integers(0, items, ratings)], axis=1), axis=0)
    rating = rng.integers(1, 6, len(cells)).astype(np.float64)
    graph = Graph.from_edges(user_ids[cells[:, 0]], item_ids[cells[:, 1]], weights=rating, vertices=ids)
    dense = np.zeros((users, items))
    mask = np.zeros((users, items), dtype=bool)
    dense[cells[:, 0], cells[:, 1]], mask[cells[:, 0], cells[:, 1]] = rating, True
    return graph, dense, mask, ids


def als_oracle(dense: np.ndarray, mask: np.ndarray, ids: np.ndarray, rank: int, lam: float,
               iterations: int) -> dict[int, list[float]]:
    users, items = dense.shape
    x, y = initial_factors(ids[:users], rank), initial_factors(ids[users:users + items], rank)
    for _ in range(iterations):
        for factors, other, ratings, rated in ((x, y, dense, mask), (y, x, dense.T, mask.T)):
            for v in range(factors.shape[0]):
                if rated[v].any():
                    f = other[rated[v]]
                    factors[v] = np.linalg.solve(f.T @ f + lam * np.eye(rank), f.T @ ratings[v, rated[v]])
    rows = np.concatenate([x, y, initial_factors(ids[users + items:], rank)])
    return dict(zip(ids.tolist(), rows.tolist(), strict=True))


@layouts
def test_als_matches_a_dense_alternating_least_squares(workers, partitioner):
    graph, dense, mask, ids = als_case()
    result = run_graph_locally(graph, ALS(rank=3, regularization=0.1, iterations=4), workers, partitioner)
    assert result.values.shape == (ids.size, 3) and result.supersteps == 8
    want = als_oracle(dense, mask, ids, 3, 0.1, 4)
    got = result.as_dict()
    assert got.keys() == want.keys()
    np.testing.assert_allclose(np.array([got[v] for v in want]), np.array(list(want.values())), rtol=1e-9)


# ---------------------------------------------------------------- bad inputs, registry, pickling
def test_a_missing_source_vertex_is_refused():
    case = random_case(True, weighted=True)
    for program in (BFS(42), SSSP(42)):
        with pytest.raises(GraphInputError, match=r"^source vertex 42 is not in the graph; pick one of its "
                                                  r"vertices with --source-vertex$"):
            run_graph_locally(case.graph, program)


def test_sssp_refuses_negative_and_missing_weights():
    graph = Graph.from_edges([1, 2, 3], [2, 3, 1], weights=[1.0, -0.5, -2.0])
    with pytest.raises(GraphInputError, match=r"^edge 1 \(2 -> 3\) has negative weight -0.5; SSSP needs weights "
                                              r"of 0 or more$") as error:
        run_graph_locally(graph, SSSP(1))
    assert isinstance(error.value, NegativeWeightError)
    assert (error.value.edge, error.value.src, error.value.dst, error.value.weight) == (1, 2, 3, -0.5)
    assert error.value.at("G.e, line 9") == ("G.e, line 9: edge 2 -> 3 has negative weight -0.5; SSSP needs weights "
                                             "of 0 or more")
    with pytest.raises(GraphInputError, match=r"^SSSP needs a weight on every edge and this graph has no edge "
                                              r"weights"):
        run_graph_locally(Graph.from_edges([1], [2]), SSSP(1))


def test_als_refuses_graphs_that_are_not_directed_bipartite_ratings():
    with pytest.raises(GraphInputError, match=r"ALS needs a rating on every edge"):
        run_graph_locally(Graph.from_edges([1], [2]), ALS())
    with pytest.raises(GraphInputError, match=r"^vertex 2 both rates .* and is rated"):
        run_graph_locally(Graph.from_edges([1, 2], [2, 3], weights=[1.0, 2.0]), ALS())
    with pytest.raises(GraphInputError, match=r"this graph is undirected"):
        run_graph_locally(Graph.from_edges([1], [2], weights=[1.0], directed=False), ALS())


def test_parameters_out_of_range_are_refused():
    for make in (lambda: PageRank(damping=1.5), lambda: PageRank(iterations=-1), lambda: CDLP(iterations=-1),
                 lambda: ALS(rank=0), lambda: ALS(regularization=0.0)):
        with pytest.raises(ValueError):
            make()


def test_every_program_is_registered_and_survives_cloudpickle():
    assert set(ALGORITHMS) == {"bfs", "pr", "wcc", "cdlp", "lcc", "sssp", "als"}
    case = random_case(True, weighted=True)
    graph, *_ = als_case()
    args = {"bfs": (case.source,), "sssp": (case.source,)}
    for name, make in ALGORITHMS.items():
        program = make(*args.get(name, ()))
        copy = cloudpickle.loads(cloudpickle.dumps(program))
        assert type(copy) is type(program) and vars(copy) == vars(program)
        g = graph if name == "als" else case.graph
        np.testing.assert_array_equal(run_graph_locally(g, copy, 2).values, run_graph_locally(g, program, 2).values)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_graphs_without_edges_or_vertices_run(name):
    source = {"bfs": (5,), "sssp": (5,)}.get(name, ())
    make = ALGORITHMS[name]
    empty = Graph.from_edges([], [], vertices=[], weights=[])
    if not source:
        assert run_graph_locally(empty, make(), 2).values.shape[0] == 0
    lonely = run_graph_locally(Graph.from_edges([], [], vertices=[9, 5], weights=[]), make(*source), 2).values
    want = {"bfs": [0, UNREACHABLE], "sssp": [0.0, np.inf], "wcc": [5, 9], "cdlp": [5, 9], "lcc": [0.0, 0.0],
            "pr": [0.5, 0.5], "als": initial_factors(np.array([5, 9]), 10).tolist()}[name]
    assert lonely.tolist() == want


# ---------------------------------------------------------------- helpers
def test_row_mode_breaks_ties_to_the_smallest_value_and_keeps_rows_without_values():
    rows = np.array([0, 0, 0, 0, 2, 2, 2, 3])
    values = np.array([9, 4, 9, 4, 7, 5, 5, -1])
    assert row_mode(rows, values, np.array([10, 11, 12, 13])).tolist() == [4, 11, 5, -1]


def test_segment_reduce_fills_empty_rows_including_trailing_ones():
    ptr = np.array([0, 0, 2, 2, 3, 3])
    got = segment_reduce(np.minimum, ptr, np.array([5.0, 3.0, 8.0]), np.inf)
    assert got.tolist() == [np.inf, 3.0, np.inf, 8.0, np.inf]
