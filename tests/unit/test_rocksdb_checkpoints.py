"""RocksDB checkpoints through checkpoint storage (state/rocksdb/checkpoints.py) without Spark: the
synchronous part is a local hard-link checkpoint, later checkpoints upload only new SST files and
reference the others, restores at another parallelism read only owned key groups (into RocksDB or
the heap backend), and retention keeps every SST file a retained checkpoint needs."""

from __future__ import annotations

import errno
import os
import random

import pytest

from epochal.config import ROCKSDB, StateBackendConfig
from epochal.control.checkpoint_files import shared_files_of
from epochal.plan.keygroups import key_group_of, key_group_range
from epochal.state.backends import create_backend
from epochal.state.descriptors import ValueStateDescriptor
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.rocksdb.checkpoints import download
from epochal.state.storage import CheckpointError, CheckpointStorage
from tests.unit.snapshot_helpers import CheckpointHistory, metadata, write_checkpoint
from tests.unit.snapshot_helpers import restored as snapshot_restored

MAX_P = 16
UID = "agg-1"


class Subtask:
    def __init__(self, index: int, parallelism: int, storage: CheckpointStorage, local: str) -> None:
        self.index = index
        config = StateBackendConfig(ROCKSDB, local_dir=local, write_buffer_bytes=1 << 20)
        self.backend = create_backend(config, MAX_P, key_group_range(index, parallelism, MAX_P), f"{UID}-{index}")
        self.storage = storage
        self.state = self.backend.get_state(ValueStateDescriptor("v"))

    def owns(self, key) -> bool:
        return key_group_of(key, MAX_P) in self.backend.key_groups

    def put(self, key, value) -> None:
        self.backend.set_current_key(key)
        self.state.update(value)

    def remove(self, key) -> None:
        self.backend.set_current_key(key)
        self.state.clear()

    def checkpoint(self, checkpoint_id: int) -> dict:
        return write_checkpoint(self.backend, self.storage, checkpoint_id, self.index, UID)[1]


def restored(storage, checkpoint_id, meta, parallelism, local, backend_kind="heap"):
    def make(index, groups):
        if backend_kind == "heap":
            return HeapKeyedStateBackend(MAX_P, groups)
        return create_backend(StateBackendConfig(ROCKSDB, local_dir=local), MAX_P, groups, f"r{index}")
    return snapshot_restored(storage, checkpoint_id, meta, UID, MAX_P, parallelism, make)


@pytest.mark.parametrize("restore_parallelism,restore_backend", [(3, "heap"), (1, "rocksdb"), (2, "rocksdb")])
def test_incremental_sst_uploads_and_rescaled_restores(tmp_path, restore_parallelism, restore_backend):
    storage = CheckpointStorage(str(tmp_path / "checkpoints"))
    local = str(tmp_path / "local")
    subtasks = [Subtask(i, 2, storage, local) for i in range(2)]
    rng = random.Random(3)
    keys = [f"k{i}" for i in range(2_000)]
    uploaded_before: set[str] = set()
    for checkpoint_id in range(1, 5):
        for _ in range(3_000 if checkpoint_id == 1 else 300):
            key = rng.choice(keys)
            owner = next(s for s in subtasks if s.owns(key))
            owner.remove(key) if rng.random() < 0.1 else owner.put(key, "x" * rng.randrange(1, 200))
        handles = {s.index: s.checkpoint(checkpoint_id) for s in subtasks}
        for subtask in subtasks:
            assert not [n for n in os.listdir(os.path.dirname(subtask.backend.directory)) if ".chk-" in n]
            subtask.backend.checkpoint_completed(checkpoint_id)
        shared = {f["file"] for h in handles.values() for f in h["keyed"]["shared"]}
        new = {f for f in shared if f".c{checkpoint_id}." in f}
        if checkpoint_id > 1:  # earlier SST files are referenced, not uploaded again
            assert shared - new and shared - new <= uploaded_before
        uploaded_before |= shared
        live = {}
        for subtask in subtasks:
            live.update(subtask.backend.capture())
        meta = metadata(UID, handles)
        storage.verify_files(checkpoint_id, meta)
        assert restored(storage, checkpoint_id, meta, restore_parallelism, local, restore_backend) == live
    for subtask in subtasks:
        subtask.backend.dispose()
    assert not os.listdir(os.path.join(local, "epochal-rocksdb"))


