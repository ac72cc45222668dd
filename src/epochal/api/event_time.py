"""Event time in the API: :class:`WatermarkStrategy` (Flink's shape) and the watermarks an
event-time window makes for itself when its input has none.

Records carry no timestamps; event time advances only through watermarks, and a window fires
only when they pass its end. So an event-time window on an unbounded stream without
``with_watermarks`` would never fire. :func:`event_time_input` makes that case right: a window
whose input has no watermarks at all gets a watermark generator from its own ``timestamp=``,
with :data:`DEFAULT_OUT_OF_ORDERNESS` (or the ``WatermarkStrategy`` given as ``timestamp=``),
inserted before its ``key_by`` exactly as ``with_watermarks`` there would be; ``describe()``
shows it. An input that is bounded keeps firing its windows at its end, as before; an input with
watermarks on some paths and none on others (from an unbounded source) is refused at planning
(:func:`epochal.plan.event_time.check_event_time`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from epochal.api.fields import check_callable
from epochal.errors import PlanError
from epochal.plan.event_time import watermark_origins
from epochal.runtime.windows.time_windows import WatermarkGenerator
from epochal.validation import check_number

if TYPE_CHECKING:
    from epochal.api.keyed import KeyedStream

#: The out-of-orderness of the watermarks an event-time window makes from its ``timestamp=``:
#: none (event times ascend within each source subtask, Flink's ``forMonotonousTimestamps``);
#: records older than the watermark are late (dropped and counted in ``late_records_dropped``).
DEFAULT_OUT_OF_ORDERNESS = 0


@dataclass(frozen=True)
class WatermarkStrategy:
    """How watermarks follow event time, in the shape of Flink's ``WatermarkStrategy``::

        WatermarkStrategy.for_bounded_out_of_orderness(5).with_timestamp_assigner(lambda e: e[2])

    ``stream.with_watermarks(strategy)`` makes watermarks ``max event time seen -
    max_out_of_orderness - 1``; an event-time ``window(size, timestamp=strategy)`` on an input
    without watermarks makes them from it. The timestamp assigner takes the record only (records
    carry no timestamp of their own to pass as Flink's second argument).
    """

    max_out_of_orderness: float = 0
    timestamp_assigner: Callable[[Any], Any] | None = None

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: float) -> WatermarkStrategy:
        """Event times may arrive up to ``max_out_of_orderness`` (in their unit) out of order."""
        check_number(max_out_of_orderness, "max_out_of_orderness", strict=False)
        return WatermarkStrategy(max_out_of_orderness)

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        """Event times ascend within each source subtask (no out-of-orderness)."""
        return WatermarkStrategy(0)

    def with_timestamp_assigner(self, timestamp: Callable[[Any], Any]) -> WatermarkStrategy:
        """The same strategy reading each record's event time with ``timestamp(record)``."""
        check_callable(timestamp, "with_timestamp_assigner")
        return replace(self, timestamp_assigner=timestamp)

    def assigner(self, method: str) -> Callable[[Any], Any]:
        """The timestamp assigner, or a :class:`PlanError` saying that ``method`` needs one."""
        if self.timestamp_assigner is None:
            raise PlanError(f"{method} was given a WatermarkStrategy without a timestamp assigner: add "
                            ".with_timestamp_assigner(lambda record: <its event time>)")
        return self.timestamp_assigner


def event_time_input(keyed: KeyedStream, timestamp: Callable[[Any], Any] | WatermarkStrategy | None,
                     method: str) -> tuple[Callable[[Any], Any], KeyedStream]:
    """The timestamp function of an event-time window on ``keyed``, and the keyed stream it reads:
    ``keyed`` itself, or, when no watermarks reach it and its input is unbounded (or a
    ``WatermarkStrategy`` was given), the same ``key_by`` behind a watermark generator made from
    ``timestamp``. ``method`` names the call in errors."""
    strategy = timestamp if isinstance(timestamp, WatermarkStrategy) else None
    function: Callable[[Any], Any] | None
    if isinstance(timestamp, WatermarkStrategy):
        function = timestamp.assigner(method)
    else:
        function = timestamp or keyed._event_time()
    if function is None:
        raise PlanError(f"{method} is in event time: pass timestamp=fn(record), the record's event time "
                        "(or put with_watermarks(fn) right before the key_by)")
    check_callable(function, method.partition("(")[0])
    origins = watermark_origins(keyed.env.graph, keyed.node.id)
    if origins.watermarked:
        if strategy is not None:
            made = ", ".join(f"'{n.name}'" for n in origins.generators + origins.sources)
            raise PlanError(f"{method} was given a WatermarkStrategy, but its input has watermarks already (from "
                            f"{made}): pass the timestamp function alone, or leave timestamp= out")
        return function, keyed  # (paths without any are checked when the job is planned)
    if strategy is None and not origins.unbounded_bare:
        return function, keyed  # a bounded input: its windows fire when it ends
    out_of_orderness = strategy.max_out_of_orderness if strategy is not None else DEFAULT_OUT_OF_ORDERNESS
    return function, _behind_watermarks(keyed, function, out_of_orderness, method)


def _behind_watermarks(keyed: KeyedStream, timestamp: Callable[[Any], Any], out_of_orderness: float,
                       method: str) -> KeyedStream:
    """``keyed``'s ``key_by`` again, fed through a watermark generator: what
    ``.with_watermarks(timestamp, out_of_orderness).key_by(...)`` would have recorded."""
    from epochal.api.keyed import KeyedStream

    graph, key_by = keyed.env.graph, keyed.node
    if key_by.partitioner is None or len(key_by.inputs) != 1:
        raise PlanError(f"{method} needs watermarks: add .with_watermarks(timestamp) before its key_by")
    origin = f"made by {method} from its timestamp=, max_out_of_orderness={out_of_orderness:g}"
    generator = graph.add("watermarks", "Watermarks", list(key_by.inputs),
                          operator=WatermarkGenerator(timestamp, out_of_orderness, origin=origin),
                          functions=[timestamp])
    node = graph.add("partition", key_by.name, [generator.id], partitioner=key_by.partitioner,
                     functions=list(key_by.functions))
    return KeyedStream(keyed.env, node, keyed.key_selector)
