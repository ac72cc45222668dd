"""The registry of state backends (epochal.state.registry): every backend kind has a factory and
every handle format a backend writes has a reader, each loaded on first use; an unknown kind or
format is refused with a message that names it; generic code reaches backends only through it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from epochal.config import HEAP, POSTGRES, ROCKSDB, StateBackendConfig
from epochal.errors import PlanError
from epochal.state import registry
from epochal.state.snapshot import RestoreSource
from epochal.state.storage import CheckpointError, CheckpointStorage


def test_every_backend_kind_has_a_factory_in_its_own_sub_package():
    assert set(registry.BACKENDS) == {HEAP, ROCKSDB, POSTGRES}
    for kind, reference in registry.BACKENDS.items():
        assert reference.startswith(f"epochal.state.{kind}.")
        assert callable(registry.backend_factory(kind))


def test_every_handle_format_has_a_reader_of_its_own_backend_that_writes_that_format():
    from epochal.state.postgres.snapshots import POSTGRES_FORMAT
    from epochal.state.rocksdb.checkpoints import FORMAT

    assert set(registry.FORMATS) == {FORMAT, POSTGRES_FORMAT}
    for handle_format, reference in registry.FORMATS.items():
        assert reference.startswith(f"epochal.state.{handle_format}.")
        reader = registry.format_reader(handle_format)
        assert reader is registry.format_reader(handle_format)  # loaded once
        assert isinstance(reader.fetches_files, bool) and callable(reader.key_groups) and callable(reader.fetch)
    assert registry.format_reader(FORMAT).fetches_files and not registry.format_reader(POSTGRES_FORMAT).fetches_files


def test_an_unknown_handle_format_is_refused_with_a_message_that_names_it(tmp_path):
    with pytest.raises(CheckpointError, match=r"keyed state in /x/chk-3 is in format 'cassandra', which no state "
                                              r"backend of this version of epochal reads \(it reads postgres, rocksdb"):
        registry.format_reader("cassandra", "/x/chk-3")
    storage = CheckpointStorage(str(tmp_path))
    metadata = {"operators": {"op": {"subtasks": {"0": {"keyed": {"format": "cassandra", "key_groups": [0, 8]}}}}}}
    source = RestoreSource(storage, 3, metadata)
    with pytest.raises(CheckpointError, match="format 'cassandra'") as refused:
        list(source.keyed_groups("op", range(0, 8)))
    assert refused.value.path == storage.location(3)
    with pytest.raises(CheckpointError, match="format 'cassandra'"):
        list(source.rocksdb_checkpoints("op", range(0, 8)))


def test_an_unknown_backend_kind_is_refused_with_a_message_that_names_it():
    with pytest.raises(PlanError, match="no state backend of kind 'cassandra' is registered "
                                        r"\(there are heap, postgres, rocksdb\)"):
        registry.backend_factory("cassandra")


def test_a_postgres_handle_is_refused_by_a_restore_into_another_backend_that_owns_its_groups(tmp_path):
    handle = {"format": "postgres", "key_groups": [0, 8], "namespace": "jobs", "table": "epochal_state"}
    source = RestoreSource(CheckpointStorage(str(tmp_path)), 4, {"operators": {"op": {"subtasks": {"0": {
        "keyed": handle}}}}})
    assert list(source.keyed_groups("op", range(8, 16))) == []  # not its groups
    assert list(source.rocksdb_checkpoints("op", range(0, 16))) == []  # no files to fetch
    with pytest.raises(CheckpointError, match="checkpoint 4 keeps the keyed state of operator 'op' in PostgreSQL "
                                              r"\(namespace 'jobs' of table epochal_state\)"):
        list(source.keyed_groups("op", range(0, 16)))


def test_generic_code_loads_a_backend_only_when_it_is_used():
    """A heap job and a restore of a heap checkpoint import neither RocksDB's nor PostgreSQL's
    backend, nor their libraries."""
    code = ("import sys; from epochal.config import StateBackendConfig; "
            "from epochal.state.backends import create_backend; import epochal.state.snapshot; "
            "import epochal.state.dataframes.snapshot_view; "
            "create_backend(StateBackendConfig(), 16, range(16), 'op'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rocksdict', 'psycopg') "
            "or m.startswith(('epochal.state.rocksdb', 'epochal.state.postgres'))))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_the_factory_of_each_embedded_kind_makes_its_backend(tmp_path):
    from epochal.state.backends import create_backend
    from epochal.state.heap.backend import HeapKeyedStateBackend
    from epochal.state.rocksdb.backend import RocksDBKeyedStateBackend

    heap = create_backend(StateBackendConfig(incremental=True), 16, range(0, 8), "op-0")
    assert isinstance(heap, HeapKeyedStateBackend) and heap.key_groups == range(0, 8)
    rocksdb = create_backend(StateBackendConfig(ROCKSDB, local_dir=str(tmp_path)), 16, range(0, 8), "op-0")
    try:
        assert isinstance(rocksdb, RocksDBKeyedStateBackend) and rocksdb.snapshots is not None
        assert rocksdb.directory.startswith(str(tmp_path / "epochal-rocksdb"))
    finally:
        rocksdb.dispose()
    assert not list((tmp_path / "epochal-rocksdb").iterdir())  # its directory goes with it


def test_the_import_paths_of_the_flat_state_modules_still_work():
    """epochal.moved answers the old module paths (those of names that moved elsewhere too); the
    old modules epochal.state.heap, .rocksdb and .postgres are packages that export what they held."""
    import warnings

    from epochal.state import canonical, rocksdict_scans
    from epochal.state.heap import HeapKeyedStateBackend
    from epochal.state.heap.backend import HeapKeyedStateBackend as heap_backend
    from epochal.state.postgres import POSTGRES_FORMAT, PostgresKeyedStateBackend, epochs, store
    from epochal.state.postgres import backend as postgres_backend
    from epochal.state.rocksdb import RocksDBKeyedStateBackend, read_key_groups, read_stored_groups, reads
    from epochal.state.rocksdb import backend as rocksdb_backend

    assert HeapKeyedStateBackend is heap_backend
    assert RocksDBKeyedStateBackend is rocksdb_backend.RocksDBKeyedStateBackend
    assert (read_key_groups, read_stored_groups) == (reads.read_key_groups, reads.read_stored_groups)
    assert PostgresKeyedStateBackend is postgres_backend.PostgresKeyedStateBackend and POSTGRES_FORMAT == "postgres"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from epochal.state.postgres_epochs import Gid
        from epochal.state.postgres_store import Fenced
        from epochal.state.rocksdb_keys import KeyEncoder, scan

    assert Gid is epochs.EpochTransactionId and Fenced is store.FencedUploadError
    assert KeyEncoder is canonical.KeyEncoder and scan is rocksdict_scans.scan
