"""What a forked snapshot costs the process that keeps processing: fork, then copy-on-write.

The heap backend's asynchronous snapshot (:mod:`epochal.dataflow.checkpointing.fork_snapshots`) forks the
worker at the barrier; the child serialises the state while the parent goes on. The parent's
stall is the ``fork()`` itself, but it pays again afterwards: every page of its heap is
write-protected after a fork, so the first write to each page it touches takes a page fault, and
while the child still runs the kernel copies the page. A job whose records update keys spread
over the whole state touches most of its pages every interval, so this cost grows with the state
and the checkpoint rate, not with what the snapshot writes.

This benchmark isolates that cost in one process, without Spark: a loop applies ``--records``
updates to uniformly random keys of a dict of ``--keys`` entries (``key -> (key, count)``, as a
rolling count keeps it), and every ``--interval`` seconds (once the previous one finished, as the checkpoint
coordinator triggers one at a time by default) takes a snapshot through the engine's own
:func:`~epochal.dataflow.checkpointing.fork_snapshots.fork_snapshot` (reaped on a thread by
:func:`~epochal.dataflow.checkpointing.fork_snapshots.wait_report`, as the uploader does). Variants:

* ``none``: no snapshots (the baseline);
* ``fork``: the child pickles the state and writes it to a file, as a checkpoint does;
* ``fork-exit``: the child exits at once, so pages are no longer shared when the parent writes
  them: what remains is the fork and one fault per page, without copies.

Per run: wall time, the parent's user and system CPU, minor page faults, snapshots, the longest
fork stall. Runs are interleaved per round; summaries are medians. Writes ``fork_cow.csv``,
``fork_cow_summary.csv`` and ``fork_cow.png`` into ``--out``.

    .venv/bin/python -m benchmarks.fork_cow                       # ~2 min on 2 cores
    .venv/bin/python -m benchmarks.fork_cow --keys 100000 --repeats 1 --out /tmp/cow   # smoke
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common.isolation import rotate
from benchmarks.common.results import RESULTS, machine, pyplot, save_figure, write_csv
from benchmarks.common.stats import median
from epochal import serialization
from epochal.dataflow.checkpointing.fork_snapshots import fork_snapshot, wait_report

VARIANTS = ("none", "fork", "fork-exit")


def run_once(keys: int, records: int, variant: str, interval: float, directory: str) -> dict[str, Any]:
    """One loop of ``records`` updates over a fresh state of ``keys`` entries; returns its row."""
    state = {k: (k, 0) for k in range(keys)}
    rng = random.Random(keys)
    order = [rng.randrange(keys) for _ in range(records)]
    gc.collect()
    reapers: list[threading.Thread] = []
    failures: list[str] = []

    def write() -> dict[str, Any]:  # in the child
        if variant == "fork-exit":
            return {}
        path = os.path.join(directory, f"snapshot-{os.getpid()}")
        with open(path, "wb") as f:
            f.write(serialization.dumps(state))
        return {"file": path}

    def reap(snapshot: Any) -> None:
        _, why = wait_report(snapshot)
        if why:
            failures.append(why)

    snapshots, stall_max = 0, 0.0
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = last = time.perf_counter()
    for i, key in enumerate(order):
        count = state[key][1]
        state[key] = (key, count + 1)
        if variant != "none" and not i & 1023:
            now = time.perf_counter()
            if now - last >= interval and not any(r.is_alive() for r in reapers[-1:]):
                last = now  # (one snapshot at a time, as the coordinator's max_concurrent = 1)
                snapshot = fork_snapshot(snapshots, 0, 0, {}, write, lambda point: None)
                stall_max = max(stall_max, snapshot.stats["fork_s"])
                snapshots += 1
                reaper = threading.Thread(target=reap, args=(snapshot,), daemon=True)
                reaper.start()
                reapers.append(reaper)
    loop_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    for reaper in reapers:
        reaper.join()
    if failures:
        raise RuntimeError(f"a snapshot child failed: {failures[0]}")
    assert sum(count for _, count in state.values()) == records  # every update applied
    return {"keys": keys, "records": records, "variant": variant, "interval_s": interval, "loop_s": loop_s,
            "user_s": after.ru_utime - before.ru_utime, "sys_s": after.ru_stime - before.ru_stime,
            "minor_faults": after.ru_minflt - before.ru_minflt, "snapshots": snapshots, "fork_stall_max_s": stall_max}


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for keys in sorted({r["keys"] for r in rows}):
        base = [r for r in rows if r["keys"] == keys and r["variant"] == "none"]
        base_loop, base_sys = median(r["loop_s"] for r in base), median(r["sys_s"] for r in base)
        for variant in VARIANTS[1:]:
            mine = [r for r in rows if r["keys"] == keys and r["variant"] == variant]
            if not mine:
                continue
            snapshots = median(r["snapshots"] for r in mine)
            loop = median(r["loop_s"] for r in mine)
            out.append({"keys": keys, "variant": variant, "snapshots": snapshots, "loop_s": loop,
                        "none_loop_s": base_loop, "ratio_vs_none": loop / base_loop,
                        "extra_s_per_snapshot": (loop - base_loop) / snapshots if snapshots else float("nan"),
                        "sys_s_per_snapshot": (median(r["sys_s"] for r in mine) - base_sys) / snapshots
                        if snapshots else float("nan"),
                        "faults_per_snapshot": median(r["minor_faults"] for r in mine) / snapshots
                        if snapshots else float("nan"),
                        "fork_stall_max_ms": median(r["fork_stall_max_s"] for r in mine) * 1e3})
    return out


def plot(summary: list[dict[str, Any]], out: Path) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for variant, colour in (("fork", "tab:red"), ("fork-exit", "tab:blue")):
        mine = [s for s in summary if s["variant"] == variant]
        xs = [s["keys"] for s in mine]
        left.plot(xs, [s["ratio_vs_none"] for s in mine], "o-", color=colour, label=variant)
        right.plot(xs, [s["sys_s_per_snapshot"] * 1e3 for s in mine], "o-", color=colour, label=f"{variant}: kernel ms")
        right.plot(xs, [s["fork_stall_max_ms"] for s in mine], "x--", color=colour, label=f"{variant}: fork stall ms")
    left.axhline(1.05, color="grey", linestyle=":", label="1.05 x (issue 15's goal)")
    left.set_xscale("log")
    left.set_xlabel("keys in the state (every update a random key)")
    left.set_ylabel("loop time / without snapshots")
    left.set_title("Snapshots every interval: runtime ratio")
    left.legend(fontsize=8)
    right.set_xscale("log")
    right.set_xlabel("keys in the state")
    right.set_ylabel("ms per snapshot (parent process)")
    right.set_title("Parent's kernel time per snapshot (faults) and fork stall")
    right.legend(fontsize=8)
    save_figure(fig, out / "fork_cow.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 300_000, 1_000_000, 3_000_000])
    parser.add_argument("--records", type=int, default=3_000_000, help="updates per run")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between snapshots")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS / "fork-cow"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(machine())
    rows = []
    with tempfile.TemporaryDirectory(prefix="epochal-fork-cow-") as directory:
        for repeat in range(args.repeats):
            for keys in args.keys:
                for variant in rotate(VARIANTS, repeat):  # against drift
                    row = {"repeat": repeat, **run_once(keys, args.records, variant, args.interval, directory)}
                    rows.append(row)
                    print(f"[{repeat}] {keys:>9,} keys {variant:>9}: {row['loop_s']:.2f} s, user {row['user_s']:.2f} "
                          f"sys {row['sys_s']:.2f}, {row['minor_faults']:,} minor faults, {row['snapshots']} "
                          f"snapshots, fork stall up to {row['fork_stall_max_s'] * 1e3:.0f} ms", flush=True)
    write_csv(out / "fork_cow.csv", rows)
    summary = summarise(rows)
    write_csv(out / "fork_cow_summary.csv", summary)
    plot(summary, out)
    print(f"\n{'keys':>10} {'variant':>10} {'snapshots':>9} {'x none':>7} {'extra ms/snap':>13} "
          f"{'kernel ms/snap':>14} {'faults/snap':>11} {'stall ms':>8}")
    for s in summary:
        print(f"{s['keys']:>10,} {s['variant']:>10} {s['snapshots']:>9.0f} {s['ratio_vs_none']:>7.3f} "
              f"{s['extra_s_per_snapshot'] * 1e3:>13.0f} {s['sys_s_per_snapshot'] * 1e3:>14.0f} "
              f"{s['faults_per_snapshot']:>11,.0f} {s['fork_stall_max_ms']:>8.0f}")


if __name__ == "__main__":
    main()
