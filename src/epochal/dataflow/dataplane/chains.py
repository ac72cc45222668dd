"""Chains: the operators of one subtask and the edges leaving them.

A batch enters a chain at its head, runs through the chained operators as plain calls
(:class:`ChainRunner`) and leaves through :class:`EdgeOutput` objects, which partition it into
per-channel buffers and send full buffers as batches. An operator's side outputs (records it
emitted under an :class:`~epochal.runtime.operators.functions.OutputTag`) go only to the chained operators
and edges that read that tag.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from epochal.dataflow.dataplane.channels import OutputChannel
from epochal.errors import UserFunctionError
from epochal.plan.jobgraph import JobGraph
from epochal.plan.partitioners import KeyGroupPartitioner, Partitioner
from epochal.runtime.operators.base import Operator, key_selector_error
from epochal.runtime.operators.inband import Watermark
from epochal.state.backend import KeyedStateBackend
from epochal.state.operator_state import OperatorStateStore


def edge_names(job: JobGraph, edge_id: int) -> tuple[str, str]:
    """(producing operator, first operator of the consuming chain) of a job edge, for errors."""
    edge = job.edges[edge_id]
    return job.nodes[edge.source_node].name, job.nodes[job.vertices[edge.target_vertex].head].name


class EdgeOutput:
    """A producer subtask's side of one job edge: partitioner, channels and their buffers.

    A channel's batches hold at most ``batch_size`` records, and no more than its consumer asked
    for (``OutputChannel.batch_size``, see :mod:`epochal.dataflow.dataplane.batch_sizing`): a part
    of a batch that is larger goes as several batches, the rest waits in the buffer."""

    __slots__ = ("partitioner", "channels", "buffers", "batch_size", "single", "edge")

    def __init__(self, partitioner: Partitioner, channels: list[OutputChannel], batch_size: int,
                 edge: tuple[str, str] = ("", "")) -> None:
        self.partitioner = partitioner
        self.channels = channels
        self.buffers: list[list[Any]] = [[] for _ in channels]
        self.batch_size = batch_size
        self.single = len(channels) == 1
        #: (producing operator, consuming operator), for errors of the partitioner's user function
        self.edge = edge

    def emit(self, batch: list[Any]) -> None:
        """Add records to the per-channel buffers; send the buffers that are full."""
        if self.single:
            parts = [batch]
        else:
            try:
                parts = self.partitioner.split(batch, len(self.channels))
            except Exception as error:
                raise self._partition_error(error) from error
        buffers = self.buffers
        limit = self.batch_size
        for index, part in enumerate(parts):
            if not part:
                continue
            channel = self.channels[index]
            size = channel.batch_size
            if size > limit:
                size = limit
            buffer = buffers[index]
            if buffer:
                buffer.extend(part)
                if len(buffer) < size:
                    continue
                part = buffer
                buffers[index] = []
            elif len(part) < size:
                buffer.extend(part)
                continue
            if len(part) == size:
                channel.send_batch(part)
                continue
            whole = len(part) - len(part) % size  # full batches go now, the rest waits
            for start in range(0, whole, size):
                channel.send_batch(part[start:start + size])
            if whole < len(part):
                buffers[index] = part[whole:]

    def _partition_error(self, error: Exception) -> UserFunctionError:
        producer, consumer = self.edge
        if isinstance(self.partitioner, KeyGroupPartitioner):
            return key_selector_error(consumer, error)
        return UserFunctionError(producer, error, where=f"the {self.partitioner.strategy} partitioner of the edge "
                                                        f"'{producer}' -> '{consumer}'")

    def flush(self) -> None:
        """Send partly filled buffers (on the buffer timeout, when idle, before events)."""
        for index, buffer in enumerate(self.buffers):
            if buffer:
                self.channels[index].send_batch(buffer)
                self.buffers[index] = []

    def send_event(self, event: Any) -> None:
        self.flush()
        for channel in self.channels:
            channel.send_event(event)


class ChainRunner:
    """Runs one operator of a chain and passes its output on: the main output to ``children``
    (chained operators) and ``outputs`` (job edges), each side output to the consumers of its
    tag in ``side_children`` and ``side_outputs``. Side output records of a tag nobody reads
    are dropped. Watermarks, end of input and events reach every consumer, side ones included."""

    __slots__ = ("name", "uid", "operator", "children", "outputs", "records_in", "records_out", "keyed_state",
                 "operator_state", "side_children", "side_outputs", "side_sink")

    def __init__(self, name: str, uid: str, operator: Operator) -> None:
        self.name = name
        self.uid = uid
        self.keyed_state: KeyedStateBackend | None = None
        self.operator_state = OperatorStateStore()
        self.operator = operator
        self.children: list[ChainRunner] = []
        self.outputs: list[EdgeOutput] = []
        self.side_children: dict[str, list[ChainRunner]] = {}
        self.side_outputs: dict[str, list[EdgeOutput]] = {}
        #: Test harnesses: gets ``(tag, records)`` of every side output, read or not.
        self.side_sink: Callable[[str, list[Any]], None] | None = None
        self.records_in = 0
        #: records of the main output (side outputs not counted)
        self.records_out = 0

    def push(self, batch: list[Any]) -> None:
        self.records_in += len(batch)
        self._call(self.operator.process_batch, batch)
        if self.operator.emits_watermarks:
            watermark = self.operator.take_watermark()
            if watermark is not None:
                self._pass_watermark(watermark)

    def push2(self, batch: list[Any]) -> None:
        """A batch of a two-input operator's second input."""
        self._call(self.operator.process_batch2, batch)

    def on_processing_time(self, now: float) -> None:
        self._call(self.operator.on_processing_time, now)

    def _call(self, method: Callable[[Any], list[Any]], argument: Any) -> None:
        try:
            out = method(argument)
        except UserFunctionError:
            raise
        except Exception as error:
            raise UserFunctionError(self.name, error) from error
        if out:
            self._forward(out)
        if self.operator.side:
            self._route_side()

    def on_watermark(self, watermark: Any) -> None:
        """Event time reached ``watermark`` upstream: emit what it completes, then pass it on.

        A watermark generator swallows upstream watermarks: its own replace them."""
        if self.operator.emits_watermarks:
            return
        self._call(self.operator.on_watermark, watermark)
        self._pass_watermark(watermark)

    def _consumers(self) -> tuple[list[ChainRunner], list[EdgeOutput]]:
        children = self.children
        outputs = self.outputs
        if self.side_children or self.side_outputs:
            children = children + [c for group in self.side_children.values() for c in group]
            outputs = outputs + [o for group in self.side_outputs.values() for o in group]
        return children, outputs

    def _pass_watermark(self, watermark: Any) -> None:
        children, outputs = self._consumers()
        for child in children:
            child.on_watermark(watermark)
        if outputs:
            event = Watermark(watermark)
            for output in outputs:
                output.send_event(event)

    def _forward(self, out: list[Any]) -> None:
        self.records_out += len(out)
        for child in self.children:
            child.push(out)
        for output in self.outputs:
            output.emit(out)

    def _route_side(self) -> None:
        """Hand the operator's side output records to the consumers of their tags."""
        side = self.operator.side
        assert side is not None
        pairs = list(side)
        side.clear()
        self.push_side(pairs)

    def push_side(self, pairs: list[tuple[str, Any]]) -> None:
        """Hand ``(tag id, record)`` pairs to the consumers of their tags (a source's records
        that failed to decode arrive here from its reader)."""
        by_tag: dict[str, list[Any]] = {}
        for tag, record in pairs:
            by_tag.setdefault(tag, []).append(record)
        for tag, records in by_tag.items():
            if self.side_sink is not None:
                self.side_sink(tag, records)
            for child in self.side_children.get(tag, ()):
                child.push(records)
            for output in self.side_outputs.get(tag, ()):
                output.emit(records)

    def end_input(self) -> None:
        self._call(lambda _: self.operator.end_input(), None)
        for child in self._consumers()[0]:
            child.end_input()
