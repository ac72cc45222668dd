"""Savepoints (issue 34, papers/001 §3.3.1): what a savepoint costs against a full checkpoint of the
same state, and how long a stop -> restore -> first record cycle takes.

Experiments (``--experiments``):

* ``sizes``: the job of ``benchmarks.state_snapshots`` (a latest ~100-byte payload and a count per
  key, then a count per bucket) on each backend (``--backends``) at each state size (``--sizes``,
  keys). Once ``--checkpoints`` steady checkpoints completed (their sources cover the fill: every
  key written), a canonical and a native savepoint are taken (their order alternates by repeat),
  each measured from ``JobClient.trigger_savepoint`` to its return (``request_s``) and by the
  JobMaster's statistics (``duration_s``: trigger -> metadata written, ``bytes`` written).
  The **full checkpoint** beside them: the median of the job's steady checkpoints that wrote at
  least 90 % of the state they reference (every checkpoint of the ``heap`` backend; the full ones
  of ``heap-incremental``). RocksDB checkpoints are always incremental (they share SST files), so
  its full checkpoint is the native savepoint: every SST file of the database copied once.
  Goal (the issue): a canonical savepoint costs at most 1.5x a full checkpoint.
* ``cycle``: ``--cycle-keys`` keys on each backend: ``stop_with_savepoint`` (request -> job ended),
  then the same job restored from it (``execute_async(restore_from=...)`` -> the keyed operator's
  first record; includes planning, Spark task launch, state restore). Goal: 5 s or less in total
  at 1 M keys on this machine.

Writes into ``--out`` (default ``benchmarks/results/savepoints``): ``savepoints.csv`` (one row per
savepoint or checkpoint measured), ``savepoints_cycle.csv``, ``savepoints_summary.csv``,
``savepoints.png`` and ``machine.txt``; ``loadavg`` and ``foreign_cpu_cores`` say how busy the
machine was.

    .venv/bin/python -m benchmarks.savepoints                                    # docs/savepoints.md
    .venv/bin/python -m benchmarks.savepoints --sizes 20000 --cycle-keys 20000 --checkpoints 1 \\
        --out /tmp/savepoints-smoke                                            # smoke check, ~2 min
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from math import nan
from pathlib import Path
from typing import Any

import epochal
from benchmarks.common.noise import ForkAwareCpuWatch
from benchmarks.common.results import RESULTS, machine, pyplot, save_figure, write_csv
from benchmarks.common.stats import median, ratio_interval
from benchmarks.state_snapshots import BACKENDS, Driver, build, source_records, stored_bytes
from epochal.control.spark import create_session
from epochal.state.storage import CheckpointStorage

#: The backends measured here: those without a server of their own
EMBEDDED = ("heap", "heap-incremental", "rocksdb")

FORMATS = ("canonical", "native")
#: How a RocksDB canonical savepoint is read: the native reader, or rocksdict in Python with
#: ``EPOCHAL_NATIVE_READER=0`` in the environment Spark starts with (epochal.state.rocksdb.native).
READER = "python" if os.environ.get("EPOCHAL_NATIVE_READER") == "0" else "native"


def environment(spark: Any, backend: str, storage_dir: str, interval: float, timeout: float) -> epochal.Environment:
    env = epochal.Environment(2, spark=spark)
    env.set_state_backend(**BACKENDS[backend], **({"local_dir": storage_dir} if backend == "rocksdb" else {}))
    env.enable_checkpointing(interval, storage=storage_dir, retained=10_000, timeout=timeout,
                             savepoint_dir=os.path.join(storage_dir, "savepoints"))
    return env


def filled(client: Any, keys: int, count: int) -> Any:
    """A condition: ``count`` steady checkpoints (covering every key) completed."""
    def done() -> bool:
        return sum(1 for c in client.checkpoint_stats()
                   if c["status"] == "completed" and "savepoint" not in c and source_records(c) >= keys) >= count
    return done


def sizes_run(spark: Any, args: argparse.Namespace, backend: str, keys: int, repeat: int) -> list[dict[str, Any]]:
    """One job: steady checkpoints, then a canonical and a native savepoint of the same state."""
    storage_dir = tempfile.mkdtemp(prefix="epochal-savepoints-", dir=args.tmp)
    env = environment(spark, backend, storage_dir, args.interval, args.checkpoint_timeout)
    build(env, keys, max(1, int(keys * args.hot)), args.rate)
    tags = {"backend": backend, "keys": keys, "repeat": repeat, "loadavg": os.getloadavg()[0], "reader": READER,
            "rate": args.rate or 0}
    cpu = ForkAwareCpuWatch()
    client = env.execute_async(f"savepoints-{backend}-{keys}")
    rows: list[dict[str, Any]] = []
    try:
        status = Driver(client, cpu, args.timeout).until(filled(client, keys, args.checkpoints))
        if status != "ok":
            raise RuntimeError(f"{backend} {keys:,} keys: {status} before the state was filled")
        for _ in range(args.warmup):  # not measured: it takes the fill's compactions
            shutil.rmtree(client.trigger_savepoint(format="native", timeout=args.checkpoint_timeout),
                          ignore_errors=True)
        order = [(r, f) for r in range(args.rounds) for f in (FORMATS if (repeat + r) % 2 == 0 else FORMATS[::-1])]
        for round_, fmt in order:
            time.sleep(args.pause)
            started = time.monotonic()
            path = client.trigger_savepoint(format=fmt, timeout=args.checkpoint_timeout)
            request_s = time.monotonic() - started
            stats = next(c for c in reversed(client.checkpoint_stats()) if c.get("savepoint") == path)
            size = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
            rows.append({**tags, "round": round_, "what": f"savepoint-{fmt}", "request_s": request_s,
                         "duration_s": stats["duration_s"], "sync_s_max": stats.get("sync_s_max", float("nan")),
                         "alignment_s_max": stats.get("alignment_s_max", nan),
                         "async_s_max": stats.get("async_s_max", nan),
                         "bytes": stats.get("bytes", 0), "state_bytes": size})
            shutil.rmtree(path, ignore_errors=True)
        stats = client.checkpoint_stats()
    finally:
        foreign = cpu.foreign_cores()
        client.cancel(timeout=120)
    storage = CheckpointStorage(client.checkpoint_path)
    for c in stats:
        if c["status"] != "completed" or "savepoint" in c or source_records(c) < keys:
            continue
        state = stored_bytes(storage, c["checkpoint_id"])
        full = state > 0 and c.get("bytes", 0) >= 0.9 * state
        rows.append({**tags, "what": "checkpoint-full" if full else "checkpoint-incremental",
                     "request_s": float("nan"), "duration_s": c["duration_s"],
                     "sync_s_max": c.get("sync_s_max", float("nan")), "bytes": c.get("bytes", 0),
                     "state_bytes": state})
    for row in rows:
        row["foreign_cpu_cores"] = foreign
    shutil.rmtree(storage_dir, ignore_errors=True)
    return rows


def cycle_run(spark: Any, args: argparse.Namespace, backend: str, keys: int, repeat: int) -> dict[str, Any]:
    """stop-with-savepoint, then restore -> the keyed operator's first record."""
    storage_dir = tempfile.mkdtemp(prefix="epochal-savepoint-cycle-", dir=args.tmp)
    hot = max(1, int(keys * args.hot))
    env = environment(spark, backend, storage_dir, args.interval, args.checkpoint_timeout)
    build(env, keys, hot)
    cpu = ForkAwareCpuWatch()
    client = env.execute_async(f"savepoint-cycle-{backend}-{keys}")
    try:
        status = Driver(client, cpu, args.timeout).until(filled(client, keys, 1))
        if status != "ok":
            raise RuntimeError(f"cycle {backend} {keys:,} keys: {status} before the state was filled")
        started = time.monotonic()
        path = client.stop_with_savepoint(timeout=args.checkpoint_timeout)
        stop_s = time.monotonic() - started
    finally:
        client.cancel(timeout=120)
    env = environment(spark, backend, storage_dir, args.interval, args.checkpoint_timeout)
    build(env, keys, hot)
    started = time.monotonic()
    restored = env.execute_async(f"savepoint-cycle-{backend}-{keys}-restored", restore_from=path)
    try:
        status = Driver(restored, cpu, args.timeout).until(
            lambda: restored.metrics() and any(m.get("operators", {}).get(name, 0) > 0
                                               for m in restored.metrics().values()
                                               for name in m.get("operators", {})
                                               if name.startswith("aggregate-per-key")))
        first_record_s = time.monotonic() - started
    finally:
        foreign = cpu.foreign_cores()
        restored.cancel(timeout=120)
    size = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
    shutil.rmtree(storage_dir, ignore_errors=True)
    return {"backend": backend, "keys": keys, "repeat": repeat, "status": status, "savepoint_bytes": size,
            "stop_s": stop_s, "restore_to_first_record_s": first_record_s, "total_s": stop_s + first_record_s,
            "loadavg": os.getloadavg()[0], "foreign_cpu_cores": foreign}


