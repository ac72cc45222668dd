"""What every CEC experiment shares: the Spark session and its warm-up, running a spec with an
optional wait for a quiet machine, one printed line per run, and selecting and formatting rows
(CSV, plots and statistics are ``benchmarks.common``'s)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.cec.runner import Spec, run
from benchmarks.common.noise import wait_for_quiet
from benchmarks.common.results import failure, machine, read_csv, write_csv


def fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        if value != value:
            return "n/a"
        return f"{value:,.{digits}f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


class Context:
    """One experiment's session: ``run`` each spec, keep its row, print a line. With
    ``--summarise-only`` it starts no Spark and ``rows`` are read back from the experiment's CSV
    (``loaded``), so tables and plots can be redone without running anything."""

    def __init__(self, args: argparse.Namespace, experiment: str) -> None:
        self.args = args
        self.experiment = experiment
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self.spark: Any = None
        self.loaded = bool(getattr(args, "summarise_only", False))
        if self.loaded:
            self.rows = read_csv(self.out / f"cec_{experiment}.csv")
            return
        from epochal.control.spark import create_session

        # one slot per worker (2), one for a replacement while the lost one's task ends, one spare
        self.spark = create_session("local[4]", 1, app_name=f"epochal-cec-{experiment}")
        self._warm_up()

    def _warm_up(self) -> None:
        """An untimed tiny job: forks Spark's Python workers and imports epochal in them."""
        for mode in ("native", "gopen_disk"):
            run(Spec(mode, 5_000, 100, 10, filter_stage=True), self.spark)

    def run(self, spec: Spec, **tags: Any) -> dict[str, Any]:
        waited = wait_for_quiet(self.args.quiet_wait, self.args.quiet_cores)  # --quiet-wait S, --quiet-cores
        spec.tags = {"experiment": self.experiment, **tags, **spec.tags}
        started = time.monotonic()
        try:
            row = run(spec, self.spark)
            row["status"] = "ok" if row.get("exact") else "wrong output"
        except Exception as error:  # noqa: BLE001 - one failed run is reported, the rest go on
            row = {"mode": spec.mode, **spec.tags, "records": spec.records, "keys": spec.keys, "size": spec.size,
                   "kill_after": spec.kill_after if spec.kill_after is not None else "", "exact": False,
                   "status": failure(error)}
        row["quiet_wait_s"] = waited
        row["run_s"] = time.monotonic() - started
        self.rows.append(row)
        self._print(row)
        return row

    def _print(self, row: dict[str, Any]) -> None:
        parts = [f"[{self.experiment} {time.monotonic() - self.started:6.0f}s]", row["mode"]]
        parts += [f"{k}={fmt(v)}" for k, v in row.items()
                  if k in ("workload", "q_factor", "u_target", "cp_s", "crb_interval_s", "abs_interval_s", "repeat")
                  and v != ""]
        if row.get("status") != "ok" and row.get("status") != "wrong output":
            parts.append(str(row.get("status")))
        else:
            parts.append(f"processing {fmt(row.get('processing_s', float('nan')), 2)} s")
            if "ready_s" in row or "recovered_s" in row:
                parts.append(f"extent {fmt(row.get('phase_extent', float('nan')), 0)}")
                parts.append(f"ready {fmt(row.get('ready_s', row.get('recovered_s', float('nan'))), 2)} s")
                parts.append(f"first commit {fmt(row.get('first_commit_s', float('nan')), 2)} s")
            parts.append(f"results {fmt(row.get('results', 0))} exact={row.get('exact')}")
            parts.append(f"foreign cpu {fmt(row.get('foreign_cpu_cores', float('nan')), 2)}")
        print(" ".join(parts), flush=True)

    def write(self, name: str, rows: Sequence[dict[str, Any]] | None = None) -> Path:
        path = self.out / name
        write_csv(path, list(self.rows if rows is None else rows))
        return path

    def close(self) -> None:
        if self.spark is not None:
            self.spark.stop()

    def elapsed(self) -> float:
        return time.monotonic() - self.started


#: a run counts as quiet when other processes used less than this many cores on average during it
QUIET_CORES = 0.25


def quiet(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs during which other processes left the CPUs alone (``foreign_cpu_cores`` below
    :data:`QUIET_CORES`), or all of ``rows`` when none was quiet."""
    calm = [r for r in rows if float(r.get("foreign_cpu_cores", 0.0) or 0.0) < QUIET_CORES]
    return calm or list(rows)


def exact_all(rows: Iterable[dict[str, Any]]) -> bool:
    return all(bool(r.get("exact")) for r in rows)


def by(rows: Iterable[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def column(rows: Iterable[dict[str, Any]], key: str, transform: Callable[[Any], float] = float) -> list[float]:
    out = []
    for r in rows:
        v = r.get(key, "")
        if v == "" or v is None:
            continue
        try:
            out.append(transform(v))
        except (TypeError, ValueError):
            continue
    return out


def bytes_per_tuple(row: dict[str, Any]) -> float:
    """Bytes per source tuple in its logged output (what travels and is replayed)."""
    frames_bytes = row.get("source_bytes_logged", 0) or 0
    records = row.get("records", 0) or 0
    return frames_bytes / records if records else float("nan")


def env_note() -> str:
    return f"{machine()}; load average now {os.getloadavg()[0]:.2f}"
