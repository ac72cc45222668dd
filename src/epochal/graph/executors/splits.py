"""Splits: the pieces of a graph's input one Spark task reads, and positions of their rows.

A *position* is ``split << 40 | row`` (the row among the split's data rows): positions order rows
as the input does, and name the file and line (text) or table and row of a bad row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: bits of a position that hold the row within its split
ROW_BITS = 40


def positions(split: int, rows: int) -> np.ndarray:
    """The positions of the first ``rows`` rows of split ``split``."""
    return (np.int64(split) << np.int64(ROW_BITS)) | np.arange(rows, dtype=np.int64)


def split_of(position: int) -> int:
    return int(position) >> ROW_BITS


def row_of(position: int) -> int:
    return int(position) & ((1 << ROW_BITS) - 1)


@dataclass(frozen=True)
class Split:
    """One piece of input one task reads. ``what``: "vertex" or "edge"; ``index``: its number
    among all splits of the job (vertex splits first, in file order); ``location``: the name
    messages use (the file or table as the user gave it)."""

    index: int
    what: str
    location: str
    #: the file (a local path or a URI)
    file: str
    #: text: byte range [start, end) (end None: the whole file, e.g. compressed); tables: row group
    start: int = 0
    end: int | None = None
    row_group: int | None = None
    #: text: SNAP comments, the field delimiter, the number of fields, the columns to read
    snap: bool = False
    delimiter: str = " "
    width: int = 0
    kinds: tuple[tuple[int, str], ...] = ()
    meaning: str = ""
    #: tables: "parquet" or "csv", the columns to read, the CSV delimiter
    table_format: str = ""
    columns: tuple[str, ...] = ()
    #: the file's first data line was checked on the driver; its number (1-based)
    first_line: int = 1


@dataclass
class SplitProblem:
    """A row of a split that cannot be read: ``local`` is its line (text, 0-based among the
    split's lines) or row (tables), ``message`` what follows the location in the error."""

    local: int
    message: str


@dataclass
class SplitColumns:
    """What one split holds: ``columns`` by name (ids as int64, weights as float64, property
    columns as they are), ``pos`` one position per row, ``lines`` the text lines the split owns
    (tables: its rows), or ``problem``."""

    pos: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    lines: int = 0
    problem: SplitProblem | None = None
