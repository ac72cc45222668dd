"""Creating the keyed-state backend a job chose (:class:`~epochal.config.StateBackendConfig`): the
factory its kind registered (:mod:`epochal.state.registry`)."""

from __future__ import annotations

from epochal.config import StateBackendConfig
from epochal.state.backend import KeyedStateBackend
from epochal.state.registry import backend_factory

__all__ = ["create_backend"]


def create_backend(config: StateBackendConfig, max_parallelism: int, key_groups: range,
                   name: str, *, uid: str = "", job_name: str = "", attempt: int = 0) -> KeyedStateBackend:
    """A backend for one keyed operator subtask (``name``: its uid and index, for directories;
    ``uid``, ``job_name``, ``attempt``: the operator, job and attempt, for the PostgreSQL backend,
    whose namespace defaults to the job's name; its ``open_state`` must run before it is used).

    RocksDB databases live in a new directory under ``config.local_dir`` (default: Spark's local
    directory, ``SPARK_LOCAL_DIRS``, else the temp directory), removed with the subtask
    (``dispose``); local checkpoints are made beside the database, on the same file system, so
    that they are hard links (:func:`epochal.state.rocksdb.backend.create`)."""
    return backend_factory(config.kind)(config, max_parallelism, key_groups, name, uid=uid, job_name=job_name,
                                        attempt=attempt)
