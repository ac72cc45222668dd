"""DataStream and KeyedStream: the fluent API in the shape of Flink's DataStream API.

Every call records a transformation in the environment's logical graph and returns a new
stream; nothing runs until ``Environment.execute``. Naming calls (``name``, ``uid``,
``set_parallelism``, ``disable_chaining``) configure the transformation that produced the
stream and return the same stream, so they chain::

    counts = (env.from_collection(lines).flat_map(str.split).name("split")
              .key_by(lambda w: w).count().uid("counts"))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from epochal.api.collected import CollectedStream
from epochal.api.event_time import WatermarkStrategy
from epochal.api.fields import Field, check_callable
from epochal.api.functions import ProcessFunction, as_process_function
from epochal.api.windowed import WindowedStream
from epochal.connectors.base import Sink
from epochal.connectors.memory import CollectSink, DiscardSink, PrintSink
from epochal.errors import PlanError
from epochal.plan.logical import Transformation
from epochal.plan.partitioners import (
    BroadcastPartitioner,
    CustomPartitioner,
    ForwardPartitioner,
    KeyGroupPartitioner,
    Partitioner,
    RebalancePartitioner,
)
from epochal.runtime.operators.base import FilterOperator, FlatMapOperator, MapOperator, Operator, SinkOperator
from epochal.runtime.operators.functions import OutputTag, tag_id
from epochal.runtime.operators.iteration import IterationHead
from epochal.runtime.operators.process import ProcessOperator
from epochal.runtime.windows.time_windows import WatermarkGenerator
from epochal.state.descriptors import MapStateDescriptor
from epochal.validation import check_number

if TYPE_CHECKING:
    from epochal.api.batches import BatchStream
    from epochal.api.connected import BroadcastConnectedStream, BroadcastStream, ConnectedStreams
    from epochal.api.environment import Environment
    from epochal.api.iterative import IterativeStream
    from epochal.api.joins import IntervalJoin, JoinedStreams
    from epochal.api.keyed import KeyedStream


class DataStream:
    """A stream of records produced by one transformation."""

    def __init__(self, env: Environment, node: Transformation) -> None:
        self.env = env
        self.node = node

    # ---------------------------------------------------------------- configuration
    def name(self, name: str) -> DataStream:
        """Name the operator that produced this stream (shown in plans, metrics, errors).

        Without a ``uid()``, the operator's uid is derived from this name and its operation
        (``<operation>:<name>``), so renaming a stateful operator changes where its state is found.
        """
        if not isinstance(name, str) or not name:
            raise PlanError(f"name() takes a non-empty str, got {name!r}")
        self.node.name = name
        self.node.user_named = True
        return self

    def uid(self, uid: str) -> DataStream:
        """Give the operator a stable id; its state is matched by this id on restore.

        Set it on every stateful operator (sources, keyed aggregations, ``process``, windows,
        loops, sinks) of a job you may upgrade: the default uid is derived from the operator's
        ``name()`` and operation, or from its operation and position among operators of that operation.
        """
        if not isinstance(uid, str) or not uid:
            raise PlanError(f"uid() takes a non-empty str, got {uid!r}")
        self.node.uid = uid
        return self

    def set_parallelism(self, parallelism: int) -> DataStream:
        """Run this operator with its own parallelism."""
        if self.node.is_virtual:
            raise PlanError("set_parallelism() applies to operators, not to partitioning calls")
        if not isinstance(parallelism, int) or parallelism < 1:
            raise PlanError(f"parallelism must be a positive int, got {parallelism!r}")
        self.node.parallelism = parallelism
        return self

    def final_results(self) -> DataStream:
        """Emit only each key's final value when the bounded input ends, instead of every rolling
        update (on the stream of a keyed ``sum/min/max/min_by/max_by/count/reduce``); for the
        whole job, ``env.set_runtime_mode("batch")``."""
        if not hasattr(self.node.operator, "final_only"):
            raise PlanError("final_results() applies to keyed aggregations (sum, min, max, min_by, max_by, count, "
                            "reduce); windows already emit one result per window")
        self.node.final_results = True
        return self

    def disable_chaining(self) -> DataStream:
        """Never fuse this operator with its neighbours (its own subtask and channels)."""
        self.node.chaining = False
        return self

    # ---------------------------------------------------------------- transformations
    def _add(self, operation: str, name: str, operator: Operator, functions: list[Any],
             inputs: list[int] | None = None) -> DataStream:
        node = self.env.graph.add(operation, name, inputs if inputs is not None else [self.node.id],
                                  operator=operator, functions=functions)
        return DataStream(self.env, node)

    def map(self, fn: Callable[[Any], Any]) -> DataStream:
        """One output record per input record."""
        check_callable(fn, "map")
        return self._add("map", "Map", MapOperator(fn), [fn])

    def filter(self, fn: Callable[[Any], bool]) -> DataStream:
        """Keep the records for which ``fn`` is true."""
        check_callable(fn, "filter")
        return self._add("filter", "Filter", FilterOperator(fn), [fn])

    def flat_map(self, fn: Callable[[Any], Iterable[Any] | None]) -> DataStream:
        """Any number of output records per input record (``fn`` returns an iterable)."""
        check_callable(fn, "flat_map")
        return self._add("flat_map", "FlatMap", FlatMapOperator(fn), [fn])

    def process(self, fn: ProcessFunction | Callable[..., Any],
                timestamp: Callable[[Any], Any] | None = None) -> DataStream:
        """Run a :class:`ProcessFunction` (or ``fn(value, ctx)``) that emits any number of records,
        and side output records through ``ctx.output(tag, value)``. On a keyed stream it has keyed
        state and timers (``ctx.timer_service()``, ``on_timer``). ``timestamp(record)`` is the
        record's event time as ``ctx.timestamp()`` reports it (records carry none of their own;
        default: the timestamp function of a ``with_watermarks`` the records come from unchanged)."""
        function = as_process_function(fn)
        if timestamp is not None:
            check_callable(timestamp, "process(timestamp=...)")
        else:
            timestamp = self._event_time()
        operator = ProcessOperator(function, self._key_selector(), timestamp)
        return self._add("process", "Process", operator, [function, *([timestamp] if timestamp else [])])

    def side_output(self, tag: OutputTag) -> DataStream:
        """The records this stream's operator emitted to the side output ``tag`` (with
        ``ctx.output(tag, value)``, or a window's late records); Flink's ``getSideOutput``."""
        if self.node.is_virtual or self.node.operator is None:
            raise PlanError("side_output() reads an operator's side output: call it on the stream a process() or "
                            "window aggregation returned")
        try:
            tag_id(tag, "side_output()")
        except TypeError as error:
            raise PlanError(str(error)) from None
        node = self.env.graph.add("side_output", f"SideOutput({tag.id})", [self.node.id], side_tag=tag.id)
        return DataStream(self.env, node)

    def connect(self, other: DataStream | BroadcastStream) -> ConnectedStreams | BroadcastConnectedStream:
        """Process this stream and ``other`` in one operator: a :class:`ConnectedStreams` for a
        ``CoProcessFunction`` or ``map(fn1, fn2)`` (keyed when both streams are keyed), or with a
        broadcast stream (``other.broadcast(descriptor)``) the broadcast state pattern."""
        from epochal.api.connected import BroadcastConnectedStream, BroadcastStream, ConnectedStreams

        if isinstance(other, BroadcastStream):
            return BroadcastConnectedStream(self, other)
        if not isinstance(other, DataStream):
            raise PlanError(f"connect() takes a DataStream or a broadcast stream, got {type(other).__name__}")
        return ConnectedStreams(self, other)

    def with_watermarks(self, timestamp: Callable[[Any], Any] | WatermarkStrategy,
                        max_out_of_orderness: float | None = None) -> DataStream:
        """Event time: ``timestamp(record)`` is a record's event time; watermarks follow it.

        The stream passes unchanged; every 200 ms (at most) each subtask emits the watermark
        ``max event time seen - max_out_of_orderness - 1``, which event-time windows downstream
        fire on (they read the same ``timestamp`` unless given their own). The default
        ``max_out_of_orderness=0`` suits event times that ascend within each subtask (Flink's
        ``for_monotonous_timestamps``). ``timestamp`` may be a :class:`WatermarkStrategy`
        instead (``WatermarkStrategy.for_bounded_out_of_orderness(5).with_timestamp_assigner(fn)``,
        Flink's ``assignTimestampsAndWatermarks``). Watermarks from further upstream are replaced.
        """
        if isinstance(timestamp, WatermarkStrategy):
            if max_out_of_orderness is not None:
                raise PlanError("with_watermarks(strategy) takes its max_out_of_orderness from the strategy")
            strategy = timestamp
            timestamp, max_out_of_orderness = strategy.assigner("with_watermarks()"), strategy.max_out_of_orderness
        check_callable(timestamp, "with_watermarks")
        max_out_of_orderness = max_out_of_orderness or 0
        check_number(max_out_of_orderness, "max_out_of_orderness", strict=False)
        return self._add("watermarks", "Watermarks", WatermarkGenerator(timestamp, max_out_of_orderness), [timestamp])

    def to_batches(self, schema: Any = None, max_rows: int | None = None) -> BatchStream:
        """A batch stream of this row stream's records: each runtime batch (at most ``max_rows``
        rows each) becomes one ``pyarrow.RecordBatch``. With ``schema`` (a ``pyarrow.Schema``)
        records are tuples in its column order or dicts by its names; without, dicts (columns by
        their keys), Spark Rows and named tuples (by their fields), other tuples (``f0``, ``f1``,
        ...) or scalars (one column ``value``), types as Arrow infers them from the first batch."""
        from epochal.api.batches import to_batches

        return to_batches(self, schema, max_rows)

    def union(self, *others: DataStream) -> DataStream:
        """Merge streams of the same kind of record into one."""
        for other in others:
            if other.env is not self.env:
                raise PlanError("union() needs streams of the same Environment")
        return self._add("union", "Union", Operator(), [], inputs=[self.node.id] + [o.node.id for o in others])

    def iterate(self) -> IterativeStream:
        """Open a loop: the returned stream carries this stream's records and, once
        :meth:`IterativeStream.close_with` is called, the records fed back to it.

        ::

            it = numbers.iterate()
            step = it.map(collatz_step)
            it.close_with(step.filter(lambda s: s.value != 1))   # around again
            done = step.filter(lambda s: s.value == 1)            # leaves the loop

        Snapshots of loops are exactly-once (papers/000 Algorithm 2): records in transit inside
        the loop at a checkpoint are logged at the head and re-emitted on restore. A bounded job
        with loops ends once its sources are exhausted and no record is left in any loop.
        """
        from epochal.api.iterative import IterativeStream

        loop_id = sum(1 for n in self.env.graph.nodes if n.operation == "iteration_head")
        node = self.env.graph.add("iteration_head", f"Iteration head {loop_id}", [self.node.id],
                                  operator=IterationHead(loop_id))
        return IterativeStream(self.env, node)

    def async_map(self, fn: Callable[[Any], Any], capacity: int = 100, timeout: float = 10.0, ordered: bool = True,
                  on_timeout: Callable[[Any], Any] | None = None, retries: int = 0,
                  retry_backoff: float = 0.1) -> DataStream:
        """One result per record from ``fn`` (an ``async def`` or a blocking function), with up
        to ``capacity`` calls in flight per subtask (Flink's async I/O); ``ordered`` keeps input
        order. Requests in flight are part of checkpoints and issued again after a restore. See
        :func:`epochal.api.async_io.async_map` for timeouts, retries and watermarks."""
        from epochal.api.async_io import async_map

        return async_map(self, fn, capacity, timeout, ordered, on_timeout, retries, retry_backoff)

    def async_flat_map(self, fn: Callable[[Any], Any], capacity: int = 100, timeout: float = 10.0,
                       ordered: bool = True, on_timeout: Callable[[Any], Any] | None = None, retries: int = 0,
                       retry_backoff: float = 0.1) -> DataStream:
        """As :meth:`async_map`, with ``fn`` returning an iterable (or None) of results per record."""
        from epochal.api.async_io import async_flat_map

        return async_flat_map(self, fn, capacity, timeout, ordered, on_timeout, retries, retry_backoff)

    def join(self, other: DataStream) -> JoinedStreams:
        """Inner join with ``other`` per key and event-time window (Flink's ``join``):
        ``a.join(b).where(key_a).equal_to(key_b).window(size, timestamp=fa, other_timestamp=fb).apply(fn)``."""
        from epochal.api.joins import join

        return join(self, other)

    def co_group(self, other: DataStream) -> JoinedStreams:
        """Both streams' records per key and event-time window, to ``fn(key, lefts, rights)``
        (Flink's ``coGroup``): ``a.co_group(b).where(ka).equal_to(kb).window(...).apply(fn)``."""
        from epochal.api.joins import co_group

        return co_group(self, other)

    def interval_join(self, other: DataStream, timestamp: Callable[[Any], Any] | None = None,
                      other_timestamp: Callable[[Any], Any] | None = None) -> IntervalJoin:
        """Join this keyed stream with another keyed stream by event time (Flink's
        ``intervalJoin``): ``a.key_by(k).interval_join(b.key_by(k), timestamp=fa,
        other_timestamp=fb).between(lower, upper).process(fn)`` pairs records whose times ``ta``,
        ``tb`` satisfy ``lower <= tb - ta <= upper``; buffered records leave state once the
        watermark passes the time after which they can match nothing more."""
        from epochal.api.joins import interval_join

        return interval_join(self, other, timestamp, other_timestamp)

    # ---------------------------------------------------------------- partitioning
    def _partition(self, partitioner: Partitioner, name: str) -> DataStream:
        node = self.env.graph.add("partition", name, [self.node.id], partitioner=partitioner)
        return DataStream(self.env, node)

    def key_by(self, key_selector: Callable[[Any], Any]) -> KeyedStream:
        """Partition by key: equal keys go to the same subtask, through their key group."""
        from epochal.api.keyed import KeyedStream

        check_callable(key_selector, "key_by")
        partitioner = KeyGroupPartitioner(key_selector, self.env.max_parallelism)
        node = self.env.graph.add("partition", "KeyBy", [self.node.id], partitioner=partitioner,
                                  functions=[key_selector])
        return KeyedStream(self.env, node, key_selector)

    def forward(self) -> DataStream:
        """Subtask i sends to subtask i (requires equal parallelism; allows chaining)."""
        return self._partition(ForwardPartitioner(), "Forward")

    def rebalance(self) -> DataStream:
        """Round robin over all downstream subtasks: evens out skew."""
        return self._partition(RebalancePartitioner(), "Rebalance")

    def broadcast(self, *descriptors: MapStateDescriptor) -> Any:
        """Every downstream subtask receives every record. With state descriptors, a
        :class:`~epochal.api.connected.BroadcastStream` for the broadcast state pattern
        (``main.connect(rules.broadcast(MapStateDescriptor("rules")))``)."""
        stream = self._partition(BroadcastPartitioner(), "Broadcast")
        if not descriptors:
            return stream
        from epochal.api.connected import BroadcastStream

        for descriptor in descriptors:
            if not isinstance(descriptor, MapStateDescriptor):
                raise PlanError(f"broadcast() takes MapStateDescriptors for broadcast state, got "
                                f"{type(descriptor).__name__}")
        return BroadcastStream(stream, list(descriptors))

    def partition_custom(self, partitioner: Callable[[Any, int], int],
                         key_selector: Callable[[Any], Any] = lambda record: record) -> DataStream:
        """``partitioner(key, num_partitions) -> index`` picks the subtask for each record."""
        check_callable(partitioner, "partition_custom")
        node = self.env.graph.add("partition", "Custom", [self.node.id],
                                  partitioner=CustomPartitioner(partitioner, key_selector),
                                  functions=[partitioner, key_selector])
        return DataStream(self.env, node)

    def _key_selector(self) -> Callable[[Any], Any] | None:
        return None

    def _event_time(self) -> Callable[[Any], Any] | None:
        """The timestamp function of the ``with_watermarks`` whose records this stream carries
        unchanged (through partitioning and filters), or None. Records carry no timestamp of
        their own, so event-time operators that were given no ``timestamp`` use this one, as
        Flink operators use the timestamps its watermark strategy assigned."""
        graph, node = self.env.graph, self.node
        while True:
            if isinstance(node.operator, WatermarkGenerator):
                return node.operator.timestamp
            if node.side_tag is None and len(node.inputs) == 1 and (node.is_virtual or node.operation == "filter"):
                node = graph[node.inputs[0]]
                continue
            return None

    # ---------------------------------------------------------------- keyed-only calls
    def _not_keyed(self, method: str) -> PlanError:
        return PlanError(f"{method}() works per key, and this stream is not keyed: call key_by(...) first, "
                         f"e.g. stream.key_by(lambda record: record[0]).{method}(...)")

    def reduce(self, fn: Callable[[Any, Any], Any]) -> DataStream:
        """Only on keyed streams (see :class:`KeyedStream`); here a clear error."""
        raise self._not_keyed("reduce")

    def count(self) -> DataStream:
        """Only on keyed streams (see :class:`KeyedStream`); here a clear error."""
        raise self._not_keyed("count")

    def sum(self, value: Field = None) -> DataStream:
        """Only on keyed streams (see :class:`KeyedStream`); here a clear error."""
        raise self._not_keyed("sum")

    def min(self, value: Field = None) -> DataStream:
        """Only on keyed streams (see :class:`KeyedStream`); here a clear error."""
        raise self._not_keyed("min")

    def max(self, value: Field = None) -> DataStream:
        """Only on keyed streams (see :class:`KeyedStream`); here a clear error."""
        raise self._not_keyed("max")

    def min_by(self, field: Field) -> DataStream:
        """Only on keyed streams (see :class:`KeyedStream`); here a clear error."""
        raise self._not_keyed("min_by")

    def max_by(self, field: Field) -> DataStream:
        """Only on keyed streams (see :class:`KeyedStream`); here a clear error."""
        raise self._not_keyed("max_by")

    def window(self, size_or_assigner: Any, timestamp: Callable[[Any], Any] | WatermarkStrategy | None = None,
               slide: float | None = None) -> WindowedStream:
        """Only on keyed streams (see :class:`KeyedStream`); here a clear error."""
        raise self._not_keyed("window")

    def count_window(self, size: int, slide: int | None = None) -> WindowedStream:
        """Only on keyed streams (see :class:`KeyedStream`); here a clear error."""
        raise self._not_keyed("count_window")

    # ---------------------------------------------------------------- sinks
    def sink_to(self, sink: Sink, name: str | None = None) -> DataStream:
        """Write the stream to ``sink`` (a file sink, a custom :class:`Sink`)."""
        return self._sink(sink, name)

    def _sink(self, sink: Sink, name: str | None, default_name: str | None = None) -> DataStream:
        if not isinstance(sink, Sink):
            raise PlanError(f"sink_to() takes an epochal Sink, got {type(sink).__name__}")
        stream = self._add("sink", name or default_name or f"Sink: {type(sink).__name__}", SinkOperator(sink),
                           [sink])
        stream.node.user_named = name is not None
        return stream

    def print(self, prefix: str = "") -> DataStream:
        """Print every record on its worker's stdout (``N> record`` with the subtask number)."""
        return self._sink(PrintSink(prefix), None, "Sink: print")

    def discard(self) -> DataStream:
        """Consume and drop every record (benchmarks)."""
        return self._sink(DiscardSink(), None, "Sink: discard")

    def collect(self, name: str | None = None) -> CollectedStream:
        """Send every record to the driver; ``.get()`` on the handle returns them: every one after
        ``env.execute``, those collected so far while a job started by ``env.execute_async`` runs."""
        stream = self._sink(CollectSink(), name, "Sink: collect")
        collect_id = f"collect-{stream.node.id}"
        stream.node.collect_id = collect_id
        return CollectedStream(self.env, collect_id)
