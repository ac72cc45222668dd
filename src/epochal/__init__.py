"""epochal: fault-tolerant, stateful stream processing for Python, running on Apache Spark.

Build a dataflow on an :class:`Environment`, then ``execute`` it: it runs as long-lived
workers on Spark executors (``local[N]`` by default).
"""

from epochal.api.datastream import CollectedStream, DataStream, KeyedStream
from epochal.api.environment import Environment
from epochal.api.functions import ProcessContext, ProcessFunction, RuntimeContext
from epochal.config import EngineConfig
from epochal.control.client import JobClient, JobResult
from epochal.control.jobmaster import JobStatus
from epochal.errors import (
                            EnvironmentSetupError,
                            EpochalError,
                            InsufficientSlotsError,
                            JavaNotFoundError,
                            JobCancelledError,
                            JobFailedError,
                            PlanError,
                            SourceError,
)

__version__ = "0.1.0"

__all__ = [
    "CollectedStream", "DataStream", "EngineConfig", "Environment", "EnvironmentSetupError", "EpochalError",
    "InsufficientSlotsError", "JavaNotFoundError", "JobCancelledError", "JobClient", "JobFailedError",
    "JobResult", "JobStatus", "KeyedStream", "PlanError", "ProcessContext", "ProcessFunction",
    "RuntimeContext", "SourceError", "__version__",
]