def paired_ratios(rows: list[dict[str, Any]]) -> list[float]:
    """Each round's canonical savepoint over the native one taken next to it in the same job
    (the machine's speed drifts between jobs and within one, so only neighbours are compared)."""
    by_round: dict[tuple[Any, ...], dict[str, float]] = {}
    for r in rows:
        if r["what"].startswith("savepoint-"):
            by_round.setdefault((r["repeat"], r.get("round", 0)), {})[r["what"]] = r["duration_s"]
    return [pair["savepoint-canonical"] / pair["savepoint-native"] for pair in by_round.values()
            if len(pair) == 2 and pair["savepoint-native"] > 0]


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    summary = []
    for backend in BACKENDS:
        for keys in sorted({r["keys"] for r in rows if r["backend"] == backend}):
            mine = [r for r in rows if (r["backend"], r["keys"]) == (backend, keys)]

            def of(what: str, column: str, rows: list[dict[str, Any]] = mine) -> float:
                return median(r[column] for r in rows if r["what"] == what)

            full = of("checkpoint-full", "duration_s")
            if full != full:  # RocksDB: the native savepoint copies every SST file once
                full = of("savepoint-native", "duration_s")
            canonical, native = of("savepoint-canonical", "duration_s"), of("savepoint-native", "duration_s")
            state_mb = of("savepoint-canonical", "state_bytes") / 1e6
            pairs = paired_ratios(mine)
            paired, low, high = ratio_interval(pairs) if pairs else (nan, nan, nan)
            summary.append({"backend": backend, "keys": keys, "state_mb": state_mb,
                            "full_checkpoint_s": full, "canonical_s": canonical, "native_s": native,
                            "canonical_request_s": of("savepoint-canonical", "request_s"),
                            "native_request_s": of("savepoint-native", "request_s"),
                            "canonical_over_full": canonical / full, "native_over_full": native / full,
                            "goal_met": canonical / full <= 1.5,
                            "canonical_over_native_paired": paired, "paired_low": low, "paired_high": high,
                            "pairs": len(pairs),
                            "loadavg_max": max(r["loadavg"] for r in mine),
                            "foreign_cpu_cores_max": max(r["foreign_cpu_cores"] for r in mine)})
    return summary


