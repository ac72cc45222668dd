"""papers/001 §5 Fig. 9 on epochal: snapshot duration and alignment against state size, alignment
against parallelism, and recovery time against state size, on the keyed-state backends.

The job: generator -> key_by(key) rolling aggregate (``reduce``: a count and the latest 96-byte
payload per key: the state) -> map(key % 1009) -> key_by(bucket) count -> discard, so barriers are
aligned at two shuffle stages (RBEA, the paper's job, has three). The first ``keys`` records write
every key once (the *fill*); after that the records update only a hot ``--hot`` fraction of the
keys, so a large state changes little between checkpoints (what incremental snapshots are for);
``--hot-keys N`` makes it N keys at every size instead, so that an epoch changes as much at
every state size and only the state grows (what "recovery flat in state size" is about: with a
fraction, the checkpoint in flight at the kill grows with the state too).
A checkpoint whose source positions cover ``keys`` records holds the whole state (``steady``).

Experiments (``--experiments``):

* ``sizes`` (Fig. 9 a and b, and recovery vs state size): every backend (``--backends``: ``heap``,
  full snapshots by ``fork()``; ``heap-incremental``; ``rocksdb``; ``postgres`` and
  ``postgres-mvcc``, on ``--dsn`` or a server started for the run) at every state size
  (``--sizes``, keys) at ``--parallelism`` (2), on Spark ``local[--slots]`` (default: as many task
  slots as workers, so a restarted attempt waits for the failed one's slots; epochal's own default
  master has at least 4). Once ``--checkpoints`` steady checkpoints completed,
  worker p-1 is SIGKILLed (``epochal.testing.kill_worker``) within a poll (50 ms) of the last one
  completing; the run ends when the restored job completed a checkpoint too (phase ``restored``;
  the others are ``fill``, ``steady`` or ``aborted``).
* ``parallelism`` (Fig. 9 c): ``--align-backend`` at ``--align-keys`` keys, at each of
  ``--align-parallelism`` (1 2 3 4; up to 16 on a bigger machine), without a kill.

Everything per checkpoint comes from the JobMaster's checkpoint statistics
(``JobClient.checkpoint_stats()``): ``duration_s`` (trigger -> last acknowledgement),
``sync_s_max`` (the longest synchronous part of a subtask's snapshot: how long a processing thread
stalled), ``async_s_max``, ``bytes`` (what the checkpoint wrote), ``alignment_s_max`` and
``alignment_s_sum`` (over the subtasks; Fig. 9 b/c plot the time spent aligning per snapshot);
``state_bytes`` is what the checkpoint references (its ``_metadata``'s files: the state as stored,
shared files of incremental chains and RocksDB included). Recovery is the JobMaster's restart
history: ``kill_to_detected_s`` (our SIGKILL -> the JobMaster saw the failure), ``kill_to_restored_s``
(-> every worker of the new attempt restored its state and started) and ``kill_to_resumed_s``
(-> the first record processed again); the restart delay is ``--restart-delay`` (0 s).
``foreign_cpu_cores``: CPU used meanwhile by processes outside this benchmark (other load).

Writes into ``--out`` (default ``benchmarks/results/state-snapshots``): ``state_snapshots.csv``
(one row per checkpoint), ``state_snapshots_runs.csv`` (one per run), ``state_snapshots_summary.csv``,
``state_snapshots.png`` and ``machine.txt``.

    .venv/bin/python -m benchmarks.state_snapshots --repeats 3          # docs/state_backends.md: ~24 min on 2 cores
    .venv/bin/python -m benchmarks.state_snapshots --sizes 20000 60000 --align-keys 20000 \\
        --checkpoints 2 --interval 1 --out /tmp/fig9-smoke                 # smoke check, ~2 min
    .venv/bin/python -m benchmarks.state_snapshots --experiments parallelism \\
        --align-parallelism 1 2 4 8 16                                    # a bigger machine
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import epochal
from benchmarks.common.noise import ForkAwareCpuWatch
from benchmarks.common.results import RESULTS, machine, pyplot, save_figure, write_csv
from benchmarks.common.stats import median
from epochal.control.restart import FixedDelayRestart
from epochal.control.spark import create_session
from epochal.state.storage import CheckpointStorage, state_files
from epochal.testing import kill_worker

#: keyed-state backends by name: ``Environment.set_state_backend`` arguments
BACKENDS: dict[str, dict[str, Any]] = {
    "heap": {"kind": "heap", "snapshot": "fork"},
    "heap-incremental": {"kind": "heap", "snapshot": "fork", "incremental": True},
    "rocksdb": {"kind": "rocksdb"},
    "postgres": {"kind": "postgres"},
    "postgres-mvcc": {"kind": "postgres", "mvcc": True},
}
#: bytes of each record's payload: a hash of its index (distinct, deterministic, incompressible, so
#: RocksDB's block compression does not shrink the state below the heap backends')
PAYLOAD_BYTES = 96
ENDED = ("finished", "failed", "cancelled")
POLL_S = 0.05


def build(env: epochal.Environment, keys: int, hot: int, rate: float | None = None, queryable: bool = False) -> None:
    """generator -> [shuffle] latest payload and count per key -> [shuffle] count per bucket -> discard;
    ``rate``: records per second in all (None: as fast as the job goes); ``queryable``: the state
    per key is queryable as ``"latest"`` (``read_committed`` views are taken at every barrier)."""

    def event(i: int) -> tuple[int, int, bytes]:
        key = i if i < keys else (i * 7919) % hot
        return key, 1, hashlib.shake_128(i.to_bytes(8, "little")).digest(PAYLOAD_BYTES)

    keyed = env.from_generator(event, rate=rate).name("source").key_by(lambda e: e[0])
    if queryable:
        keyed = keyed.as_queryable_state("latest")
    per_key = keyed.reduce(lambda a, b: (a[0], a[1] + b[1], b[2])).name("aggregate-per-key").uid("aggregate-per-key")
    per_key.map(lambda e: (e[0] % 1009, 1)).name("bucket").key_by(lambda e: e[0]).count() \
        .name("count-per-bucket").discard()


def stored_bytes(storage: CheckpointStorage, checkpoint_id: int) -> int:
    """Bytes of every state file a completed checkpoint references (0 if it is gone)."""
    try:
        metadata = storage.read_metadata(checkpoint_id)
    except Exception:
        return 0
    total = 0
    for operator in metadata.get("operators", {}).values():
        for handle in operator.get("subtasks", {}).values():
            for part in ("keyed", "operator"):
                if handle.get(part):
                    total += sum(f.get("size", 0) for f in state_files(handle[part]))
    return total


def source_records(checkpoint: dict[str, Any]) -> int:
    """Records the checkpoint's source positions cover (summed over the source subtasks)."""
    return sum(s.get("source_records", 0) for s in checkpoint.get("subtasks", {}).values())


