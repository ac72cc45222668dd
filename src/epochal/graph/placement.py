"""Which worker owns each vertex: hash partitioning and Fennel (papers/003 §6.7).

A partitioner maps every vertex (by dense index into ``Graph.vertices``) to a worker; the
worker then holds that vertex's *master* with its in-edges, and *replicas* of the remote
vertices its masters read (papers/003 §2.1, Fig. 4). :func:`replication_factor` is the average
number of copies (master plus replicas) per vertex, the measure papers/003 Fig. 10(a) reports.

``hash``: a 64-bit mix of the vertex id modulo the worker count (stable across runs and
machines, unlike Python's ``hash``). ``fennel``: a streaming partitioner (Tsourakakis et al.,
WSDM 2014) that places each vertex, in a fixed order, where most of its neighbours already are,
minus a penalty that grows with the partition's size, under a balance cap; it lowers the
replication factor at the cost of a pass over the graph on the driver.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from epochal.graph.model import Graph

#: name -> ``partitioner(graph, num_workers) -> owner`` (int32 worker per dense vertex index).
Partitioner = Callable[[Graph, int], np.ndarray]


def mix64(ids: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser of each id: a stable, well-spread 64-bit hash."""
    z = ids.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z += np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def hash_partition(graph: Graph, num_workers: int) -> np.ndarray:
    """Owner of each vertex: ``mix64(id) % num_workers``."""
    return (mix64(graph.vertices) % np.uint64(num_workers)).astype(np.int32)


def undirected_csr(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """``(ptr, nbr)``: every vertex's neighbours in either direction, as dense indices."""
    n = graph.num_vertices
    s, d = graph.dense_edges()
    a = np.concatenate([s, d])
    b = np.concatenate([d, s])
    order = np.argsort(a, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=ptr[1:])
    return ptr, b[order]


def fennel_partition(graph: Graph, num_workers: int, gamma: float = 1.5, slack: float = 1.1) -> np.ndarray:
    """Fennel: vertices in id order go where ``|N(v) ∩ P| - alpha*gamma*|P|^(gamma-1)`` is largest,
    among partitions below ``slack * n / num_workers`` vertices (alpha = m * k^(gamma-1) / n^gamma)."""
    n, m = graph.num_vertices, max(graph.num_edges, 1)
    owner = np.full(n, -1, dtype=np.int32)
    if n == 0:
        return owner
    ptr, nbr = undirected_csr(graph)
    k = num_workers
    alpha = m * k ** (gamma - 1) / n ** gamma
    cap = slack * n / k
    sizes = np.zeros(k, dtype=np.float64)
    for v in range(n):
        placed = owner[nbr[ptr[v]:ptr[v + 1]]]
        counts = np.bincount(placed[placed >= 0], minlength=k).astype(np.float64)
        score = counts - alpha * gamma * sizes ** (gamma - 1)
        score[sizes >= cap] = -np.inf
        best = int(np.argmax(score))
        owner[v] = best
        sizes[best] += 1
    return owner


PARTITIONERS: dict[str, Partitioner] = {"hash": hash_partition, "fennel": fennel_partition}


def partition(graph: Graph, num_workers: int, method: str = "hash") -> np.ndarray:
    """The owner of each vertex under partitioner ``method``."""
    try:
        partitioner = PARTITIONERS[method]
    except KeyError:
        raise ValueError(f"unknown partitioner {method!r}; choose one of {', '.join(PARTITIONERS)}") from None
    return partitioner(graph, num_workers)


def replication_factor(graph: Graph, owner: np.ndarray) -> float:
    """Copies per vertex (master plus one replica on every other worker holding an in-edge from
    it; for an undirected graph, edges count both ways)."""
    n = graph.num_vertices
    if n == 0:
        return 0.0
    s, d = graph.dense_edges()
    if not graph.directed:
        s, d = np.concatenate([s, d]), np.concatenate([d, s])  # a self-loop is never remote
    remote = owner[s] != owner[d]
    pairs = np.unique(s[remote].astype(np.int64) * np.int64(owner.max() + 1) + owner[d[remote]])
    return (n + pairs.size) / n
