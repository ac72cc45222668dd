"""epochal: fault-tolerant, stateful stream processing for Python, running on Apache Spark.

Build a dataflow on an :class:`Environment`, then ``execute`` it: it runs as long-lived
workers on Spark executors (``local[N]`` by default).
"""

from epochal.api.datastream import CollectedStream, DataStream, KeyedStream, WindowedStream
from epochal.api.environment import Environment
from epochal.api.functions import ProcessContext, ProcessFunction, RuntimeContext
from epochal.config import CheckpointConfig, EngineConfig
from epochal.connectors.transactional import ExactlyOnceFileSink
from epochal.control.client import JobClient, JobResult
from epochal.control.jobmaster import JobStatus
from epochal.control.restart import (
                                     ExponentialBackoffRestart,
                                     FailureRateRestart,
                                     FixedDelayRestart,
                                     NoRestart,
                                     RestartStrategy,
)
from epochal.errors import (
                                     EnvironmentSetupError,
                                     EpochalError,
                                     InsufficientSlotsError,
                                     JavaNotFoundError,
                                     JobCancelledError,
                                     JobFailedError,
                                     JobTimeoutError,
                                     PlanError,
                                     SourceError,
)
from epochal.state.descriptors import (
                                     AggregatingStateDescriptor,
                                     ListStateDescriptor,
                                     MapStateDescriptor,
                                     ReducingStateDescriptor,
                                     ValueStateDescriptor,
)

__version__ = "0.1.0"

__all__ = [
    "AggregatingStateDescriptor", "CheckpointConfig", "ExactlyOnceFileSink", "ExponentialBackoffRestart",
    "FailureRateRestart", "FixedDelayRestart", "ListStateDescriptor", "MapStateDescriptor", "NoRestart",
    "ReducingStateDescriptor", "RestartStrategy", "ValueStateDescriptor",
    "CollectedStream", "DataStream", "EngineConfig", "Environment", "EnvironmentSetupError", "EpochalError",
    "InsufficientSlotsError", "JavaNotFoundError", "JobCancelledError", "JobClient", "JobFailedError",
    "JobTimeoutError", "JobResult", "JobStatus", "KeyedStream", "WindowedStream", "PlanError", "ProcessContext",
    "ProcessFunction", "RuntimeContext", "SourceError", "__version__",
]