class Driver:
    """Polls a running job (and the CPU watch) until a condition holds or the run times out."""

    def __init__(self, client: Any, cpu: ForkAwareCpuWatch, timeout: float) -> None:
        self.client, self.cpu = client, cpu
        self.deadline = time.monotonic() + timeout
        self.polls = 0

    def until(self, done: Any) -> str:
        while time.monotonic() < self.deadline:
            if done():
                return "ok"
            if self.client.status.value in ENDED:
                return f"job {self.client.status.value}"
            self.polls += 1
            if self.polls % 10 == 0:
                self.cpu.sample()
            time.sleep(POLL_S)
        return "timeout"


def run(spark: Any, args: argparse.Namespace, experiment: str, backend: str, keys: int, parallelism: int,
        repeat: int, kill: bool, cache_entries: int = 0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One job: checkpoints until ``--checkpoints`` steady ones completed, then (``kill``) a
    worker killed and the restored job's first checkpoint. Returns the run's row and its
    checkpoints' rows. ``cache_entries``: the PostgreSQL backends' read cache (0: its default)."""
    storage_dir = tempfile.mkdtemp(prefix="epochal-fig9-", dir=args.tmp)
    env = epochal.Environment(parallelism, spark=spark)
    extra: dict[str, Any] = {"local_dir": storage_dir} if backend == "rocksdb" else {}
    if BACKENDS[backend]["kind"] == "postgres":
        extra["dsn"] = args.dsn
        if cache_entries:
            extra["cache_entries"] = cache_entries
    env.set_state_backend(**BACKENDS[backend], **extra)
    env.enable_checkpointing(args.interval, storage=storage_dir, retained=10_000, timeout=args.checkpoint_timeout)
    env.set_restart_strategy(FixedDelayRestart(attempts=1, delay=args.restart_delay))
    hot = min(keys, args.hot_keys) if args.hot_keys else max(1, int(keys * args.hot))
    build(env, keys, hot, queryable=args.queryable)
    tags = {"experiment": experiment, "backend": backend, "keys": keys, "hot_keys": hot,
            "parallelism": parallelism, "repeat": repeat, "cache_entries": cache_entries}
    load = os.getloadavg()[0]
    cpu = ForkAwareCpuWatch()
    started = time.monotonic()
    client = env.execute_async(f"fig9-{experiment}-{backend}-{keys}-p{parallelism}")
    driver = Driver(client, cpu, args.timeout)
    kill_mono = kill_wall = 0.0
    killed_after = 0

    def steady() -> list[dict[str, Any]]:
        return [c for c in client.checkpoint_stats() if c["status"] == "completed" and source_records(c) >= keys]

    try:
        status = driver.until(lambda: len(steady()) >= args.checkpoints)
        fill_s = time.monotonic() - started
        if status == "ok" and kill:
            killed_after = steady()[-1]["checkpoint_id"]
            kill_mono, kill_wall = time.monotonic(), time.time()
            kill_worker(client, parallelism - 1)
            status = driver.until(lambda: bool(client.restarts()) and "resumed_s" in client.restarts()[0])
            if status == "ok":
                status = driver.until(lambda: any(c["status"] == "completed" and c["trigger_time"] > kill_wall
                                                  for c in client.checkpoint_stats()))
        stats, restarts = client.checkpoint_stats(), client.restarts()
    finally:
        foreign = cpu.foreign_cores()
        client.cancel(timeout=120)
    storage = CheckpointStorage(client.checkpoint_path)
    checkpoints = []
    for c in stats:
        done = c["status"] == "completed"
        phase = "restored" if kill_wall and c["trigger_time"] > kill_wall else "aborted" if not done else \
            "steady" if source_records(c) >= keys else "fill"
        subtasks = c.get("subtasks", {}).values()
        nan = float("nan")
        checkpoints.append({**tags, "checkpoint_id": c["checkpoint_id"], "status": c["status"], "phase": phase,
                            "duration_s": c["duration_s"], "sync_s_max": c.get("sync_s_max", float("nan")),
                            "async_s_max": c.get("async_s_max", float("nan")),
                            "alignment_s_max": c.get("alignment_s_max", float("nan")),
                            "alignment_s_sum": sum(s.get("alignment_s", 0.0) for s in subtasks) if done else nan,
                            "bytes": c.get("bytes", 0),
                            "state_bytes": stored_bytes(storage, c["checkpoint_id"]) if done else 0,
                            "source_records": source_records(c), "reason": c.get("reason", "")})
    shutil.rmtree(storage_dir, ignore_errors=True)
    row: dict[str, Any] = {**tags, "status": status, "seconds": time.monotonic() - started, "fill_s": fill_s,
                           "checkpoints": sum(1 for c in checkpoints if c["status"] == "completed"),
                           "aborted": sum(1 for c in checkpoints if c["status"] != "completed"),
                           "loadavg_before": load, "foreign_cpu_cores": foreign}
    if kill:
        restart = restarts[0] if restarts else {}
        detected = restart.get("detected", float("nan")) - kill_mono
        restored = next((c for c in checkpoints if c["checkpoint_id"] == killed_after), {})
        row.update({"killed_after_checkpoint": killed_after, "restored_state_bytes": restored.get("state_bytes", 0),
                    "kill_to_detected_s": detected,
                    "kill_to_restored_s": detected + restart.get("recovered_s", float("nan")),
                    "kill_to_resumed_s": detected + restart.get("resumed_s", float("nan"))})
    return row, checkpoints


def summarise(runs: list[dict[str, Any]], checkpoints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (experiment, backend, keys, parallelism, cache_entries): medians over the
    steady checkpoints (and over the runs, for recovery)."""
    summary = []
    groups = sorted({(r["experiment"], r["backend"], r["keys"], r["parallelism"], r["cache_entries"]) for r in runs},
                    key=lambda g: (g[0], list(BACKENDS).index(g[1]), g[2], g[3], g[4]))
    for experiment, backend, keys, parallelism, cache in groups:
        def mine(rows: list[dict[str, Any]], e: str = experiment, b: str = backend, k: int = keys,
                 p: int = parallelism, c: int = cache) -> list[dict[str, Any]]:
            return [r for r in rows if (r["experiment"], r["backend"], r["keys"], r["parallelism"],
                                        r["cache_entries"]) == (e, b, k, p, c)]

        done = [c for c in mine(checkpoints) if c["status"] == "completed"]
        steady = [c for c in done if c["phase"] == "steady"]
        restored = [c for c in done if c["phase"] == "restored"]
        my_runs = mine(runs)
        row = {"experiment": experiment, "backend": backend, "keys": keys, "parallelism": parallelism,
               "cache_entries": cache, "runs": len(my_runs), "ok_runs": sum(1 for r in my_runs if r["status"] == "ok"),
               "steady_checkpoints": len(steady),
               "aborted_checkpoints": sum(1 for c in mine(checkpoints) if c["status"] != "completed"),
               "state_mb": max((c["state_bytes"] for c in steady), default=0) / 1e6,
               "written_mb_median": median(c["bytes"] for c in steady) / 1e6,
               "written_mb_max": max((c["bytes"] for c in steady), default=0) / 1e6,
               "duration_s_median": median(c["duration_s"] for c in steady),
               "duration_s_max": max((c["duration_s"] for c in steady), default=float("nan")),
               "sync_s_median": median(c["sync_s_max"] for c in steady),
               "sync_s_max": max((c["sync_s_max"] for c in steady), default=float("nan")),
               "alignment_s_max_median": median(c["alignment_s_max"] for c in steady),
               "alignment_s_sum_median": median(c["alignment_s_sum"] for c in steady),
               "alignment_s_max_max": max((c["alignment_s_max"] for c in steady), default=float("nan")),
               "restored_duration_s": median(c["duration_s"] for c in restored),
               "restored_written_mb": median(c["bytes"] for c in restored) / 1e6,
               "fill_s_median": median(r["fill_s"] for r in my_runs),
               "foreign_cpu_cores_max": max(r["foreign_cpu_cores"] for r in my_runs)}
        for name in ("kill_to_detected_s", "kill_to_restored_s", "kill_to_resumed_s"):
            row[name] = median(r.get(name, float("nan")) for r in my_runs)
        summary.append(row)
    return summary


def plot(summary: list[dict[str, Any]], out: Path, title: str) -> None:
    """Fig. 9 a, b, c and recovery: one panel each."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    sizes = [r for r in summary if r["experiment"] == "sizes"]
    first_cache = {r["backend"]: r["cache_entries"] for r in reversed(sizes)}  # one line per backend: its first
    for backend, marker in zip(BACKENDS, "os^Dv", strict=True):
        rows = sorted((r for r in sizes if r["backend"] == backend and r["cache_entries"] == first_cache.get(backend)),
                      key=lambda r: r["keys"])
        if not rows:
            continue
        xs = [r["keys"] for r in rows]
        line = axes[0][0].plot(xs, [r["duration_s_median"] for r in rows], marker=marker, label=f"{backend}: total")[0]
        axes[0][0].plot(xs, [r["sync_s_max"] for r in rows], marker=marker, linestyle=":", color=line.get_color(),
                        label=f"{backend}: longest sync part")
        axes[0][1].plot(xs, [r["alignment_s_max_median"] for r in rows], marker=marker, label=backend)
        line = axes[1][1].plot(xs, [r["kill_to_resumed_s"] for r in rows], marker=marker,
                               label=f"{backend}: first record")[0]
        axes[1][1].plot(xs, [r["kill_to_restored_s"] for r in rows], marker=marker, linestyle=":",
                        color=line.get_color(), label=f"{backend}: restored")
    for backend in BACKENDS:
        rows = sorted((r for r in summary if r["experiment"] == "parallelism" and r["backend"] == backend),
                      key=lambda r: r["parallelism"])
        if rows:
            xs = [r["parallelism"] for r in rows]
            axes[1][0].plot(xs, [r["alignment_s_max_median"] for r in rows], marker="o", label=f"{backend}: longest")
            axes[1][0].plot(xs, [r["alignment_s_sum_median"] for r in rows], marker="s", label=f"{backend}: sum")
            axes[1][0].set_xticks(xs)
            axes[1][0].set_title(f"(c) alignment per snapshot vs parallelism ({rows[0]['keys']:,} keys)")
    labels = {(0, 0): ("(a) snapshot duration vs state size", "seconds (median; dotted: longest stall)"),
              (0, 1): ("(b) alignment per snapshot vs state size", "seconds (median of the longest)"),
              (1, 1): ("recovery vs state size", "seconds from SIGKILL (dotted: restored)")}
    for (i, j), (name, ylabel) in labels.items():
        axes[i][j].set_title(name)
        axes[i][j].set_xscale("log")
        axes[i][j].set_xlabel("keys (~100-byte values)")
        axes[i][j].set_ylabel(ylabel)
    axes[1][0].set_xlabel("parallelism")
    axes[1][0].set_ylabel("seconds (median)")
    axes[0][0].set_yscale("log")
    for ax in axes.flat[1:]:
        ax.set_ylim(bottom=0)
    for ax in axes.flat:
        if ax.has_data():
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, out / "state_snapshots.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", nargs="+", choices=("sizes", "parallelism"), default=["sizes", "parallelism"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000, 3_000_000],
                        help="state sizes in keys (each value ~100 bytes)")
    parser.add_argument("--backends", nargs="+", choices=list(BACKENDS), default=list(BACKENDS))
    parser.add_argument("--parallelism", type=int, default=2, help="of the sizes experiment")
    parser.add_argument("--align-parallelism", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--align-keys", type=int, default=300_000)
    parser.add_argument("--align-backend", choices=list(BACKENDS), default="heap")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between checkpoint triggers")
    parser.add_argument("--checkpoints", type=int, default=4, help="steady checkpoints per run before the kill")
    parser.add_argument("--hot", type=float, default=0.01, help="fraction of the keys updated after the fill")
    parser.add_argument("--hot-keys", type=int, default=0, help="keys updated after the fill, at every size "
                                                                "(instead of --hot)")
    parser.add_argument("--restart-delay", type=float, default=0.0)
    parser.add_argument("--queryable", action="store_true",
                        help="the state per key queryable (as_queryable_state): what its read_committed views cost")
    parser.add_argument("--checkpoint-timeout", type=float, default=120.0)
    parser.add_argument("--slots", type=int, default=0, help="Spark's local[N] (default: the largest parallelism, "
                                                          "at least 2; epochal's own default master has at least 4)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--tmp", default=None, help="where checkpoints and RocksDB go (default: the temp dir)")
    parser.add_argument("--out", default=str(RESULTS / "state-snapshots"))
    parser.add_argument("--cache-entries", type=int, nargs="+", default=[0],
                        help="the PostgreSQL backends' read cache (values per subtask; 0: the default); each "
                             "value is a run of its own, beside the others")
    parser.add_argument("--dsn", default=None, help="the PostgreSQL server of the postgres backends (default: "
                                                    "one started for the run, tests/postgres_server.py)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = [("sizes", b, k, args.parallelism, True, c) for k in args.sizes for b in args.backends
            for c in (args.cache_entries if BACKENDS[b]["kind"] == "postgres" else [0])
            if "sizes" in args.experiments]
    plan += [("parallelism", args.align_backend, args.align_keys, p, False, 0) for p in args.align_parallelism
             if "parallelism" in args.experiments]
    slots = args.slots or max([2, *(p for *_, p, _, _ in plan)])
    about = f"{machine()}; Spark local[{slots}]"
    (out / "machine.txt").write_text(about + "\n")
    print(about, flush=True)
    server = None
    if args.dsn is None and any(BACKENDS[b]["kind"] == "postgres" for _, b, *_ in plan):
        from tests.postgres_server import PostgresServer

        server = PostgresServer(Path(tempfile.mkdtemp(prefix="epochal-fig9-pg-", dir=args.tmp))).start()
        args.dsn = server.dsn
    spark = create_session(f"local[{slots}]", slots)
    warm = epochal.Environment(2, spark=spark)
    build(warm, 1_000, 10)  # unbounded: started and cancelled, to warm up Spark's Python workers
    client = warm.execute_async("fig9-warm-up")
    client.wait_until_running()
    time.sleep(1.0)
    client.cancel(timeout=60)

    runs: list[dict[str, Any]] = []
    checkpoints: list[dict[str, Any]] = []
    try:
        for repeat in range(args.repeats):
            for experiment, backend, keys, parallelism, kill, cache in plan:
                row, rows = run(spark, args, experiment, backend, keys, parallelism, repeat, kill, cache)
                runs.append(row)
                checkpoints.extend(rows)
                steady = [c for c in rows if c["phase"] == "steady"]
                state_mb = max((c["state_bytes"] for c in steady), default=0) / 1e6
                print(f"[{repeat}] {experiment:>11} {backend:>16} {keys:>9,} keys p={parallelism}"
                      + (f" cache {cache:,}" if cache else "") + f": {row['status']}, "
                      f"{row['seconds']:5.1f} s, state {state_mb:6.1f} MB, "
                      f"snapshot {median(c['duration_s'] for c in steady):5.2f} s (stall "
                      f"{median(c['sync_s_max'] for c in steady) * 1e3:5.1f} ms), alignment "
                      f"{median(c['alignment_s_max'] for c in steady) * 1e3:6.1f} ms"
                      + (f", kill -> restored {row['kill_to_restored_s']:5.2f} s, -> first record "
                         f"{row['kill_to_resumed_s']:5.2f} s" if kill else "")
                      + f", foreign cpu {row['foreign_cpu_cores']:.2f}", flush=True)
    finally:
        if runs:
            write_csv(out / "state_snapshots_runs.csv", runs)
            write_csv(out / "state_snapshots.csv", checkpoints)
            summary = summarise(runs, checkpoints)
            write_csv(out / "state_snapshots_summary.csv", summary)
            plot(summary, out, f"papers/001 Fig. 9 on epochal: interval {args.interval:g} s, hot keys "
                 f"{args.hot_keys or args.hot:g}; {about}")
        spark.stop()
        if server is not None:
            server.destroy()


if __name__ == "__main__":
    main()
