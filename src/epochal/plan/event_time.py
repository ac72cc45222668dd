"""Where an event-time operator's watermarks come from, read off the logical graph.

Records carry no timestamps, and event time only advances through watermarks: an operator that
fires on event time (windows, joins) fires nothing until every input delivers watermarks, and an
input that never does holds it back for good. :func:`watermark_origins` walks every path into a
node back to where its records enter the job and says, per path, what makes its watermarks: a
watermark generator (``with_watermarks``, or one a window made from its ``timestamp=``), a source
that makes its own (``Source.emits_watermarks``, e.g. a Kafka source with ``watermarks=True``),
or nothing. Planning refuses an event-time operator reached by an unbounded source without
watermarks (:func:`check_event_time`, a :class:`~epochal.errors.PlanError` that says what to
add) and ``JobGraph.describe`` shows each one's origins (:func:`describe_origins`).

Operators are read duck-typed (``emits_watermarks``, ``event_time``, ``origin``): this layer
knows no runtime class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epochal.errors import PlanError
from epochal.plan.logical import LogicalGraph, Transformation


@dataclass
class WatermarkOrigins:
    """What makes the watermarks of the records reaching one node, path by path."""

    #: watermark generators on some path (the nearest on each path)
    generators: list[Transformation] = field(default_factory=list)
    #: sources whose own watermarks reach the node
    sources: list[Transformation] = field(default_factory=list)
    #: sources whose records reach the node without any watermark
    bare: list[Transformation] = field(default_factory=list)

    @property
    def watermarked(self) -> bool:
        """Some path brings watermarks."""
        return bool(self.generators or self.sources)

    @property
    def unbounded_bare(self) -> list[Transformation]:
        """The sources without watermarks that never end (they hold event time back forever)."""
        return [n for n in self.bare if n.source is not None and not n.source.bounded]


def is_event_time(node: Transformation) -> bool:
    """Whether ``node``'s operator acts on event time (fires on watermarks)."""
    return bool(getattr(node.operator, "event_time", False))


def watermark_origins(graph: LogicalGraph, node_id: int) -> WatermarkOrigins:
    """The origins of the watermarks of every input of node ``node_id`` (not of the node itself).

    Each path is followed upstream until a watermark generator or a source; a generator swallows
    what is above it. Loops are walked once (their back-edges lead to nodes already seen)."""
    origins = WatermarkOrigins()
    seen: set[int] = set()
    stack = list(graph[node_id].inputs)
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        node = graph[current]
        if getattr(node.operator, "emits_watermarks", False):
            origins.generators.append(node)
        elif node.source is not None:
            (origins.sources if node.source.emits_watermarks else origins.bare).append(node)
        else:
            stack.extend(node.inputs)
    for group in (origins.generators, origins.sources, origins.bare):
        group.sort(key=lambda n: n.id)
    return origins


def _names(nodes: list[Transformation]) -> str:
    return ", ".join(f"'{n.name}'" for n in nodes)


def check_event_time(graph: LogicalGraph, node: Transformation) -> None:
    """Refuse an event-time operator that an unbounded source reaches without watermarks: it
    would never fire (or, next to watermarked inputs, hold their event time back forever)."""
    origins = watermark_origins(graph, node.id)
    missing = origins.unbounded_bare
    if not missing:
        return
    others = origins.generators + origins.sources
    beside = f" (while those of {_names(others)} do)" if others else ""
    raise PlanError(
        f"'{node.name}' acts on event time, but the records of {_names(missing)} reach it without watermarks"
        f"{beside}, and that source never ends: it would never fire. Add .with_watermarks(timestamp) (or "
        "with_watermarks(WatermarkStrategy.for_bounded_out_of_orderness(d).with_timestamp_assigner(timestamp))) "
        f"on the stream of {_names(missing)} before it reaches '{node.name}'")


def describe_origins(graph: LogicalGraph, node: Transformation) -> str:
    """How ``node`` (an event-time operator) gets its watermarks, in words, for ``describe()``."""
    origins = watermark_origins(graph, node.id)
    parts = [f"'{n.name}' ({getattr(n.operator, 'origin', 'with_watermarks')})" for n in origins.generators]
    parts += [f"'{n.name}' (the source's own)" for n in origins.sources]
    text = f"watermarks from {', '.join(parts)}" if parts else "no watermarks"
    if origins.bare:
        text += f"{'; none' if parts else ''} from {_names(origins.bare)}"
        if not origins.unbounded_bare:
            text += " (bounded: what waits for them fires when the input ends)"
    return text
