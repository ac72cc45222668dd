"""High availability with real driver processes (issue 36): standbys take over from SIGKILLed
leaders, and a paused leader (SIGSTOP, then SIGCONT) is fenced and stops by itself.

Each driver is ``tests/ha_job.py`` in a subprocess of its own (its own Spark ``local[2]``), on the
file-based HA services in a temporary directory or on a real ZooKeeper server started here
(:mod:`epochal.testing.zookeeper_server`): keyed running counts into an exactly-once file sink,
compared with the oracle.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

from epochal.connectors.files import read_committed_lines
from tests.ha_job import oracle

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "ha_job.py"
GRAPH_SCRIPT = SCRIPT.with_name("ha_graph_job.py")
ROOT = SCRIPT.parents[1]

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def zookeeper():
    from epochal.testing.zookeeper_server import ZooKeeperServer

    with ZooKeeperServer(tick_ms=500) as server:
        yield server


@pytest.fixture(params=["file", "zookeeper"])
def ha_uri(request, tmp_path):
    """The HA services of one test: a directory, or a fresh root on the ZooKeeper server."""
    if request.param == "file":
        return str(tmp_path / "ha")
    return request.getfixturevalue("zookeeper").uri(f"/epochal-{uuid.uuid4().hex[:8]}")


class Driver:
    """One driver process of the job; its output goes to ``<work>/driver-<n>.log``."""

    def __init__(self, number: int, uri: str, work: pathlib.Path, records: int = 0, rate: float = 0.0,
                 extra_env: dict[str, str] | None = None, script: pathlib.Path = SCRIPT) -> None:
        self.log = work / f"driver-{number}.log"
        env = {key: value for key, value in os.environ.items() if key != "EPOCHAL_HA_UNSAFE_NO_FENCING"}
        env.update(PYTHONPATH=str(ROOT), **(extra_env or {}))
        args = [str(records), str(rate)] if script == SCRIPT else []
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen([sys.executable, str(script), uri, str(work), *args],
                                            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def epoch(self) -> int | None:
        """The epoch this driver leads with, once it started the job."""
        found = re.findall(r"leads it \(epoch (\d+)\)", self.text())
        return int(found[-1]) if found else None

    def wait_for(self, pattern: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.text()):
                return True
            if not self.alive:
                return bool(re.search(pattern, self.text()))
            time.sleep(0.1)
        return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive:
            os.kill(self.process.pid, sig)

    def finish(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait()
            raise AssertionError(f"driver did not end within {timeout} s:\n{self.text()[-3000:]}") from None


def leader_of(drivers: list[Driver], timeout: float) -> Driver:
    """The live driver that leads with the newest epoch (waits until one started the job)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leading = [(d.epoch(), d) for d in drivers if d.alive and d.epoch() is not None]
        if leading:
            return max(leading, key=lambda pair: pair[0])[1]
        time.sleep(0.1)
    raise AssertionError("no driver leads the job:\n" + "\n".join(d.text()[-2000:] for d in drivers))


def committed(work: pathlib.Path) -> collections.Counter:
    return collections.Counter(read_committed_lines(str(work / "out")))


