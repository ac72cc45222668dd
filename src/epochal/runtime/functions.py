"""User-facing function types and the context a running function sees.

Most operators take plain callables (``map(str.upper)``). :class:`ProcessFunction` is the
general one: it sees each record with a context (the current key on keyed streams, its subtask)
and may emit any number of records. Subclass it when a function needs set-up (``open``) or
tear-down (``close``), e.g. a connection to a lookup service.

They live in the runtime because they run on the workers (which never import the driver-side
``epochal.api``); ``epochal.api.functions`` and ``epochal`` export them to users.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


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

    def get_state(self, descriptor: Any) -> Any:
        """Keyed state for ``descriptor`` (Value/List/Reducing/Aggregating/MapStateDescriptor),
        scoped to the key of the record being processed. Only on keyed streams."""
        if self.keyed_state is None:
            raise RuntimeError(f"operator '{self.operator_name}' is not keyed: keyed state needs key_by() first")
        return self.keyed_state.get_state(descriptor)

    def get_list_state(self, name: str, mode: str = "split") -> list[Any]:
        """Operator list state: a list this subtask owns, redistributed on restore by ``mode``
        ('split': divided evenly; 'union': every subtask gets all entries)."""
        return self.operator_state.get_list_state(name, mode)


class ProcessContext:
    """Per-record context handed to :meth:`ProcessFunction.process_element`.

    ``current_key`` is the key of the record being processed on a keyed stream, else ``None``.
    """

    __slots__ = ("current_key", "runtime")

    def __init__(self, runtime: RuntimeContext) -> None:
        self.runtime = runtime
        self.current_key: Any = None

    @property
    def subtask_index(self) -> int:
        return self.runtime.subtask_index

    def get_state(self, descriptor: Any) -> Any:
        """Keyed state for ``descriptor``, scoped to ``current_key`` (see RuntimeContext.get_state)."""
        return self.runtime.get_state(descriptor)


class ProcessFunction:
    """A function that sees every record with its context and emits any number of records.

    Override :meth:`process_element` to return an iterable of output records (a generator,
    a list) or ``None`` for no output.
    """

    def open(self, context: RuntimeContext) -> None:
        """Called once per subtask before the first record."""

    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        """Handle one record; return (or yield) the records to emit."""
        raise NotImplementedError

    def close(self) -> None:
        """Called once when the subtask ends, also after a failure."""


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
