"""The built-in graph algorithms, as :class:`~epochal.graph.program.VectorProgram` s.

Six follow the LDBC Graphalytics benchmark specification (v1.0.x, arXiv:2011.15028) to the
letter of its output definitions: :class:`BFS`, :class:`PageRank`, :class:`WCC`, :class:`CDLP`,
:class:`LCC` and :class:`SSSP`; :class:`ALS` is the collaborative-filtering workload of
papers/003. :data:`ALGORITHMS` names them for command lines and job configurations
(``ALGORITHMS["pr"](iterations=20)``). Shared pieces: segment reductions over CSR rows
(``_csr``), dynamic minimum propagation (``_propagation``) and input checks (``_checks``).
"""

from __future__ import annotations

from collections.abc import Callable

from epochal.graph.algorithms.als import ALS
from epochal.graph.algorithms.bfs import BFS
from epochal.graph.algorithms.cdlp import CDLP
from epochal.graph.algorithms.lcc import LCC
from epochal.graph.algorithms.pagerank import PageRank
from epochal.graph.algorithms.sssp import SSSP
from epochal.graph.algorithms.wcc import WCC
from epochal.graph.program import VectorProgram

#: short name -> the program's constructor
ALGORITHMS: dict[str, Callable[..., VectorProgram]] = {
    "bfs": BFS, "pr": PageRank, "wcc": WCC, "cdlp": CDLP, "lcc": LCC, "sssp": SSSP, "als": ALS,
}

__all__ = ["ALGORITHMS", "ALS", "BFS", "CDLP", "LCC", "PageRank", "SSSP", "WCC"]
