"""epochal: fault-tolerant, stateful stream processing for Python, running on Apache Spark.

Build a dataflow on an :class:`Environment`, then ``execute`` it: it runs as long-lived
workers on Spark executors (``local[N]`` by default).

The names below are loaded on first use (PEP 562), not when the package is imported: a worker
process imports ``epochal.dataflow.worker`` and must not pull in the driver (``epochal.api``,
``epochal.control``) through this package's ``__init__``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from epochal import moved

moved.install()  # the import paths of an earlier epochal (users' code, pickles in old checkpoints)

if TYPE_CHECKING:
    from epochal.api.batches import BatchStream, KeyedBatchStream, WindowedBatchStream
    from epochal.api.collected import CollectedStream
    from epochal.api.connected import BroadcastConnectedStream, BroadcastStream, ConnectedStreams
    from epochal.api.datastream import DataStream
    from epochal.api.environment import Environment
    from epochal.api.event_time import WatermarkStrategy
    from epochal.api.keyed import KeyedStream
    from epochal.api.windowed import (
        CountTrigger,
        EventTimeSessionWindows,
        EventTimeTrigger,
        GlobalWindows,
        ProcessingTimeSessionWindows,
        ProcessingTimeTrigger,
        ProcessWindowFunction,
        PurgingTrigger,
        SlidingEventTimeWindows,
        SlidingProcessingTimeWindows,
        TimeWindow,
        Trigger,
        TriggerResult,
        TumblingEventTimeWindows,
        TumblingProcessingTimeWindows,
        WindowedStream,
        WindowResult,
    )
    from epochal.config import CheckpointConfig, EngineConfig
    from epochal.connectors.base import Sink, SinkWriter, TransactionalSinkWriter
    from epochal.connectors.delta import DeltaSink, DeltaSource
    from epochal.connectors.files import ExactlyOnceFileSink, ParquetFileSink, TextFileSink
    from epochal.connectors.kafka import KafkaRecord, KafkaSink, KafkaSource
    from epochal.connectors.postgres import PostgresSink
    from epochal.control.client import JobClient, JobResult
    from epochal.control.jobmaster import JobStatus
    from epochal.control.jobspec import JobSpec
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
        QueryableStateError,
        QueryKeyTypeError,
        QueryUnauthorizedError,
        SavepointError,
        SinkError,
        SinkInUseError,
        SourceError,
        StateNamespaceInUseError,
        StateUnavailableError,
        UnknownQueryableStateError,
    )
    from epochal.graph.job import run_graph
    from epochal.rest.state_client import QueryableStateClient
    from epochal.runtime.operators.async_io import AsyncTimeoutError
    from epochal.runtime.operators.co_process import (
        BroadcastProcessFunction,
        BroadcastState,
        CoProcessFunction,
        KeyedBroadcastProcessFunction,
    )
    from epochal.runtime.operators.functions import (
        KeyedProcessFunction,
        OutputTag,
        ProcessContext,
        ProcessFunction,
        RuntimeContext,
        TimerService,
    )
    from epochal.runtime.operators.timers import TimeDomain
    from epochal.runtime.windows.joins import JoinContext, ProcessJoinFunction
    from epochal.state.checkpoint_dirs import latest_checkpoint
    from epochal.state.dataframes.reader import read_state, read_state_metadata, register_state_sources
    from epochal.state.dataframes.snapshot_view import StateDataFrameError
    from epochal.state.dataframes.values import decode_state_value
    from epochal.state.dataframes.writer import SavepointWriter
    from epochal.state.descriptors import (
        AggregatingStateDescriptor,
        ListStateDescriptor,
        MapStateDescriptor,
        ReducingStateDescriptor,
        ValueStateDescriptor,
    )
    from epochal.state.ttl import StateTtlConfig

#: Exported name -> the module defining it.
_EXPORTS = {
    **dict.fromkeys(("BatchStream", "KeyedBatchStream", "WindowedBatchStream"), "epochal.api.batches"),
    "CollectedStream": "epochal.api.collected",
    "DataStream": "epochal.api.datastream",
    "KeyedStream": "epochal.api.keyed",
    **dict.fromkeys(("CountTrigger", "EventTimeSessionWindows", "EventTimeTrigger", "GlobalWindows",
                     "ProcessWindowFunction", "ProcessingTimeSessionWindows", "ProcessingTimeTrigger",
                     "PurgingTrigger", "SlidingEventTimeWindows", "SlidingProcessingTimeWindows", "TimeWindow",
                     "Trigger", "TriggerResult", "TumblingEventTimeWindows", "TumblingProcessingTimeWindows",
                     "WindowResult", "WindowedStream"), "epochal.api.windowed"),
    "Environment": "epochal.api.environment",
    "WatermarkStrategy": "epochal.api.event_time",
    "latest_checkpoint": "epochal.state.checkpoint_dirs",
    **dict.fromkeys(("KeyedProcessFunction", "OutputTag", "ProcessContext", "ProcessFunction", "RuntimeContext",
                     "TimerService"), "epochal.runtime.operators.functions"),
    **dict.fromkeys(("BroadcastConnectedStream", "BroadcastStream", "ConnectedStreams"), "epochal.api.connected"),
    **dict.fromkeys(("BroadcastProcessFunction", "BroadcastState", "CoProcessFunction",
                     "KeyedBroadcastProcessFunction"), "epochal.runtime.operators.co_process"),
    "TimeDomain": "epochal.runtime.operators.timers",
    **dict.fromkeys(("JoinContext", "ProcessJoinFunction"), "epochal.runtime.windows.joins"),
    "AsyncTimeoutError": "epochal.runtime.operators.async_io",
    **dict.fromkeys(("CheckpointConfig", "EngineConfig"), "epochal.config"),
    "ExactlyOnceFileSink": "epochal.connectors.files",
    **dict.fromkeys(("Sink", "SinkWriter", "TransactionalSinkWriter"), "epochal.connectors.base"),
    **dict.fromkeys(("ParquetFileSink", "TextFileSink"), "epochal.connectors.files"),
    **dict.fromkeys(("KafkaRecord", "KafkaSink", "KafkaSource"), "epochal.connectors.kafka"),
    **dict.fromkeys(("DeltaSink", "DeltaSource"), "epochal.connectors.delta"),
    "PostgresSink": "epochal.connectors.postgres",
    **dict.fromkeys(("JobClient", "JobResult"), "epochal.control.client"),
    "JobStatus": "epochal.control.jobmaster",
    **dict.fromkeys(("ExponentialBackoffRestart", "FailureRateRestart", "FixedDelayRestart", "NoRestart",
                     "RestartStrategy"), "epochal.control.restart"),
    **dict.fromkeys(("EnvironmentSetupError", "EpochalError", "InsufficientSlotsError", "JavaNotFoundError",
                     "JobCancelledError", "JobFailedError", "JobTimeoutError", "PlanError", "SavepointError",
                     "SinkError",
                     "SinkInUseError", "SourceError", "QueryableStateError", "UnknownQueryableStateError",
                     "QueryUnauthorizedError", "QueryKeyTypeError", "StateUnavailableError",
                     "StateNamespaceInUseError"),
                    "epochal.errors"),
    **dict.fromkeys(("AggregatingStateDescriptor", "ListStateDescriptor", "MapStateDescriptor",
                     "ReducingStateDescriptor", "ValueStateDescriptor"), "epochal.state.descriptors"),
    "StateTtlConfig": "epochal.state.ttl",
    "run_graph": "epochal.graph.job",
    "JobSpec": "epochal.control.jobspec",
    "QueryableStateClient": "epochal.rest.state_client",
    **dict.fromkeys(("dispose_savepoint", "savepoint_info"), "epochal.state.inspect"),
    **dict.fromkeys(("read_state", "read_state_metadata", "register_state_sources"),
                    "epochal.state.dataframes.reader"),
    "StateDataFrameError": "epochal.state.dataframes.snapshot_view",
    "decode_state_value": "epochal.state.dataframes.values",
    "SavepointWriter": "epochal.state.dataframes.writer",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'epochal' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__version__ = "0.1.0"

__all__ = [
    "AggregatingStateDescriptor", "CheckpointConfig", "ExactlyOnceFileSink", "ExponentialBackoffRestart",
    "FailureRateRestart", "FixedDelayRestart", "ListStateDescriptor", "MapStateDescriptor", "NoRestart",
    "ReducingStateDescriptor", "RestartStrategy", "ValueStateDescriptor",
    "BatchStream", "KeyedBatchStream", "WindowedBatchStream",
    "CollectedStream", "DataStream", "EngineConfig", "Environment", "EnvironmentSetupError", "EpochalError",
    "InsufficientSlotsError", "JavaNotFoundError", "JobCancelledError", "JobClient", "JobFailedError",
    "JobTimeoutError", "SavepointError", "SinkInUseError", "dispose_savepoint", "savepoint_info",
    "QueryableStateClient", "QueryableStateError", "UnknownQueryableStateError", "QueryUnauthorizedError",
    "QueryKeyTypeError", "StateUnavailableError", "StateNamespaceInUseError",
    "JobResult", "JobStatus", "KeyedStream", "WindowedStream", "PlanError",
    "ProcessContext",
    "ProcessFunction", "RuntimeContext", "SourceError", "__version__",
    "BroadcastConnectedStream", "BroadcastProcessFunction", "BroadcastState", "BroadcastStream",
    "CoProcessFunction", "ConnectedStreams", "KeyedBroadcastProcessFunction", "KeyedProcessFunction", "OutputTag",
    "TimeDomain", "TimerService", "JoinContext", "ProcessJoinFunction", "AsyncTimeoutError",
    "CountTrigger", "EventTimeSessionWindows", "EventTimeTrigger", "GlobalWindows", "ProcessWindowFunction",
    "ProcessingTimeSessionWindows", "ProcessingTimeTrigger", "PurgingTrigger", "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows", "TimeWindow", "Trigger", "TriggerResult", "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows", "WindowResult",
    "ParquetFileSink", "Sink", "SinkWriter", "StateTtlConfig", "TextFileSink", "TransactionalSinkWriter",
    "KafkaRecord", "KafkaSink", "KafkaSource",
    "DeltaSink", "DeltaSource", "PostgresSink", "SinkError",
    "WatermarkStrategy", "latest_checkpoint",
    "SavepointWriter", "StateDataFrameError", "decode_state_value", "read_state", "read_state_metadata",
    "register_state_sources", "run_graph", "JobSpec",
]
