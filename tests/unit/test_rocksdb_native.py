"""The native reader of RocksDB checkpoints (state/rocksdb/native.py, state/rocksdb/_native.c)
without Spark: it gives the groups the Python reader gives (every key kind, values of every pickle
length class, several states, empty groups, any key-group range, any chunk size), the canonical
savepoint it writes restores the state, a checkpoint it cannot open falls back to Python, and
``EPOCHAL_NATIVE_READER=0`` turns it off. The chunked writer streams to local and other file
systems with the same handle as a write of the whole file."""

from __future__ import annotations

import os
import pickle
import zlib

import pytest

from epochal.config import ROCKSDB, StateBackendConfig
from epochal.plan.keygroups import key_group_of
from epochal.state.backends import create_backend
from epochal.state.canonical import decode_states
from epochal.state.descriptors import MapStateDescriptor, ValueStateDescriptor
from epochal.state.rocksdb import native as rocksdb_native
from epochal.state.rocksdb.reads import read_stored_groups
from epochal.state.snapshot import stored_chunks, write_group_chunks
from epochal.state.storage import CheckpointStorage, crc

MAX_P = 64
#: a state name longer than 255 bytes of UTF-8 (pickle's BINUNICODE, not SHORT_BINUNICODE)
LONG_NAME = "état-" + "x" * 300

pytestmark = pytest.mark.skipif(os.environ.get(rocksdb_native.SWITCH_ENV) == "0",
                                reason="the native reader is switched off in this environment")


def state() -> dict:
    """Keys of every kind; values whose pickles take 1-, 4-byte lengths (short, 300 B, 70 kB)."""
    out: dict = {f"k{i}": i for i in range(3000)}
    out.update({("t", i): "v" * (i % 400) for i in range(500)})
    out.update({i: bytes([i]) * 70_000 for i in range(3)})
    out.update({None: 1.5, b"raw": [1, 2], 2.5: {"a": 1}})
    return out


@pytest.fixture
def checkpoint(tmp_path):
    """A RocksDB checkpoint of three states (one with a long name, one a map state) over the
    groups 8-55 of 64, whose groups 8-11 are left empty."""
    groups = range(8, 56)
    backend = create_backend(StateBackendConfig(ROCKSDB, local_dir=str(tmp_path / "local")), MAX_P, groups, "op")
    value = backend.get_state(ValueStateDescriptor("v"))
    long = backend.get_state(ValueStateDescriptor(LONG_NAME))
    items = backend.get_state(MapStateDescriptor("m"))
    for key, item in state().items():
        group = key_group_of(key, MAX_P)
        if group in groups and group >= 12:
            backend.set_current_key(key)
            value.update(item)
            if isinstance(key, str) and key.endswith("7"):
                long.update(key)
                items.put("field", item)
    directory = str(tmp_path / "chk")
    backend.local_checkpoint(directory)
    yield directory, groups
    backend.dispose()


def decoded(chunks) -> dict[int, dict]:
    """Every group's pickle of ``chunks``, loaded, by group (checking that spans tile the chunk
    and that each group's CRC is zlib's of its bytes)."""
    out: dict[int, dict] = {}
    for data, spans in chunks:
        end = 0
        for group, offset, length, checksum in spans:
            assert offset == end and group not in out and zlib.crc32(data[offset:offset + length]) == checksum
            out[group] = pickle.loads(data[offset:offset + length])
            end = offset + length
        assert end == len(data)
    return out


def test_the_native_reader_is_built_and_finds_rocksdb():
    assert rocksdb_native.unavailable_reason() is None
    assert os.path.exists(rocksdb_native.library_path())


@pytest.fixture(params=[1, 2, 3], ids=lambda n: f"{n}-threads")
def threads(request, monkeypatch):
    """The reader's threads, each a part of the key groups (one by default)."""
    monkeypatch.setattr(rocksdb_native, "THREADS", request.param)
    return request.param


@pytest.mark.parametrize("groups,min_bytes", [(range(0, 64), 4 << 20), (range(0, 64), 1), (range(20, 21), 1),
                                              (range(13, 40), 100_000), (range(8, 12), 1), (range(56, 64), 1)])
