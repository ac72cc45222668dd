"""Tuning knobs of the runtime, with defaults that suit Spark ``local[N]`` on a laptop.

One frozen dataclass travels from the driver to every worker inside the deployment, so the
driver and all workers always agree on batch sizes, credits and timeouts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    """Runtime settings of one job.

    Attributes:
        batch_size: records per network batch; a batch is flushed when it is full.
        buffer_timeout: seconds a partly filled batch may wait before it is flushed anyway
            (bounds latency when input is slow).
        channel_credits: batches a consumer lets one producer have in flight on one channel;
            this bounds the memory a channel can hold and is what creates backpressure.
        max_parallelism: number of key groups; the upper bound of any operator's parallelism
            and the unit in which keyed state is placed and, later, redistributed.
        registration_timeout: seconds the driver waits for all workers to start and register
            before it fails the job with a clear "too few Spark slots" error.
        heartbeat_interval: seconds between a worker's heartbeats to the JobMaster.
        heartbeat_timeout: seconds of silence after which the JobMaster declares a worker lost.
        cancel_timeout: seconds workers get to stop by themselves before the Spark job is killed.
        connect_timeout: seconds a worker waits for its data connections to peers.
    """

    batch_size: int = 1024
    buffer_timeout: float = 0.02
    channel_credits: int = 8
    max_parallelism: int = 128
    registration_timeout: float = 60.0
    heartbeat_interval: float = 0.5
    heartbeat_timeout: float = 20.0
    cancel_timeout: float = 10.0
    connect_timeout: float = 30.0

    def __post_init__(self) -> None:
        from epochal.errors import PlanError

        if self.batch_size < 1:
            raise PlanError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.channel_credits < 1:
            raise PlanError(f"channel_credits must be >= 1, got {self.channel_credits}")
        if not 1 <= self.max_parallelism <= 32768:
            raise PlanError(f"max_parallelism must be in 1..32768, got {self.max_parallelism}")
        for name in ("buffer_timeout", "registration_timeout", "heartbeat_interval",
                     "heartbeat_timeout", "cancel_timeout", "connect_timeout"):
            if getattr(self, name) <= 0:
                raise PlanError(f"{name} must be > 0, got {getattr(self, name)}")
