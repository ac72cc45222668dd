"""The RocksDB keyed-state backend: keyed state out of core, a RocksDB database per subtask.

:mod:`.backend` (the backend), :mod:`.keys` (its key layout and its view of one key group),
:mod:`.reads` (a checkpoint read by key group, read-only), :mod:`.views` (read_committed views of
a local checkpoint), :mod:`.checkpoints` (its checkpoints and canonical savepoints, restores from
them: the reader of its ``rocksdb`` handle format), :mod:`.native` (the native reader of a
checkpoint, with the C extension ``_native``).

Exports :class:`RocksDBKeyedStateBackend`, :func:`read_key_groups` and :func:`read_stored_groups`
(what ``epochal.state.rocksdb`` held before it became this package).
"""

from __future__ import annotations

from epochal.state.rocksdb.backend import RocksDBKeyedStateBackend
from epochal.state.rocksdb.reads import read_key_groups, read_stored_groups

__all__ = ["RocksDBKeyedStateBackend", "read_key_groups", "read_stored_groups"]
