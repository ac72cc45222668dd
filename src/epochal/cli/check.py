"""``epochal check``: is this machine ready to run epochal (Python, Java, PySpark)? It also says
whether the optional native parts are in use: the RocksDB reader (``epochal.state.rocksdb.native``)
and the query answer path (``epochal.dataflow.queries.native``)."""

from __future__ import annotations

import argparse
import os
import sys


def check(args: argparse.Namespace | None = None) -> int:
    """Print what epochal will run with; exit 1 with a readable message if it cannot."""
    from epochal.control.spark import check_java, find_java
    from epochal.errors import JavaNotFoundError

    try:
        java = check_java()
    except JavaNotFoundError as error:
        print(f"epochal: {error}", file=sys.stderr)
        return 1
    try:
        import pyspark
    except ImportError:
        print("epochal: PySpark is not installed; run 'pip install epochal' or 'make setup'", file=sys.stderr)
        return 1
    from epochal.dataflow.queries import native as native_queries
    from epochal.state.rocksdb.native import unavailable_reason

    print(f"epochal ready: Python {sys.version.split()[0]}, Java {java} ({find_java()}), "
          f"PySpark {pyspark.__version__}, {os.cpu_count()} cores")
    why_not = unavailable_reason()  # optional: canonical RocksDB savepoints are slower without it
    print("native RocksDB reader: " + ("in use" if why_not is None else f"off ({why_not}); RocksDB canonical "
                                        "savepoints are read in Python, slower"))
    why_not = native_queries.unavailable_reason()  # optional: each lookup costs a busy worker more without it
    print("native query answers: " + ("in use" if why_not is None else f"off ({why_not}); workers answer "
                                       "every query in Python, at a higher cost to a busy job"))
    return 0
