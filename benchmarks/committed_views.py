"""What ``read_committed`` costs a worker at each checkpoint's barrier (issue 37: "keep what that
needs cheap and say what it costs"), without Spark: the processing thread's time to take the
pending view of one subtask's queryable state (``dataflow.queries.shown.views_of``, what
``Worker._do_capture`` calls at every barrier), and a ``read_committed`` point lookup in it
afterwards, at each state size, on each backend:

* ``rocksdb``: a local checkpoint's views (``RocksDBKeyedStateBackend.committed_views``);
* ``rocksdb copy``: the same backend through the copying path the views replaced (every entry
  read out of RocksDB and unpickled into a dict at the barrier);
* ``heap``: the heap backend's copy (what forked and incremental heap snapshots take; a full
  snapshot by a thread shares its own copy and costs nothing);
* ``postgres`` (``--dsn``, or a server started for the run with ``--postgres``): the committed
  rows' views (``PostgresKeyedStateBackend.committed_views``), and ``postgres copy``.

One subtask of two (64 of 128 key groups), a value state of ~100-byte values, every key written
once. ``--repeats`` barriers each; the state is changed between them (a tenth of the keys) so a
local checkpoint has new files to link. The first lookup of a view pays for opening it (RocksDB)
or reading the row (PostgreSQL); ``lookup_ms`` is the median of 200 lookups of random keys after it.

    .venv/bin/python -m benchmarks.committed_views --sizes 100000 500000            # ~1 min
    .venv/bin/python -m benchmarks.committed_views --sizes 100000 --postgres        # + PostgreSQL

Writes ``committed_views.csv`` and ``committed_views.png`` into ``--out``; prints one line per
backend and size.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.results import RESULTS, machine, pyplot, save_figure, write_csv

MAXP = 128
GROUPS = range(0, 64)


class _Copying:
    """A backend seen without ``committed_views``: ``views_of`` copies its tables, as before."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        if name == "committed_views":
            raise AttributeError(name)
        return getattr(self._backend, name)


def backend_of(kind: str, work: Path, dsn: str | None) -> Any:
    from epochal.config import POSTGRES, ROCKSDB, StateBackendConfig
    from epochal.state.backends import create_backend

    if kind.startswith("rocksdb"):
        return create_backend(StateBackendConfig(ROCKSDB, local_dir=str(work)), MAXP, GROUPS, "op")
    if kind.startswith("postgres"):
        from epochal.state.postgres.schema import ensure_schema

        ensure_schema(dsn, "epochal_state", False)
        config = StateBackendConfig(POSTGRES, dsn=dsn, namespace=f"views{time.time_ns()}")
        backend = create_backend(config, MAXP, GROUPS, "op", uid="op", job_name="views")
        backend.open_state(None)
        return backend
    return create_backend(StateBackendConfig("heap"), MAXP, GROUPS, "op")


def keys_of(count: int) -> list[int]:
    from epochal.plan.keygroups import key_group_of

    keys: list[int] = []
    i = 0
    while len(keys) < count:
        if key_group_of(i, MAXP) in GROUPS:
            keys.append(i)
        i += 1
    return keys


def write(backend: Any, state: Any, keys: list[int], generation: int) -> None:
    for key in keys:
        backend.set_current_key(key)
        state.update((key, generation, random.randbytes(80)))


def checkpointed(backend: Any, kind: str, checkpoint_id: int) -> None:
    """What a checkpoint does to the backend besides the view (PostgreSQL: its epoch committed, so
    the next barrier's epoch is small, as in a job)."""
    if kind.startswith("postgres"):
        backend.begin_snapshot(checkpoint_id).upload(None, checkpoint_id, "x")
        backend.checkpoint_completed(checkpoint_id)


def measure(kind: str, size: int, repeats: int, work: Path, dsn: str | None) -> dict[str, Any]:
    from epochal.dataflow.queries.shown import views_of
    from epochal.plan.keygroups import key_group_of
    from epochal.state.descriptors import ValueStateDescriptor

    backend = backend_of(kind, work, dsn)
    try:
        state = backend.get_state(ValueStateDescriptor("latest", queryable="latest"))
        keys = keys_of(size)
        write(backend, state, keys, 0)
        checkpointed(backend, kind, 1)
        seen = _Copying(backend) if kind.endswith("copy") else backend
        took, lookups, first = [], [], []
        for repeat in range(repeats):
            write(backend, state, random.sample(keys, size // 10), repeat + 1)
            checkpointed(backend, kind, repeat + 2)
            gc.collect()
            started = time.perf_counter()
            views = views_of(seen)
            took.append(time.perf_counter() - started)
            groups = views["latest"]
            key = random.choice(keys)
            started = time.perf_counter()
            assert groups[key_group_of(key, MAXP)].get(key) is not None
            first.append(time.perf_counter() - started)
            for key in random.sample(keys, 200):
                started = time.perf_counter()
                groups[key_group_of(key, MAXP)].get(key)
                lookups.append(time.perf_counter() - started)
            del views, groups
        return {"backend": kind, "keys": size, "repeats": repeats,
                "barrier_ms": statistics.median(took) * 1e3, "barrier_ms_max": max(took) * 1e3,
                "first_lookup_ms": statistics.median(first) * 1e3, "lookup_ms": statistics.median(lookups) * 1e3,
                "machine": machine()}
    finally:
        dispose = getattr(backend, "dispose", None)  # (the heap backend has nothing to dispose of)
        if dispose is not None:
            dispose()


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind in dict.fromkeys(r["backend"] for r in rows):
        mine = sorted((r for r in rows if r["backend"] == kind), key=lambda r: r["keys"])
        ax.plot([r["keys"] for r in mine], [r["barrier_ms"] for r in mine], marker="o", label=kind,
                linestyle="--" if kind.endswith("copy") or kind == "heap" else "-")
    ax.set(xscale="log", yscale="log", xlabel="keys of the subtask's queryable state",
           ylabel="processing thread at the barrier (ms, median)",
           title="read_committed: the view taken at each barrier")
    ax.legend()
    save_figure(fig, path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 500_000])
    parser.add_argument("--backends", nargs="+", default=["rocksdb", "rocksdb copy", "heap"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dsn", default=None, help="a PostgreSQL server for the postgres backends")
    parser.add_argument("--postgres", action="store_true", help="start a server for the postgres backends")
    parser.add_argument("--out", default=str(RESULTS / "committed_views"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="epochal-committed-views-"))
    server = None
    backends = list(args.backends)
    if args.postgres or args.dsn:
        backends += [b for b in ("postgres", "postgres copy") if b not in backends]
    if args.postgres and not args.dsn:
        from tests.postgres_server import PostgresServer

        server = PostgresServer(work / "pg").start()
        args.dsn = server.dsn
    rows = []
    try:
        for size in args.sizes:
            for kind in backends:
                row = measure(kind, size, args.repeats, work, args.dsn)
                rows.append(row)
                print(f"{kind:>14} {size:>9,} keys: barrier {row['barrier_ms']:9.1f} ms (max "
                      f"{row['barrier_ms_max']:.1f}), first lookup {row['first_lookup_ms']:.2f} ms, "
                      f"lookup {row['lookup_ms']:.3f} ms", flush=True)
    finally:
        if server is not None:
            server.destroy()
    write_csv(out / "committed_views.csv", rows)
    plot(rows, out / "committed_views.png")


if __name__ == "__main__":
    main()