def test_retention_never_deletes_an_sst_file_a_retained_checkpoint_needs(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "checkpoints"))
    store = CheckpointHistory(storage, retained=1)
    subtask = Subtask(0, 1, storage, str(tmp_path / "local"))
    rng = random.Random(5)
    for checkpoint_id in range(1, 7):
        for _ in range(2_000):
            subtask.put(f"k{rng.randrange(5_000)}", "y" * 50)
        meta = metadata(UID, {0: subtask.checkpoint(checkpoint_id)})
        store.complete(checkpoint_id, meta)
        subtask.backend.checkpoint_completed(checkpoint_id)
        assert set(storage.shared_files()) == shared_files_of(storage.read_metadata(checkpoint_id))
        newest = storage.read_metadata(store.completed[-1])
        storage.verify_files(store.completed[-1], newest)
        assert restored(storage, checkpoint_id, newest, 1, str(tmp_path)) == subtask.backend.capture()
    subtask.backend.dispose()


def test_a_restore_from_local_storage_links_sst_files_and_still_checks_them(tmp_path, monkeypatch):
    """On a local file system a restore hard-links the stored SST files instead of copying them;
    the database adopted from them goes on writing without changing a stored byte; where the file
    system refuses links the files are copied; and a corrupt file is refused either way."""
    storage = CheckpointStorage(str(tmp_path / "checkpoints"))
    subtask = Subtask(0, 1, storage, str(tmp_path / "local"))
    for i in range(3_000):
        subtask.put(f"k{i}", "z" * 100)
    handle = subtask.checkpoint(1)
    subtask.backend.checkpoint_completed(1)
    live = subtask.backend.capture()
    meta = metadata(UID, {0: handle})
    ssts = [f for f in handle["keyed"]["shared"] if f["name"].endswith(".sst")]
    assert ssts

    linked = download(storage, 1, handle["keyed"], str(tmp_path / "linked"))
    for file in ssts:
        assert os.stat(os.path.join(linked, file["name"])).st_ino == os.stat(storage.file_path(1, file)).st_ino
    adopted = create_backend(StateBackendConfig(ROCKSDB, local_dir=str(tmp_path / "local")), MAX_P,
                             key_group_range(0, 1, MAX_P), "adopted")
    adopted.adopt_checkpoint(linked)
    assert adopted.capture() == live
    state = adopted.get_state(ValueStateDescriptor("v"))
    for i in range(20_000):  # overwrite and add, then flush and compact everything
        adopted.set_current_key(f"k{i % 6_000}")
        state.update("w" * 120)
    adopted.local_checkpoint(str(tmp_path / "later"))
    for cf in adopted._cfs.values():
        cf.compact_range(None, None)
    adopted.dispose()
    storage.verify_files(1, meta)  # the stored files are as they were written
    assert restored(storage, 1, meta, 1, str(tmp_path / "local")) == live

    def refuse(*_: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refuse)
    copied = download(storage, 1, handle["keyed"], str(tmp_path / "copied"))
    for file in ssts:
        assert os.stat(os.path.join(copied, file["name"])).st_ino != os.stat(storage.file_path(1, file)).st_ino
    monkeypatch.undo()

    path = storage.file_path(1, ssts[0])
    with open(path, "r+b") as stored:  # one flipped byte in the middle of a stored SST file
        stored.seek(ssts[0]["size"] // 2)
        byte = stored.read(1)
        stored.seek(ssts[0]["size"] // 2)
        stored.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CheckpointError, match="corrupt"):
        download(storage, 1, handle["keyed"], str(tmp_path / "again"))
    assert not os.path.exists(tmp_path / "again" / ssts[0]["name"])


def test_a_canonical_savepoint_is_a_local_checkpoint_at_the_barrier_written_as_key_groups_later(tmp_path):
    """The barrier only links a local checkpoint; changes after it are not in the savepoint; its
    file is the canonical layout (one pickle of stored bytes per key group), which the heap restores."""
    from epochal.state.snapshot import materialize

    storage = CheckpointStorage(str(tmp_path / "checkpoints"))
    subtasks = [Subtask(i, 2, storage, str(tmp_path / "local")) for i in range(2)]
    expected = {}
    for i in range(300):
        key = f"k{i}"
        owner = next(s for s in subtasks if s.owns(key))
        owner.put(key, i)
        expected[key] = i
    handles = {}
    for subtask in subtasks:
        plan = subtask.backend.begin_savepoint(7, native=False)
        assert os.path.isdir(plan.directory)
        for key in list(expected)[:20]:  # after the barrier: not in the savepoint
            if subtask.owns(key):
                subtask.put(key, -1)
        captured = subtask.backend.capture_snapshot(plan)
        handles[subtask.index] = materialize(storage, 7, subtask.index, {UID: {"keyed": captured}})[UID]
        assert not os.path.exists(plan.directory)  # the local checkpoint is gone once written
        # canonical, not SST files
        assert set(handles[subtask.index]["keyed"]) == {"file", "size", "groups", "encoding"}
    back = restored(storage, 7, metadata(UID, handles), 3, str(tmp_path / "restored"))
    assert {key: value for states in back.values() for key, value in states["v"].items()} == expected
