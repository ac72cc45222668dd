"""The operator harness: drive ONE operator by hand and look at its output and state.

Owns :class:`OperatorHarness` (in the spirit of Flink's ``KeyedOneInputStreamOperatorTestHarness``),
:class:`OperatorSnapshot` and the in-memory restore behind it. A harness hosts the operator in a
real :class:`~epochal.dataflow.dataplane.tasks.Subtask` of a chosen parallelism and subtask index, with
real keyed state (the key groups that subtask owns) and operator state, and one input channel,
so records, watermarks, end of input and checkpoint barriers take the same code path as on a
worker; what the operator emits is caught on an in-memory output channel. Snapshots are the
synchronous part of a worker's snapshot (``Subtask.capture``), pickled as the upload does; a
new harness restores from one or several of them at any parallelism, each subtask reading the
key groups it owns and its share of the operator state, as a restore from a checkpoint does
(``state/snapshot.py`` ``RestoreSource``).

A testing aid: what it shows is one operator's logic; the guarantees of whole jobs are proven on
Spark by the chaos suite.
"""

from __future__ import annotations

import copy
import pickle
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from epochal import serialization
from epochal.api.functions import ProcessFunction, as_process_function
from epochal.config import StateBackendConfig
from epochal.dataflow.dataplane.chains import EdgeOutput
from epochal.dataflow.dataplane.channels import InputChannel, LocalTransport, OutputChannel
from epochal.dataflow.dataplane.tasks import Subtask
from epochal.errors import UserFunctionError
from epochal.plan.jobgraph import ChainedNode
from epochal.plan.keygroups import key_group_of, subtask_for_key_group
from epochal.plan.partitioners import ForwardPartitioner
from epochal.runtime.operators.base import Operator, keys_of
from epochal.runtime.operators.inband import END_OF_PARTITION, CheckpointBarrier, Watermark
from epochal.runtime.operators.process import ProcessOperator
from epochal.runtime.windows.time_windows import WatermarkGenerator
from epochal.state.operator_state import redistribute

if TYPE_CHECKING:
    from epochal.api.datastream import DataStream

_HUGE = 1 << 40


@dataclass(frozen=True)
class OperatorSnapshot:
    """The state one harness (one subtask) captured for checkpoint ``checkpoint_id``.

    ``state`` is what a worker uploads for the operator: ``{"keyed": {key group: {state name:
    {key: value}}} or None, "operator": {list name: (mode, items)}}``, already a detached copy.
    """

    uid: str
    checkpoint_id: int
    subtask_index: int
    parallelism: int
    max_parallelism: int
    state: dict[str, Any]


class _SnapshotRestore:
    """Reads :class:`OperatorSnapshot` objects the way ``RestoreSource`` reads checkpoint files."""

    def __init__(self, snapshots: list[OperatorSnapshot]) -> None:
        self.snapshots = sorted(snapshots, key=lambda s: s.subtask_index)
        self.checkpoint_id = max(s.checkpoint_id for s in snapshots)

    def keyed_groups(self, uid: str, key_groups: range) -> Iterator[tuple[int, dict[str, Any]]]:
        for snapshot in self.snapshots:
            if snapshot.uid == uid:
                for group, states in (snapshot.state.get("keyed") or {}).items():
                    if group in key_groups:
                        yield group, copy.deepcopy(states)

    def operator_lists(self, uid: str, index: int, parallelism: int) -> dict[str, list[Any]]:
        old = [copy.deepcopy(s.state.get("operator") or {}) for s in self.snapshots if s.uid == uid]
        return redistribute(old, index, parallelism)


