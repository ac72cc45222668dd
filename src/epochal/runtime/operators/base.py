"""Operators: the code that runs inside subtasks, one batch of records at a time.

Every operator turns an input batch into an output batch, so a chain of operators costs one
Python call per operator per batch, not per record. User code raising inside an operator is
wrapped in :class:`UserFunctionError`, which carries the operator's name to the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from epochal.connectors.base import Sink, SinkContext, SinkWriter
from epochal.errors import UserFunctionError, each, note_record
from epochal.plan.keygroups import key_groups_of
from epochal.runtime.operators.aggregates import MISSING, CountAggregate, ReduceAggregate, emit_key_value, emit_value
from epochal.runtime.operators.functions import RuntimeContext


def key_selector_error(consumer: str, error: BaseException) -> UserFunctionError:
    """The error for a key selector that raised (or returned an unusable key) on its way into
    the keyed operator ``consumer``: it names the ``key_by``, not the operator behind it."""
    return UserFunctionError(consumer, error, where=f"the key selector of key_by (into '{consumer}')")


def keys_of(selector: Callable[[Any], Any], batch: list[Any], max_parallelism: int,
            consumer: str) -> tuple[list[Any], list[int]]:
    """Keys and key groups of every record of ``batch``; a failing selector or an unusable key
    (unhashable, no stable encoding) is reported as the ``key_by``'s error."""
    try:
        keys = each(selector, batch)
    except Exception as error:
        raise key_selector_error(consumer, error) from error
    try:
        return keys, key_groups_of(keys, max_parallelism)
    except Exception as error:
        raise key_selector_error(consumer, error) from error


class Operator:
    """Base operator: identity. Subclasses override :meth:`process_batch`."""

    name: str = ""
    uid: str = ""
    #: Keyed operators get a keyed state backend (their key selector sets the current key).
    keyed: bool = False
    #: Watermark generators replace upstream watermarks with their own (see ``take_watermark``).
    emits_watermarks: bool = False
    #: Operators that fire on event time (windows, joins): planning checks that watermarks reach
    #: them (:mod:`epochal.plan.event_time`).
    event_time: bool = False
    #: Two-input operators (``connect``, joins) take 2: their second input's batches arrive in
    #: :meth:`process_batch2`; every other operator takes one (a union merges into one input).
    input_count: int = 1
    #: Operators that act on the wall clock (processing-time timers, async I/O) set this; the
    #: worker then calls :meth:`on_processing_time` between batches.
    processing_time: bool = False
    #: Side outputs: ``(tag id, record)`` pairs emitted since the runner last took them (a list
    #: on operators that have side outputs, which the runner empties after every call).
    side: list[tuple[str, Any]] | None = None
    #: Operators of batch streams set this: their output elements are ``pyarrow.RecordBatch``es,
    #: already batches of rows, so their edges send each as it comes (:mod:`epochal.api.batches`).
    emits_batches: bool = False

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        """Prepare for the first batch (create writers, call user ``open``).

        ``context.keyed_state`` and ``context.operator_state`` are already restored here."""

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        """Called on the barrier, just before the state is captured: put whatever must be part
        of checkpoint ``checkpoint_id`` into managed state (sinks pre-commit here)."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is complete: transactional sinks commit its epoch."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` was given up."""

    def process_batch(self, batch: list[Any]) -> list[Any]:
        """Return the output for ``batch``; must not mutate ``batch`` (it may be shared)."""
        return batch

    def process_batch2(self, batch: list[Any]) -> list[Any]:
        """Two-input operators: the output for a batch of the second input."""
        raise TypeError(f"operator '{self.name}' has one input")

    def end_input(self) -> list[Any]:
        """All input has arrived: return final output (if any) and make results visible."""
        return []

    def on_processing_time(self, now: float) -> list[Any]:
        """``processing_time`` operators: the wall clock reads ``now``; return what is due."""
        return []

    def next_processing_time(self) -> float | None:
        """``processing_time`` operators: when :meth:`on_processing_time` next has work (the
        worker sleeps no longer than that), or None."""
        return None

    def on_watermark(self, watermark: Any) -> list[Any]:
        """Event time reached ``watermark``: return what it completes (fired windows)."""
        return []

    def take_watermark(self) -> Any:
        """Watermark generators: the watermark to emit after the last batch, or None."""
        return None

    def close(self) -> None:
        """Release resources; called once, also after a failure."""

    def counters(self) -> dict[str, int]:
        """Operator-specific counters reported with the worker's metrics (summed per job)."""
        return {}


class MapOperator(Operator):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def process_batch(self, batch: list[Any]) -> list[Any]:
        return each(self.fn, batch)


