"""User-facing function types and the context a running function sees.

Most operators take plain callables (``map(str.upper)``). :class:`ProcessFunction` is the
general one: it sees each record with a context (the current key on keyed streams, its subtask)
and may emit any number of records. Subclass it when a function needs set-up (``open``) or
tear-down (``close``), e.g. a connection to a lookup service.

They live in the runtime because they run on the workers (which never import the driver-side
``epochal.api``); ``epochal.api.functions`` and ``epochal`` export them to users.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from epochal.runtime.operators.timers import EVENT_TIME, PROCESSING_TIME, TimeDomain


@dataclass
class RuntimeContext:
    """What a function knows about where it runs; passed to :meth:`ProcessFunction.open`."""

    operator_name: str
    operator_uid: str
    subtask_index: int
    parallelism: int
    max_parallelism: int
    #: Key groups owned by this subtask (empty on non-keyed operators).
    key_groups: range = field(default_factory=lambda: range(0))
    #: Keyed state of this subtask (keyed operators only); scoped to the current key.
    keyed_state: Any = None
    #: Operator (non-keyed) state of this subtask.
    operator_state: Any = None
    #: Job attempt: 0 for the first run, +1 for each restart after a failure.
    attempt: int = 0
    #: Whether the job takes checkpoints (transactional sinks then commit per checkpoint).
    checkpointing: bool = False
    #: The job's name and id (the same across its restarts; see
    #: :class:`~epochal.connectors.base.SinkContext`): sinks name their transactions by them.
    job_name: str = ""
    job_id: str = ""
    #: Whether this attempt restored a checkpoint, and which (None when it started from scratch).
    restored: bool = False
    restored_checkpoint: int | None = None
    #: The processing-time clock (seconds since the epoch); a test harness may set its own.
    clock: Callable[[], float] = time.time

    def get_state(self, descriptor: Any) -> Any:
        """Keyed state for ``descriptor`` (Value/List/Reducing/Aggregating/MapStateDescriptor),
        scoped to the key of the record being processed. Only on keyed streams."""
        if self.keyed_state is None:
            raise RuntimeError(f"operator '{self.operator_name}' is not keyed: keyed state needs key_by() first")
        return self.keyed_state.get_state(descriptor)

    def get_list_state(self, name: str, mode: str = "split") -> list[Any]:
        """Operator list state: a list this subtask owns, redistributed on restore by ``mode``
        ('split': divided evenly; 'union': every subtask gets all entries). A checkpoint's barrier
        copies the list, not its elements: replace an element to change it (an element changed in
        place after the barrier may reach a snapshot that a thread writes later: RocksDB and
        PostgreSQL jobs, ``snapshot="thread"``)."""
        return self.operator_state.get_list_state(name, mode)


class OutputTag:
    """Names a side output (Flink's ``OutputTag``): a function emits to it with
    ``ctx.output(tag, value)`` and ``stream.side_output(tag)`` reads it. Tags are equal when
    their ids are, so a tag may be created again where it is read."""

    __slots__ = ("id",)

    def __init__(self, id: str, type_info: Any = None) -> None:
        """``type_info`` is accepted for PyFlink's ``OutputTag(name, Types...)`` and not used:
        records are Python objects."""
        if not isinstance(id, str) or not id:
            raise TypeError(f"OutputTag takes a non-empty str id, got {id!r}")
        self.id = id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.id == self.id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.id))

    def __repr__(self) -> str:
        return f"OutputTag({self.id!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return OutputTag, (self.id,)


def tag_id(tag: Any, method: str) -> str:
    """The id of ``tag``, or a TypeError saying ``method`` takes an OutputTag."""
    if not isinstance(tag, OutputTag):
        raise TypeError(f"{method} takes an OutputTag, e.g. OutputTag('late'), got {type(tag).__name__}")
    return tag.id


class TimerService:
    """Timers and clocks of a keyed function (``ctx.timer_service()``), PyFlink's names.

    Timers belong to the current key (the record's, or the firing timer's). Event-time timers
    fire once the watermark reaches their timestamp, processing-time timers once the wall clock
    (``time.time()``, seconds) does; ``on_timer(timestamp, ctx)`` is called with the key set.
    They are keyed state: in checkpoints, moved with their keys on a rescaled restore, and fired
    exactly once in the committed output. At the end of a bounded input every event-time timer
    fires (the watermark goes to infinity); processing-time timers still pending are dropped,
    as Flink does.
    """

    __slots__ = ("operator", "ctx")

    def __init__(self, operator: Any, ctx: ProcessContext) -> None:
        self.operator = operator
        self.ctx = ctx

    def register_event_time_timer(self, timestamp: Any) -> None:
        self.operator.timers.register(EVENT_TIME, timestamp, self.ctx.current_key, self.ctx.group)

    def register_processing_time_timer(self, timestamp: float) -> None:
        self.operator.timers.register(PROCESSING_TIME, timestamp, self.ctx.current_key, self.ctx.group)

    def delete_event_time_timer(self, timestamp: Any) -> None:
        self.operator.timers.delete(EVENT_TIME, timestamp, self.ctx.current_key, self.ctx.group)

    def delete_processing_time_timer(self, timestamp: float) -> None:
        self.operator.timers.delete(PROCESSING_TIME, timestamp, self.ctx.current_key, self.ctx.group)

    def current_watermark(self) -> Any:
        """The operator's event time: the last watermark it saw (``-inf`` before the first)."""
        return self.operator.watermark

    def current_processing_time(self) -> float:
        return self.ctx.runtime.clock()


class ProcessContext:
    """Per-record context handed to :meth:`ProcessFunction.process_element` and ``on_timer``.

    ``current_key`` is the key of the record being processed (or of the firing timer) on a keyed
    stream, else ``None``. ``output(tag, value)`` emits to a side output. On keyed streams
    ``timer_service()`` registers timers and reads the clocks; ``timestamp()`` is the record's
    event time (when ``process`` was given a ``timestamp`` function) or the firing timer's
    timestamp, and ``time_domain()`` the firing timer's domain (None outside ``on_timer``).
    """

    __slots__ = ("current_key", "runtime", "group", "side", "timers", "event_time", "domain")

    def __init__(self, runtime: RuntimeContext, side: list[tuple[str, Any]] | None = None,
                 operator: Any = None) -> None:
        self.runtime = runtime
        self.current_key: Any = None
        #: the key group of ``current_key``
        self.group = 0
        self.side = side if side is not None else []
        self.timers = TimerService(operator, self) if operator is not None else None
        self.event_time: Any = None
        self.domain: TimeDomain | None = None

    @property
    def subtask_index(self) -> int:
        return self.runtime.subtask_index

    def get_current_key(self) -> Any:
        return self.current_key

    def get_state(self, descriptor: Any) -> Any:
        """Keyed state for ``descriptor``, scoped to ``current_key`` (see RuntimeContext.get_state)."""
        return self.runtime.get_state(descriptor)

    def output(self, tag: OutputTag, value: Any) -> None:
        """Emit ``value`` to the side output ``tag`` (read with ``stream.side_output(tag)``)."""
        self.side.append((tag_id(tag, "output()"), value))

    def timer_service(self) -> TimerService:
        if self.timers is None:
            raise RuntimeError(f"operator '{self.runtime.operator_name}' is not keyed: timers need key_by() "
                               "first, e.g. stream.key_by(...).process(fn)")
        return self.timers

    def timestamp(self) -> Any:
        return self.event_time

    def time_domain(self) -> TimeDomain | None:
        return self.domain


class ProcessFunction:
    """A function that sees every record with its context and emits any number of records.

    Override :meth:`process_element` to return an iterable of output records (a generator,
    a list) or ``None`` for no output. On keyed streams, :meth:`on_timer` is called for each
    timer registered through ``ctx.timer_service()`` (Flink's ``KeyedProcessFunction``).
    """

    def open(self, context: RuntimeContext) -> None:
        """Called once per subtask before the first record."""

    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        """Handle one record; return (or yield) the records to emit."""
        raise NotImplementedError

    def on_timer(self, timestamp: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        """A timer of ``ctx.current_key`` fired (``ctx.time_domain()`` says which clock); return
        (or yield) the records to emit. Keyed state is scoped to the timer's key."""
        return None

    def close(self) -> None:
        """Called once when the subtask ends, also after a failure."""


#: Flink's name for a process function on a keyed stream: the same class here (timers and keyed
#: state are available whenever the stream is keyed).
KeyedProcessFunction = ProcessFunction


class _CallableProcessFunction(ProcessFunction):
    """Adapts ``fn(value, ctx) -> iterable | None`` to :class:`ProcessFunction`."""

    def __init__(self, fn: Callable[[Any, ProcessContext], Iterable[Any] | None]) -> None:
        self.fn = fn

    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        return self.fn(value, ctx)


def as_process_function(fn: ProcessFunction | Callable[..., Any]) -> ProcessFunction:
    """Accept either a ProcessFunction or a plain ``fn(value, ctx)`` callable."""
    if isinstance(fn, ProcessFunction):
        return fn
    if callable(fn):
        return _CallableProcessFunction(fn)
    raise TypeError(f"process() takes a ProcessFunction or a callable, got {type(fn).__name__}")
