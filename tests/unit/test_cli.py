"""The ``epochal`` command line without Spark: parsing, --help on every verb, exit codes, and the
job verbs against real JobMasters served over REST (tests/unit/served_jobs.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from epochal.cli import Exit, main
from epochal.control.job_registry import HOME_ENV, Registry, RegistryEntry
from tests.unit.served_jobs import served_jobs

VERBS = ["list", "info", "checkpoints", "dashboard", "savepoint", "stop", "cancel", "run", "check"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    monkeypatch.delenv("EPOCHAL_TOKEN", raising=False)
    return tmp_path / "home"


@pytest.fixture
def jobs(tmp_path, home):
    with served_jobs(tmp_path) as start:
        yield start


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("verb", [*VERBS, "savepoint info", "savepoint dispose"])
def test_every_verb_has_help(capsys, verb):
    code, out, _ = run(capsys, *verb.split(), "--help")
    assert code == Exit.OK and f"epochal {verb}" in out and "exit codes" in out


def test_usage_errors_exit_2(capsys, home):
    assert run(capsys)[0] == Exit.USAGE  # no verb
    assert run(capsys, "frobnicate")[0] == Exit.USAGE
    assert run(capsys, "info")[0] == Exit.USAGE  # no JOB
    assert run(capsys, "savepoint", "job", "--format", "zip")[0] == Exit.USAGE
    code, _, err = run(capsys, "info", "job", "--address", "127.0.0.1:9")
    assert code == Exit.USAGE and "give --token" in err
    home.mkdir()
    (home / "job.py").write_text("pass\n")
    code, _, err = run(capsys, "run", str(home / "job.py"), "--allow-non-restored-state")
    assert code == Exit.USAGE and "needs --restore" in err


def test_not_found_or_unreachable_exit_3(capsys, home, tmp_path):
    code, _, err = run(capsys, "info", "no-such-job")
    assert code == Exit.NOT_FOUND and "no job with id or name 'no-such-job' running on this machine" in err
    code, out, _ = run(capsys, "cancel", "no-such-job", "--json")
    assert code == Exit.NOT_FOUND and json.loads(out)["exit_code"] == 3
    code, _, err = run(capsys, "info", "job", "--address", "127.0.0.1:9", "--token", "t")
    assert code == Exit.NOT_FOUND and "not reachable" in err
    assert run(capsys, "savepoint", "info", str(tmp_path / "nothing"))[0] == Exit.NOT_FOUND
    assert run(capsys, "savepoint", "dispose", str(tmp_path / "nothing"))[0] == Exit.NOT_FOUND
    assert run(capsys, "run", str(tmp_path / "absent.py"))[0] == Exit.NOT_FOUND


def test_list_is_empty_then_shows_served_jobs_and_info_reads_one(capsys, jobs):
    code, out, _ = run(capsys, "list")
    assert code == Exit.OK and "no running epochal jobs on this machine" in out
    job = jobs("listed")
    code, out, _ = run(capsys, "list")
    assert code == Exit.OK and "JOB ID" in out and job.job_id in out and "listed" in out and "deploying" in out
    code, out, _ = run(capsys, "list", "--json")
    (listed,) = json.loads(out)["jobs"]
    assert (listed["id"], listed["status"], listed["pid"]) == (job.job_id, "deploying", os.getpid())
    code, out, _ = run(capsys, "info", "listed")
    assert code == Exit.OK and f"job 'listed' (id {job.job_id})" in out and "uid 'map-1' Map" in out
    code, out, _ = run(capsys, "dashboard", "listed")
    assert code == Exit.OK and out.strip() == job.dashboard_url  # the URL the driver gives
    code, out, _ = run(capsys, "info", job.job_id[:6], "--json")
    document = json.loads(out)
    assert document["job"]["id"] == job.job_id and len(document["vertices"]) == 2
    code, out, _ = run(capsys, "checkpoints", "listed")
    assert code == Exit.OK and "0 completed" in out
    entry = Registry().entries()[0]
    code, out, _ = run(capsys, "list", "--address", entry.address, "--json")  # the token from the registry
    # the server may still list jobs of earlier tests in this process (it outlives a job by IDLE_S)
    assert code == Exit.OK and job.job_id in [listed["id"] for listed in json.loads(out)["jobs"]]
    code, _, err = run(capsys, "list", "--address", entry.address, "--token", "wrong")
    assert code == Exit.NOT_FOUND and "refused the token" in err


def test_refusals_exit_1_and_ambiguous_names_exit_2(capsys, jobs, tmp_path):
    jobs("pair")
    jobs("pair")
    code, out, _ = run(capsys, "info", "pair", "--json")
    error = json.loads(out)
    assert code == Exit.USAGE and len(error["candidates"]) == 2 and "names 2 jobs" in error["error"]
    single = jobs("single")
    code, _, err = run(capsys, "savepoint", "single", str(tmp_path / "sp"))
    assert code == Exit.FAILED and "is deploying" in err  # not running yet: 409
    code, out, _ = run(capsys, "cancel", "single")
    assert code == Exit.OK and out.strip() == f"job {single.job_id} cancelled"
    code, _, err = run(capsys, "cancel", single.job_id)  # ended already (its server still serves the pair)
    assert code == Exit.FAILED and "has ended" in err


def test_a_name_on_two_drivers_is_ambiguous_and_a_dead_drivers_entry_is_not_listed(capsys, home):
    registry = Registry()
    for job_id, pid in (("aaaa11112222", os.getpid()), ("bbbb11112222", os.getppid())):
        registry.add(RegistryEntry(job_id, "shared", "dataflow", "127.0.0.1:9", "t", pid, 0.0))
    code, _, err = run(capsys, "stop", "shared")
    assert code == Exit.USAGE and "aaaa11112222 (shared, running)" in err
    code, _, err = run(capsys, "info", "aaaa")
    assert code == Exit.NOT_FOUND and "not reachable" in err  # found, but nobody listens there
    code, out, _ = run(capsys, "list")
    assert code == Exit.OK and out.count("unreachable") == 2


def test_the_command_is_installed_and_python_m_epochal_is_the_same(home):
    bin_dir = os.path.dirname(sys.executable)
    for command in ([os.path.join(bin_dir, "epochal"), "list", "--json"],
                    [sys.executable, "-m", "epochal", "list", "--json"]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=os.environ.copy())
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"jobs": []}


def test_run_runs_a_script_with_its_arguments_and_settings_and_exits_with_its_status(capsys, home, monkeypatch):
    for name in ("EPOCHAL_PARALLELISM", "EPOCHAL_RESTORE_FROM", "EPOCHAL_ALLOW_NON_RESTORED_STATE", "EPOCHAL_MASTER"):
        monkeypatch.setenv(name, "")  # restored (removed) after the test: run sets them in this process
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    script = home / "script.py"
    home.mkdir()
    script.write_text("import os, sys\n"
                      "from epochal.control import run_settings\n"
                      "print(sys.argv[1:], run_settings.parallelism(), run_settings.restore(None, False),\n"
                      "      run_settings.master())\n"
                      "sys.exit(int(sys.argv[1]))\n")
    code, out, err = run(capsys, "run", str(script), "--parallelism", "3", "--restore", "sp", "-n",
                       "--master", "local[3]", "--", "7", "x")
    assert code == 7, err
    assert out.strip() == f"['7', 'x'] 3 ('{os.path.abspath('sp')}', True) local[3]"
    script.write_text("raise ValueError('broken job')\n")
    code, _, err = run(capsys, "run", str(script))
    assert code == Exit.FAILED and "ValueError: broken job" in err


def test_list_shows_the_leader_and_the_standbys_of_a_highly_available_job(capsys, jobs):
    """With high availability each driver has an entry: the leader's (served, ``role`` leader)
    and each standby's (no address); ``info`` resolves the job to its leader."""
    import dataclasses
    import time

    job = jobs("ha-listed")
    registry = Registry()
    served = next(e for e in registry.entries() if e.job_id == job.job_id)
    registry.add(dataclasses.replace(served, role="leader", ha="/shared/ha"))
    standby = subprocess.Popen(["sleep", "60"])  # another live driver process, waiting
    try:
        registry.add(RegistryEntry(job.job_id, "ha-listed", "dataflow", "", "", standby.pid, time.time(),
                                   "standby", "/shared/ha"))
        code, out, _ = run(capsys, "list")
        rows = [line for line in out.splitlines() if job.job_id in line]
        assert code == Exit.OK and "ROLE" in out and len(rows) == 2
        assert any("leader" in r and str(os.getpid()) in r for r in rows)
        assert any("standby" in r and str(standby.pid) in r for r in rows)
        code, out, _ = run(capsys, "info", "ha-listed")
        assert code == Exit.OK and f"(id {job.job_id})" in out
        registry.remove(job.job_id, pid=os.getpid())  # the leader's job ended: its entry goes, not the standby's
        assert [e.role for e in registry.entries() if e.job_id == job.job_id] == ["standby"]
    finally:
        standby.kill()
        standby.wait()


@pytest.mark.parametrize("switch", ["1", "0"])
def test_check_says_whether_the_native_parts_are_in_use(capsys, monkeypatch, switch):
    monkeypatch.setenv("EPOCHAL_NATIVE_READER", switch)
    monkeypatch.setenv("EPOCHAL_NATIVE_QUERIES", switch)
    code, out, _ = run(capsys, "check")
    assert code == 0 and "epochal ready" in out
    assert ("native RocksDB reader: in use" in out) == (switch == "1")
    assert ("native RocksDB reader: off (EPOCHAL_NATIVE_READER=0)" in out) == (switch == "0")
    assert ("native query answers: in use" in out) == (switch == "1")
    assert ("native query answers: off (EPOCHAL_NATIVE_QUERIES=0)" in out) == (switch == "0")
