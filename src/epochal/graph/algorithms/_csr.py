"""Array helpers the built-in algorithms share: reductions over the rows of a partition's CSR.

A partition lists what each master reads as CSR (``ptr`` of ``n + 1`` offsets, one entry per
edge read); the algorithms reduce those entries per row (sum, minimum, most frequent value).
Every helper here is a vectorised numpy function of its arguments, with no Python loop per
vertex, and reduces each row in the row's own entry order (the order of the input edges), so a
row's result does not depend on how the graph was partitioned.
"""

from __future__ import annotations

import numpy as np


def rows_of(ptr: np.ndarray, entries: np.ndarray | None = None) -> np.ndarray:
    """The row of every entry of CSR ``ptr`` (or of the entries ``entries``, sorted or not)."""
    if entries is None:
        return np.repeat(np.arange(ptr.size - 1), np.diff(ptr))
    return np.searchsorted(ptr, entries, side="right") - 1


def segment_reduce(ufunc: np.ufunc, ptr: np.ndarray, values: np.ndarray, empty: float | int) -> np.ndarray:
    """``ufunc`` over each row's entries of ``values`` (along axis 0); a row without entries gets ``empty``.

    ``values`` has one entry (a scalar or an array) per CSR entry, ``ptr.size - 1`` rows result.
    """
    n = ptr.size - 1
    out = np.full((n, *values.shape[1:]), empty, dtype=values.dtype)
    if n == 0 or values.shape[0] == 0:
        return out
    starts = ptr[:-1]
    filled = starts < ptr[1:]
    # reduceat reads one entry for an empty row and cannot start at the end: reduce non-empty rows only
    out[filled] = ufunc.reduceat(values, starts[filled], axis=0)
    return out


def segment_sum(ptr: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each row's sum of ``values`` (zero for a row without entries)."""
    return segment_reduce(np.add, ptr, values, 0)


def row_mode(rows: np.ndarray, values: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Per row, the most frequent of the ``values`` listed for it (ties: the smallest value).

    ``rows[i]`` is the row of ``values[i]``; a row with no value keeps ``current[row]``. Sorts the
    (row, value) pairs once and counts runs: O(m log m) for m pairs.
    """
    out = current.copy()
    if rows.size == 0:
        return out
    order = np.lexsort((values, rows))
    r, v = rows[order], values[order]
    starts = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (v[1:] != v[:-1])])
    counts = np.diff(np.r_[starts, r.size])
    run_rows, run_values = r[starts], v[starts]
    # runs by row, then by count (descending), then by value (ascending): the first run of a row wins
    best = np.lexsort((run_values, -counts, run_rows))
    first = np.r_[True, run_rows[best][1:] != run_rows[best][:-1]]
    winners = best[first]
    out[run_rows[winners]] = run_values[winners]
    return out


def unique_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``(a[i], b[i])`` pairs of two int64 arrays, sorted by ``a`` then ``b``."""
    if a.size == 0:
        return a, b
    pairs = np.unique(np.stack([a, b], axis=1), axis=0)
    return pairs[:, 0], pairs[:, 1]