class FilterOperator(Operator):
    def __init__(self, fn: Callable[[Any], bool]) -> None:
        self.fn = fn

    def process_batch(self, batch: list[Any]) -> list[Any]:
        return each(self.fn, batch, filter)


class FlatMapOperator(Operator):
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def process_batch(self, batch: list[Any]) -> list[Any]:
        out: list[Any] = []
        extend = out.extend
        fn = self.fn
        record = None
        try:
            for record in batch:
                produced = fn(record)
                if produced is not None:
                    extend(produced)
        except Exception as error:
            note_record(error, record)
            raise
        return out


class KeyedReduceOperator(Operator):
    """Rolling reduce per key: emits the new accumulated record for every input (Flink's ``reduce``).

    ``aggregate`` maps (accumulator or ``missing``, record) to the new accumulator; ``emit``
    turns (key, accumulator) into the output record.
    """

    MISSING = MISSING
    STATE = "aggregate"
    keyed = True
    #: Emit only each key's final value, at the end of a bounded input, instead of every update
    #: (``Environment.set_runtime_mode("batch")`` or ``stream.final_results()``).
    final_only = False
    #: the name clients query each key's value by (``KeyedStream.as_queryable_state``); None: none
    queryable_name: str | None = None

    def __init__(self, key_selector: Callable[[Any], Any],
                 aggregate: Callable[[Any, Any], Any],
                 emit: Callable[[Any, Any], Any]) -> None:
        self.key_selector = key_selector
        self.aggregate = aggregate
        self.emit = emit
        self.backend: Any = None
        #: The managed value state, accessed inline: key group -> key -> value (every owned group).
        self.groups: Any = None
        #: What the backend needs told of each batch's keys before they are written (None: nothing).
        self.log_batch: Callable[[list[Any], list[int]], None] | None = None

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        from epochal.state.descriptors import ValueStateDescriptor

        self.backend = context.keyed_state
        # declares the managed value state (queryable by the name as_queryable_state gave, if any)
        self.backend.get_state(ValueStateDescriptor(self.STATE, queryable=self.queryable_name))
        # every record of a batch writes its key: one log call per batch (incremental checkpoints)
        self.groups, self.log_batch = self.backend.batch_logged_table(self.STATE)
        # The batch loop, chosen once: reduce(fn) and count() have loops without a wrapper call.
        if type(self.aggregate) is ReduceAggregate and self.emit is emit_value:
            self._loop = self._reduce_batch
        elif type(self.aggregate) is CountAggregate and self.emit is emit_key_value:
            self._loop = self._count_batch
        else:
            self._loop = self._aggregate_batch

    def process_batch(self, batch: list[Any]) -> list[Any]:
        # The managed value state, accessed inline: key group (all owned ones exist) -> key -> value.
        # Keys and key groups are computed for the whole batch first (one C hash call per str key).
        keys, key_groups = keys_of(self.key_selector, batch, self.backend.max_parallelism, self.name)
        if self.log_batch is not None:
            self.log_batch(keys, key_groups)
        if self.final_only:
            self._update_batch(batch, keys, key_groups, self.groups)
            return []
        return self._loop(batch, keys, key_groups, self.groups)

    def _update_batch(self, batch: list[Any], keys: list[Any], key_groups: list[int],
                      groups: dict[int, dict[Any, Any]]) -> None:
        """Final results only: the state changes, nothing is emitted until the end of the input."""
        aggregate = self.aggregate
        missing = self.MISSING
        record = None
        try:
            for record, key, group in zip(batch, keys, key_groups, strict=True):
                values = groups[group]
                values[key] = aggregate(values.get(key, missing), record)
        except Exception as error:
            note_record(error, record)
            raise

    def end_input(self) -> list[Any]:
        """Final results only: each key's final value, key group by key group."""
        if not self.final_only:
            return []
        emit = self.emit
        return [emit(key, value) for values in self.groups.values() for key, value in values.items()]

    def _aggregate_batch(self, batch: list[Any], keys: list[Any], key_groups: list[int],
                         groups: dict[int, dict[Any, Any]]) -> list[Any]:
        """Any aggregate: ``aggregate(accumulator or MISSING, record)``, output ``emit(key, value)``."""
        aggregate = self.aggregate
        emit = self.emit
        missing = self.MISSING
        out: list[Any] = []
        append = out.append
        record = None
        try:
            for record, key, group in zip(batch, keys, key_groups, strict=True):
                values = groups[group]
                value = aggregate(values.get(key, missing), record)
                values[key] = value
                append(emit(key, value))
        except Exception as error:
            note_record(error, record)
            raise
        return out

    def _count_batch(self, batch: list[Any], keys: list[Any], key_groups: list[int],
                     groups: dict[int, dict[Any, Any]]) -> list[Any]:
        """``count()``: ``(key, running count)`` per record."""
        out: list[Any] = []
        append = out.append
        for key, group in zip(keys, key_groups, strict=True):
            values = groups[group]
            count = values[key] = values.get(key, 0) + 1
            append((key, count))
        return out

    def _reduce_batch(self, batch: list[Any], keys: list[Any], key_groups: list[int],
                      groups: dict[int, dict[Any, Any]]) -> list[Any]:
        """``reduce(fn)``: the rolling value of each record's key is the output."""
        fn = cast(ReduceAggregate, self.aggregate).fn
        out: list[Any] = []
        append = out.append
        record = None
        try:
            for record, key, group in zip(batch, keys, key_groups, strict=True):
                values = groups[group]
                previous = values.get(key, values)  # the dict itself stands for "no value yet"
                value = record if previous is values else fn(previous, record)
                values[key] = value
                append(value)
        except Exception as error:
            note_record(error, record)
            raise
        return out


