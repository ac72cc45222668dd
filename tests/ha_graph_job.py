"""A graph (Pregel) job run with high availability by real driver processes
(tests/chaos/test_high_availability.py).

    python tests/ha_graph_job.py HA_URI WORK_DIR

PageRank on a small random graph, slowed to :data:`STEP_S` seconds a superstep so a test can
kill the leading driver mid-run, with a superstep checkpoint every superstep under
``WORK_DIR/graph``. The driver that runs the job to its end writes its ranks to
``WORK_DIR/ranks-<pid>.npy`` and prints ``FINAL`` with the supersteps it restored from; one that
finds the job ended elsewhere prints ``ENDED ELSEWHERE`` and writes the ranks it read back too.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from epochal.graph.algorithms import PageRank
from epochal.graph.model import Graph

ITERATIONS = 12
STEP_S = 0.4


def graph() -> Graph:
    rng = np.random.default_rng(36)
    ids = np.arange(300, dtype=np.int64) * 7919 + 11
    edges = np.unique(rng.integers(0, len(ids), (1500, 2)), axis=0)
    return Graph.from_edges(ids[edges[:, 0]], ids[edges[:, 1]], vertices=ids)


class SlowPageRank(PageRank):
    """PageRank that takes at least :data:`STEP_S` seconds per superstep on each worker."""

    def compute(self, part, table, ctx):  # type: ignore[no-untyped-def]
        time.sleep(STEP_S)
        return super().compute(part, table, ctx)


def main() -> int:
    import logging

    import epochal
    from epochal.errors import LeadershipLostError
    from epochal.graph.job import run_graph

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    uri, work = sys.argv[1], sys.argv[2]
    env = epochal.Environment(2, master="local[2]", registration_timeout=60.0)
    env.enable_high_availability(uri, lease_timeout=float(os.environ.get("HA_LEASE_TIMEOUT", "3")),
                                 poll_interval=0.1)
    print(f"DRIVER {os.getpid()} STARTED {time.time():.3f}", flush=True)
    try:
        result = run_graph(graph(), SlowPageRank(ITERATIONS), parallelism=2, environment=env,
                           fault_tolerance="checkpoint", checkpoint_interval=1, full_checkpoint_every=4,
                           work_dir=os.path.join(work, "graph"), job_name="ha-pagerank")
    except LeadershipLostError as error:
        print(f"DEPOSED {error}", flush=True)
        return 3
    np.save(os.path.join(work, f"ranks-{os.getpid()}.npy"), np.asarray(result.values))
    if result.halt_reason.startswith("ended under another driver"):
        print(f"ENDED ELSEWHERE {result.supersteps}", flush=True)
        return 0
    print(f"FINAL supersteps={result.supersteps} restored_from={result.restored_from}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
