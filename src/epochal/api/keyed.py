"""KeyedStream: a stream partitioned by key, with rolling aggregations and windows per key."""

from __future__ import annotations

import operator as _op
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from epochal.api.datastream import DataStream
from epochal.api.event_time import WatermarkStrategy
from epochal.api.fields import Field, check_callable, check_field, field_getter
from epochal.api.windowed import WindowedStream, count_windows, keyed_window
from epochal.plan.logical import Transformation
from epochal.runtime.operators.aggregates import (
    ByFieldAggregate,
    CountAggregate,
    FieldAggregate,
    FoldAggregate,
    ReduceAggregate,
    emit_key_value,
    emit_value,
)
from epochal.runtime.operators.base import KeyedReduceOperator

if TYPE_CHECKING:
    from epochal.api.environment import Environment


class KeyedStream(DataStream):
    """A stream partitioned by key; aggregations and ``process`` see one key at a time.

    Aggregations are rolling, as in Flink: every input record produces the key's updated
    aggregate, so the last output per key is its final value.
    """

    def __init__(self, env: Environment, node: Transformation, key_selector: Callable[[Any], Any]) -> None:
        super().__init__(env, node)
        self.key_selector = key_selector
        #: the query name the next built-in aggregation's state gets (:meth:`as_queryable_state`)
        self.queryable_name: str | None = None

    def as_queryable_state(self, name: str) -> KeyedStream:
        """The next rolling aggregation on the stream returned (``count``, ``sum``, ``min``, ``max``,
        ``min_by``, ``max_by``, ``reduce``) keeps each key's value queryable as ``name`` while the
        job runs: ``key_by(word).as_queryable_state("counts").count()``, then
        ``QueryableStateClient(job).get("counts", "a")`` (docs/queryable_state.md). A query name is
        unique within a job."""
        if not isinstance(name, str) or not name:
            from epochal.errors import PlanError

            raise PlanError(f"as_queryable_state needs a non-empty name, not {name!r}")
        stream = KeyedStream(self.env, self.node, self.key_selector)
        stream.queryable_name = name
        return stream

    def _key_selector(self) -> Callable[[Any], Any] | None:
        return self.key_selector

    def _aggregate(self, operation: str, name: str, aggregate: Callable[[Any, Any], Any],
                   emit: Callable[[Any, Any], Any], functions: list[Any]) -> DataStream:
        operator = KeyedReduceOperator(self.key_selector, aggregate, emit)
        operator.queryable_name = self.queryable_name
        return self._add(operation, name, operator, [self.key_selector, *functions])

    def reduce(self, fn: Callable[[Any, Any], Any]) -> DataStream:
        """Rolling ``fn(accumulated, record)`` per key; emits the accumulated record. ``fn``
        returns a new value and leaves its arguments as they are: the value it returns is both
        emitted and kept as the key's state (an accumulator that changes in place belongs in an
        AggregateFunction, whose state objects copy it where a snapshot shares it)."""
        check_callable(fn, "reduce")
        return self._aggregate("reduce", "Reduce", ReduceAggregate(fn), emit_value, [fn])

    def count(self) -> DataStream:
        """Rolling count per key; emits ``(key, count)``."""
        return self._aggregate("count", "Count", CountAggregate(), emit_key_value, [])

    def _fold(self, operation: str, name: str, value: Field, combine: Callable[[Any, Any], Any]) -> DataStream:
        if value is None or callable(value):
            return self._aggregate(operation, name, FoldAggregate(value, combine), emit_key_value, [value])
        return self._aggregate(operation, name, FieldAggregate(check_field(value, operation), combine), emit_value, [])

    def sum(self, value: Field = None) -> DataStream:
        """Rolling sum per key.

        With a function (or nothing: the record itself) it sums ``value(record)`` and emits
        ``(key, sum)``. With a field name (dict key or attribute) or a tuple index it works as
        Flink's ``sum(field)``: it emits the key's first record with that field holding the sum.
        """
        return self._fold("sum", "Sum", value, _op.add)

    def min(self, value: Field = None) -> DataStream:
        """Rolling minimum per key: ``(key, min of value(record))``, or with a field name or
        index the key's first record with that field holding the minimum (Flink's ``min``)."""
        return self._fold("min", "Min", value, min)

    def max(self, value: Field = None) -> DataStream:
        """Rolling maximum per key: ``(key, max of value(record))``, or with a field name or
        index the key's first record with that field holding the maximum (Flink's ``max``)."""
        return self._fold("max", "Max", value, max)

    def min_by(self, field: Field) -> DataStream:
        """Rolling: the key's record with the smallest ``field`` (name, index or function) so far;
        on ties the earliest stays (Flink's ``minBy``)."""
        return self._aggregate("min_by", "MinBy", ByFieldAggregate(field_getter(field, "min_by"), largest=False),
                               emit_value, [field] if callable(field) else [])

    def max_by(self, field: Field) -> DataStream:
        """Rolling: the key's record with the largest ``field`` (name, index or function) so far;
        on ties the earliest stays (Flink's ``maxBy``)."""
        return self._aggregate("max_by", "MaxBy", ByFieldAggregate(field_getter(field, "max_by"), largest=True),
                               emit_value, [field] if callable(field) else [])

    def window(self, size_or_assigner: Any, timestamp: Callable[[Any], Any] | WatermarkStrategy | None = None,
               slide: float | None = None) -> WindowedStream:
        """Windows per key: a size (event-time windows, tumbling or sliding) or any window
        assigner (``TumblingEventTimeWindows.of(10)``, ``SlidingProcessingTimeWindows.of(60, 10)``,
        ``EventTimeSessionWindows.with_gap(5)``, ``GlobalWindows.create()``...; docs/windows.md).

        With a size: windows of ``size`` (in the unit of the event times), tumbling, or sliding
        with a new window every ``slide`` (``0 < slide <= size``; a record then belongs to up to
        ``ceil(size / slide)`` windows). Window starts are multiples of ``slide`` (of ``size``
        when tumbling); window ``start`` covers ``[start, start + size)``.

        ``timestamp(record)`` is the record's event time, needed by event-time windows (records
        do not carry one); after ``with_watermarks(ts)`` it may be left out (``ts`` is used).
        Windows fire on watermarks: when none reach the window (no ``with_watermarks`` upstream)
        and its input is unbounded, the window makes them from ``timestamp`` with
        ``max_out_of_orderness=0`` (:data:`~epochal.api.event_time.DEFAULT_OUT_OF_ORDERNESS`), as
        ``with_watermarks(timestamp)`` before the ``key_by`` would; pass a
        :class:`~epochal.api.event_time.WatermarkStrategy` as ``timestamp`` for another bound
        (``WatermarkStrategy.for_bounded_out_of_orderness(5).with_timestamp_assigner(ts)``).
        ``env.plan().describe()`` says where each window's watermarks come from. A window fires once the watermark
        reaches its last instant (``start + size - 1``) and emits a
        :class:`~epochal.runtime.windows.assigners.WindowResult`, equal to ``(key, start, result)``
        and carrying ``.start``/``.end``; every open window fires at the end of a bounded input.
        A record whose windows have all fired is late: dropped and counted in
        ``JobResult.late_records_dropped``, unless ``allowed_lateness`` or
        ``side_output_late_data`` say otherwise. Aggregate with :class:`WindowedStream`'s
        ``count``, ``sum``, ``min``, ``max``, ``avg``, ``reduce``, ``aggregate`` or ``process``,
        and shape firing with ``trigger``.
        """
        return keyed_window(self, size_or_assigner, timestamp, slide)

    def count_window(self, size: int, slide: int | None = None) -> WindowedStream:
        """Windows of ``size`` consecutive records per key (Flink's ``countWindow``): tumbling,
        or sliding with a new window every ``slide`` records (``1 <= slide <= size``): the key's
        ``n``-th record (from 0) opens a window when ``n % slide == 0``.

        A window fires with its ``size``-th record and emits ``(key, result)``; at the end of a
        bounded input, windows that are not full never fire (as Flink's count trigger). Windows
        follow each key's arrival order, so their contents are deterministic only if each key's
        records reach the window in a deterministic order (e.g. all from one source subtask).
        Event time and watermarks play no part: nothing is late.
        """
        return WindowedStream(self, count_windows(size, slide))
