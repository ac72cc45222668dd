"""High availability (issue 36, papers/001 §4.5): takeover time after the leader's driver dies.

Each run starts two drivers of one job (this module's ``driver`` mode, each a process with its
own Spark ``local[2]``), leader and standby, on the file-based HA services or a ZooKeeper server
started here. The job counts ``--keys`` distinct keys (the first records write every key once:
keyed state of that many entries), then goes on over the same keys at full speed, checkpointing
every second. Once a checkpoint covering every key completed (and the standby is warm), the
leader's driver is SIGKILLed; the timeline, each measured from the kill: ``elected_s`` (the
standby won the election), ``started_s`` (it leads: its Spark warm-up joined, it starts the job),
``submitted_s`` (the job planned, the HA store read, orphans removed, its Spark job submitted:
``execute_async`` returned), ``running_s`` (every worker deployed, connected and its state
restored: the JobMaster saw every ``Ready``) and ``first_record_s`` (a worker of the new leader
processed its first record). Rows written before the timeline have no ``submitted_s`` and
``running_s``. Goal (the issue): the first record
within 10 s of the kill with the default lease/session timeout (5 s), and within the timeout + 3 s
in general.

Writes ``ha_takeover.csv``, ``ha_takeover.png`` and ``machine.txt`` into ``--out`` (default
``benchmarks/results/ha_takeover``).

    .venv/bin/python -m benchmarks.ha_takeover                              # docs/high_availability.md
    .venv/bin/python -m benchmarks.ha_takeover --keys 10000 --timeouts 2 --repeats 1 --stores file
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common.isolation import child_env
from benchmarks.common.results import RESULTS, ROOT, machine, pyplot, save_figure, write_csv
from benchmarks.common.stats import median


def driver(uri: str, work: str, keys: int, timeout: float) -> None:
    """One driver of the benchmark's job (run as ``python -m benchmarks.ha_takeover driver ...``)."""
    import logging

    import epochal

    logging.basicConfig(level=logging.INFO, format="%(created).3f %(name)s %(levelname)s %(message)s")
    first = os.path.join(work, "first")
    os.makedirs(first, exist_ok=True)

    def mark(value: Any) -> Any:  # a worker's first record: when, written once per worker process
        marker = os.path.join(first, f"{os.getpid()}")
        if not os.path.exists(marker):
            with open(marker, "w") as out:
                out.write(f"{time.time():.4f}")
        return value

    env = epochal.Environment(2, master="local[2]", registration_timeout=120.0)
    env.enable_checkpointing(1.0, storage=os.path.join(work, "checkpoints"), timeout=120.0)
    env.enable_high_availability(uri, lease_timeout=timeout)
    (env.from_generator(lambda i: i % keys).map(mark).key_by(lambda k: k).count()
        .filter(lambda kv: kv[0] == 0 and kv[1] % 100_000 == 0).print())
    try:  # the timeline's marks, in the log's format (its first field: the time)
        client = env.execute_async("ha-takeover")
        print(f"{time.time():.3f} bench SUBMITTED", flush=True)
        client.wait_until_running(600)
        print(f"{time.time():.3f} bench RUNNING", flush=True)
        client.result()
    except epochal.EpochalError as error:
        print(f"ENDED {type(error).__name__}: {error}", flush=True)


class Process:
    def __init__(self, uri: str, work: Path, keys: int, timeout: float, name: str) -> None:
        self.log = work / f"{name}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.ha_takeover", "driver", uri, str(work), str(keys), str(timeout)],
                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=child_env())

    def when(self, pattern: str) -> float | None:
        for line in self.log.read_text(errors="replace").splitlines():
            if re.search(pattern, line):
                stamp = line.split(" ", 1)[0]
                try:
                    return float(stamp)
                except ValueError:
                    continue
        return None

    def wait(self, pattern: str, limit: float) -> float:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            found = self.when(pattern)
            if found is not None:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{pattern!r} not seen within {limit} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def covered(work: Path, keys: int) -> bool:
    """A checkpoint covering every key completed (its stats count more source records than keys)."""
    import json

    for stats in glob.glob(str(work / "checkpoints" / "*" / "*" / "checkpoint_stats.jsonl")):
        for line in Path(stats).read_text().splitlines():
            entry = json.loads(line)
            records = sum(s.get("source_records", 0) for s in entry.get("subtasks", {}).values())
            if entry["status"] == "completed" and records > keys:
                return True
    return False


