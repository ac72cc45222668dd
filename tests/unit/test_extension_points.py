"""A job kind is a coordinator on the JobMaster and a worker body on the executors: the kind's
coordinator names its body (which travels with each Spark task by class) and declares how a lost
worker is recovered; the JobMaster's machine runs any kind through the same protocol."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from epochal.cec.coordination import CecCoordination
from epochal.config import EngineConfig
from epochal.control.jobmaster_events import JobStarted, ResolveRestore, RestoreResolved, WorkerMessage
from epochal.control.jobmaster_machine import JobMasterMachine
from epochal.control.kinds import KindCoordinator
from epochal.control.lifecycle import JobStatus
from epochal.dataflow.coordination import DataflowCoordination
from epochal.dataflow.worker import Worker
from epochal.graph.algorithms import PageRank
from epochal.graph.coordination import GraphCoordination
from epochal.graph.recovery import ReplicationSettings
from epochal.graph.replica_recovery import ReplicaRecovery
from epochal.graph.worker import GraphWorker
from epochal.messages import Finished, KindReport, Ready, Register
from epochal.runtime.host import entry
from epochal.runtime.host.links import Bootstrap


class EchoBody:
    """A worker body of a test job kind: reports what it was started with."""

    def __init__(self, bootstrap: Bootstrap, index: int, task_attempt: int = 0) -> None:
        self.bootstrap, self.index, self.task_attempt = bootstrap, index, task_attempt

    def run(self) -> dict[str, Any]:
        return {"job": self.bootstrap.job_id, "worker": self.index, "attempt": self.task_attempt}


class EchoCoordination(KindCoordinator):
    """The coordinator of a test job kind: counts its workers' reports and ends after two."""

    worker_body: ClassVar[type] = EchoBody

    def __init__(self) -> None:
        self.reports: list[Any] = []

    def on_message(self, worker, message, now, wall, running):
        self.reports.append((worker, message.payload))
        return []


def test_the_spark_entry_point_runs_the_body_the_bootstrap_names():
    bootstrap = Bootstrap("h", 1, b"t", "job-1", 1.0, worker_body=EchoBody)
    assert list(entry.run_worker_partition(bootstrap, iter([]))) == [{"job": "job-1", "worker": 0, "attempt": 0}]
    assert list(entry.warm_worker_partition("job-2", EchoBody, iter([]))) == [0]
    assert "job-2" in entry.WARMED_FOR


def test_each_kind_names_its_worker_body_and_how_it_recovers_a_lost_worker():
    assert DataflowCoordination.worker_body is Worker and DataflowCoordination(2).local_recovery is None
    cec = CecCoordination(2)
    assert CecCoordination.worker_body.__name__ == "CecWorker" and cec.local_recovery is cec
    assert GraphCoordination.worker_body is GraphWorker
    assert GraphCoordination("g", PageRank(), 2).local_recovery is None  # checkpoints: the job restarts
    replicas = ReplicaRecovery(ReplicationSettings(1, "rebirth", True, True), np.arange(4), np.array([0, 1, 0, 1]),
                               np.array([[1], [0], [1], [0]]), 2)
    replicated = GraphCoordination("g", PageRank(), 2, replication=replicas)
    assert replicated.local_recovery is replicated


def test_a_new_kind_needs_only_a_coordinator_the_machine_runs_it_through_the_shared_protocol():
    kind = EchoCoordination()
    machine = JobMasterMachine("echo", b"deployment", 1, EngineConfig(), kind)
    machine.handle(JobStarted(0.0))
    [resolve] = machine.handle(WorkerMessage(0, 10, Register(0, 0, 0, 1, "127.0.0.1", 6000, "h"), 1.0, 1.0))
    assert resolve == ResolveRestore(None, None, None)  # the default: nothing to restore
    machine.handle(RestoreResolved(None, ""))
    machine.handle(WorkerMessage(0, 10, Ready(0), 2.0, 2.0))
    machine.handle(WorkerMessage(0, 10, KindReport(0, "step 1"), 3.0, 3.0))
    assert kind.reports == [(0, "step 1")]
    machine.handle(WorkerMessage(0, 10, Finished({}), 4.0, 4.0))
    assert machine.status is JobStatus.FINISHING  # the default: the job ends when every worker finished