def wait_for_checkpoint(work: pathlib.Path, after: int, leader: Driver, timeout: float) -> int:
    """Wait until more than ``after`` checkpoints are recorded: with the previous leader dead, the
    new one completed a checkpoint of its own (re-committing the one it resumed from adds none)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and leader.alive:
        recorded = len(checkpoint_ids(work)) if list((work / "checkpoints").glob("*/*/checkpoint_stats.jsonl")) else 0
        if recorded > after:
            return recorded
        time.sleep(0.1)
    raise AssertionError(f"the leader completed no checkpoint within {timeout} s:\n{leader.text()[-3000:]}")


def checkpoint_ids(work: pathlib.Path) -> list[int]:
    """Every checkpoint any leader completed or aborted, in the order they were recorded."""
    stats = next((work / "checkpoints").glob("*/*/checkpoint_stats.jsonl"))
    return [json.loads(line)["checkpoint_id"] for line in stats.read_text().splitlines() if line.strip()]


def finals(work: pathlib.Path) -> list[str]:
    path = work / "final.log"
    return path.read_text().splitlines() if path.exists() else []


def cleanup(drivers: list[Driver]) -> None:
    for driver in drivers:
        driver.kill(signal.SIGCONT)
        driver.kill()
        driver.process.wait()


def test_leaders_sigkilled_repeatedly_the_standbys_resume_exactly(tmp_path, ha_uri):
    """Leader and standby; the leader SIGKILLed at a random moment twice (a new standby started
    after each, so three leaders in turn; CI time: what the store does is the same at each
    takeover), on files and on ZooKeeper: the committed output equals the oracle, checkpoint ids
    never repeat, and one driver reports the final result."""
    records, rate = 4000, 250.0
    uri = ha_uri
    kills = 2
    rng = random.Random()
    drivers = [Driver(0, uri, tmp_path, records, rate), Driver(1, uri, tmp_path, records, rate)]
    epochs = []
    recorded = 0
    try:
        for _ in range(kills):
            leader = leader_of(drivers, 300)
            epochs.append(leader.epoch())
            recorded = wait_for_checkpoint(tmp_path, recorded, leader, 120)  # it resumed and took one
            time.sleep(rng.uniform(0.0, 1.5))
            assert leader.alive and not finals(tmp_path), "the job ended before the kills were done: slow it down"
            leader.kill()
            leader.process.wait()
            recorded = len(checkpoint_ids(tmp_path))  # the dead leader records no more
            drivers.append(Driver(len(drivers), uri, tmp_path, records, rate))
        last = leader_of(drivers, 300)
        epochs.append(last.epoch())
        assert last.finish(300) == 0, last.text()[-3000:]
        for driver in drivers:
            if driver.alive:  # the last standby learns the job ended
                assert driver.finish(60) == 0 and "ENDED ELSEWHERE" in driver.text(), driver.text()[-3000:]
    finally:
        cleanup(drivers)
    assert epochs == sorted(set(epochs)), epochs
    got, expected = committed(tmp_path), oracle(records)
    assert got == expected, (f"{sum((got - expected).values())} lines too many, "
                             f"{sum((expected - got).values())} missing")
    ids = checkpoint_ids(tmp_path)
    assert len(ids) == len(set(ids)) and ids == sorted(ids), ids
    # the counter is exact: a new leader goes on right after the last id started before it (at most
    # the one its killed predecessor had in flight is skipped; blocks of reserved ids would show here)
    assert all(b - a <= 2 for a, b in zip(ids, ids[1:], strict=False)), ids
    assert len(finals(tmp_path)) == 1, finals(tmp_path)
    # each new leader removed what its killed predecessor left (checkpoints never completed): only
    # the last leader's retained completed checkpoints remain
    left = sorted((work_dir.name, (work_dir / "_metadata").exists())
                  for work_dir in tmp_path.glob("checkpoints/*/*/chk-*"))
    assert all(done for _, done in left) and len(left) <= 2, left


@pytest.mark.parametrize("fencing", [True, False], ids=["fenced", "fencing-off"])
def test_a_paused_leader_is_fenced_and_stops(tmp_path, fencing):
    """SIGSTOP the leader until the standby took over and runs, then SIGCONT it: it commits
    nothing more and exits with a clear message; the output is exact. With fencing off the
    same zombie goes on committing what the new leader commits too: the output is not exact."""
    records, rate = 3000, 250.0
    uri = str(tmp_path / "ha")
    zombie_env = {} if fencing else {"EPOCHAL_HA_UNSAFE_NO_FENCING": "1"}
    old = Driver(0, uri, tmp_path, records, rate, zombie_env)
    drivers = [old]
    try:
        assert leader_of(drivers, 300) is old
        new = Driver(1, uri, tmp_path, records, rate)
        drivers.append(new)
        assert old.wait_for(r"served at", 60)
        time.sleep(1.5)
        old.kill(signal.SIGSTOP)
        assert new.wait_for(r"leads it", 300), new.text()[-3000:]
        assert new.wait_for(r"served at", 60)
        time.sleep(2.0)
        old.kill(signal.SIGCONT)
        assert old.finish(120) == 3, old.text()[-3000:]
        assert "lost the leadership" in old.text()
        assert new.finish(300) == 0, new.text()[-3000:]
    finally:
        cleanup(drivers)
    got, expected = committed(tmp_path), oracle(records)
    if fencing:
        assert got == expected, (f"{sum((got - expected).values())} lines too many, "
                                 f"{sum((expected - got).values())} missing")
        assert "committed nothing more" in old.text()
        assert len(finals(tmp_path)) == 1
    else:
        assert sum((got - expected).values()) > 0, "without fencing the zombie's commits must repeat output"


def graph_checkpoints(work: pathlib.Path) -> list[int]:
    """The supersteps of the graph job's complete checkpoints (their metadata written)."""
    return sorted(int(p.parent.name.split("-")[1]) for p in (work / "graph").glob("*/checkpoints/chk-*/_metadata"))


def test_a_graph_job_resumes_under_the_standby_from_its_superstep_checkpoint(tmp_path):
    """A Pregel job (PageRank, a superstep checkpoint every superstep) with leader and standby:
    the leader SIGKILLed mid-run; the standby resumes from the latest complete superstep
    checkpoint (not from superstep 0) and its ranks equal the oracle's; a driver started after
    the end reads the same ranks back (ENDED ELSEWHERE) and runs nothing."""
    from epochal.graph.algorithms import PageRank
    from epochal.graph.local import run_graph_locally
    from tests.ha_graph_job import ITERATIONS, graph

    uri = str(tmp_path / "ha")
    drivers = [Driver(i, uri, tmp_path, script=GRAPH_SCRIPT) for i in range(2)]
    try:
        leader = leader_of(drivers, 300)
        deadline = time.monotonic() + 300
        while len(graph_checkpoints(tmp_path)) < 3 and leader.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leader.alive and len(graph_checkpoints(tmp_path)) >= 3, leader.text()[-3000:]
        leader.kill()
        leader.process.wait()
        killed_after = max(graph_checkpoints(tmp_path))
        assert killed_after < ITERATIONS, "the job ended before the kill: slow it down"
        standby = next(d for d in drivers if d is not leader)
        assert standby.finish(300) == 0, standby.text()[-3000:]
        restored = re.findall(r"FINAL supersteps=(\d+) restored_from=\[(\d+)", standby.text())
        # the newest metadata on disk may not be committed yet (the HA store's pointer is the commit
        # point, set right after it): the standby resumes from it or from the one before
        assert restored and int(restored[0][1]) >= killed_after - 1, standby.text()[-3000:]
        late = Driver(2, uri, tmp_path, script=GRAPH_SCRIPT)
        drivers.append(late)
        assert late.finish(300) == 0 and "ENDED ELSEWHERE" in late.text(), late.text()[-3000:]
    finally:
        cleanup(drivers)
    expected = np.asarray(run_graph_locally(graph(), PageRank(ITERATIONS), 1).values)
    for driver in (standby, late):
        ranks = np.load(tmp_path / f"ranks-{driver.process.pid}.npy")
        np.testing.assert_allclose(ranks, expected, rtol=1e-9, atol=0)
