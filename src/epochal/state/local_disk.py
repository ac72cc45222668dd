"""Where state backends keep files on a worker's local disk (a RocksDB database and its local
checkpoints, the PostgreSQL backend's spilled write-ahead log)."""

from __future__ import annotations

import os
import tempfile

from epochal.config import StateBackendConfig

__all__ = ["local_root"]


def local_root(config: StateBackendConfig) -> str:
    """Where a backend keeps files on the worker's local disk: ``config.local_dir``, else Spark's
    local directory (``SPARK_LOCAL_DIRS``, its first entry), else the temp directory."""
    return config.local_dir or (os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or tempfile.gettempdir())
