"""Starting a job on Spark and waiting for it, whatever its kind.

:func:`launch` checks what must hold before anything is submitted (enough Spark task slots,
executors whose Python can import epochal), creates the job's token and JobMaster, and submits
the Spark job of ``num_workers`` tasks running the worker body of ``job_kind``
(:mod:`epochal.runtime.kinds`). Waiting for it as a user's blocking call does is :func:`epochal.api.running.wait`.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from epochal.config import EngineConfig
from epochal.control import executor_python, slots
from epochal.control import spark as spark_support
from epochal.control.checkpointing import CheckpointCoordinator
from epochal.control.client import JobClient
from epochal.control.jobmaster import JobMaster
from epochal.control.kinds import KindCoordinator, TaskLocalRecovery
from epochal.control.restart import RestartStrategy
from epochal.runtime.links import Bootstrap
from epochal.runtime.protocol import TOKEN_BYTES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def launch(spark: SparkSession, config: EngineConfig, *, job_name: str, job_id: str, deployment: bytes,
           num_workers: int, restart: RestartStrategy, job_kind: str = "dataflow", kind: KindCoordinator | None = None,
           coordinator: CheckpointCoordinator | None = None, restore: dict[str, Any] | None = None,
           loops: dict[int, int] | None = None, collect_ids: list[str] | None = None) -> JobClient:
    """Start the job's JobMaster and submit its Spark job; returns at once."""
    slots_hint = slots.check_slots(spark, num_workers, job_name)
    executor_python.check_worker_python(spark, config.registration_timeout)  # once per SparkContext
    token = secrets.token_bytes(TOKEN_BYTES)
    bind_host = "127.0.0.1" if spark_support.is_local(spark) else ""
    launcher: spark_support.SparkJobLauncher | None = None

    def submit(jm: JobMaster) -> None:
        nonlocal launcher
        bootstrap = Bootstrap(spark_support.driver_host(spark), jm.address[1], token, job_id,
                              config.registration_timeout, bind_host, jm.attempt, job_kind)
        launcher = spark_support.SparkJobLauncher(spark, bootstrap, num_workers, job_name, independent,
                                                  spare=config.spare_worker)
        launcher.submit(jm)

    def cancel_spark() -> None:
        if launcher is not None:
            launcher.cancel()

    def submit_worker(index: int) -> None:
        assert launcher is not None
        launcher.submit_worker(index, jobmaster)

    # a kind that replaces lost workers runs each worker as a Spark job of its own: one failed
    # task then does not make Spark cancel the others
    independent = isinstance(kind, TaskLocalRecovery) and bool(getattr(kind, "task_local", False))
    jobmaster = JobMaster(job_name, job_id, deployment, num_workers, config, token, bind_host, collect_ids or [],
                          submit, cancel_spark, slots_hint, coordinator=coordinator, restart=restart,
                          restore=restore, loops=loops, kind=kind,
                          submit_worker=submit_worker if independent else None)
    jobmaster.start()
    slots.track_job(spark, job_id, job_name, num_workers, jobmaster.done)
    return JobClient(jobmaster)
