"""High availability's errors at start: one readable message each, in bounded time, before Spark
starts (no SparkSession is made by these tests)."""

from __future__ import annotations

import time

import pytest

import epochal
from epochal.control.ha.files import FileHaServices
from epochal.control.ha.leadership import JobEndedElsewhere, stable_job_id
from epochal.control.ha.records import JobRecord, JobResultRecord
from epochal.dataflow.ha import plan_fingerprint
from epochal.errors import HighAvailabilityError, PlanError
from epochal.testing.kafka_broker import free_port


def job(tmp_path, ha: str, parallelism: int = 2) -> epochal.Environment:
    env = epochal.Environment(parallelism)
    env.enable_checkpointing(1.0, storage=str(tmp_path / "checkpoints"))
    env.enable_high_availability(ha)
    env.from_collection([1, 2, 3]).key_by(lambda x: x % 2).count().print()
    return env


def test_a_second_job_with_the_same_id_and_another_plan_is_refused(tmp_path):
    ha = str(tmp_path / "ha")
    env = job(tmp_path, ha)
    services = FileHaServices(ha, stable_job_id("counts"))
    services.put_job(JobRecord(services.job_id, "counts", plan_fingerprint(env.plan(), "streaming"), 0.0, "a"), b"")
    other = job(tmp_path, ha, parallelism=3)  # the same name, so the same id; another plan
    with pytest.raises(HighAvailabilityError, match="another plan"):
        other.execute_async("counts")
    assert not other.spark_handle.started  # refused before any Spark


def test_a_job_that_ended_is_not_run_again(tmp_path):
    ha = str(tmp_path / "ha")
    services = FileHaServices(ha, stable_job_id("done"))
    epoch = services.claim(services.observe(), epochal_driver())
    services.put_result(epoch, JobResultRecord("FINISHED", time.time(), "driver x"))
    env = job(tmp_path, ha)
    with pytest.raises(JobEndedElsewhere):
        env.execute_async("done")
    result = env.execute("done")
    assert result.ended_elsewhere["status"] == "FINISHED" and "not run again" in repr(result)
    # a FAILED one raises the stored error
    failed = FileHaServices(ha, stable_job_id("failed"))
    epoch = failed.claim(failed.observe(), epochal_driver())
    failed.put_result(epoch, JobResultRecord("FAILED", time.time(), "driver y", error="boom"))
    with pytest.raises(epochal.JobFailedError, match="boom"):
        job(tmp_path, ha).execute("failed")


def test_high_availability_needs_checkpoints(tmp_path):
    env = epochal.Environment(2)
    env.enable_high_availability(str(tmp_path / "ha"))
    env.from_collection([1]).print()
    with pytest.raises(PlanError, match="enable_checkpointing"):
        env.execute_async("x")


def test_an_unreachable_zookeeper_fails_within_the_connect_timeout(tmp_path):
    env = job(tmp_path, "x")
    env.enable_high_availability(f"zookeeper://127.0.0.1:{free_port()}/epochal", connect_timeout=1.5)
    started = time.monotonic()
    with pytest.raises(HighAvailabilityError, match="did not answer within 1.5 s"):
        env.execute_async("zk")
    assert time.monotonic() - started < 10


def epochal_driver():
    from epochal.control.ha.records import DriverInfo

    return DriverInfo.this_process()


def test_a_cec_job_is_refused_with_why(tmp_path):
    env = epochal.Environment(2)
    env.enable_cec(log_dir=str(tmp_path / "cec"))
    env.enable_high_availability(str(tmp_path / "ha"))
    env.from_collection([1]).print()
    with pytest.raises(PlanError, match="cannot run with high availability: it has no job-wide checkpoint"):
        env.execute_async("cec")
    assert not env.spark_handle.started


@pytest.mark.parametrize(("options", "message"), [
    ({"fault_tolerance": "replication"}, "fault_tolerance='checkpoint'"),
    ({"fault_tolerance": "checkpoint"}, "needs work_dir="),
])
def test_a_graph_job_says_what_high_availability_needs(tmp_path, options, message):
    from epochal.graph.algorithms import PageRank
    from epochal.graph.job import run_graph
    from epochal.graph.model import Graph

    env = epochal.Environment(2)
    env.enable_high_availability(str(tmp_path / "ha"))
    with pytest.raises(PlanError, match=message):
        run_graph(Graph.from_edges([1, 2], [2, 1]), PageRank(2), environment=env, **options)
    assert not env.spark_handle.started


def test_a_graph_job_that_ended_reads_its_results_back_without_spark(tmp_path):
    """A driver started after the job ended elsewhere returns the stored results from the work
    directory; it starts no Spark."""
    from epochal.graph.algorithms import PageRank
    from epochal.graph.deployment import write_result
    from epochal.graph.job import run_graph
    from epochal.graph.model import Graph

    ha = str(tmp_path / "ha")
    services = FileHaServices(ha, stable_job_id("ranks"))
    epoch = services.claim(services.observe(), epochal_driver())
    services.put_result(epoch, JobResultRecord("FINISHED", time.time(), "driver z",
                                               details={"supersteps": 4, "halt_reason": "converged"}))
    work = tmp_path / "work"
    (work / services.job_id).mkdir(parents=True)
    write_result(str(work / services.job_id), 0, [3, 1], [0.3, 0.1])
    write_result(str(work / services.job_id), 1, [2], [0.2])
    env = epochal.Environment(2)
    env.enable_high_availability(ha)
    result = run_graph(Graph.from_edges([1, 2], [2, 3]), PageRank(2), environment=env, fault_tolerance="checkpoint",
                       work_dir=str(work), job_name="ranks")
    assert result.as_dict() == {1: 0.1, 2: 0.2, 3: 0.3} and result.supersteps == 4
    assert result.halt_reason.startswith("ended under another driver (converged)") and not env.spark_handle.started
