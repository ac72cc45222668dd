"""What each state backend registers, by name: the factory of its kind and the readers of the
keyed-state handle formats it writes. Generic code finds a backend's code here and imports no
backend sub-package (``epochal.state.heap``, ``.rocksdb``, ``.postgres``) itself: the backend
factory (:func:`epochal.state.backends.create_backend`), restores and the state DataFrames
(:class:`epochal.state.snapshot.RestoreSource`), canonical savepoints.

The contract:

* :data:`BACKENDS` maps a :class:`~epochal.config.StateBackendConfig` ``kind`` to the
  ``"module:attribute"`` of a :class:`BackendFactory`.
* :data:`FORMATS` maps the ``format`` of a keyed-state handle (a subtask's ``"keyed"`` entry in
  checkpoint metadata) that a backend writes in a format of its own to the ``"module:attribute"``
  of a :class:`FormatReader`. Such a handle names its subtask's ``key_groups`` (``[start,
  stop]``) and what that checkpoint wrote (``written_bytes``). Handles without a ``format`` (a
  file of per-key-group blobs: a heap checkpoint, any canonical savepoint) and incremental chains
  (``"format": "chain"``) are generic, read by :mod:`epochal.state.snapshot` itself.
* An entry is imported when it is first asked for (a job that restores a heap checkpoint never
  imports rocksdict or psycopg), then cached. An unknown kind or format raises an error that names
  it and the known ones (:class:`~epochal.errors.PlanError`, :class:`~epochal.state.storage.CheckpointError`).
* A new backend: a sub-package of ``epochal.state`` and a line here per kind and per format; no
  backend sub-package imports another (tests/unit/test_layering.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from epochal.config import HEAP, POSTGRES, ROCKSDB, StateBackendConfig
from epochal.errors import PlanError
from epochal.state.storage import CheckpointError, CheckpointStorage

if TYPE_CHECKING:
    from epochal.state.backend import KeyedStateBackend

__all__ = ["BACKENDS", "FORMATS", "BackendFactory", "FormatReader", "backend_factory", "format_reader"]

#: Backend kind -> ``"module:attribute"`` of its :class:`BackendFactory`
BACKENDS: dict[str, str] = {
    HEAP: "epochal.state.heap.backend:create",
    ROCKSDB: "epochal.state.rocksdb.backend:create",
    POSTGRES: "epochal.state.postgres.backend:create",
}
#: Keyed-state handle format -> ``"module:attribute"`` of its :class:`FormatReader`
FORMATS: dict[str, str] = {
    "rocksdb": "epochal.state.rocksdb.checkpoints:READER",
    "postgres": "epochal.state.postgres.snapshots:READER",
}

_loaded: dict[str, Any] = {}


class BackendFactory(Protocol):
    """Creates the keyed-state backend of one keyed operator subtask (``name``: its uid and index,
    for directories; ``uid``, ``job_name``, ``attempt``: the operator, job and attempt, for a
    backend that keeps state outside the worker). A factory ignores what it does not use."""

    def __call__(self, config: StateBackendConfig, max_parallelism: int, key_groups: range, name: str, *,
                 uid: str = "", job_name: str = "", attempt: int = 0) -> KeyedStateBackend: ...


class FormatReader(Protocol):
    """Reads the keyed-state handles of one format for a restore (or the state DataFrames)."""

    #: Whether a backend of this format restores such a handle's files as they are, fetched into
    #: a local directory (:meth:`fetch`; RocksDB's SST files), rather than key group by key group
    fetches_files: bool

    def key_groups(self, storage: CheckpointStorage, checkpoint_id: int, uid: str, handle: dict[str, Any],
                   key_groups: range, names: frozenset[str] | None) -> Iterator[tuple[int, dict[str, dict[Any, Any]]]]:
        """``(group, {state name: {key: value}})`` for each group of ``key_groups`` with state in
        ``handle`` (operator ``uid``'s, of checkpoint ``checkpoint_id`` in ``storage``), in group
        order, one group in memory at a time; ``names``: of these states only. Raises
        :class:`~epochal.state.storage.CheckpointError` where the handle's state cannot be read
        so (it is in a database) and ``key_groups`` overlaps its own."""
        ...

    def fetch(self, storage: CheckpointStorage, checkpoint_id: int, handle: dict[str, Any],
              key_groups: range) -> Iterator[tuple[str, range]]:
        """Where :attr:`fetches_files`: if ``handle`` holds some of ``key_groups``, its files
        fetched into a new local directory (checksums verified) and the groups of it wanted,
        ``(directory, groups)``, once; the directory is removed when the iteration moves on (or
        ends)."""
        ...


def backend_factory(kind: str) -> BackendFactory:
    """The factory of backend ``kind``; :class:`~epochal.errors.PlanError` for an unknown kind."""
    reference = BACKENDS.get(kind)
    if reference is None:
        raise PlanError(f"no state backend of kind {kind!r} is registered (there are {', '.join(sorted(BACKENDS))})")
    return _load(reference)


def format_reader(handle_format: str, path: str = "") -> FormatReader:
    """The reader of keyed-state handles of format ``handle_format`` (``path``: where the handle
    is, for the message); :class:`~epochal.state.storage.CheckpointError` for an unknown format:
    the checkpoint was written by a backend this version of epochal does not have."""
    reference = FORMATS.get(handle_format)
    if reference is None:
        where = f" in {path}" if path else ""
        raise CheckpointError(f"keyed state{where} is in format {handle_format!r}, which no state backend of this "
                              f"version of epochal reads (it reads {', '.join(sorted(FORMATS))}, and files of key "
                              "groups): restore it with the epochal that wrote it", path=path or None)
    return _load(reference)


def _load(reference: str) -> Any:
    """The attribute a ``"module:attribute"`` reference names, imported on first use."""
    found = _loaded.get(reference)
    if found is None:
        module, _, attribute = reference.partition(":")
        found = _loaded[reference] = getattr(importlib.import_module(module), attribute)
    return found
