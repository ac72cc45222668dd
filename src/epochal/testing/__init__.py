"""Tools for testing epochal jobs, shipped so users can test their own jobs the same way.

Fast tests without Spark: :func:`run_locally` (a job's plan in one process), :class:`TestSource`
and :class:`TestSink`, and :class:`OperatorHarness` (one operator, by hand). Fault injection on
Spark (what proves the guarantees): :class:`Fault`.

The local runner and the harness are imported lazily (on first use of their names): a worker
process that unpickles a ``TestSource`` or ``TestSink`` imports this package, and must not pull
in the driver-side modules the local runner uses.
"""

from typing import TYPE_CHECKING, Any

from epochal.testing.faults import POINTS, Fault, kill_worker, random_faults
from epochal.testing.sinks import TestSink
from epochal.testing.sources import TestSource, TestSourceAborted

if TYPE_CHECKING:
    from epochal.testing.harness import OperatorHarness, OperatorSnapshot
    from epochal.testing.local import LocalResult, LocalRunner, run_locally

_LAZY = {"OperatorHarness": "harness", "OperatorSnapshot": "harness",
         "LocalResult": "local", "LocalRunner": "local", "run_locally": "local"}

__all__ = ["POINTS", "Fault", "kill_worker", "random_faults",
           "LocalResult", "LocalRunner", "OperatorHarness", "OperatorSnapshot", "TestSink", "TestSource",
           "TestSourceAborted", "run_locally"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'epochal.testing' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"epochal.testing.{module}"), name)
    globals()[name] = value
    return value
