"""The peer benchmark driver end to end on epochal alone (the peers need their own virtualenvs,
which CI does not install): verify, start-up and timed runs, CSV, table and plot."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_driver_runs_verifies_and_reports(tmp_path):
    subprocess.run([sys.executable, "-m", "benchmarks.peers", "--systems", "epochal", "--jobs", "keyed",
                    "--records", "40000", "--repeats", "1", "--out", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    rows = list(csv.DictReader((tmp_path / "peers.csv").open()))
    assert {(r["job"], r["kind"]) for r in rows} == {(job, kind) for job in ("keyed",)
                                                     for kind in ("verify", "startup", "timed")}
    assert not [r for r in rows if r["error"]], rows
    timed = [r for r in rows if r["kind"] == "timed"]
    assert all(float(r["peak_rss_mb"]) > 0 for r in timed)
    keyed = next(r for r in timed if r["job"] == "keyed")
    assert float(keyed["latency_p50_ms"]) > 0 and int(keyed["checkpoints"]) >= 0
    table = (tmp_path / "peers.md").read_text()
    assert table.count("| epochal |") == 1 and "ok" in table
    assert (tmp_path / "peers.png").stat().st_size > 0
