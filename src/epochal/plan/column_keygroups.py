"""Key groups of a whole column of keys at once: the key groups of the batch (columnar) path.

A batch stream keyed by columns (``key_by("user")``, ``key_by(["user", "day"])``) places each
row by the key the row path would give it: the column's value (``as_py()``) for one key column,
the tuple of the values for several. :func:`key_groups_of_columns` returns exactly
``[key_group_of(key, max_parallelism) for key in keys]`` (:mod:`epochal.plan.keygroups`), so a
row job and a batch job put equal keys in the same key group and restore each other's state.

Contract: ``columns`` are Arrow arrays of equal length; the result is an ``int32`` numpy array
of that length. int, bool, str and binary columns (and their large and dictionary forms) are
hashed in compiled code without a Python call per row where the extension
``epochal.plan._column_keygroups`` is built; every other type (floats, dates, timestamps, ...),
and every type where the extension is missing, goes through the row path's own functions,
row by row: slower, the same groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from epochal.plan.keygroups import key_groups_of
from epochal.plan.partitioners import Partitioner


def column_keys(columns: Sequence[pa.Array]) -> list[Any]:
    """The Python keys of the rows: each row's value for one column, the tuple of its values for
    several (what a row job's ``key_by`` on the same fields returns)."""
    if len(columns) == 1:
        return columns[0].to_pylist()
    return list(zip(*(column.to_pylist() for column in columns), strict=True))


def key_groups_of_columns(columns: Sequence[pa.Array], max_parallelism: int) -> np.ndarray:
    """The key group of every row's key (see the module docstring), as an ``int32`` array."""
    return np.asarray(key_groups_of(column_keys(columns), max_parallelism), dtype=np.int32)


class ColumnKeys:
    """The key of a batch stream's rows: the values of ``columns`` (a key selector for batches).

    ``of(batch)`` gives the Python keys of every row, ``groups(batch, max_parallelism)`` their key
    groups as a numpy array; the partitioner and the keyed operators use the same."""

    def __init__(self, columns: list[str]) -> None:
        self.columns = list(columns)

    def arrays(self, batch: pa.RecordBatch | pa.Table) -> list[pa.Array]:
        try:
            arrays = [batch.column(name) for name in self.columns]
        except KeyError:
            missing = next(c for c in self.columns if c not in batch.schema.names)
            raise ValueError(f"key_by({self!r}): the batches have no column {missing!r} (they have "
                             f"{', '.join(batch.schema.names) or 'none'})") from None
        return [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]

    def groups(self, batch: pa.RecordBatch | pa.Table, max_parallelism: int) -> np.ndarray:
        return key_groups_of_columns(self.arrays(batch), max_parallelism)

    def __repr__(self) -> str:
        return repr(self.columns[0]) if len(self.columns) == 1 else repr(self.columns)


class KeyGroupBatchPartitioner(Partitioner):
    """A batch stream's keyed exchange: each record batch is split by the key groups of its key
    columns (hashed once per batch, :mod:`epochal.plan.column_keygroups`), into one slice per
    consumer subtask that owns rows of it. The same key groups as the row path's for the same
    keys, so row and batch jobs place (and restore) keys alike."""

    strategy = "hash"

    def __init__(self, keys: ColumnKeys, max_parallelism: int) -> None:
        self.keys = keys
        self.max_parallelism = max_parallelism

    def split(self, batch: list[Any], n: int) -> list[list[Any]]:
        if n == 1:
            return [batch]
        targets: list[list[Any]] = [[] for _ in range(n)]
        for element in batch:
            if element.num_rows == 0:
                continue
            owners = self.keys.groups(element, self.max_parallelism).astype(np.int64) * n // self.max_parallelism
            counts = np.bincount(owners, minlength=n)
            nonzero = np.flatnonzero(counts)
            if len(nonzero) == 1:
                targets[int(nonzero[0])].append(element)
                continue
            ordered = element.take(pa.array(np.argsort(owners, kind="stable")))
            offset = 0
            for target, count in enumerate(counts.tolist()):
                if count:
                    targets[target].append(ordered.slice(offset, count))
                    offset += count
        return targets
