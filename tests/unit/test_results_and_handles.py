"""What a new user reads back: a JobResult prints as a short summary, and a collect() handle's
get() is the one call for the records, before, during and after a job (the driver side; the
running job on Spark is tests/integration/test_first_hour.py's)."""

from __future__ import annotations

import pytest

import epochal
from epochal import JobResult, PlanError
from epochal.testing import run_locally


def test_a_job_result_prints_a_short_summary_and_keeps_the_details_in_its_fields():
    stats = {"checkpoint_id": 1, "status": "completed", "subtasks": {f"{v}/{s}": {"bytes": 10 ** 6} for v in range(9)
                                                                     for s in range(8)}}
    result = JobResult("totals", "abc123", 12.345, collected={"collect-3": list(range(1500))},
                       metrics={w: {"source_records": 5000, "operators": {f"op{i}": i for i in range(50)}}
                                for w in range(4)},
                       checkpoints=[stats, {**stats, "checkpoint_id": 2}, {"checkpoint_id": 3, "status": "aborted"}],
                       restarts=[{"attempt": 0, "cause": "boom"}])
    assert repr(result) == str(result) == ("JobResult(job 'totals' (id abc123) finished in 12.3 s: 20,000 records, "
                                           "2 checkpoints (1 aborted), 1 restart, 1,500 records collected)")
    assert result.checkpoints[0]["subtasks"]["0/0"] == {"bytes": 10 ** 6}  # still there, just not printed
    assert repr(JobResult("j", "id", 0.04)) == ("JobResult(job 'j' (id id) finished in 0.0 s: 0 records, "
                                                "0 checkpoints, 0 restarts)")


class _Client:
    """A JobClient as CollectedStream sees it: whether the job ended, what it published so far."""

    def __init__(self, published, done=False):
        self.published, self.done = published, done

    def collected(self, sink):
        return list(self.published.get(getattr(sink, "collect_id", sink), []))


def test_get_reads_a_running_job_then_its_result_and_says_what_is_true_before_any():
    env = epochal.Environment(1)
    handle = env.from_collection([1, 2, 3]).collect()
    with pytest.raises(PlanError, match="no job of this Environment has been started.*execute_async.*so far"):
        handle.get()
    env.last_client = _Client({handle.collect_id: [1]})  # as execute_async leaves it
    assert handle.get() == [1]  # while it runs: what was collected so far
    env.last_client.published[handle.collect_id].append(2)
    assert list(handle) == [1, 2]
    env.last_client.done = True  # it ended (execute_async + result(), a failure, a cancel): the client's records
    assert handle.get() == [1, 2]
    run_locally(env)  # a newer finished job: its result
    assert handle.get() == [1, 2, 3]


def test_execute_async_forgets_the_previous_result_for_the_new_job(monkeypatch):
    from epochal.dataflow import job as dataflow_job

    env = epochal.Environment(1)
    handle = env.from_collection([1, 2, 3]).collect()
    run_locally(env)
    client = _Client({handle.collect_id: ["new"]})
    monkeypatch.setattr(dataflow_job, "execute_async", lambda *args, **kwargs: client)
    assert env.execute_async("again") is client
    assert env.last_result is None and handle.get() == ["new"]