def plot(summary: list[dict[str, Any]], cycles: list[dict[str, Any]], out: Path, title: str) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for backend, marker in zip(BACKENDS, "os^Dv", strict=True):
        rows = sorted((r for r in summary if r["backend"] == backend), key=lambda r: r["keys"])
        if not rows:
            continue
        xs = [r["keys"] for r in rows]
        line = left.plot(xs, [r["canonical_s"] for r in rows], marker=marker, label=f"{backend}: canonical")[0]
        left.plot(xs, [r["native_s"] for r in rows], marker=marker, linestyle="--", color=line.get_color(),
                  label=f"{backend}: native")
        left.plot(xs, [r["full_checkpoint_s"] for r in rows], marker=marker, linestyle=":", color=line.get_color(),
                  label=f"{backend}: full checkpoint")
    left.set(xscale="log", yscale="log", xlabel="keys (~100-byte values)", ylabel="seconds (median)",
             title="savepoint vs full checkpoint of the same state")
    left.legend(fontsize=7)
    names = [f"{c['backend']}\n{c['keys']:,}" for c in cycles]
    right.bar(names, [c["stop_s"] for c in cycles], label="stop with savepoint")
    right.bar(names, [c["restore_to_first_record_s"] for c in cycles], bottom=[c["stop_s"] for c in cycles],
              label="restore -> first record")
    right.axhline(5.0, color="grey", linestyle=":", label="goal (5 s)")
    right.set(ylabel="seconds", title="stop -> restore -> first record")
    right.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, out / "savepoints.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", nargs="+", choices=("sizes", "cycle"), default=["sizes", "cycle"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--backends", nargs="+", choices=EMBEDDED, default=list(EMBEDDED),
                        help="the backends that need no server (benchmarks.postgres_state measures PostgreSQL's)")
    parser.add_argument("--cycle-keys", type=int, default=1_000_000)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between checkpoint triggers")
    parser.add_argument("--checkpoints", type=int, default=2, help="steady checkpoints before the savepoints")
    parser.add_argument("--hot", type=float, default=0.01, help="fraction of the keys updated after the fill")
    parser.add_argument("--checkpoint-timeout", type=float, default=600.0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1,
                        help="canonical and native savepoints per job (their order alternates by round)")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds before each savepoint")
    parser.add_argument("--warmup", type=int, default=1,
                        help="unmeasured native savepoints before the measured ones: the first savepoint after "
                             "the fill runs beside RocksDB's compactions of it (1.6-1.8x slower at 10 M keys)")
    parser.add_argument("--rate", type=float, default=None,
                        help="records per second of the sizes job (default: as fast as it goes)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per run")
    parser.add_argument("--tmp", default=None, help="where checkpoints, savepoints and RocksDB go")
    parser.add_argument("--out", default=str(RESULTS / "savepoints"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    about = f"{machine()}; Spark local[2]"
    (out / "machine.txt").write_text(about + "\n")
    print(about, flush=True)
    spark = create_session("local[2]", 2)
    rows: list[dict[str, Any]] = []
    cycles: list[dict[str, Any]] = []
    try:
        for repeat in range(args.repeats):
            for keys in args.sizes if "sizes" in args.experiments else ():
                for backend in args.backends:
                    mine = sizes_run(spark, args, backend, keys, repeat)
                    rows.extend(mine)
                    line = ", ".join(f"{w} {median(r['duration_s'] for r in mine if r['what'] == w):.2f} s"
                                     for w in ("checkpoint-full", "savepoint-canonical", "savepoint-native"))
                    print(f"[{repeat}] {backend:>16} {keys:>10,} keys: {line} (load {mine[0]['loadavg']:.1f})",
                          flush=True)
            for backend in args.backends if "cycle" in args.experiments else ():
                cycle = cycle_run(spark, args, backend, args.cycle_keys, repeat)
                cycles.append(cycle)
                print(f"[{repeat}] cycle {backend:>16} {args.cycle_keys:,} keys: stop {cycle['stop_s']:.2f} s, "
                      f"restore -> first record {cycle['restore_to_first_record_s']:.2f} s, total "
                      f"{cycle['total_s']:.2f} s", flush=True)
    finally:
        summary = summarise(rows)
        for path, data in (("savepoints.csv", rows), ("savepoints_cycle.csv", cycles),
                           ("savepoints_summary.csv", summary)):
            if data:
                write_csv(out / path, data)
        for row in summary:
            print(f"{row['backend']:>16} {row['keys']:>10,} keys {row['state_mb']:8.1f} MB: full checkpoint "
                  f"{row['full_checkpoint_s']:.2f} s, canonical {row['canonical_s']:.2f} s "
                  f"({row['canonical_over_full']:.2f}x), native {row['native_s']:.2f} s "
                  f"({row['native_over_full']:.2f}x); canonical / native paired in {row['pairs']} rounds: "
                  f"x{row['canonical_over_native_paired']:.2f} ({row['paired_low']:.2f}-{row['paired_high']:.2f})")
        if summary or cycles:
            plot(summary, cycles, out, f"epochal savepoints; {about}")
        spark.stop()


if __name__ == "__main__":
    main()
