"""The PostgreSQL keyed-state backend: keyed state in a database, committed with each checkpoint.

:mod:`.backend` (the backend, the driver of the rest), :mod:`.epochs` (its commit protocol as a
pure machine), :mod:`.wal` and :mod:`.spill` (its write-ahead log, in memory and spilled to local
disk), :mod:`.views` (its read cache and key groups as mappings), :mod:`.store` and
:mod:`.schema` (its SQL and connections), :mod:`.snapshots` (its uploads and canonical
savepoints: the reader of its ``postgres`` handle format), :mod:`.restore` (restores in the
database), :mod:`.claims` (the driver's claim of a namespace), :mod:`.release` (its read cache
freed in the background).
"""
