"""The ``epochal`` command line end to end, against a job running in another process: ``epochal
run job.py`` starts an unbounded keyed job with an exactly-once sink on its own embedded Spark;
``list``, ``info``, ``checkpoints``, ``savepoint``, ``savepoint info`` and ``stop --savepoint-dir``
steer it from other processes; ``epochal run job.py --restore PATH --parallelism 3`` resumes it,
and it is stopped again. The union of both runs' committed output is each key's running sums,
each exactly once (nothing lost, nothing repeated)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from epochal.state.storage import METADATA
from tests.integration.test_savepoints import KEYS, committed_sums, wait_for_output

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB = """
import sys

import epochal
from epochal.connectors.files import ExactlyOnceFileSink

out, checkpoints = sys.argv[1], sys.argv[2]
env = epochal.Environment()  # the parallelism and the restore come from `epochal run`
env.enable_checkpointing(0.5, storage=checkpoints)
(env.from_generator(lambda i: (f"k{i % KEYS}", 1), count=None, rate=1000).uid("source")
 .key_by(lambda kv: kv[0]).sum(lambda kv: kv[1]).uid("sum")
 .sink_to(ExactlyOnceFileSink(out, format=lambda kv: f"{kv[0]} {kv[1]}")).uid("sink"))
result = env.execute("cli-job")
print(f"cli-job ended after {result.records_processed} records")
"""


def epochal(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "epochal", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def start(env: dict[str, str], tmp_path, run: int, *options: str) -> subprocess.Popen[str]:
    log = open(tmp_path / f"run-{run}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "-m", "epochal", "run", str(tmp_path / "job.py"), *options, "--",
                             str(tmp_path / "out"), str(tmp_path / "checkpoints")],
                            env=env, stdout=log, stderr=subprocess.STDOUT, text=True)


def wait_listed(env: dict[str, str], process: subprocess.Popen[str], tmp_path, run: int) -> dict:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert process.poll() is None, (tmp_path / f"run-{run}.log").read_text()
        jobs = json.loads(ok(epochal(env, "list", "--json")))["jobs"]
        if jobs and jobs[0]["status"] == "running":
            return jobs[0]
        time.sleep(1.0)
    raise AssertionError("the job did not show as running in `epochal list`")


def finish(process: subprocess.Popen[str], tmp_path, run: int) -> str:
    process.wait(timeout=120)
    log = (tmp_path / f"run-{run}.log").read_text()
    assert process.returncode == 0, log
    return log


def test_run_list_info_savepoint_stop_and_run_restored_at_another_parallelism(tmp_path):
    (tmp_path / "job.py").write_text(JOB.replace("KEYS", str(KEYS)))
    env = {**os.environ, "EPOCHAL_HOME": str(tmp_path / "home")}
    for name in ("EPOCHAL_RESTORE_FROM", "EPOCHAL_PARALLELISM", "EPOCHAL_MASTER", "EPOCHAL_REST"):
        env.pop(name, None)
    savepoints = str(tmp_path / "savepoints")

    first = start(env, tmp_path, 1)
    try:
        listed = wait_listed(env, first, tmp_path, 1)
        assert (listed["name"], listed["parallelism"], listed["pid"]) == ("cli-job", 2, first.pid)
        assert "cli-job" in ok(epochal(env, "list"))
        info = ok(epochal(env, "info", "cli-job"))
        assert f"job 'cli-job' (id {listed['id']})" in info and "uid 'sum'" in info
        wait_for_output(tmp_path / "out", 200, timeout=120)
        assert json.loads(ok(epochal(env, "checkpoints", listed["id"][:6], "--json")))["counts"]["completed"] >= 1
        running = ok(epochal(env, "savepoint", "cli-job", savepoints)).strip()
        assert running.startswith(savepoints) and os.path.isfile(os.path.join(running, METADATA))
        assert "uid 'sum'" in ok(epochal(env, "savepoint", "info", running))
        assert first.poll() is None  # a savepoint leaves the job running
        time.sleep(1.0)
        stopped = ok(epochal(env, "stop", "cli-job", "--savepoint-dir", savepoints)).strip()
        assert stopped != running and os.path.isfile(os.path.join(stopped, METADATA))
        assert "cli-job ended" in finish(first, tmp_path, 1)
    finally:
        first.kill()
    after_first = committed_sums(tmp_path / "out")
    assert ok(epochal(env, "list")).startswith("no running epochal jobs")
    assert epochal(env, "info", "cli-job").returncode == 3

    second = start(env, tmp_path, 2, "--restore", stopped, "--parallelism", "3")
    try:
        listed = wait_listed(env, second, tmp_path, 2)
        assert listed["parallelism"] == 3
        wait_for_output(tmp_path / "out", sum(map(len, after_first.values())) + 300, timeout=120)
        ok(epochal(env, "stop", "cli-job", "--savepoint-dir", savepoints, "--json"))
        finish(second, tmp_path, 2)
    finally:
        second.kill()
    assert json.loads(ok(epochal(env, "savepoint", "dispose", running, "--json"))) == {"disposed": running}
    assert not os.path.exists(running)

    sums = committed_sums(tmp_path / "out")
    assert sorted(sums) == [f"k{k}" for k in range(KEYS)]
    for key, totals in sums.items():  # each key's running sums, each once, none missing
        assert sorted(totals) == list(range(1, len(totals) + 1)), key
        assert len(totals) > len(after_first[key]), f"{key}: the restored run added nothing"
