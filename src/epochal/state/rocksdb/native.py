"""The native reader of RocksDB checkpoints: a RocksDB subtask's canonical savepoint without a
Python object per entry (issue 34; docs/savepoints.md, "The native reader").

A canonical savepoint of a RocksDB subtask reads every entry of its local checkpoint and writes
the key groups in the canonical layout's stored-bytes encoding (:mod:`epochal.state.canonical`).
Read through rocksdict, that costs about 0.9 µs of Python an entry (rocksdict's iterator hands
over each key and value as a Python object, the lists and the pickles), under the interpreter
lock that the job's processing thread needs too: about 3x a native savepoint at 1 M keys. The
extension ``epochal.state.rocksdb._native`` (C, built by ``pip install`` where a C compiler is;
optional) reads the checkpoint through RocksDB's own C API with the lock released, and writes
the same pickles itself (``pickle.loads`` of a group's blob gives what
:func:`~epochal.state.canonical.dump_stored` of :func:`~epochal.state.rocksdb.reads.read_stored_groups`'
group would). The files are the same either way; only the cost differs.

The RocksDB library is the one PySpark already ships: ``librocksdbjni-<platform>`` inside the
``rocksdbjni`` JAR of ``pyspark/jars`` (Spark's own state store uses it), which exports RocksDB's
whole C API. It is extracted once into a directory of this user's (:func:`library_path`); the
variable ``EPOCHAL_ROCKSDB_LIBRARY`` names another ``librocksdb.so`` instead. RocksDB reads the
files of its own and earlier versions; a checkpoint it cannot read (a library older than
rocksdict's) is read in Python instead, with one warning in the worker's log.

``EPOCHAL_NATIVE_READER=0`` turns the native reader off (benchmarks compare the two with it).
"""

from __future__ import annotations

import glob
import logging
import os
import platform
import queue
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from typing import Any

from epochal.state.checksums import crc32
from epochal.state.rocksdb.keys import group_prefix
from epochal.state.snapshot import Chunk

__all__ = ["library_path", "read_chunks", "unavailable_reason"]

LIBRARY_ENV = "EPOCHAL_ROCKSDB_LIBRARY"
#: Threads that read one checkpoint, each a part of its key groups (``EPOCHAL_NATIVE_READER_THREADS``).
#: RocksDB's iteration is the cost, about 0.3 µs an entry. One thread, overlapping the writer,
#: reads as fast as two and costs less CPU (one subtask's 500k entries in one process: 0.26 s and
#: 0.34-0.36 CPU-s, against 0.28-0.36 s and 0.39-0.47 CPU-s with two); beside a job that keeps
#: the cores busy the savepoint is bound by CPU. On 2 busy cores, 1, 2 and 4 threads gave the same
#: duration at 1 M keys, and more threads slowed the job's barrier alignment meanwhile
THREADS = int(os.environ.get("EPOCHAL_NATIVE_READER_THREADS", "1"))
#: Bytes the reading threads after the first may hold before the writer gets to their part
READ_AHEAD_BYTES = 256 << 20
#: Chunks larger than the Python reader's (:data:`~epochal.state.snapshot.CHUNK_BYTES`): each
#: chunk takes the interpreter lock a few times, and beside a busy processing thread each take
#: may wait its switch interval (5 ms)
NATIVE_CHUNK_BYTES = 16 << 20
SWITCH_ENV = "EPOCHAL_NATIVE_READER"

log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict[str, Any] = {}  # "module" once loaded, or "reason" why not


def _jni_library_name() -> str | None:
    """The RocksDB library's name inside the rocksdbjni JAR on this platform, None if it has none."""
    machine = platform.machine().lower()
    if sys.platform.startswith("linux"):
        suffix = {"x86_64": "64", "amd64": "64", "aarch64": "-aarch64", "arm64": "-aarch64",
                  "ppc64le": "-ppc64le", "s390x": "-s390x", "riscv64": "-riscv64"}.get(machine)
        return None if suffix is None else f"librocksdbjni-linux{suffix}.so"
    if sys.platform == "darwin":
        return f"librocksdbjni-osx-{'arm64' if machine == 'arm64' else 'x86_64'}.jnilib"
    return None


def library_path() -> str:
    """The path of a shared library with RocksDB's C API: ``$EPOCHAL_ROCKSDB_LIBRARY``, else the
    one in Spark's rocksdbjni JAR (``$SPARK_HOME/jars``, else PySpark's own), extracted (once per
    JAR, atomically, so concurrent workers are safe) into ``<tmp>/epochal-<uid>/`` (mode 0700).
    Raises :class:`OSError` when there is none."""
    named = os.environ.get(LIBRARY_ENV)
    if named:
        return named
    import pyspark

    # a Spark worker may import PySpark from SPARK_HOME's python/lib/pyspark.zip: its JARs are
    # then in SPARK_HOME/jars (a pip-installed PySpark is its own SPARK_HOME)
    homes = [os.environ.get("SPARK_HOME", ""), os.path.dirname(pyspark.__file__)]
    jars = next((found for home in homes if home
                 for found in [sorted(glob.glob(os.path.join(home, "jars", "rocksdbjni-*.jar")))] if found), [])
    member = _jni_library_name()
    if not jars or member is None:
        raise OSError(f"no RocksDB library: PySpark has no rocksdbjni JAR for {sys.platform}/{platform.machine()}"
                      f" (set {LIBRARY_ENV} to a librocksdb shared library)")
    jar = jars[-1]
    directory = os.path.join(tempfile.gettempdir(), f"epochal-{os.getuid()}")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if os.stat(directory).st_uid != os.getuid():
        raise OSError(f"{directory} belongs to another user: set {LIBRARY_ENV}")
    target = os.path.join(directory, f"{os.path.basename(jar)[:-4]}-{os.path.getsize(jar)}-{member}")
    if not os.path.exists(target):
        with zipfile.ZipFile(jar) as archive:
            try:
                data = archive.read(member)
            except KeyError:
                raise OSError(f"{jar} holds no {member}: set {LIBRARY_ENV} to a librocksdb shared library") from None
        partial = f"{target}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(partial, "wb") as out:
            out.write(data)
        os.replace(partial, target)
    return target