class OperatorHarness:
    """Feeds records, watermarks and barriers to one operator; shows its output and state.

    Args:
        operator: an epochal :class:`~epochal.runtime.operators.base.Operator` (e.g. a
            ``KeyedReduceOperator`` or ``TumblingWindowOperator``), or a :class:`ProcessFunction`
            or ``fn(value, ctx)``, run as ``process`` would run it.
        key_selector: for a process function on a keyed stream (operators bring their own).
        parallelism, subtask_index: which subtask the harness is; keyed operators own the key
            groups of that subtask and refuse records of other key groups.
        max_parallelism: the number of key groups (as the job's ``max_parallelism``).
        restore_from: one :class:`OperatorSnapshot` or several (one per old subtask): the state to
            start from, redistributed for this subtask.
        checkpointing: what the operator is told (transactional sinks then commit on
            :meth:`notify_complete` instead of at end of input).
        watermark_interval: for a ``WatermarkGenerator``: seconds between its watermarks (0: after
            every batch; ``None`` keeps the operator's).
        state_backend: where keyed state lives (default: heap); e.g.
            ``StateBackendConfig(kind="rocksdb", local_dir=...)`` runs the operator on RocksDB.
            Snapshots are always a full copy of the state.

    User exceptions are raised as they are (not wrapped), so tests can ``pytest.raises`` them.
    """

    __test__ = False

    def __init__(self, operator: Operator | ProcessFunction | Callable[..., Any], *,
                 key_selector: Callable[[Any], Any] | None = None, parallelism: int = 1, subtask_index: int = 0,
                 max_parallelism: int = 128, name: str | None = None, uid: str | None = None,
                 restore_from: OperatorSnapshot | Iterable[OperatorSnapshot] | None = None,
                 checkpointing: bool = True, attempt: int = 0, watermark_interval: float | None = 0.0,
                 state_backend: StateBackendConfig | None = None) -> None:
        if not 0 <= subtask_index < parallelism <= max_parallelism:
            raise ValueError(f"need 0 <= subtask_index < parallelism <= max_parallelism, got subtask_index "
                             f"{subtask_index}, parallelism {parallelism}, max_parallelism {max_parallelism}")
        if isinstance(operator, Operator):
            if key_selector is not None:
                raise TypeError("key_selector is for process functions; an Operator brings its own")
        else:
            operator = ProcessOperator(as_process_function(operator), key_selector)
        snapshots = [restore_from] if isinstance(restore_from, OperatorSnapshot) else list(restore_from or [])
        for snapshot in snapshots:
            if snapshot.max_parallelism != max_parallelism:
                raise ValueError(f"snapshot of subtask {snapshot.subtask_index} was taken with max_parallelism "
                                 f"{snapshot.max_parallelism}, this harness has {max_parallelism}: key groups "
                                 "cannot be remapped")
        self.name = name or operator.name or type(operator).__name__
        self.uid = uid or (snapshots[0].uid if snapshots else None) or operator.uid or self.name
        if watermark_interval is not None and isinstance(operator, WatermarkGenerator):
            operator.interval = watermark_interval
        try:
            self._template: Operator | None = copy.deepcopy(operator)  # for restored_from()
        except Exception:
            self._template = None
        self.operator = operator
        self.parallelism = parallelism
        self.subtask_index = subtask_index
        self.max_parallelism = max_parallelism
        self.checkpointing = checkpointing
        self.attempt = attempt
        self.watermark_interval = watermark_interval
        #: Everything emitted, in order: records and in-band events (Watermark, CheckpointBarrier, ...).
        self.events: list[Any] = []
        #: What a collect() sink under the harness sent to the driver: (collect id, payload).
        self.sent_to_driver: list[tuple[str | None, Any]] = []
        self._records: list[Any] = []
        self._taken = 0
        #: Side output records by tag id, in order.
        self.side_records: dict[str, list[Any]] = {}
        #: The processing-time clock the operator sees (``set_processing_time`` moves it).
        self.processing_time = 0.0
        self.subtask = Subtask(0, subtask_index, parallelism, self.name)
        self.subtask.clock = lambda: self.processing_time
        restore: Any = _SnapshotRestore(snapshots) if snapshots else None  # duck-types RestoreSource
        node = ChainedNode(0, "harness", self.name, self.uid, operator)
        self.state_backend = state_backend
        self._call(lambda: self.subtask.open({0: node}, [0], max_parallelism, self._to_driver, attempt=attempt,
                                             checkpointing=checkpointing, restore=restore,
                                             state_backend=state_backend))
        self.runner = self.subtask.runners[0]
        channel = OutputChannel(0, _HUGE, LocalTransport(self._deliver), (self.name, "harness"))
        output = EdgeOutput(ForwardPartitioner(), [channel], _HUGE, (self.name, "harness"))
        self.runner.outputs.append(output)
        self.subtask.outputs.append(output)
        self.subtask.output_channels.append(channel)
        self.runner.side_sink = self._side
        self.input = InputChannel(0, self.subtask, lambda credit, batch_size: None)
        self.subtask.inputs.append(self.input)
        #: A two-input operator's second input.
        self.input2: InputChannel | None = None
        if operator.input_count == 2:
            self.input2 = InputChannel(1, self.subtask, lambda credit, batch_size: None)
            self.input2.input_index = 1
            self.subtask.inputs.append(self.input2)

    # ------------------------------------------------------------------ building
    @classmethod
    def for_stream(cls, stream: DataStream, **options: Any) -> OperatorHarness:
        """A harness for (a copy of) the operator behind a DataStream call, e.g.
        ``OperatorHarness.for_stream(env.from_collection([]).key_by(f).sum(g))``; ``options`` as
        the constructor's (``max_parallelism`` defaults to the environment's)."""
        node = stream.node
        if node.operator is None:
            raise TypeError(f"'{node.name}' is a {'partitioning call' if node.is_virtual else node.operation}, not an "
                            "operator: pass the stream an operator call (map, sum, process, window...) returned")
        operator = copy.deepcopy(node.operator)
        operator.name = node.name
        options.setdefault("max_parallelism", stream.env.max_parallelism)
        options.setdefault("uid", node.uid or (f"{node.operation}:{node.name}" if node.user_named else node.operation))
        return cls(operator, **options)

    def restored_from(self, *snapshots: OperatorSnapshot, parallelism: int | None = None, subtask_index: int = 0,
                      operator: Operator | None = None, **options: Any) -> OperatorHarness:
        """A new harness for a fresh copy of this operator (as it was before it opened), restored
        from ``snapshots`` as subtask ``subtask_index`` of ``parallelism`` (default: this one's)."""
        if operator is None:
            if self._template is None:
                raise TypeError(f"operator '{self.name}' cannot be copied: pass operator= a fresh one")
            operator = copy.deepcopy(self._template)
        options.setdefault("checkpointing", self.checkpointing)
        options.setdefault("watermark_interval", self.watermark_interval)
        options.setdefault("state_backend", self.state_backend)
        return OperatorHarness(operator, parallelism=parallelism or self.parallelism, subtask_index=subtask_index,
                               max_parallelism=self.max_parallelism, name=self.name, uid=self.uid,
                               restore_from=list(snapshots), **options)

    # ------------------------------------------------------------------ feeding
    def process(self, *records: Any) -> list[Any]:
        """Process ``records`` as one batch; returns what the operator emitted for them."""
        return self.process_batch(list(records))

    def process_batch(self, batch: list[Any], input_index: int = 0) -> list[Any]:
        """Process one batch (as it would arrive on a channel of input ``input_index``: 1 is a
        two-input operator's second); returns the records emitted."""
        self._check_open()
        self._input(input_index)
        self._check_key_groups(batch, input_index)
        return self._call(lambda: self.subtask.on_batch(list(batch), input_index))

    def process2(self, *records: Any) -> list[Any]:
        """Process ``records`` as one batch of a two-input operator's second input."""
        return self.process_batch(list(records), 1)

    def watermark(self, timestamp: Any, input_index: int | None = None) -> list[Any]:
        """Event time reached ``timestamp`` on the input (on both inputs of a two-input operator,
        unless ``input_index`` names one: the operator's event time is the minimum); returns what
        it fired. A watermark not above the current one changes nothing, as on workers."""
        self._check_open()
        channels = self.subtask.inputs if input_index is None else [self._input(input_index)]
        return self._call(lambda: self._events(channels, Watermark(timestamp)))

    def set_processing_time(self, now: float) -> list[Any]:
        """The wall clock the operator sees reads ``now`` (seconds); fires the processing-time
        work due (timers, ...) and returns what it emitted."""
        self.processing_time = now
        return self._call(lambda: self.subtask.on_processing_time(now))

    def end_input(self) -> list[Any]:
        """The input ends (every input): the operator emits its final output (open windows
        fire, sinks without checkpointing commit); the harness then refuses input."""
        self._check_open()
        return self._call(lambda: self._events(self.subtask.inputs, END_OF_PARTITION))

    def side_output(self, tag: Any) -> list[Any]:
        """Every record emitted so far to the side output ``tag`` (an OutputTag or its id)."""
        return list(self.side_records.get(getattr(tag, "id", tag), []))

    def snapshot(self, checkpoint_id: int) -> OperatorSnapshot:
        """Barrier ``checkpoint_id`` reached the operator: it is forwarded (see :attr:`events`),
        then the state is captured (sinks pre-commit), as a worker does when aligned."""
        self._call(lambda: self.subtask.broadcast_event(CheckpointBarrier(checkpoint_id, time.time())))
        captured: dict[str, dict[str, Any]] = {}

        def capture() -> None:  # the whole state as a copy, whichever backend (no files)
            self.subtask.prepare_capture(checkpoint_id)
            backend = self.runner.keyed_state
            captured[self.uid] = {"keyed": backend.capture() if backend is not None else None,
                                  "operator": self.runner.operator_state.capture()}

        self._call(capture)
        state = pickle.loads(serialization.dumps(captured[self.uid]))  # detached, and picklable as uploads need
        return OperatorSnapshot(self.uid, checkpoint_id, self.subtask_index, self.parallelism,
                                self.max_parallelism, state)

    def notify_complete(self, checkpoint_id: int) -> list[Any]:
        """Checkpoint ``checkpoint_id`` completed (transactional sinks commit)."""
        return self._call(lambda: self.subtask.notify_complete(checkpoint_id))

    def notify_aborted(self, checkpoint_id: int) -> list[Any]:
        """Checkpoint ``checkpoint_id`` was given up."""
        return self._call(lambda: self.subtask.notify_aborted(checkpoint_id))

    def close(self) -> None:
        """Release the operator (user ``close`` hooks, sink writers)."""
        self.subtask.close()

    def __enter__(self) -> OperatorHarness:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ looking
    @property
    def output(self) -> list[Any]:
        """Every record emitted so far (events left out)."""
        return list(self._records)

    def take_output(self) -> list[Any]:
        """The records emitted since the last ``take_output``."""
        taken = self._records[self._taken:]
        self._taken = len(self._records)
        return taken

    @property
    def watermarks(self) -> list[Any]:
        """The watermarks the operator passed downstream, in order."""
        return [e.timestamp for e in self.events if type(e) is Watermark]

    @property
    def key_groups(self) -> range:
        """The key groups this subtask owns (empty for a non-keyed operator)."""
        backend = self.runner.keyed_state
        return backend.key_groups if backend is not None else range(0)

    def owns(self, key: Any) -> bool:
        """Whether records with ``key`` belong to this subtask."""
        return key_group_of(key, self.max_parallelism) in self.key_groups

    @staticmethod
    def owner_of(key: Any, parallelism: int, max_parallelism: int = 128) -> int:
        """The subtask index (of ``parallelism``) whose key groups hold ``key``."""
        return subtask_for_key_group(key_group_of(key, max_parallelism), parallelism, max_parallelism)

    def keyed_state(self, name: str | None = None) -> dict[Any, Any]:
        """Keyed state as ``{state name: {key: value}}`` (a copy), or ``{key: value}`` of state
        ``name``. Built-in operators name theirs: ``"aggregate"`` (reduce, sum, count...),
        ``"window-contents"`` (windows: ``{key: {window start: accumulator}}``)."""
        backend = self.runner.keyed_state
        merged: dict[str, dict[Any, Any]] = {}
        if backend is not None:
            for states in backend.capture().values():
                for state_name, entries in states.items():
                    merged.setdefault(state_name, {}).update(entries)
        return merged if name is None else merged.get(name, {})

    def state_of(self, key: Any) -> dict[str, Any]:
        """Every keyed state value of ``key``: ``{state name: value}`` (names without a value left out)."""
        return {name: entries[key] for name, entries in self.keyed_state().items() if key in entries}

    def operator_state(self, name: str | None = None) -> Any:
        """Operator list state as ``{list name: items}`` (a copy), or the items of list ``name``."""
        lists = {n: list(items) for n, items in self.runner.operator_state.lists.items()}
        return lists if name is None else lists.get(name, [])

    def counters(self) -> dict[str, int]:
        """The operator's counters (e.g. ``late_records_dropped`` of windows)."""
        return self.operator.counters()

    # ------------------------------------------------------------------ internals
    def _deliver(self, channel: int, is_batch: bool, item: Any) -> None:
        if is_batch:
            self.events.extend(item)
            self._records.extend(item)
        else:
            self.events.append(item)

    def _events(self, channels: list[InputChannel], event: Any) -> None:
        for channel in list(channels):
            self.subtask.on_event(channel, event)

    def _side(self, tag: str, records: list[Any]) -> None:
        self.side_records.setdefault(tag, []).extend(records)

    def _input(self, input_index: int) -> InputChannel:
        if input_index == 0:
            return self.input
        if input_index == 1 and self.input2 is not None:
            return self.input2
        raise ValueError(f"operator '{self.name}' has no input {input_index}")

    def _to_driver(self, collect_id: str | None, payload: Any) -> None:
        self.sent_to_driver.append((collect_id, payload))

    def _call(self, action: Callable[[], Any]) -> list[Any]:
        """Run ``action`` on the subtask, flush its output, return the records it emitted; a user
        function's exception is raised as itself."""
        before = len(self._records)
        try:
            action()
            if not self.subtask.finished:
                self.subtask.flush()
        except UserFunctionError as error:
            raise error.error from None
        return self._records[before:]

    def _check_open(self) -> None:
        if self.subtask.finished:
            raise RuntimeError(f"the input of '{self.name}' ended (end_input was called): start a new harness")

    def _check_key_groups(self, batch: list[Any], input_index: int = 0) -> None:
        """A worker only ever gets records of its own key groups; so does the harness."""
        backend = self.runner.keyed_state
        selector = getattr(self.operator, "key_selector2" if input_index else "key_selector", None)
        if backend is None or selector is None or len(backend.key_groups) == self.max_parallelism:
            return
        try:
            keys, groups = keys_of(selector, batch, self.max_parallelism, self.name)
        except UserFunctionError as error:
            raise error.error from None
        owned = backend.key_groups
        for record, key, group in zip(batch, keys, groups, strict=True):
            if group not in owned:
                owner = subtask_for_key_group(group, self.parallelism, self.max_parallelism)
                raise ValueError(
                    f"record {record!r} has key {key!r} in key group {group}, which subtask {self.subtask_index} of "
                    f"{self.parallelism} does not own (it owns key groups {owned.start}..{owned.stop - 1}); on a "
                    f"worker it would go to subtask {owner}")