def test_it_reads_the_groups_the_python_reader_reads(checkpoint, groups, min_bytes, threads):
    directory, _ = checkpoint
    native = decoded(rocksdb_native.read_chunks(directory, groups, min_bytes))
    python = decoded(stored_chunks(read_stored_groups(directory, groups), min_bytes))
    assert native == python
    assert all(g in groups for g in native)
    if groups.start <= 12 < groups.stop:  # the state, with keys and values of every kind, is all there
        back = {key: value for states in native.values() for key, value in decode_states(states)["v"].items()}
        assert back == {k: v for k, v in state().items() if key_group_of(k, MAX_P) in range(max(12, groups.start),
                                                                                            min(56, groups.stop))}
        assert any(LONG_NAME in states for states in native.values())


def test_with_small_chunks_every_chunk_but_the_last_of_each_part_holds_at_least_what_was_asked(checkpoint, threads):
    directory, groups = checkpoint
    sizes = [len(data) for data, _ in rocksdb_native.read_chunks(directory, groups, 20_000)]
    # each reading thread's part of the key groups ends with a smaller one, at most
    assert len(sizes) > rocksdb_native.THREADS and sum(size < 20_000 for size in sizes) <= rocksdb_native.THREADS


@pytest.mark.parametrize("reader", ["native", "python"])
@pytest.mark.parametrize("uri", ["local", "mock:///sp"])
def test_the_written_file_is_the_same_as_one_written_whole(tmp_path, checkpoint, monkeypatch, reader, uri):
    """write_group_chunks streams; its handle and bytes are what group_blobs + write_file give."""
    directory, groups = checkpoint
    storage = CheckpointStorage(str(tmp_path / "sp") if uri == "local" else uri)
    if reader == "python":
        monkeypatch.setenv(rocksdb_native.SWITCH_ENV, "0")
    chunks = rocksdb_native.read_chunks(directory, groups, 300_000)
    assert (chunks is None) == (reader == "python")
    handle = write_group_chunks(storage, 4, "op-0.keyed",
                                chunks if chunks is not None else stored_chunks(read_stored_groups(directory, groups)))
    with storage.fs.open_input_file(storage.file_path(4, handle)) as source:
        whole = source.readall()
    assert len(whole) == handle["size"]
    for offset, length, checksum in handle["groups"].values():
        assert crc(whole[offset:offset + length]) == checksum
    assert decoded([(whole, [(int(g), o, n, c) for g, (o, n, c) in handle["groups"].items()])]) == \
        decoded(stored_chunks(read_stored_groups(directory, groups)))


def test_a_directory_it_cannot_open_falls_back_to_python(tmp_path, caplog):
    assert rocksdb_native.read_chunks(str(tmp_path / "nothing-here"), range(0, 4)) is None


def test_switched_off_it_says_so(monkeypatch):
    monkeypatch.setenv(rocksdb_native.SWITCH_ENV, "0")
    assert rocksdb_native.read_chunks("/nowhere", range(0, 1)) is None
    assert rocksdb_native.unavailable_reason() == f"{rocksdb_native.SWITCH_ENV}=0"
    monkeypatch.delenv(rocksdb_native.SWITCH_ENV)
    assert rocksdb_native.unavailable_reason() is None


def test_a_reader_opens_once_and_closed_reads_nothing_more(checkpoint):
    from epochal.state.rocksdb import _native as native  # type: ignore[attr-defined]
    from epochal.state.rocksdb.keys import group_prefix

    directory, groups = checkpoint
    reader = native.Reader(directory, group_prefix(groups.start), group_prefix(groups.stop))
    with pytest.raises(RuntimeError, match="opened once"):
        reader.__init__(directory, b"\x00\x00", b"\xff\xff\xff")
    data, spans = reader.read(1)
    assert len(spans) == 1 and data
    reader.close()
    assert reader.read(1) == (b"", [])
    with pytest.raises(OSError, match="nothing-here"):
        native.Reader(directory + "-nothing-here", b"\x00\x00", b"\xff\xff\xff")