def _module() -> Any | None:
    """The loaded extension, or None (the reason in ``_state["reason"]``)."""
    if _switched_off():
        return None
    with _lock:
        if "module" in _state or "reason" in _state:
            return _state.get("module")
        try:
            import epochal.state.rocksdb._native as native
        except ImportError:
            _state["reason"] = "the extension epochal.state.rocksdb._native was not built (no C compiler at install)"
            return None
        try:
            native.load(library_path())
        except OSError as error:
            _state["reason"] = str(error)
            return None
        _state["module"] = native
        return native


def _switched_off() -> bool:
    return os.environ.get(SWITCH_ENV, "1") == "0"


def unavailable_reason() -> str | None:
    """None when the native reader is in use, else why not (one line)."""
    if _module() is not None:
        return None
    return f"{SWITCH_ENV}=0" if _switched_off() else _state.get("reason", "unavailable")


def read_chunks(directory: str, key_groups: range, min_bytes: int = NATIVE_CHUNK_BYTES) -> Iterator[Chunk] | None:
    """The canonical stored-bytes groups of the RocksDB checkpoint at ``directory`` (one
    subtask's, not written to meanwhile) for ``key_groups``, in chunks of at least ``min_bytes``
    with their groups' spans, as :func:`~epochal.state.snapshot.stored_chunks` of
    :func:`~epochal.state.rocksdb.reads.read_stored_groups` gives them (the same groups, each pickle
    loading to the same value). The checkpoint is opened now; each chunk is read when asked
    for, without the interpreter lock. None when the native reader is off or unavailable, or
    RocksDB's library here cannot open this checkpoint (warned once): the caller reads it in
    Python then. A read that fails later raises :class:`OSError` with RocksDB's message."""
    native = _module()
    if native is None:
        return None
    parts = [range(key_groups.start + len(key_groups) * i // THREADS, key_groups.start + len(key_groups) * (i + 1)
                   // THREADS) for i in range(THREADS)]
    readers: list[Any] = []
    try:
        for part in parts:
            if part:
                readers.append(native.Reader(directory, group_prefix(part.start), group_prefix(part.stop)))
    except OSError as error:
        for reader in readers:
            reader.close()
        if not _state.get("warned"):
            _state["warned"] = True
            log.warning("the native RocksDB reader cannot read %s (%s); reading it in Python instead", directory, error)
        return None
    return _in_order(readers, min_bytes)


def _chunks(reader: Any, min_bytes: int) -> Iterator[Chunk]:
    """``reader``'s chunks, each a memoryview of the buffer the reader filled (no copy; its memory
    serves a later read once the view is gone) with each group's span and its CRC-32
    (:func:`~epochal.state.checksums.crc32` of the group's bytes, here on the reading thread)."""
    try:
        while True:
            data, spans = reader.read(min_bytes)
            if not spans:
                return
            view = memoryview(data)
            yield view, [(group, offset, length, crc32(view[offset:offset + length]))
                         for group, offset, length in spans]
    finally:
        reader.close()


def _in_order(readers: list[Any], min_bytes: int) -> Iterator[Chunk]:
    """Every reader's chunks, in key-group order (the readers' order), each reader read by a
    thread of its own (RocksDB's iteration without the interpreter lock) ahead of the consumer,
    which meanwhile writes what it has: reading and writing overlap. The readers after the first
    hold at most :data:`READ_AHEAD_BYTES` between them until the consumer gets to them. A
    consumer that stops early stops the readers after their current chunk; a reader's error is
    raised to the consumer."""
    stop = threading.Event()
    ahead = max(1, READ_AHEAD_BYTES // max(min_bytes, 1) // max(len(readers) - 1, 1))
    queues: list[queue.Queue[Any]] = [queue.Queue(ahead) for _ in readers]

    def put(out: queue.Queue[Any], item: Any) -> None:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def read(reader: Any, out: queue.Queue[Any]) -> None:
        try:
            for chunk in _chunks(reader, min_bytes):
                if stop.is_set():
                    break
                put(out, chunk)
            put(out, None)
        except BaseException as error:  # handed to the consumer
            put(out, error)

    threads = [threading.Thread(target=read, args=(reader, out), name=f"epochal-rocksdb-read-{i}", daemon=True)
               for i, (reader, out) in enumerate(zip(readers, queues, strict=True))]
    for thread in threads:
        thread.start()
    try:
        for out in queues:
            while (item := out.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
    finally:
        stop.set()
