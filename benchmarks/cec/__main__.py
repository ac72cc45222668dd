"""``python -m benchmarks.cec <experiment>``: papers/002 (continuous eventual checkpointing) §IV on
epochal's ``cec`` job kind, and a recovery comparison with CRB and ABS.

Experiments (each its own SparkSession ``local[4]``, a warm-up job first):

* ``fig5`` -- throughput of fast (size 1) and slow (size 1,000) windows over 2 item ids: native,
  Gopen/Net, Gopen/Disk and Real (:mod:`benchmarks.cec.fig5`);
* ``fig6`` -- Q from 1 to 8 times the open windows: G_checks, extent at a crash mid-run, EC-load
  time, bytes replayed upstream (:mod:`benchmarks.cec.fig67`);
* ``fig7`` -- U from 125k to 1M tuples, the same metrics (:mod:`benchmarks.cec.fig67`);
* ``fig8_9`` -- response time and extent as CP goes 25..250 ms, CI = 10 ms (:mod:`benchmarks.cec.fig89`);
* ``recovery`` -- recovery time and failure-free overhead of CEC, CRB and ABS on the same job
  (:mod:`benchmarks.cec.recovery`);
* ``all`` -- all of them, in that order.

Every run's committed output is compared with a Python oracle (``exact`` in the CSVs). Results go
to ``--out`` (default ``benchmarks/results``): ``cec_<experiment>*.csv`` and ``cec_<experiment>.png``.
``--quick`` shrinks every experiment to a smoke check (under 2 minutes each).

Examples (from the repository root)::

    .venv/bin/python -m benchmarks.cec fig5
    .venv/bin/python -m benchmarks.cec fig6 --quick --out /tmp/cec-smoke
    .venv/bin/python -m benchmarks.cec recovery --quiet-wait 60
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from benchmarks.cec import fig5, fig67, fig89, recovery
from benchmarks.cec.common import env_note
from benchmarks.common.results import RESULTS

EXPERIMENTS = {"fig5": fig5.main, "fig6": fig67.main_q, "fig7": fig67.main_u, "fig8_9": fig89.main,
               "recovery": recovery.main}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cec", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=(*EXPERIMENTS, "all"))
    parser.add_argument("--quick", action="store_true", help="a smoke check: small inputs, one repeat")
    parser.add_argument("--out", default=str(RESULTS), help=f"output directory (default {RESULTS})")
    parser.add_argument("--repeats", type=int, default=0,
                        help="runs per point (default: fig5 3, the others 1; --quick 1)")
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="do not profile where a goal is missed")
    parser.add_argument("--quiet-wait", type=float, default=0.0,
                        help="before each run wait up to this many seconds for other processes to leave "
                             "the CPUs (default 0: do not wait; foreign_cpu_cores is recorded either way)")
    parser.add_argument("--summarise-only", action="store_true",
                        help="run nothing: redo the tables, summaries and plots from the CSV in --out "
                             "(with the options the runs had)")
    parser.add_argument("--quiet-cores", type=float, default=0.2,
                        help="what counts as quiet for --quiet-wait: CPU cores used by other processes")
    for module in (fig5, fig67, fig89, recovery):
        module.add_arguments(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"machine: {env_note()}", flush=True)
    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    for name in names:
        started = time.monotonic()
        EXPERIMENTS[name](args)
        print(f"== {name} took {time.monotonic() - started:.0f} s\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