def run(store: str, uri: str, keys: int, timeout: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="epochal-ha-bench-"))
    leader = Process(uri, work, keys, timeout, "leader")
    standby = None
    try:
        leader.wait(r"leads it", 600)
        standby = Process(uri, work, keys, timeout, "standby")
        deadline = time.monotonic() + 600
        while not covered(work, keys):
            if time.monotonic() > deadline:
                raise RuntimeError("no checkpoint covered every key")
            time.sleep(0.2)
        standby.wait(r"Spark is ready for a takeover", 600)
        before = set(os.listdir(work / "first"))
        killed = time.time()
        leader.stop()
        elected = standby.wait(r"elected for job", 120)
        leads = standby.wait(r"leads it", 300)
        submitted = standby.wait(r"bench SUBMITTED", 300)
        running = standby.wait(r"bench RUNNING", 300)
        deadline = time.monotonic() + 300
        while True:
            fresh = [f for f in os.listdir(work / "first") if f not in before]
            if fresh:
                first = min(float((work / "first" / f).read_text() or "inf") for f in fresh)
                if first != float("inf"):
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the new leader processed no record")
            time.sleep(0.05)
        return {"store": store, "keys": keys, "timeout_s": timeout, "elected_s": round(elected - killed, 3),
                "started_s": round(leads - killed, 3), "submitted_s": round(submitted - killed, 3),
                "running_s": round(running - killed, 3), "first_record_s": round(first - killed, 3),
                "loadavg": round(os.getloadavg()[0], 2)}
    finally:
        leader.stop()
        if standby is not None:
            standby.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", default="bench")
    parser.add_argument("args", nargs="*")
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--timeouts", type=float, nargs="+", default=[2.0, 5.0])
    parser.add_argument("--stores", nargs="+", default=["file", "zookeeper"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--runs", nargs="+", default=None,
                        help="instead of every combination: STORE:KEYS:TIMEOUT triples, e.g. file:100000:5")
    parser.add_argument("--out", default=str(ROOT / RESULTS / "ha_takeover"))
    options = parser.parse_args()
    if options.mode == "driver":
        uri, work, keys, timeout = options.args
        driver(uri, work, int(keys), float(timeout))
        return
    if options.mode == "merge":  # python -m benchmarks.ha_takeover merge A.csv B.csv --out DIR
        import csv

        merged = [{k: v if k == "store" else int(float(v)) if k == "keys" else float(v) for k, v in row.items()}
                  for path in options.args for row in csv.DictReader(open(path))]
        Path(options.out).mkdir(parents=True, exist_ok=True)
        write_csv(Path(options.out) / "ha_takeover.csv", merged)
        plot(merged, Path(options.out) / "ha_takeover.png")
        return
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "machine.txt").write_text(machine())
    rows: list[dict[str, Any]] = []
    zookeeper = None
    if "zookeeper" in options.stores or any(r.startswith("zookeeper") for r in options.runs or []):
        from epochal.testing.zookeeper_server import ZooKeeperServer

        zookeeper = ZooKeeperServer(tick_ms=500).start()
    runs = [(s, int(k), float(t)) for s, k, t in (r.split(":") for r in options.runs)] if options.runs else \
        [(s, k, t) for s in options.stores for k in options.keys for t in options.timeouts]
    try:
        for _ in range(options.repeats):
            for store, keys, timeout in runs:
                uri = zookeeper.uri(f"/bench-{uuid.uuid4().hex[:8]}") if store == "zookeeper" and zookeeper else \
                    tempfile.mkdtemp(prefix="epochal-ha-store-")
                row = run(store, uri, keys, timeout)
                print(row, flush=True)
                rows.append(row)
                write_csv(out / "ha_takeover.csv", rows)
    finally:
        if zookeeper is not None:
            zookeeper.close()
    plot(rows, out / "ha_takeover.png")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    for (store, keys) in sorted({(r["store"], r["keys"]) for r in rows}):
        mine = [r for r in rows if r["store"] == store and r["keys"] == keys]
        timeouts = sorted({r["timeout_s"] for r in mine})
        axis.plot(timeouts, [median(r["first_record_s"] for r in mine if r["timeout_s"] == t) for t in timeouts],
                  marker="o", label=f"{store}, {keys:,} keys: first record")
    timeouts = sorted({r["timeout_s"] for r in rows})
    axis.plot(timeouts, [t + 3 for t in timeouts], linestyle="--", color="grey", label="goal: timeout + 3 s")
    axis.axhline(10.0, linestyle=":", color="red", label="goal at the default 5 s: 10 s")
    axis.set_xlabel("lease / session timeout (s)")
    axis.set_ylabel("SIGKILL of the leader -> first record (s)")
    axis.set_title("HA takeover time (median)")
    axis.legend(fontsize=7)
    save_figure(figure, path)


if __name__ == "__main__":
    main()
