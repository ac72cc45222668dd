"""Streaming Fennel on the executors: each worker places its home vertices (papers/003 §6.7).

The driver's Fennel (:func:`~epochal.graph.placement.fennel_partition`) streams every vertex in
id order and sees where each earlier neighbour went. On the executors each of the ``W`` build
tasks streams only its *home* vertices (``mix64(id) % W``), in id order, at the same time as the
others: it sees where its own earlier vertices went, not the other tasks' (a neighbour homed
elsewhere counts as unplaced), and it estimates each partition's size as ``W`` times its own
placements there, with its share ``slack * n / (k W)`` of the balance cap. It is the same score
(neighbours there minus ``alpha * gamma * size^(gamma-1)``) on a ``1/W`` sample of the
neighbourhood, so its replication factor lies between hash's and the driver's Fennel; both are
measured in ``benchmarks/graph/executor_loading.py``.
"""

from __future__ import annotations

import numpy as np


def stream_fennel(ids: np.ndarray, edges: dict[str, np.ndarray], worker: int, num_workers: int,
                  total_vertices: int, total_edges: int, gamma: float = 1.5, slack: float = 1.1) -> np.ndarray:
    """The owner of each of ``ids`` (this worker's home vertices, sorted), given every edge with
    an endpoint among them; ``total_*`` are the graph's sizes (for Fennel's ``alpha``)."""
    n_local = ids.size
    owner = np.full(n_local, -1, dtype=np.int32)
    if n_local == 0:
        return owner
    k = num_workers
    n, m = max(total_vertices, n_local), max(total_edges, 1)
    alpha = m * k ** (gamma - 1) / n ** gamma
    src, dst = edges["src"], edges["dst"]
    both = np.isin(src, ids) & np.isin(dst, ids)  # neighbours both homed here: visible to this task
    a = np.searchsorted(ids, np.concatenate([src[both], dst[both]]))
    b = np.searchsorted(ids, np.concatenate([dst[both], src[both]]))
    order = np.argsort(a, kind="stable")
    ptr = np.zeros(n_local + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=n_local), out=ptr[1:])
    nbr = b[order]
    cap = slack * n_local / k
    sizes = np.zeros(k, dtype=np.float64)
    for v in range(n_local):
        placed = owner[nbr[ptr[v]:ptr[v + 1]]]
        counts = np.bincount(placed[placed >= 0], minlength=k).astype(np.float64)
        score = counts - alpha * gamma * (sizes * num_workers) ** (gamma - 1)
        score[sizes >= cap] = -np.inf
        best = int(np.argmax(score))
        owner[v] = best
        sizes[best] += 1
    return owner
