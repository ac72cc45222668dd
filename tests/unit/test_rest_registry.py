"""The per-user job registry (epochal.control.job_registry) and job names (epochal.rest.names): the file
is the user's alone, entries of dead drivers disappear, concurrent writers lose nothing, and a
name or id prefix names one job or says which it could be."""

from __future__ import annotations

import multiprocessing
import os
import stat
import subprocess
import sys
from dataclasses import dataclass

import pytest

from epochal.control.job_registry import HOME_ENV, Registry, RegistryEntry, RegistryError, home
from epochal.rest.names import MIN_PREFIX, AmbiguousJob, UnknownJob, resolve


def entry(job_id: str, name: str = "job", pid: int | None = None) -> RegistryEntry:
    return RegistryEntry(job_id, name, "dataflow", "127.0.0.1:1", "token", pid or os.getpid(), 1.0)


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_the_registry_is_readable_by_its_user_only(tmp_path):
    registry = Registry(tmp_path / "home")
    registry.add(entry("a1"))
    assert stat.S_IMODE(os.stat(tmp_path / "home").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(registry.path).st_mode) == 0o600
    os.chmod(tmp_path / "home", 0o755)  # loosened by someone: the next change tightens it
    registry.add(entry("a2"))
    assert stat.S_IMODE(os.stat(tmp_path / "home").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(registry.path).st_mode) == 0o600
    assert [e.job_id for e in Registry(tmp_path / "home").entries()] == ["a1", "a2"]
    assert not [p for p in os.listdir(tmp_path / "home") if p.endswith(".tmp")]  # no temporary file left


def test_home_is_epochal_home_else_the_runtime_directory_else_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "mine"))
    assert home() == tmp_path / "mine"
    monkeypatch.delenv(HOME_ENV)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert home() == tmp_path / "epochal"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "absent"))
    assert home().name == ".epochal"


def test_a_registry_that_is_a_file_is_refused_with_a_clear_error(tmp_path):
    (tmp_path / "home").write_text("not a directory")
    with pytest.raises(RegistryError, match="not a directory"):
        Registry(tmp_path / "home").add(entry("a"))


def test_entries_of_dead_drivers_are_ignored_then_pruned(tmp_path):
    registry = Registry(tmp_path)
    registry.add(entry("alive"))
    registry.add(entry("dead", pid=dead_pid()))
    assert "dead" in registry.path.read_text()  # written, but not read back
    assert [e.job_id for e in registry.entries()] == ["alive"]
    registry.remove("alive")
    assert registry.entries() == [] and "dead" not in registry.path.read_text()


def test_a_damaged_file_reads_as_empty_and_is_replaced_by_the_next_change(tmp_path):
    registry = Registry(tmp_path)
    registry.path.write_text("{not json")
    assert registry.entries() == []
    registry.add(entry("a"))
    assert [e.job_id for e in registry.entries()] == ["a"]


def _add_many(directory: str, writer: int, count: int, pid: int) -> None:
    registry = Registry(directory)
    for i in range(count):
        registry.add(entry(f"w{writer}-{i}", pid=pid))
        if i % 3 == 2:
            registry.remove(f"w{writer}-{i}")


def test_concurrent_writers_lose_no_entry(tmp_path):
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_add_many, args=(str(tmp_path), w, 15, os.getpid())) for w in range(4)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(60)
        assert process.exitcode == 0
    expected = {f"w{w}-{i}" for w in range(4) for i in range(15) if i % 3 != 2}
    assert {e.job_id for e in Registry(tmp_path).entries()} == expected


# ---------------------------------------------------------------------- names
@dataclass
class Job:
    job_id: str
    name: str
    running: bool = True


def test_a_job_is_named_by_id_then_by_name_then_by_unique_id_prefix():
    jobs = [Job("a1b2c3d4e5f6", "counts"), Job("a1b2ffffffff", "sums"), Job("counts", "odd-name")]
    assert resolve("a1b2c3d4e5f6", jobs) is jobs[0]
    assert resolve("counts", jobs) is jobs[2]  # an id wins over a name
    assert resolve("sums", jobs) is jobs[1]
    assert resolve("a1b2c", jobs) is jobs[0]
    with pytest.raises(AmbiguousJob) as ambiguous:
        resolve("a1b2", jobs)
    assert ambiguous.value.candidates == ["a1b2c3d4e5f6 (counts, running)", "a1b2ffffffff (sums, running)"]
    with pytest.raises(UnknownJob, match="no job with id or name 'a1b' here"):
        resolve("a1b"[:MIN_PREFIX - 1], jobs, " here")  # too short to be a prefix


def test_a_name_shared_by_an_ended_job_and_a_running_one_names_the_running_one():
    jobs = [Job("old000000000", "counts", running=False), Job("new000000000", "counts")]
    assert resolve("counts", jobs) is jobs[1]
    jobs.append(Job("new111111111", "counts"))
    with pytest.raises(AmbiguousJob, match="'counts' names 2 jobs: new000000000 .*new111111111"):
        resolve("counts", jobs)
    with pytest.raises(AmbiguousJob, match="names 2 jobs"):
        resolve("counts", [Job("x1", "counts", False), Job("x2", "counts", False)])
