"""The JobMaster's dispatch of typed messages, driven in-process (no Spark, no threads): inbox
events go in through ``_process`` (timers through ``_tick``), what it sends comes out of socket
pairs standing in for the workers' control connections (added to its control server as accepted
connections), and JobClient-facing queries read the result."""

from __future__ import annotations

import socket
import time

import pytest

from epochal.config import EngineConfig
from epochal.control.inbox import CancelAsked, Disconnected, Received, SparkEnded
from epochal.control.jobmaster import JobMaster, JobStatus
from epochal.control.kinds import collected_of
from epochal.control.lifecycle import Started
from epochal.control.restart import FixedDelayRestart
from epochal.dataflow.coordination import DataflowCoordination
from epochal.dataflow.protocol import Collect
from epochal.messages import Cancel, Deploy, Failed, Heartbeat, Ready, Register, Reject, Start, ToWorker
from epochal.runtime.host import frames as protocol


class _Link:
    """One worker's control connection: the JobMaster's end and the worker's end."""

    def __init__(self, jm: JobMaster) -> None:
        self.jobmaster_end, self.worker_end = socket.socketpair()
        self.worker_end.settimeout(5)
        self.stream = self.worker_end.makefile("rb")
        self.connection = jm.server.add(self.jobmaster_end)  # as if accepted, its HELLO checked

    def received(self) -> ToWorker:
        frame = protocol.read_frame(self.stream)
        assert frame is not None and frame[0] == protocol.CONTROL
        return protocol.loads(frame[2])

    def close(self) -> None:
        self.stream.close()
        self.jobmaster_end.close()
        self.worker_end.close()


@pytest.fixture
def deploying():
    jm = JobMaster("job", "id", b"deployment", 2, EngineConfig(), b"\0" * 32, "127.0.0.1",
                   DataflowCoordination(2, collect_ids=["sink"]), submit_spark_job=lambda jm: None,
                   cancel_spark_job=lambda: None)
    jm.machine.lifecycle.handle(Started())  # what start() does, without its threads and Spark job
    links = [_Link(jm), _Link(jm)]
    yield jm, links
    jm.server.close_all()
    for link in links:
        link.close()


def _register(jm: JobMaster, link: _Link, worker: int, job_attempt: int = 0) -> None:
    jm._process(Received(worker, link.connection, Register(worker, 0, job_attempt, 100 + worker, "127.0.0.1",
                                                           6000 + worker, "host")))


def test_registration_deploys_and_readiness_starts(deploying):
    jm, links = deploying
    _register(jm, links[0], 0)
    assert jm.status == JobStatus.DEPLOYING and jm.registered_workers() == 1
    _register(jm, links[1], 1)
    assert jm.status == JobStatus.RUNNING
    for link in links:
        assert link.received() == Deploy(b"deployment", {0: ("127.0.0.1", 6000), 1: ("127.0.0.1", 6001)}, None)
    assert jm.worker_infos()[1] == {"pid": 101, "host": "127.0.0.1", "hostname": "host", "data_port": 6001,
                                    "attempt": 0}
    jm._process(Received(0, links[0].connection, Ready(0)))
    assert not jm.all_running()
    jm._process(Received(1, links[1].connection, Ready(1)))
    assert jm.all_running()
    assert [link.received() for link in links] == [Start(), Start()]


def test_a_registration_from_a_stale_attempt_or_a_duplicate_is_rejected(deploying):
    jm, links = deploying
    _register(jm, links[0], 0, job_attempt=1)  # the job is at attempt 0
    reply = links[0].received()
    assert isinstance(reply, Reject) and "worker 0 attempt 0 is not needed" in reply.reason
    assert jm.registered_workers() == 0
    _register(jm, links[0], 0)
    _register(jm, links[1], 0)  # a second worker 0
    assert isinstance(links[1].received(), Reject)
    assert jm.registered_workers() == 1


def test_messages_count_only_from_the_registered_connection(deploying):
    jm, links = deploying
    _register(jm, links[0], 0)
    _register(jm, links[1], 1)
    jm._process(Received(0, links[1].connection, Heartbeat({"records_processed": 5})))  # wrong connection
    jm._process(Received(1, links[1].connection, Heartbeat({"records_processed": 7})))
    assert jm.snapshot_metrics() == {0: {}, 1: {"records_processed": 7}}
    jm._process(Received(1, links[1].connection, Collect("sink", 1, ["a", "b"])))
    assert jm.query(lambda kind: collected_of(kind).published("sink")) == ["a", "b"]
    jm._process(Received(0, links[1].connection, Collect("sink", 0, ["c"])))  # wrong connection
    assert jm.query(lambda kind: collected_of(kind).published_all()) == {"sink": ["a", "b"]}


