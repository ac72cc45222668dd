"""The PostgreSQL keyed-state backend: keyed state in a database, committed with each checkpoint.

:mod:`.backend` (the backend, the driver of the rest), :mod:`.epochs` (its commit protocol as a
pure machine), :mod:`.wal` and :mod:`.spill` (its write-ahead log, in memory and spilled to local
disk), :mod:`.views` (its read cache and key groups as mappings), :mod:`.store` and
:mod:`.schema` (its SQL and connections), :mod:`.snapshots` (its uploads and canonical
savepoints: the reader of its ``postgres`` handle format), :mod:`.restore` (restores in the
database), :mod:`.claims` (the driver's claim of a namespace), :mod:`.release` (its read cache
freed in the background).

Exports :class:`PostgresKeyedStateBackend` and :data:`POSTGRES_FORMAT` (what
``epochal.state.postgres`` held before it became this package).
"""

from __future__ import annotations

from epochal.state.postgres.backend import PostgresKeyedStateBackend
from epochal.state.postgres.snapshots import POSTGRES_FORMAT

__all__ = ["POSTGRES_FORMAT", "PostgresKeyedStateBackend"]
