"""What the driver gives each build task (:class:`BuildPlan`) and what each returns (:class:`BuildReport`).

Both are small and picklable: the plan names where the buckets are and the job's layout; the
report carries the earliest :class:`Problems` a task found, or the sizes of the partition it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class BuildPlan:
    """What every build task needs (all small): where things are and the job's layout."""

    staging: str
    work_uri: str
    num_workers: int
    vertex_splits: tuple[int, ...]
    edge_splits: tuple[int, ...]
    has_vertices: bool
    directed: bool
    duplicates: str
    directions: str
    adjacency: bool
    partitioner: str = "hash"
    property_columns: tuple[str, ...] = ()
    #: replication fault tolerance: (k, selfish, ft_replicas); None: off
    replication: tuple[int, bool, bool] | None = None
    #: vertex ids the driver asks about (a program's source)
    lookups: tuple[int, ...] = ()
    total_vertices_hint: int = 0
    total_edges_hint: int = 0


@dataclass
class Problems:
    """The earliest problem of each kind one task found (positions; None: none)."""

    #: (position of the second listing, position of the first, id)
    repeated_vertex: tuple[int, int, int] | None = None
    #: (position, src, dst, the unknown vertex)
    unknown_source: tuple[int, int, int, int] | None = None
    unknown_destination: tuple[int, int, int, int] | None = None
    #: (position of the repeat, its src, dst, position of the first, the first's src)
    repeated_edge: tuple[int, int, int, int, int] | None = None

    def any(self) -> bool:
        return any(v is not None for v in (self.repeated_vertex, self.unknown_source, self.unknown_destination,
                                            self.repeated_edge))


@dataclass
class BuildReport:
    """What one build task returns to the driver: problems, or the sizes of its partition."""

    worker: int
    problems: Problems = field(default_factory=Problems)
    masters: int = 0
    replicas: int = 0
    ft_replicas: int = 0
    edges: int = 0
    read_entries: int = 0
    dropped_edges: int = 0
    #: the first dropped repeat: (position, src, dst, position of the first, its src, its dst)
    first_dropped: tuple[int, int, int, int, int, int] | None = None
    found: tuple[int, ...] = ()
    #: vertices with both in- and out-edges (ALS refuses them), and the smallest such id
    both_ways: int = 0
    both_ways_first: int | None = None
    partition_bytes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    #: replication: the distinct ``(owner, mirror workers)`` rows of this worker's masters and
    #: how many masters have each (what the JobMaster's recovery machine needs)
    patterns: tuple[np.ndarray, np.ndarray] | None = None