class SinkOperator(Operator):
    """Hands batches to a :class:`SinkWriter`; emits nothing.

    With a transactional writer (one that has ``pre_commit``/``commit``) it runs two-phase
    commit: on the barrier of checkpoint *n* the writer pre-commits the epoch's output and the
    returned committable is kept in operator state; when *n* completes, every committable up to
    *n* is committed. After a restore, the committables found in the restored state belong to
    completed checkpoints and are committed again (commits are idempotent); what an earlier
    attempt wrote after that checkpoint is never committed. Without checkpointing the writer
    pre-commits and commits once, when its input ends.

    A plain writer is flushed at every barrier instead, so everything it got before a checkpoint
    is durable once the checkpoint completes: after a restart it may repeat records, never lose
    them (at-least-once).
    """

    PENDING = "pending-commits"
    #: union list: the parallelism of the sink that took the checkpoint (what a restore tells its writer)
    PARALLELISM = "sink-parallelism"

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.writer: SinkWriter | None = None
        self.pending: list[Any] = []
        self.transactional = False
        self.checkpointing = False

    def open(self, context: RuntimeContext, send_to_driver: Callable[[Any], None]) -> None:
        parallelism = context.get_list_state(self.PARALLELISM, "union")
        sink_context = SinkContext(operator_name=context.operator_name, subtask_index=context.subtask_index,
                                   parallelism=context.parallelism, send_to_driver=send_to_driver,
                                   attempt=context.attempt, checkpointing=context.checkpointing,
                                   job_name=context.job_name, job_id=context.job_id,
                                   operator_uid=context.operator_uid, restored=context.restored,
                                   restored_parallelism=max(parallelism, default=None),
                                   restored_checkpoint=context.restored_checkpoint)
        parallelism[:] = [context.parallelism] if context.subtask_index == 0 else []
        self.writer = self.sink.create_writer(sink_context)
        self.transactional = hasattr(self.writer, "pre_commit")
        self.checkpointing = context.checkpointing
        self.pending = context.get_list_state(self.PENDING)
        if self.transactional and (self.pending or context.restored):
            restored = [c for _, c in self.pending]
            restore = getattr(self.writer, "restore_committables", None)
            if restore is not None:
                restore(restored)
            elif restored:
                self.writer.commit(restored)  # type: ignore[attr-defined]
            self.pending.clear()

    def process_batch(self, batch: list[Any]) -> list[Any]:
        self.writer.write_batch(batch)  # type: ignore[union-attr]
        return []

    def end_input(self) -> list[Any]:
        self.writer.flush()  # type: ignore[union-attr]
        if self.transactional and not self.checkpointing:
            committable = self.writer.pre_commit(0)  # type: ignore[union-attr]
            self.writer.commit([] if committable is None else [committable])  # type: ignore[union-attr]
        return []

    def prepare_snapshot(self, checkpoint_id: int) -> None:
        if self.transactional:
            committable = self.writer.pre_commit(checkpoint_id)  # type: ignore[union-attr]
            if committable is not None:
                self.pending.append((checkpoint_id, committable))
        else:
            self.writer.flush()  # type: ignore[union-attr]  # at-least-once: durable before the snapshot

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if not self.transactional:
            return
        due = [c for cid, c in self.pending if cid <= checkpoint_id]
        if due:
            self.writer.commit(due)  # type: ignore[union-attr]
            self.pending[:] = [(cid, c) for cid, c in self.pending if cid > checkpoint_id]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
