"""``python -m benchmarks.graph``: epochal's graph engine against its peers, and the checkpoint baseline.

Subcommands (each shares one SparkSession between all of its Spark runs):

* ``peers`` -- PageRank (10 iterations), WCC and SSSP on R-MAT and road-like grid graphs of
  2^scale vertices: epochal ``run_graph`` vs the PySpark RDD PageRank example, a DataFrame
  PageRank, NetworkX and scipy.sparse (:mod:`benchmarks.graph.compare`);
* ``checkpoint`` -- papers/003 Fig. 2 on epochal: checkpoint overhead at intervals 1, 2, 4 and
  recovery after a killed worker (:mod:`benchmarks.graph.checkpoint`);
* ``replication`` -- papers/003 §6 (Imitator) on epochal: overhead of replication vs checkpoints
  (Fig. 7), extra replicas and messages (Fig. 8), recovery by CKPT, Rebirth and Migration
  (Table 2), hash vs Fennel (Fig. 10), k = 1..3 (Fig. 11), memory (Table 3), a failure timeline
  (Fig. 12) and a ~1M-vertex recovery (:mod:`benchmarks.graph.replication`);
* ``all`` -- ``peers`` and ``checkpoint``.

Examples (from the repository root; docs/graph_benchmarks.md reports the first three)::

    python -m benchmarks.graph all --scales 14 16 --repeats 2 --ckpt-scale 18        # moderate: ~4 min
    python -m benchmarks.graph checkpoint --ckpt-scale 18 --ckpt-repeats 2 --recovery-repeats 3
    python -m benchmarks.graph peers --scales 18 20 --systems epochal spark-rdd scipy --repeats 1 \\
        --spark-max-scale 18 --out benchmarks/results/large
    python -m benchmarks.graph peers --scales 10 --repeats 1 --no-profile            # smoke test
    python -m benchmarks.graph all --scales 14 16 18 20 --parallelism 1 2 4 --repeats 3 \\
        --networkx-max-scale 18 --driver-memory 8g --ckpt-scale 20 --ckpt-repeats 3   # full scale (hours)
    python -m benchmarks.graph replication --out benchmarks/results/imitator    # docs/imitator_benchmarks.md
    python -m benchmarks.graph replication --rep-scale 12 --large-scale 0 --rep-repeats 1 \\
        --rep-recovery-repeats 1                                                     # smoke test (~2 min)

Results go to ``--out`` (default ``benchmarks/results``): ``graph_*.csv``, ``graph_*.png`` and,
where a PageRank goal is missed, ``graph_profile_*.txt``; ``replication`` writes ``imitator_*``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common.results import RESULTS, machine
from benchmarks.graph import checkpoint, compare, peers, replication


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.graph", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("peers", "checkpoint", "replication", "all"))
    common = parser.add_argument_group("common")
    common.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    common.add_argument("--seed", type=int, default=1, help="graph generator seed (default 1)")
    common.add_argument("--timeout", type=float, default=3600.0, help="seconds one epochal job may take")
    common.add_argument("--driver-memory", default="4g",
                        help="spark.driver.memory (local mode: the JVM that runs every task; default 4g)")
    group = parser.add_argument_group("peers")
    group.add_argument("--scales", type=int, nargs="+", default=[14, 16],
                       help="graph scales: 2^s vertices, R-MAT with 16 x 2^s edge samples (default 14 16)")
    group.add_argument("--parallelism", type=int, nargs="+", default=[2],
                       help="parallelisms of the Spark systems (default 2)")
    group.add_argument("--repeats", type=int, default=3, help="timed runs per system and graph (default 3)")
    group.add_argument("--algorithms", nargs="+", choices=peers.ALGORITHMS, default=list(peers.ALGORITHMS))
    group.add_argument("--systems", nargs="+", choices=peers.SYSTEMS, default=list(peers.SYSTEMS))
    group.add_argument("--iterations", type=int, default=10, help="PageRank iterations (default 10)")
    group.add_argument("--networkx-max-scale", type=int, default=16,
                       help="largest scale NetworkX runs at (pure Python; default 16)")
    group.add_argument("--spark-max-scale", type=int, default=30,
                       help="largest scale the PySpark RDD/DataFrame peers run at (default: all)")
    group.add_argument("--no-profile", dest="profile", action="store_false",
                       help="do not profile epochal where a PageRank goal is missed")
    group = parser.add_argument_group("checkpoint")
    group.add_argument("--ckpt-scale", type=int, default=18, help="R-MAT scale of the checkpoint runs (default 18)")
    group.add_argument("--ckpt-iterations", type=int, default=20, help="PageRank iterations (default 20)")
    group.add_argument("--intervals", type=int, nargs="+", default=[1, 2, 4],
                       help="checkpoint intervals in supersteps (default 1 2 4)")
    group.add_argument("--ckpt-parallelism", type=int, default=2, help="workers (default 2; at least 2)")
    group.add_argument("--ckpt-repeats", type=int, default=2, help="rounds of failure-free runs (default 2)")
    group.add_argument("--recovery-repeats", type=int, default=2, help="runs with a failure per mode (default 2)")
    group.add_argument("--fail-at", type=int, default=15,
                       help="superstep after which worker 1 is killed (default 15)")
    replication.add_arguments(parser)
    args = parser.parse_args(argv)
    if min(args.scales) < 2 or args.repeats < 1 or min(args.parallelism) < 1 or args.iterations < 1:
        parser.error("--scales must be at least 2; --repeats, --parallelism and --iterations positive")
    if args.ckpt_parallelism < 2:
        parser.error("--ckpt-parallelism must be at least 2 (worker 1 is the one killed)")
    if not 0 < args.fail_at <= args.ckpt_iterations:
        parser.error("--fail-at must be a superstep between 1 and --ckpt-iterations")
    if args.command == "replication":
        replication.check_arguments(parser, args)
    args.parallelism = sorted(set(args.parallelism))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from epochal.control.spark import create_session

    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    slots = max(max(args.parallelism), args.ckpt_parallelism, 2)
    if args.command == "replication":
        slots = max(args.rep_parallelism, args.large_parallelism if args.large_scale else 0)
    command = "python -m benchmarks.graph " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"{command}\nmachine: {machine()}; Spark local[{slots}], driver memory {args.driver_memory}", flush=True)
    started = time.perf_counter()
    spark = create_session(f"local[{slots}]", slots, app_name="epochal-graph-benchmark",
                           conf={"spark.driver.memory": args.driver_memory})
    try:
        if args.command in ("peers", "all"):
            compare.main(spark, args)
        if args.command in ("checkpoint", "all"):
            checkpoint.main(spark, args)
        if args.command == "replication":
            replication.main(spark, args)
    finally:
        spark.stop()
    print(f"\ntotal {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
