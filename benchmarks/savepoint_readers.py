"""How a RocksDB canonical savepoint is read (issue 34): the native reader against rocksdict in
Python (``EPOCHAL_NATIVE_READER=0``), files written through the page cache instead of past it
(``page-cache``: ``EPOCHAL_DIRECT_IO=0``), and optionally the code of another checkout, on the same
job, in alternating jobs of ``benchmarks.savepoints`` (each ``--rounds`` canonical and native
savepoints of one state; docs/savepoints.md, "The native reader").

The reader is chosen when Spark starts (its workers inherit the environment), so each job runs in
a process of its own, the configurations taking turns. Each job pairs a canonical savepoint with
the native one next to it (the machine's speed drifts between jobs and within one); the summary
gives per configuration the geometric mean of those ratios with its 95 % interval, and the
medians of the canonical and native savepoints' durations and parts (alignment, asynchronous
part), which say what the reader changed where the ratio's denominator moves from job to job.

    .venv/bin/python -m benchmarks.savepoint_readers --jobs 3 --rounds 6              # ~7 min
    .venv/bin/python -m benchmarks.savepoint_readers --baseline-tree /tmp/old-epochal  # + old code
    .venv/bin/python -m benchmarks.savepoint_readers --baseline-tree /tmp/old-epochal \
        --configurations native baseline                                                  # only these

``--baseline-tree``: a checkout with its own ``.venv`` (``make setup`` there), run with this
checkout's ``benchmarks/savepoints.py``. Writes ``savepoint_readers.csv`` (every savepoint),
``savepoint_readers_summary.csv`` and ``savepoint_readers.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.common.results import RESULTS, ROOT, pyplot, save_figure, write_csv
from benchmarks.common.stats import ratio_interval
from benchmarks.savepoints import paired_ratios


def configurations(args: argparse.Namespace) -> dict[str, tuple[Path, dict[str, str]]]:
    """Name -> (checkout to run in, environment additions)."""
    out = {"native": (ROOT, {}), "python": (ROOT, {"EPOCHAL_NATIVE_READER": "0"}),
           "page-cache": (ROOT, {"EPOCHAL_DIRECT_IO": "0"})}
    if args.baseline_tree:
        out["baseline"] = (Path(args.baseline_tree).resolve(), {})
    if args.configurations:
        unknown = set(args.configurations) - set(out)
        if unknown:
            raise SystemExit(f"unknown configurations {sorted(unknown)} (there are {sorted(out)})")
        out = {name: out[name] for name in args.configurations}
    return out


def run_job(tree: Path, env: dict[str, str], args: argparse.Namespace, out: Path) -> None:
    script = tree / "benchmarks" / "savepoints.py"
    if tree != ROOT:  # the baseline runs this checkout's benchmark (and its helpers) against its own epochal
        shutil.copy(ROOT / "benchmarks" / "savepoints.py", script)
        shutil.copytree(ROOT / "benchmarks" / "common", tree / "benchmarks" / "common", dirs_exist_ok=True)
    command = [str(tree / ".venv" / "bin" / "python"), "-m", "benchmarks.savepoints", "--experiments", "sizes",
               "--sizes", str(args.keys), "--backends", "rocksdb", "--repeats", "1", "--rounds", str(args.rounds),
               "--pause", str(args.pause), "--out", str(out)]
    subprocess.run(command, cwd=tree, env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL)


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    summary = []
    for name in dict.fromkeys(r["configuration"] for r in rows):
        mine = [r for r in rows if r["configuration"] == name]
        jobs = sorted({r["job"] for r in mine})
        ratio, low, high = ratio_interval(paired_ratios(mine))
        by_job = [ratio_interval(paired_ratios([r for r in mine if r["job"] == job]))[0] for job in jobs]

        def median_of(what: str, column: str, rows: list[dict[str, Any]] = mine) -> float:
            return statistics.median(float(r[column]) for r in rows if r["what"] == what)

        summary.append({"configuration": name, "jobs": len(jobs), "pairs": len(paired_ratios(mine)),
                        "canonical_over_native": ratio, "low": low, "high": high,
                        "by_job": " ".join(f"{r:.2f}" for r in by_job),
                        **{f"{fmt}_{part}": median_of(f"savepoint-{fmt}", column)
                           for fmt in ("canonical", "native")
                           for part, column in (("s", "duration_s"), ("alignment_s", "alignment_s_max"),
                                                ("async_s", "async_s_max"))}})
    return summary


def plot(summary: list[dict[str, Any]], keys: int, path: Path) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    names = [s["configuration"] for s in summary]
    at = range(len(names))
    left.bar([x - 0.2 for x in at], [s["canonical_s"] for s in summary], 0.4, label="canonical savepoint")
    left.bar([x + 0.2 for x in at], [s["native_s"] for s in summary], 0.4, label="native savepoint (all SST files)")
    left.set_xticks(list(at), names)
    left.set_ylabel("duration, median (s)")
    left.legend()
    right.errorbar(list(at), [s["canonical_over_native"] for s in summary],
                   yerr=[[s["canonical_over_native"] - s["low"] for s in summary],
                         [s["high"] - s["canonical_over_native"] for s in summary]], fmt="o", capsize=6)
    right.axhline(1.5, color="red", linestyle="--", label="goal 1.5x")
    right.set_xticks(list(at), names)
    right.set_ylabel("canonical / native, paired (geometric mean, 95 %)")
    right.legend()
    fig.suptitle(f"RocksDB canonical and native savepoints at {keys / 1e6:g} M keys: {', '.join(names)}")
    save_figure(fig, path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3, help="jobs per configuration (they take turns)")
    parser.add_argument("--rounds", type=int, default=6, help="canonical and native savepoints per job")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--pause", type=float, default=2.0)
    parser.add_argument("--baseline-tree", default=None, help="another checkout (with .venv) to compare")
    parser.add_argument("--configurations", nargs="+", default=None,
                        help="only these (native, python, page-cache, baseline); default: all")
    parser.add_argument("--from-dir", default=None,
                        help="summarise the runs already in this directory (<configuration>-<job>/savepoints.csv)")
    parser.add_argument("--out", default=str(RESULTS / "savepoint_readers"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = Path(args.from_dir) if args.from_dir else out / "runs"
    if not args.from_dir:
        for job in range(args.jobs):
            for name, (tree, env) in configurations(args).items():
                run_job(tree, env, args, runs / f"{name}-{job}")
                print(f"job {job}: {name} done", flush=True)
    rows = []
    for path in sorted(runs.glob("*-*/savepoints.csv")):
        name, job = path.parent.name.rsplit("-", 1)
        if not job.isdigit():
            continue
        with open(path) as source:
            for row in csv.DictReader(source):
                if row["what"].startswith("savepoint-"):
                    rows.append({"configuration": name, "job": int(job), **row, "repeat": int(job),
                                 "duration_s": float(row["duration_s"])})
    summary = summarise(rows)
    write_csv(out / "savepoint_readers.csv", rows)
    write_csv(out / "savepoint_readers_summary.csv", summary)
    keys = int(rows[0]["keys"]) if rows else args.keys
    plot(summary, keys, out / "savepoint_readers.png")
    for s in summary:
        print(f"{s['configuration']:>9}: canonical {s['canonical_s']:.2f} s (async {s['canonical_async_s']:.2f}, "
              f"alignment {s['canonical_alignment_s']:.2f}), native {s['native_s']:.2f} s; paired in "
              f"{s['pairs']} rounds x{s['canonical_over_native']:.2f} ({s['low']:.2f}-{s['high']:.2f}), "
              f"by job {s['by_job']}")


if __name__ == "__main__":
    sys.exit(main())
