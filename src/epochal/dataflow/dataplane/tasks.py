"""Subtasks: one parallel instance of a vertex (a chain of operators) with its channels.

A batch enters a subtask at the head of its chain (:mod:`epochal.dataflow.dataplane.chains`), on the head's
first or, for a two-input head, second input, as its channel's edge says. Source subtasks pull
from their splits instead. Operators that act on the wall clock get ``on_processing_time``
from the worker between batches.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from epochal.config import StateBackendConfig
from epochal.connectors.source_reader import SourceReader
from epochal.dataflow.dataplane.batch_sizing import BatchSizer, output_capacity
from epochal.dataflow.dataplane.chains import ChainRunner, EdgeOutput, edge_names
from epochal.dataflow.dataplane.channels import InputChannel, OutputChannel
from epochal.dataflow.dataplane.subtask_barriers import SubtaskBarriers
from epochal.errors import UserFunctionError
from epochal.plan.jobgraph import ChainedNode, JobGraph
from epochal.plan.keygroups import key_group_range
from epochal.runtime.operators.functions import RuntimeContext
from epochal.runtime.operators.inband import (
    END_OF_PARTITION,
    NO_WATERMARK,
    CheckpointBarrier,
    EndOfPartition,
    Watermark,
)
from epochal.runtime.operators.iteration import LOG_STATE, IterationHead
from epochal.state.backends import create_backend
from epochal.state.snapshot import RestoreSource


class LoopRole:
    """Where a subtask of a loop's vertex sits in the loop (its protocol state is the worker
    machine's, :mod:`epochal.dataflow.checkpointing.loop_heads`).

    Attributes:
        loop_id: the loop.
        head: the :class:`IterationHead` operator if this subtask is the loop's head.
        loop_inputs / external_inputs: ids of input channels inside the loop (not back-edges) and
            from outside it; a probe is forwarded once every loop input delivered it and every
            external input ended.
        loop_outputs: the edge outputs that stay inside the loop (probes travel only there).
    """

    def __init__(self, loop_id: int, head: IterationHead | None) -> None:
        self.loop_id = loop_id
        self.head = head
        self.loop_inputs: set[int] = set()
        self.external_inputs: set[int] = set()
        self.loop_outputs: list[EdgeOutput] = []


class Subtask:
    """One parallel instance of a vertex, hosted by a worker."""

    def __init__(self, vertex_id: int, index: int, parallelism: int, name: str) -> None:
        self.vertex_id = vertex_id
        self.index = index
        self.parallelism = parallelism
        self.name = name
        self.runners: list[ChainRunner] = []
        self.head: ChainRunner | None = None
        self.inputs: list[InputChannel] = []
        self.outputs: list[EdgeOutput] = []
        self.output_channels: list[OutputChannel] = []
        self.reader: SourceReader | None = None
        #: Records this (source) subtask read in this attempt: counted once, where they enter the job.
        self.records_read = 0
        self.ended_inputs = 0
        self.finished = False
        self.barriers: SubtaskBarriers | None = None
        #: Highest checkpoint this subtask has snapshotted.
        self.last_snapshot = 0
        #: per operator uid, what the keyed state's snapshot in progress writes (None: all of it)
        self.plans: dict[str, Any] = {}
        #: Event time: the minimum watermark over the live input channels.
        self.watermark: Any = NO_WATERMARK
        #: Loops: the loop this subtask's vertex lies in, and the head's loop bookkeeping.
        self.loop: LoopRole | None = None
        #: The runners whose operators act on the wall clock (``Operator.processing_time``).
        self.timed: list[ChainRunner] = []
        #: The processing-time clock the operators' contexts read (a test harness sets its own).
        self.clock: Callable[[], float] = time.time
        #: Whether this subtask was opened from a restored checkpoint.
        self.restored = False
        #: Source subtasks: the last watermark their split reader reported.
        self.source_watermark: Any = NO_WATERMARK
        #: Sizes this subtask's batches by its measured cost per record (``EngineConfig.batch_time``);
        #: None: by count only.
        self.sizer: BatchSizer | None = None

    @property
    def backlogged(self) -> bool:
        """True while some output channel holds batches waiting for credit."""
        for channel in self.output_channels:
            if channel.pending:
                return True
        return False

    def open(self, nodes: dict[int, ChainedNode], node_ids: list[int], max_parallelism: int,
             send_to_driver: Callable[[str | None, Any], None], attempt: int = 0,
             checkpointing: bool = False, restore: RestoreSource | None = None,
             state_backend: StateBackendConfig | None = None, job: tuple[str, str] = ("", "")) -> None:
        """Restore each operator's state (if restoring), then open the operators in chain order
        (user ``open`` hooks run here and see their restored state). Keyed operators get the
        backend ``state_backend`` names (default: heap, full snapshots); ``job`` is the job's
        ``(name, id)``, which sinks use to name their transactions."""
        backend = state_backend or StateBackendConfig()
        self.restored = restore is not None
        runners = {}
        key_groups = key_group_range(self.index, self.parallelism, max_parallelism)
        for node_id in node_ids:
            node = nodes[node_id]
            runner = ChainRunner(node.name, node.uid, node.operator)
            if node.operator.keyed:
                runner.keyed_state = create_backend(backend, max_parallelism, key_groups, f"{node.uid}-{self.index}",
                                                    uid=node.uid, job_name=job[0], attempt=attempt)
                open_state = getattr(runner.keyed_state, "open_state", None)
                if open_state is not None:  # an external backend: it restores (or starts empty) itself
                    open_state(restore)
            if restore is not None:
                self._restore(runner, restore, key_groups)
            context = RuntimeContext(
                operator_name=node.name, operator_uid=node.uid, subtask_index=self.index,
                parallelism=self.parallelism, max_parallelism=max_parallelism,
                key_groups=key_groups if node.operator.keyed else range(0),
                keyed_state=runner.keyed_state, operator_state=runner.operator_state,
                attempt=attempt, checkpointing=checkpointing, clock=self.clock, job_name=job[0], job_id=job[1],
                restored=restore is not None,
                restored_checkpoint=restore.checkpoint_id if restore is not None else None)
            try:
                node.operator.open(context, functools.partial(send_to_driver, node.collect_id))
            except Exception as error:
                raise UserFunctionError(node.name, error) from error
            runners[node_id] = runner
            self.runners.append(runner)
        for node_id in node_ids:
            node, runner = nodes[node_id], runners[node_id]
            for child in node.children:
                tag = node.child_tags.get(child)
                if tag is None:
                    runner.children.append(runners[child])
                else:
                    runner.side_children.setdefault(tag, []).append(runners[child])
        self.head = runners[node_ids[0]]
        self.timed = [runner for runner in self.runners if runner.operator.processing_time]

    def _restore(self, runner: ChainRunner, restore: RestoreSource, key_groups: range) -> None:
        backend = runner.keyed_state
        if backend is not None and not hasattr(backend, "open_state"):
            # A RocksDB backend takes what RocksDB subtasks wrote as SST files, never unpickled:
            # a predecessor's checkpoint that holds all of its groups becomes its database as it
            # is (restored at the same parallelism, or fewer subtasks before); otherwise each
            # predecessor's share is copied as stored into SST files it ingests. Everything else
            # arrives per key group (as bytes to write: see epochal.state.canonical).
            ingest = getattr(backend, "ingest_key_groups", None)
            adopt = getattr(backend, "adopt_checkpoint", None)
            checkpoints = getattr(restore, "rocksdb_checkpoints", None)
            if ingest is None or adopt is None or checkpoints is None:
                for group, states in restore.keyed_groups(runner.uid, key_groups):
                    backend.restore_group(group, states)
            else:
                for directory, wanted in checkpoints(runner.uid, key_groups):
                    if wanted == key_groups:  # (then it is the only one: ranges are disjoint)
                        adopt(directory)
                    else:
                        ingest(directory, wanted)
                # the rest as stored bytes: a canonical savepoint's are written as they are
                for group, stored in restore.keyed_groups(runner.uid, key_groups, skip_rocksdb=True, stored=True):
                    backend.restore_stored_group(group, stored)
        if isinstance(runner.operator, IterationHead):
            runner.operator.restore_log(restore, key_groups, self.index, self.parallelism)
        lists = restore.operator_lists(runner.uid, self.index, self.parallelism)
        lists.pop(LOG_STATE, None)
        for name, items in lists.items():
            mode = "union" if name == SourceReader.POSITIONS else "split"
            runner.operator_state.get_list_state(name, mode).extend(items)

    def connect_outputs(self, job: JobGraph, outputs_of: dict[tuple[int, int], list[int]],
                        out_channels: dict[int, OutputChannel], batch_size: int) -> list[tuple[int, EdgeOutput]]:
        """Give every operator of the (opened) chain an :class:`EdgeOutput` per job edge leaving it,
        over the channels ``outputs_of[(edge, subtask index)]``; returns ``(edge id, output)`` pairs."""
        created = []
        for node_id, runner in zip(job.vertices[self.vertex_id].nodes, self.runners, strict=True):
            for edge_id in job.nodes[node_id].out_edges:
                channels = [out_channels[c] for c in outputs_of[(edge_id, self.index)]]
                edge = job.edges[edge_id]
                # a record batch is a batch already: a batch stream's edges send each as it comes
                size = 1 if job.nodes[node_id].operator.emits_batches else batch_size
                output = EdgeOutput(edge.partitioner, channels, size, edge_names(job, edge_id))
                if edge.side_tag is None:
                    runner.outputs.append(output)
                else:
                    runner.side_outputs.setdefault(edge.side_tag, []).append(output)
                self.outputs.append(output)
                self.output_channels.extend(channels)
                created.append((edge_id, output))
        return created

    def attach_source(self, reader: SourceReader) -> None:
        """Make this a source subtask; restored positions (if any) are applied as splits open."""
        self.reader = reader
        restored = self.runners[0].operator_state.lists.get(SourceReader.POSITIONS)
        if restored:
            reader.restore(restored)

    def capture(self, checkpoint_id: int, savepoint: str | None = None) -> dict[str, dict[str, Any]]:
        """The synchronous part of a snapshot of every operator in the chain: a copy of its state
        (``savepoint``: the savepoint format, ``canonical`` or ``native``)."""
        self.prepare_capture(checkpoint_id, savepoint)
        return self.capture_state()

    def prepare_capture(self, checkpoint_id: int, savepoint: str | None = None) -> None:
        """What must happen on the processing thread at the barrier before the state is read:
        the source positions into operator state, the operators' ``prepare_snapshot``. The keyed
        state backends plan their snapshot (an incremental part, RocksDB's files); a savepoint's
        (``savepoint``: its format) is whole: a copy of every key group (``canonical``) or the
        backend's own files, all of them (``native``), and no backend builds on it."""
        if self.reader is not None:
            positions = self.runners[0].operator_state.get_list_state(SourceReader.POSITIONS, "union")
            positions[:] = self.reader.snapshot(checkpoint_id)
        for runner in self.runners:
            try:
                runner.operator.prepare_snapshot(checkpoint_id)
            except Exception as error:
                raise UserFunctionError(runner.name, error) from error
        self.plans = {}
        for runner in self.runners:
            backend = runner.keyed_state
            if backend is not None:
                self.plans[runner.uid] = backend.begin_snapshot(checkpoint_id) if savepoint is None \
                    else backend.begin_savepoint(checkpoint_id, savepoint == "native")
        self.last_snapshot = max(self.last_snapshot, checkpoint_id)

    def capture_state(self) -> dict[str, dict[str, Any]]:
        """Every operator's state as it is now, by uid: ``{"keyed": ..., "operator": ...}`` (a
        copy; in a forked snapshot's child the live state no longer changes), keyed state as the
        plan of :meth:`prepare_capture` says (all of it, or an incremental checkpoint's part)."""
        return {runner.uid: {"keyed": runner.keyed_state.capture_snapshot(self.plans.get(runner.uid))
                             if runner.keyed_state is not None else None,
                             "operator": runner.operator_state.capture(),
                             "states": dict(runner.keyed_state.state_types) if runner.keyed_state is not None else {},
                             "entries": runner.keyed_state.state_entries() if runner.keyed_state is not None else {}}
                for runner in self.runners}

    def snapshot_written(self, checkpoint_id: int, handles: dict[str, Any]) -> None:
        """This subtask's files of checkpoint ``checkpoint_id`` are written (``handles`` by uid);
        called on the uploader thread before the acknowledgement is sent."""
        for runner in self.runners:
            keyed = handles.get(runner.uid, {}).get("keyed")
            if runner.keyed_state is not None and keyed is not None:
                runner.keyed_state.snapshot_written(checkpoint_id, keyed)

    def notify_complete(self, checkpoint_id: int, savepoint: bool = False) -> None:
        """Checkpoint ``checkpoint_id`` completed: sources and operators are told (sinks commit);
        the keyed state backends build on it, unless it is a ``savepoint``."""
        if self.reader is not None:
            try:
                self.reader.notify_checkpoint_complete(checkpoint_id)
            except Exception as error:
                raise UserFunctionError(self.runners[0].name, error) from error
        for runner in self.runners:
            if runner.keyed_state is not None and not savepoint:
                runner.keyed_state.checkpoint_completed(checkpoint_id)
            try:
                runner.operator.notify_checkpoint_complete(checkpoint_id)
            except Exception as error:
                raise UserFunctionError(runner.name, error) from error

    def notify_aborted(self, checkpoint_id: int) -> None:
        if self.barriers is not None:
            self.barriers.abort(checkpoint_id, "aborted by the coordinator")
        for runner in self.runners:
            if runner.keyed_state is not None:
                runner.keyed_state.checkpoint_aborted(checkpoint_id)
            runner.operator.notify_checkpoint_aborted(checkpoint_id)

    def observe(self, records: int, seconds: float) -> int:
        """A batch of ``records`` took this subtask ``seconds``: the batch size it wants next on
        its inputs, or 0 when it sizes by count only (:mod:`epochal.dataflow.dataplane.batch_sizing`)."""
        sizer = self.sizer
        if sizer is None:
            return 0
        return min(sizer.observe(records, seconds), output_capacity(self.outputs, sizer.limit))

    def wanted_batch_size(self) -> int:
        """The batch size this subtask wants now on its inputs (0: by count only)."""
        sizer = self.sizer
        return 0 if sizer is None else min(sizer.size, output_capacity(self.outputs, sizer.limit))

    def read_size(self, limit: int) -> int:
        """Source subtasks: how many records to read next (at most ``limit``)."""
        sizer = self.sizer
        return limit if sizer is None else min(limit, sizer.size, output_capacity(self.outputs, limit))

    def on_batch(self, batch: list[Any], input_index: int = 0) -> None:
        if input_index:
            self.head.push2(batch)  # type: ignore[union-attr]
        else:
            self.head.push(batch)  # type: ignore[union-attr]

    def on_processing_time(self, now: float) -> None:
        """Let the operators that act on the wall clock do what is due at ``now``."""
        if not self.finished:
            for runner in self.timed:
                runner.on_processing_time(now)

    def next_processing_time(self) -> float | None:
        """The earliest time an operator of this subtask has wall-clock work, or None."""
        if self.finished:
            return None
        times = [t for t in (r.operator.next_processing_time() for r in self.timed) if t is not None]
        return min(times) if times else None

    def on_event(self, channel: InputChannel, event: Any) -> None:
        if isinstance(event, Watermark):
            channel.watermark = event.timestamp
            self._advance_watermark()
        elif isinstance(event, CheckpointBarrier):
            if self.barriers is not None:
                self.barriers.on_barrier(channel, event.checkpoint_id, event.savepoint)
        elif isinstance(event, EndOfPartition):
            channel.ended = True
            self.ended_inputs += 1
            if self.barriers is not None:
                self.barriers.on_input_ended(channel)
            if self.ended_inputs == len(self.inputs) and not self.finished:
                self.finish()
            else:
                self._advance_watermark()  # an ended input no longer holds event time back

    def _advance_watermark(self) -> None:
        """Event time is the minimum watermark of the live inputs (back-edges excluded)."""
        live = [c.watermark for c in self.inputs if not c.ended and not c.back_edge]
        if live:
            watermark = min(live)
            if watermark > self.watermark:
                self.watermark = watermark
                self.head.on_watermark(watermark)  # type: ignore[union-attr]

    def broadcast_event(self, event: Any) -> None:
        """Send an in-band event (a barrier) on every output, after the data before it."""
        for output in self.outputs:
            output.send_event(event)

    def poll_source(self, max_records: int) -> int:
        """Read and process one batch from the source; returns the number of records."""
        try:
            records = self.reader.read(max_records)  # type: ignore[union-attr]
        except Exception as error:  # a malformed file, an unreachable store: name the source
            raise UserFunctionError(self.head.name, error) from error  # type: ignore[union-attr]
        if records is None:
            self.finish()
            return 0
        if records:
            self.records_read += len(records)
            self.head.push(records)  # type: ignore[union-attr]
        reader = self.reader
        if reader.split_reader is not None:  # type: ignore[union-attr]
            self._poll_split_reader(reader)  # type: ignore[arg-type]
        return len(records)

    def _poll_split_reader(self, reader: SourceReader) -> None:
        """A split reader's side output records, and its watermark when it advanced."""
        side = reader.take_side_output()
        if side:
            self.head.push_side(side)  # type: ignore[union-attr]
        watermark = reader.watermark()
        if watermark is not None and watermark > self.source_watermark:
            self.source_watermark = watermark
            self.head.on_watermark(watermark)  # type: ignore[union-attr]

    def flush(self) -> None:
        for output in self.outputs:
            output.flush()

    def finish(self) -> None:
        """All input processed: let operators emit final output, then end every output channel."""
        self.head.end_input()  # type: ignore[union-attr]
        for output in self.outputs:
            output.send_event(END_OF_PARTITION)
        if self.reader is not None:
            self.reader.close()
        self.finished = True

    def close(self) -> None:
        """Release operator resources; errors here are secondary and ignored."""
        for runner in self.runners:
            try:
                runner.operator.close()
            except Exception:
                pass
            dispose = getattr(runner.keyed_state, "dispose", None)  # an out-of-core backend's files
            if dispose is not None:
                try:
                    dispose()
                except Exception:
                    pass
        if self.reader is not None:
            try:
                self.reader.close()
            except Exception:
                pass
