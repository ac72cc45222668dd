"""Keyed state larger than a worker's memory (issue 15): with ``worker_memory_limit_bytes`` set,
a job whose keyed state per worker is more than twice the limit completes on RocksDB with
exactly the oracle's output, while the same job on the heap backend fails with the one readable
memory-limit error (so the limit is real). Then the workers' processes, which PySpark reuses,
have their own limit back.

The job: every key gets two records; the first stores a 256 KiB value (distinct per key, not
compressible) in a ValueState, the second reads it back after the rest of the state was written
(by then long flushed to SST files). Each emits the CRC-32 of the value it holds.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import resource
import time
import zlib

import pytest

import epochal
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from epochal.control.restart import NoRestart
from epochal.errors import JobFailedError
from epochal.plan.keygroups import key_group_of, subtask_for_key_group
from epochal.state.descriptors import ValueStateDescriptor
from epochal.state.storage import CheckpointStorage

pytestmark = [pytest.mark.slow, pytest.mark.chaos]

#: what the job may add to each worker process's data memory (EngineConfig.worker_memory_limit_bytes)
LIMIT = 256 << 20
VALUE = 256 << 10  # one key's state
PARALLELISM, MAX_PARALLELISM = 2, 128
#: keys per keyed subtask: each holds more than twice the limit in state
PER_SUBTASK = 2 * LIMIT // VALUE + 32
_POOL = random.Random(15).randbytes(4 << 20)


def _keys() -> tuple[int, ...]:
    """The first PER_SUBTASK keys (ints) of each keyed subtask, so both hold the same state."""
    picked: dict[int, list[int]] = {s: [] for s in range(PARALLELISM)}
    key = 0
    while min(map(len, picked.values())) < PER_SUBTASK:
        owner = picked[subtask_for_key_group(key_group_of(key, MAX_PARALLELISM), PARALLELISM, MAX_PARALLELISM)]
        if len(owner) < PER_SUBTASK:
            owner.append(key)
        key += 1
    return tuple(sorted(k for keys in picked.values() for k in keys))


KEYS = _keys()


def key_at(i: int) -> int:
    return KEYS[i % len(KEYS)]


def value_of(key: int) -> bytes:
    """A key's state: its own bytes (a slice of random bytes at a per-key offset, led by the key)."""
    offset = key * 7919 % (len(_POOL) - VALUE)
    return key.to_bytes(8, "big") + _POOL[offset:offset + VALUE - 8]


class StoreThenRead(epochal.ProcessFunction):
    def open(self, context):
        self.descriptor = ValueStateDescriptor("value", default=None)

    def process_element(self, key, ctx):
        state = ctx.get_state(self.descriptor)
        value = state.value()
        if value is None:
            value = value_of(key)
            state.update(value)
            yield f"{key} stored {zlib.crc32(value)}"
        else:
            yield f"{key} read {zlib.crc32(value)}"


def oracle() -> collections.Counter:
    lines: collections.Counter = collections.Counter()
    for key in KEYS:
        crc = zlib.crc32(value_of(key))
        lines[f"{key} stored {crc}"] += 1
        lines[f"{key} read {crc}"] += 1
    return lines


def build(make_env, tmp_path, backend: str):
    env = make_env(PARALLELISM, max_parallelism=MAX_PARALLELISM, worker_memory_limit_bytes=LIMIT)
    if backend == "rocksdb":  # small memtables and cache: RocksDB's own memory stays far below the limit
        env.set_state_backend("rocksdb", local_dir=str(tmp_path / "rocksdb"))
        env.state_backend = dataclasses.replace(env.state_backend, write_buffer_bytes=4 << 20,
                                                block_cache_bytes=4 << 20)
    else:
        env.set_state_backend("heap")
    env.enable_checkpointing(1.0, storage=str(tmp_path / "chk"))  # a declined checkpoint fails the job
    env.set_restart_strategy(NoRestart())
    out = tmp_path / "out"
    (env.from_generator(key_at, count=2 * len(KEYS), rate=None).uid("keys")
     .key_by(lambda key: key).process(StoreThenRead()).name("store-then-read").uid("state")
     .sink_to(ExactlyOnceFileSink(str(out)), name="sink"))
    return env, out


def _rlimits(_):
    import os

    return os.getpid(), resource.getrlimit(resource.RLIMIT_DATA)


def test_keyed_state_twice_the_memory_limit_completes_on_rocksdb_exactly_once(make_env, spark, tmp_path):
    env, out = build(make_env, tmp_path, "rocksdb")
    started = time.monotonic()
    result = env.execute("larger-than-memory", timeout=400)
    elapsed = time.monotonic() - started
    assert not result.restarts
    assert collections.Counter(read_committed_lines(str(out))) == oracle()
    assert result.completed_checkpoints >= 2, result.checkpoints
    for metrics in result.metrics.values():  # the limit was applied, and held
        assert metrics["memory_limit_bytes"] == LIMIT
        assert metrics["data_bytes"] <= metrics["data_bytes_at_start"] + LIMIT
    storage = CheckpointStorage(result.checkpoint_path)
    subtasks = storage.read_metadata(storage.latest())["operators"]["state"]["subtasks"]
    state_bytes = {int(s): sum(f["size"] for f in h["keyed"]["shared"]) for s, h in subtasks.items()}
    assert len(state_bytes) == PARALLELISM and min(state_bytes.values()) >= 2 * LIMIT, state_bytes
    print(f"\nRocksDB: {sum(state_bytes.values()) >> 20} MiB of SST files ({state_bytes}) under a limit of "
          f"{LIMIT >> 20} MiB per worker (held at start: "
          f"{[m['data_bytes_at_start'] >> 20 for m in result.metrics.values()]} MiB, at the end "
          f"{[m['data_bytes'] >> 20 for m in result.metrics.values()]} MiB, RSS "
          f"{[m['rss_bytes'] >> 20 for m in result.metrics.values()]} MiB) in {elapsed:.1f} s")
    # the workers' processes stay in PySpark's pool: the next job finds their own limit back
    pids = {m["pid"] for m in result.metrics.values()}
    own = resource.getrlimit(resource.RLIMIT_DATA)  # what the worker processes inherited
    seen = dict(spark.sparkContext.parallelize(range(4), 4).map(_rlimits).collect())
    assert all(limits == own for pid, limits in seen.items() if pid in pids), (own, seen)
    print(f"reused after the job: {sorted(pids & set(seen))} of {sorted(pids)}")


def test_the_same_job_on_the_heap_backend_fails_with_the_memory_limit_error(make_env, tmp_path):
    env, out = build(make_env, tmp_path, "heap")
    started = time.monotonic()
    with pytest.raises(JobFailedError) as failure:
        env.execute("larger-than-memory-heap", timeout=200)
    message = str(failure.value)
    print(f"\nheap: failed after {time.monotonic() - started:.1f} s: {message}")
    assert "ran out of memory" in message and "worker_memory_limit_bytes (256 MiB beyond" in message, message
    assert "set_state_backend('rocksdb')" in message
    assert "Traceback" not in message  # one readable error
