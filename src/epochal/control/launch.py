"""Starting a job on Spark, whatever its kind.

:func:`launch` checks what must hold before anything is submitted (enough Spark task slots,
executors whose Python can import epochal), creates the job's token and JobMaster with the
kind's coordinator (:class:`~epochal.control.kinds.KindCoordinator`), and submits the Spark job
of ``num_workers`` tasks, each running the kind's worker body. A kind that recovers lost workers
task-locally has each worker run as a Spark job of its own. Waiting for the job as a user's
blocking call does is :func:`epochal.control.running.wait`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

from epochal.config import EngineConfig
from epochal.control import executor_python, slots
from epochal.control import spark as spark_support
from epochal.control.checkpoint_files import CheckpointFence
from epochal.control.jobmaster import JobMaster
from epochal.control.kinds import KindCoordinator
from epochal.control.restart import RestartStrategy
from epochal.runtime.host.frames import TOKEN_BYTES
from epochal.runtime.host.links import Bootstrap

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def launch(spark: SparkSession, config: EngineConfig, *, job_name: str, job_id: str, deployment: bytes,
           num_workers: int, restart: RestartStrategy, kind: KindCoordinator,
           on_end: Callable[[], None] | None = None, fence: CheckpointFence | None = None) -> JobMaster:
    """Start the job's JobMaster, coordinated by the job kind's ``kind``, and submit its Spark
    job; returns the running JobMaster at once (a kind's job module wraps it in its client).
    ``on_end`` is called once the job ended, before the JobMaster's ``done`` is set; ``fence``
    (high availability) guards its checkpoint writes and deletions."""
    slots_hint = slots.check_slots(spark, num_workers, job_name)
    executor_python.check_worker_python(spark, config.registration_timeout)  # once per SparkContext
    token = secrets.token_bytes(TOKEN_BYTES)
    bind_host = "127.0.0.1" if spark_support.is_local(spark) else ""
    launcher: spark_support.SparkJobLauncher | None = None
    # a kind that replaces lost workers runs each worker as a Spark job of its own: one failed
    # task then does not make Spark cancel the others
    independent = kind.local_recovery is not None

    def submit(jm: JobMaster) -> None:
        nonlocal launcher
        bootstrap = Bootstrap(spark_support.driver_host(spark), jm.address[1], token, job_id,
                              config.registration_timeout, bind_host, jm.attempt, kind.worker_body)
        launcher = spark_support.SparkJobLauncher(spark, bootstrap, num_workers, job_name, independent,
                                                  spare=config.spare_worker)
        launcher.submit(jm)

    def cancel_spark() -> None:
        if launcher is not None:
            launcher.cancel()

    def submit_worker(index: int) -> None:
        assert launcher is not None
        launcher.submit_worker(index, jobmaster)

    jobmaster = JobMaster(job_name, job_id, deployment, num_workers, config, token, bind_host, kind, submit,
                          cancel_spark, slots_hint, restart=restart,
                          submit_worker=submit_worker if independent else None, fence=fence)
    if on_end is not None:
        jobmaster.on_end.append(on_end)
    jobmaster.start()
    slots.track_job(spark, job_id, job_name, num_workers, jobmaster.done)
    return jobmaster
