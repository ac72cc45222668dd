"""The job kinds epochal runs: the registry every kind is listed in, by its worker body.

A job kind is a package with the same five modules: ``protocol`` (the kind's own vocabulary:
events, instructions or messages that are the kind's alone; what every kind shares is in
:mod:`epochal.messages` and :mod:`epochal.runtime.host.events`), ``worker_machine`` (the worker's
pure machine), ``worker`` (its driver, the Spark
task's body), ``coordination`` (its :class:`~epochal.control.kinds.KindCoordinator` on the
JobMaster) and ``job`` (submitting a job of the kind). The registry names each kind's worker
body by class, so importing it imports what an executor runs for every kind, and nothing of the
driver: the PySpark daemon preloads it (:mod:`epochal.daemon`), and the layering test checks
every kind against it (tests/unit/test_layering.py).
"""

from __future__ import annotations

from epochal.cec.worker import CecWorker
from epochal.dataflow.worker import Worker
from epochal.graph.worker import GraphWorker

#: job kind -> the worker body each of its Spark tasks runs
JOB_KINDS: dict[str, type] = {"dataflow": Worker, "graph": GraphWorker, "cec": CecWorker}