def test_a_chunk_is_a_read_only_buffer_that_outlives_its_reader_and_whose_memory_a_later_read_takes(checkpoint):
    """Chunks are handed over without a copy: the buffer the reader filled. Released, its memory
    serves the next read (no fresh pages per chunk); held, the next read fills another."""
    import numpy as np

    from epochal.state.rocksdb import _native as native  # type: ignore[attr-defined]
    from epochal.state.rocksdb.keys import group_prefix

    def address(chunk) -> int:
        return np.frombuffer(chunk, dtype=np.uint8).__array_interface__["data"][0]

    directory, groups = checkpoint
    reader = native.Reader(directory, group_prefix(groups.start), group_prefix(groups.stop))
    first, spans = reader.read(1)
    view = memoryview(first)
    assert view.readonly and len(first) == len(view) == spans[-1][1] + spans[-1][2]
    with pytest.raises(TypeError):
        view[0] = 0
    where, content = address(first), bytes(view)
    del view, first
    second, _ = reader.read(1)
    assert address(second) == where  # the released buffer, from the pool
    third, spans = reader.read(1)
    assert address(third) != address(second)  # the second is still held
    reader.close()
    assert bytes(second) != content  # the next group, in the first one's memory
    (_, offset, length), = spans  # a chunk outlives its reader (its CRCs are the caller's: read_chunks)
    assert isinstance(pickle.loads(memoryview(third)[offset:offset + length]), dict)


@pytest.mark.parametrize("uri", ["local", "mock:///sp"])
def test_a_file_written_in_chunks_has_the_size_and_checksum_of_its_bytes(tmp_path, uri):
    storage = CheckpointStorage(str(tmp_path / "sp") if uri == "local" else uri)
    chunks = [os.urandom(n) for n in (0, 1, 999, 5000, 70_000)]
    written = storage.write_file_chunks(2, "f", iter(chunks))
    assert written == {"file": "f", "size": sum(map(len, chunks)), "crc": crc(b"".join(chunks))}
    assert storage.read_file(2, written) == b"".join(chunks)
    assert storage.write_file_chunks(2, "g", iter(chunks), whole_crc=False) == {"file": "g", "size": written["size"]}


def test_with_little_read_ahead_the_readers_wait_for_the_writer_and_give_the_same_groups(checkpoint, monkeypatch):
    monkeypatch.setattr(rocksdb_native, "THREADS", 3)
    monkeypatch.setattr(rocksdb_native, "READ_AHEAD_BYTES", 1)  # one chunk ahead per reader
    directory, groups = checkpoint
    assert decoded(rocksdb_native.read_chunks(directory, groups, 5_000)) == \
        decoded(stored_chunks(read_stored_groups(directory, groups), 5_000))


def test_a_consumer_that_stops_early_stops_the_reading_threads(checkpoint, monkeypatch):
    import threading
    import time

    monkeypatch.setattr(rocksdb_native, "THREADS", 2)
    monkeypatch.setattr(rocksdb_native, "READ_AHEAD_BYTES", 1)
    directory, groups = checkpoint
    chunks = rocksdb_native.read_chunks(directory, groups, 5_000)
    next(chunks)
    chunks.close()
    deadline = time.monotonic() + 5
    while any(t.name.startswith("epochal-rocksdb-read") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "reading threads still running after the consumer stopped"
        time.sleep(0.01)


def test_a_corrupt_checkpoint_fails_the_read_with_rocksdbs_message(checkpoint):
    """A block whose checksum does not match fails the savepoint (OSError from the reading
    thread, raised to the writer), instead of writing what RocksDB could not verify."""
    directory, groups = checkpoint
    largest = max((os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".sst")),
                  key=os.path.getsize)
    with open(largest, "r+b") as sst:
        sst.seek(os.path.getsize(largest) // 3)
        sst.write(b"\xde\xad\xbe\xef" * 64)
    with pytest.raises(OSError, match="(?i)corrupt|checksum"):
        for _ in rocksdb_native.read_chunks(directory, groups, 5_000):
            pass