def test_the_most_specific_failure_explains_the_job(deploying):
    jm, links = deploying
    _register(jm, links[0], 0)
    _register(jm, links[1], 1)
    jm._process(Received(1, links[1].connection, Failed("peer_lost", "lost the connection to worker 0", 1,
                                                        peer=0)))
    assert jm.status == JobStatus.FAILING
    jm._process(Disconnected(0, links[0].connection))
    jm._process(Received(1, links[1].connection, Failed("user", "ValueError: bad", 1, operator="Map",
                                                        traceback="Traceback ...")))
    error = jm.machine.failure_error()
    assert error.category == "user" and error.operator == "Map" and error.worker == 1
    assert str(error) == "job 'job' failed: operator 'Map' (worker 1) raised ValueError: bad\nTraceback ..."
    jm.machine.failures = [f for f in jm.machine.failures if f.category != "user"]
    error = jm.machine.failure_error()
    assert error.category == "worker_lost" and "worker 0 (Spark task attempt 0, pid 100 on host) died" in str(error)


def test_cancel_reaches_every_worker(deploying):
    jm, links = deploying
    _register(jm, links[0], 0)
    _register(jm, links[1], 1)
    for link in links:
        link.received()  # the deployment
    jm._process(CancelAsked("cancelled by the user"))
    assert jm.status == JobStatus.CANCELLING
    assert [link.received() for link in links] == [Cancel("cancelled by the user")] * 2


def test_restart_after_restart_through_the_jobmaster_then_a_stale_registration():
    """The lifecycle and restart machines wired into the JobMaster: two failures, two restarts
    (a registration of the failed attempt is then rejected), a third failure ends the job."""
    submitted: list[int] = []
    jm = JobMaster("job", "id", b"deployment", 1, EngineConfig(cancel_timeout=0.2), b"\0" * 32, "127.0.0.1",
                   DataflowCoordination(1), submit_spark_job=lambda jm: submitted.append(jm.attempt),
                   cancel_spark_job=lambda: None,
                   restart=FixedDelayRestart(attempts=2, delay=0.0))
    jm.machine.lifecycle.handle(Started())
    links = []
    try:
        for attempt in range(3):
            link = _Link(jm)
            links.append(link)
            if attempt:
                _register(jm, link, 0, job_attempt=attempt - 1)  # a late worker of the failed attempt
                assert isinstance(link.received(), Reject) and jm.registered_workers() == 0
            _register(jm, link, 0, job_attempt=attempt)
            assert jm.status == JobStatus.RUNNING and isinstance(link.received(), Deploy)
            jm._process(Disconnected(0, link.connection))
            assert jm.status == JobStatus.FAILING
            jm._tick(time.monotonic())  # within the grace period: nothing yet
            assert jm.status == JobStatus.FAILING
            jm._tick(time.monotonic() + 1.0)
            if attempt == 2:
                # stopping is a state now (no blocking wait): it ends on a tick past cancel_timeout
                jm._tick(time.monotonic() + 2.0)
                break
            assert jm.status == JobStatus.RESTARTING and len(jm.restart_history()) == attempt + 1
            jm._process(SparkEnded([], None))
            jm._tick(time.monotonic() + 1.0)
            assert jm.status == JobStatus.DEPLOYING and jm.attempt == attempt + 1
        assert jm.status == JobStatus.FAILED and submitted == [1, 2]
        assert [r["attempt"] for r in jm.restart_history()] == [0, 1]
        assert "(after 2 restarts; restart strategy: fixed delay (2 attempts, 0 s apart))" in str(jm.error)
    finally:
        jm.server.close_all()
        for link in links:
            link.close()


def test_a_workers_own_failure_explains_its_later_loss_but_not_another_workers():
    from epochal.control.job_failures import failure_error, worker_lost

    internal = Failed("internal", "BrokenPipeError: [Errno 32] Broken pipe", 0, traceback="Traceback ...")
    error = failure_error([internal, worker_lost(0, 0, 100, "host")], "job", "")
    assert error.category == "internal" and "BrokenPipeError" in str(error) and error.worker == 0
    # worker 1 was killed, worker 0 then failed sending to it: worker 1's loss is the cause
    error = failure_error([internal, worker_lost(0, 0, 100, "host"), worker_lost(1, 0, 101, "host")], "job", "")
    assert error.category == "worker_lost" and error.worker == 1
