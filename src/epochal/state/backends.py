"""Creating the keyed-state backend a job chose (:class:`~epochal.config.StateBackendConfig`)."""

from __future__ import annotations

import os
import re
import tempfile

from epochal.config import POSTGRES, ROCKSDB, StateBackendConfig
from epochal.state.backend import KeyedStateBackend
from epochal.state.heap import HeapKeyedStateBackend


def local_root(config: StateBackendConfig) -> str:
    """Where a backend keeps files on the worker's local disk: ``config.local_dir``, else Spark's
    local directory (``SPARK_LOCAL_DIRS``), else the temp directory."""
    return config.local_dir or (os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or tempfile.gettempdir())


def create_backend(config: StateBackendConfig, max_parallelism: int, key_groups: range,
                   name: str, *, uid: str = "", job_name: str = "", attempt: int = 0) -> KeyedStateBackend:
    """A backend for one keyed operator subtask (``name``: its uid and index, for directories;
    ``uid``, ``job_name``, ``attempt``: the operator, job and attempt, for the PostgreSQL backend,
    whose namespace defaults to the job's name; its ``open_state`` must run before it is used).

    RocksDB databases live in a new directory under ``config.local_dir`` (default: Spark's local
    directory, ``SPARK_LOCAL_DIRS``, else the temp directory), removed with the subtask
    (``dispose``); local checkpoints are made beside the database, on the same file system, so
    that they are hard links."""
    if config.kind == POSTGRES:
        from epochal.state.postgres import PostgresKeyedStateBackend

        return PostgresKeyedStateBackend(max_parallelism, key_groups, config, uid or name,
                                         config.namespace or job_name or "job", attempt, name)
    if config.kind != ROCKSDB:
        return HeapKeyedStateBackend(max_parallelism, key_groups, config.incremental, config.full_every)
    from epochal.state.rocksdb import RocksDBKeyedStateBackend
    from epochal.state.rocksdb_checkpoints import RocksDBSnapshots

    base = os.path.join(local_root(config), "epochal-rocksdb")
    os.makedirs(base, exist_ok=True)
    owned = tempfile.mkdtemp(prefix=re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] + "-", dir=base)
    backend = RocksDBKeyedStateBackend(max_parallelism, key_groups, os.path.join(owned, "db"),
                                       write_buffer_bytes=config.write_buffer_bytes,
                                       block_cache_bytes=config.block_cache_bytes)
    backend.snapshots = RocksDBSnapshots(backend)
    dispose = backend.dispose

    def dispose_all() -> None:
        dispose()
        import shutil

        shutil.rmtree(owned, ignore_errors=True)

    backend.dispose = dispose_all  # type: ignore[method-assign]
    return backend
