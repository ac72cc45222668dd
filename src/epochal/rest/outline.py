"""A job's shape as the REST API shows it: vertices, their parallelism and their operators.

A job kind's ``job`` module builds the :class:`JobOutline` from its plan when it starts the job
(:func:`epochal.rest.server.serve`); what the workers report (records, watermarks,
backpressure) is matched to it by vertex id and operator uid.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochal.control.source_progress import SourceVertex


@dataclass(frozen=True)
class OperatorOutline:
    """One operator of a vertex's chain: its uid (the key of its state) and its name."""

    uid: str
    name: str


@dataclass(frozen=True)
class VertexOutline:
    """A vertex: a chain of operators run as ``parallelism`` subtasks (a CEC job's stage; a graph
    job has none); ``progress_unit``: a source vertex's ``Source.progress_unit`` (its subtasks
    report ``source_progress`` in it), None for others."""

    id: int
    name: str
    parallelism: int
    operators: tuple[OperatorOutline, ...] = ()
    progress_unit: str | None = None


@dataclass(frozen=True)
class EdgeOutline:
    """An edge between two vertices: how records are partitioned on it (``forward``, ``hash``,
    ``rebalance``, ``broadcast``, ...), whether it is a loop's back-edge, and the side output it
    carries (None: the main output)."""

    source: int
    target: int
    partitioning: str
    back_edge: bool = False
    side_output: str | None = None


@dataclass(frozen=True)
class JobOutline:
    """The job kind (``dataflow``, ``cec``, ``graph``), its default parallelism, its vertices
    and the edges between them, and the records its sources will read in all (None: unknown or
    unbounded; see ``Source.size_hint``)."""

    kind: str
    parallelism: int
    vertices: tuple[VertexOutline, ...] = ()
    edges: tuple[EdgeOutline, ...] = ()
    source_records: int | None = None

    def progress_sources(self) -> tuple[SourceVertex, ...]:
        """The source vertices as :func:`~epochal.control.source_progress.job_share` takes them:
        all of them when every one reports progress in a unit of its own, else none."""
        ids = self.source_ids
        sources = [(v, v.progress_unit) for v in self.vertices if v.id in ids]
        if not sources or any(unit is None for _, unit in sources):
            return ()
        return tuple(SourceVertex(v.id, v.parallelism, unit) for v, unit in sources if unit is not None)

    @property
    def source_ids(self) -> frozenset[int]:
        """The vertices no edge (but a back-edge) leads into: the sources."""
        fed = {e.target for e in self.edges if not e.back_edge}
        return frozenset(v.id for v in self.vertices if v.id not in fed)
