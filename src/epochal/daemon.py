"""PySpark's worker daemon with epochal's worker modules imported: forked workers start warm.

Spark starts a Python worker by forking it from one daemon process per executor
(``pyspark.daemon``); each fork then imports what its task needs. A worker that replaces a lost
one (task-local recovery: Imitator's Rebirth) or the workers of a restarted attempt pay those
imports (numpy, pyarrow, epochal: ~0.3-0.4 s on 2 cores) on the recovery's critical path.
Sessions epochal starts on a local master set ``spark.python.daemon.module`` to this module,
which imports them once in the daemon, before it forks (the children share the pages
copy-on-write), then runs PySpark's own daemon loop unchanged.

What may be imported here: modules whose import starts no thread that a fork would break.
numpy's OpenBLAS starts its thread pool at import and re-creates it in a forked child
(``pthread_atfork``); pyarrow's pools start on first use; psycopg loads libpq and opens no
connection. Nothing here opens a socket or a file that a child would inherit.

The PostgreSQL state backend's modules and psycopg are among them: a restarted attempt's workers
open their connections on the recovery's critical path, and the import alone took 0.1-0.2 s
(quiet) to ~0.9 s (load 10) in a freshly forked worker (docs/state_backends.md).

After the imports the daemon freezes the garbage collector's generations (:func:`gc.freeze`):
what it imported lives as long as the process, and a forked worker inherits the frozen
generation, so its full collections do not traverse (and write to, copying every page on write)
the ~100 MB the daemon imported: a fresh worker's first full collection took 0.1-0.16 s of its
start before. A heap backend's forked snapshot unfreezes the whole process once its last child
reported (:mod:`epochal.dataflow.checkpointing.fork_snapshots`; ``gc.unfreeze`` has no partial
form), so in a worker process that PySpark reuses the freeze lasts until its first such snapshot.
"""

from __future__ import annotations

import gc
import importlib

#: what a worker of any kind imports first (the slow part of a fresh worker): the libraries, the
#: Spark entry point, and every kind's worker body (:mod:`epochal.kinds`)
PRELOAD = ("numpy", "pyarrow", "pyarrow.compute", "cloudpickle", "epochal.runtime.host.entry", "epochal.kinds",
           "psycopg", "epochal.state.postgres.backend")


def preload(freeze: bool = True) -> None:
    """Import :data:`PRELOAD`; a module that fails to import is left to the worker that needs it.
    ``freeze``: then move every object the process has into the collector's permanent generation
    (children forked later inherit it)."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the task that needs it reports the real error
            continue
    if freeze:
        gc.collect()
        gc.freeze()


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager

    manager()
