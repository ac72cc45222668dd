"""Job kinds and recovery modes register themselves: a new kind or mode is a registry entry
pointing at its own module, and the worker entry point and the JobMaster's machine pick it by name."""

from __future__ import annotations

from typing import Any

import pytest

from epochal.config import EngineConfig
from epochal.control import recovery
from epochal.control.jobmaster_machine import JobMasterMachine
from epochal.control.restart import FixedDelayRestart, RestartMachine
from epochal.runtime import kinds
from epochal.runtime.links import Bootstrap
from epochal.runtime.worker import Worker


class EchoBody:
    """A worker body of a test job kind: reports what it was started with."""

    def __init__(self, bootstrap: Bootstrap, index: int, task_attempt: int = 0) -> None:
        self.bootstrap, self.index, self.task_attempt = bootstrap, index, task_attempt

    def run(self) -> dict[str, Any]:
        return {"kind": self.bootstrap.job_kind, "worker": self.index, "attempt": self.task_attempt}


@pytest.fixture
def echo_kind():
    kinds.register_job_kind("echo", f"{__name__}:EchoBody")
    yield "echo"
    del kinds.JOB_KINDS["echo"]


def test_the_streaming_worker_is_the_dataflow_kind():
    assert kinds.worker_body("dataflow") is Worker
    assert Bootstrap("h", 1, b"t", "job", 1.0).job_kind == "dataflow"


def test_the_spark_entry_point_runs_the_body_of_the_bootstraps_kind(echo_kind):
    bootstrap = Bootstrap("h", 1, b"t", "job", 1.0, job_kind=echo_kind)
    assert list(kinds.run_worker_partition(bootstrap, iter([]))) == [{"kind": "echo", "worker": 0, "attempt": 0}]


def test_kinds_are_named_once_and_unknown_kinds_are_named_in_the_error(echo_kind):
    kinds.register_job_kind(echo_kind, f"{__name__}:EchoBody")  # the same again is fine
    with pytest.raises(ValueError, match="already runs"):
        kinds.register_job_kind(echo_kind, "elsewhere:Body")
    with pytest.raises(ValueError, match="module:Class"):
        kinds.register_job_kind("bad", "no_colon")
    with pytest.raises(ValueError, match="unknown job kind 'graphx'; known kinds: cec, dataflow, echo, graph"):
        kinds.worker_body("graphx")


class CountingRecovery(RestartMachine):
    """A recovery mode of a test: restarts like restart_job, counting its decisions."""

    decisions = 0

    def decide(self, kind: str, now: float) -> float | None:
        CountingRecovery.decisions += 1
        return super().decide(kind, now)


def test_the_jobmaster_machine_builds_the_recovery_mode_it_is_given():
    recovery.register_recovery_mode("counting", CountingRecovery)
    try:
        machine = JobMasterMachine("job", b"", 1, EngineConfig(), [], restart=FixedDelayRestart(1, 0.0),
                                   recovery="counting")
        assert isinstance(machine.restarting, CountingRecovery)
        assert machine.restarting.decide("user", 0.0) == 0.0 and CountingRecovery.decisions == 1
        assert isinstance(JobMasterMachine("job", b"", 1, EngineConfig(), []).restarting, RestartMachine)
        with pytest.raises(ValueError, match="already registered"):
            recovery.register_recovery_mode("counting", RestartMachine)
        with pytest.raises(ValueError, match="unknown recovery mode 'cec'; known modes: counting, restart_job"):
            JobMasterMachine("job", b"", 1, EngineConfig(), [], recovery="cec")
    finally:
        del recovery.RECOVERY_MODES["counting"]
