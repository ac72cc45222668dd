"""Where modules went: the import paths of an earlier epochal, kept working.

Code moves to the package of its concern (issue 56: ``connectors/kafka/``, ``state/rocksdb/``,
...). Two kinds of reader still name the old paths: users' code (``from
epochal.connectors.delta_sink import DeltaSink``), and the pickles inside checkpoints and
savepoints an earlier epochal wrote, which name each class by the module it lived in (a Kafka
split in a source's operator state, a sink's committable). So that both go on working, and
nothing lives in two places, this module keeps one table, :data:`MOVED`: each old module path
-> the module that holds its contents now, and the names that went elsewhere. :func:`install`
(run when the package is imported, so in every driver and worker) puts a finder on
``sys.meta_path`` that answers an old path with an alias module: reading a name from it reads it
from its new home (the same object: ``isinstance`` and identity hold), and a user's import of it
gets a :class:`DeprecationWarning` naming the new path. A leaf: it imports nothing of epochal
until an old path is used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Moved:
    """An old module: ``module`` holds what it held, except the names in ``elsewhere`` (old
    name -> ``"new.module:new_name"``)."""

    module: str
    elsewhere: dict[str, str] = field(default_factory=dict)


#: old module path -> where its contents are now
MOVED: dict[str, Moved] = {
    # connectors by concern (connectors/{kafka,delta,postgres,files}/)
    "epochal.connectors.filesystems": Moved("epochal.filesystems"),
    "epochal.connectors.kafka_common": Moved("epochal.connectors.kafka.common"),
    "epochal.connectors.kafka_source": Moved("epochal.connectors.kafka.source", {
        name: f"epochal.connectors.kafka.partitions:{name}"
        for name in ("KafkaPartitionSplit", "split_id", "OFFSET_BEGINNING", "owner_of_new_split")}),
    "epochal.connectors.kafka_reader": Moved("epochal.connectors.kafka.reader"),
    "epochal.connectors.kafka_sink": Moved("epochal.connectors.kafka.sink"),
    "epochal.connectors.kafka_transactions": Moved("epochal.connectors.kafka.writers"),
    "epochal.connectors.delta_sink": Moved("epochal.connectors.delta.sink"),
    "epochal.connectors.delta_source": Moved("epochal.connectors.delta.source"),
    "epochal.connectors.delta_tables": Moved("epochal.connectors.delta.tables"),
    "epochal.connectors.postgres_sink": Moved("epochal.connectors.postgres.sink"),
    "epochal.connectors.postgres_sql": Moved("epochal.connectors.postgres.sql", {
        "Gid": "epochal.connectors.postgres.sql:SinkTransactionId",
        "parse_gid": "epochal.connectors.postgres.sql:parse_transaction_id",
        "prepared_gids": "epochal.connectors.postgres.sql:prepared_transaction_ids"}),
    "epochal.connectors.file_sinks": Moved("epochal.connectors.files.sinks"),
    "epochal.connectors.text_file_source": Moved("epochal.connectors.files.text_source"),
    "epochal.connectors.table_file_sources": Moved("epochal.connectors.files.table_sources", {
        "_ParquetSplit": "epochal.connectors.parquet_split:ParquetSplit",
        "_rows": "epochal.connectors.file_splits:rows_of"}),
    "epochal.connectors.transactional": Moved("epochal.connectors.files.transactional"),
    # state backends in sub-packages (state/{heap,rocksdb,postgres}/); epochal.state.heap, .rocksdb
    # and .postgres are those packages now, which export what the modules of those names did
    "epochal.state.rocksdb_checkpoints": Moved("epochal.state.rocksdb.checkpoints"),
    "epochal.state.rocksdb_keys": Moved("epochal.state.rocksdb.keys", {
        "KeyEncoder": "epochal.state.canonical:KeyEncoder", "_SCALAR_KEYS": "epochal.state.canonical:SCALAR_KEYS",
        **{name: f"epochal.state.rocksdict_scans:{name}" for name in ("scan", "scan_keys", "BULK_READAHEAD")}}),
    "epochal.state.rocksdb_native": Moved("epochal.state.rocksdb.native"),
    "epochal.state.rocksdb_views": Moved("epochal.state.rocksdb.views"),
    "epochal.state.postgres_claims": Moved("epochal.state.postgres.claims"),
    "epochal.state.postgres_epochs": Moved("epochal.state.postgres.epochs", {
        "Gid": "epochal.state.postgres.epochs:EpochTransactionId",
        "parse_gid": "epochal.state.postgres.epochs:parse_epoch_transaction_id"}),
    "epochal.state.postgres_restore": Moved("epochal.state.postgres.restore"),
    "epochal.state.postgres_schema": Moved("epochal.state.postgres.schema"),
    "epochal.state.postgres_snapshots": Moved("epochal.state.postgres.snapshots"),
    "epochal.state.postgres_spill": Moved("epochal.state.postgres.spill"),
    "epochal.state.postgres_store": Moved("epochal.state.postgres.store", {
        "Fenced": "epochal.state.postgres.store:FencedUploadError"}),
    "epochal.state.postgres_views": Moved("epochal.state.postgres.views"),
    "epochal.state.postgres_wal": Moved("epochal.state.postgres.wal"),
    "epochal.state.release": Moved("epochal.state.postgres.release"),
    # the driver's own: below the API, beside what they serve
    "epochal.api.run_settings": Moved("epochal.control.run_settings"),
    "epochal.api.running": Moved("epochal.control.running"),
    "epochal.rest.registry": Moved("epochal.control.job_registry"),
    "epochal.control.jobmaster_messages": Moved("epochal.control.jobmaster_machine"),
    # what the dataflow kind alone uses lives in it: its checkpointing (worker and JobMaster
    # sides), its data plane and its query server; how a worker reads source splits is shared
    **{f"epochal.runtime.checkpointing.{name}": Moved(f"epochal.dataflow.checkpointing.{name}")
       for name in ("alignment", "barriers", "events", "fork_snapshots", "loop_heads", "messages", "snapshots",
                    "upload_queue", "uploads")},
    "epochal.runtime.checkpointing": Moved("epochal.dataflow.checkpointing"),
    **{f"epochal.control.checkpointing.{name}": Moved(f"epochal.dataflow.checkpointing.{name}")
       for name in ("coordinator", "pending", "failures", "stats", "store", "restore")},
    "epochal.control.checkpointing.files": Moved("epochal.control.checkpoint_files"),
    "epochal.control.checkpointing": Moved("epochal.control.checkpoint_files", {
        **{name: f"epochal.dataflow.checkpointing.coordinator:{name}" for name in ("CheckpointCoordinator",)},
        **{name: f"epochal.dataflow.checkpointing.failures:{name}"
           for name in ("AbortReason", "CheckpointFailureManager")},
        **{name: f"epochal.dataflow.checkpointing.pending:{name}" for name in ("AckResult", "PendingCheckpoint")},
        "CheckpointStatsTracker": "epochal.dataflow.checkpointing.stats:CheckpointStatsTracker",
        "CompletedCheckpointStore": "epochal.dataflow.checkpointing.store:CompletedCheckpointStore",
        "check_restore": "epochal.dataflow.checkpointing.restore:check_restore"}),
    **{f"epochal.runtime.dataplane.{name}": Moved(f"epochal.dataflow.dataplane.{name}")
       for name in ("batch_sizing", "chains", "channels", "datapath", "subtask_barriers", "tasks", "wiring")},
    "epochal.runtime.dataplane.source_reader": Moved("epochal.connectors.source_reader"),
    "epochal.runtime.dataplane": Moved("epochal.dataflow.dataplane"),
    **{f"epochal.runtime.queries.{name}": Moved(f"epochal.dataflow.queries.{name}")
       for name in ("server", "machine", "committed", "shown", "native")},
}


#: names that left a module which is still there: module -> old name -> ``"new.module:new_name"``;
#: the module's ``__getattr__`` answers them through :func:`moved_name`
MOVED_NAMES: dict[str, dict[str, str]] = {
    # a collect sink's payloads went to the sink's writer (its committable, CollectEpoch, is in
    # the operator state of checkpoints an earlier epochal wrote)
    "epochal.messages": {
        **{name: f"epochal.connectors.memory:{name}"
           for name in ("CollectEpoch", "CollectBatch", "CollectSeal", "CollectCommit")},
        # the dataflow kind's checkpoint and loop protocol, and its own messages
        **{name: f"epochal.dataflow.checkpointing.messages:{name}"
           for name in ("TriggerCheckpoint", "Ack", "Decline", "CheckpointComplete", "CheckpointAbort", "Committed",
                        "SavepointTarget", "LoopReady", "StartLoopProbe", "LoopVote", "EndLoop")},
        **{name: f"epochal.dataflow.protocol:{name}" for name in ("Collect", "EndSources")}},
}


def moved_name(module: str, name: str) -> Any:
    """For the ``__getattr__`` of ``module``: the object ``name`` is now, if it left ``module``
    (:data:`MOVED_NAMES`); else the AttributeError of a name the module never had."""
    target = MOVED_NAMES.get(module, {}).get(name)
    if target is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return resolve(target)


def resolve(target: str) -> Any:
    """The object ``"module:name"`` names."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


class _Alias(types.ModuleType):
    """An old module path: every name read from it is read from where it lives now."""

    def __init__(self, name: str, moved: Moved) -> None:
        super().__init__(name, f"moved to {moved.module}")
        self.__moved = moved
        self.__path__: list[str] = []  # an old package: its old submodules are answered by name too

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        moved = self.__moved
        if name in moved.elsewhere:
            return resolve(moved.elsewhere[name])
        return getattr(importlib.import_module(moved.module), name)

    def __dir__(self) -> list[str]:
        return sorted({*dir(importlib.import_module(self.__moved.module)), *self.__moved.elsewhere})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old module path of :data:`MOVED` with its :class:`_Alias`."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _Alias(spec.name, MOVED[spec.name])

    def exec_module(self, module: types.ModuleType) -> None:
        warnings.warn(f"{module.__name__} moved to {MOVED[module.__name__].module}; import it from there",
                      DeprecationWarning, stacklevel=2)


_FINDER = _Finder()


def install() -> None:
    """Let the old paths of :data:`MOVED` be imported (idempotent)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
