"""Keeping benchmark runs apart, so that one run's leftovers and the machine's drift do not land
on another's numbers:

* **fresh processes**: a run in a process of its own (:func:`child_env`), where a peer system runs
  in its own virtualenv (:func:`ensure_venv`), its whole process tree watched while it runs
  (:func:`watch_tree`: peak memory, and the tree killed past a timeout), paused and continued
  (:func:`pause`), and killed with everything it started (:func:`kill_tree`);
* **a private registry**: the job registry of this run alone (:func:`isolated_home`), emptied of
  the previous job before the next starts (:func:`wait_unregistered`), so a watcher or client
  process finds this run's job and no other;
* **interleaving**: configurations run in rounds, each round in another rotating order
  (:func:`rotate`), so that slow drift of the machine hits every configuration alike.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.results import ROOT

#: The peer systems' virtualenvs, one per system, created on first use.
VENVS = ROOT / ".venv-peers"
#: Their requirements files, ``<name>.txt``.
REQUIREMENTS = ROOT / "benchmarks" / "peers" / "requirements"


# ------------------------------------------------------------------------------- fresh processes
def ensure_venv(name: str) -> None:
    """Create ``.venv-peers/<name>`` from its requirements file, again whenever the file changes."""
    requirements = REQUIREMENTS / f"{name}.txt"
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()
    venv = VENVS / name
    marker = venv / ".installed"
    if marker.exists() and marker.read_text() == digest:
        return
    print(f"installing {name} into {venv} (first use) ...", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-r", str(requirements)], check=True)
    marker.write_text(digest)


def child_env() -> dict[str, str]:
    """The environment of a benchmark's child process: this one's, with the repository root as
    ``PYTHONPATH`` (the child imports ``benchmarks``, whatever its interpreter)."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def tree(pid: int) -> list[Any]:
    """Process ``pid`` and its descendants (psutil processes; none if it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_rss(process: Any) -> int:
    """Bytes resident in ``process`` (a psutil process) and its descendants now."""
    import psutil

    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass
    return total


def kill_tree(process: Any) -> None:
    """SIGKILL ``process`` (a psutil process) and every descendant, the descendants first."""
    import psutil

    for member in [*process.children(recursive=True), process]:
        try:
            member.kill()
        except psutil.Error:
            pass


def pause(pid: int, paused: bool) -> None:
    """Stop (``SIGSTOP``) or continue (``SIGCONT``) process ``pid`` and every descendant: a stopped
    watcher takes no CPU and sends nothing."""
    for process in tree(pid):
        try:
            process.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)
        except Exception:  # noqa: BLE001 - a process that ended meanwhile
            continue


def watch_tree(child: subprocess.Popen[Any], started: float, timeout: float,
               until: threading.Event | None = None) -> tuple[int, bool]:
    """Sample the resident memory of ``child``'s process tree every 0.25 s until it exits (or
    ``until`` is set); past ``timeout`` seconds from ``started`` (``time.perf_counter``) kill the
    tree. Returns (the largest sum of RSS seen, in bytes; whether the tree was killed)."""
    import psutil

    process = psutil.Process(child.pid)
    peak = 0
    while child.poll() is None and not (until is not None and until.is_set()):
        peak = max(peak, tree_rss(process))
        if time.perf_counter() - started > timeout:
            kill_tree(process)
            return peak, True
        time.sleep(0.25)
    return peak, False


# ------------------------------------------------------------------------------ private registry
def isolated_home(prefix: str) -> Path:
    """A new scratch directory (``prefix`` its name's start) whose ``home`` is this process's
    ``EPOCHAL_HOME`` from now on: the job registry there holds this run's jobs only, and child
    processes started later find them (and no other)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["EPOCHAL_HOME"] = str(work / "home")
    return work


def wait_unregistered(timeout: float = 30.0) -> None:
    """Until the previous run's job left the registry (so a watcher or client finds the next one)."""
    from epochal.control.job_registry import Registry

    deadline = time.monotonic() + timeout
    while Registry().entries() and time.monotonic() < deadline:
        time.sleep(0.05)


# ---------------------------------------------------------------------------------- interleaving
def rotate(items: Sequence[Any], shift: int) -> list[Any]:
    """``items`` started at position ``shift`` (interleaving: each round another order)."""
    shift %= max(1, len(items))
    return list(items[shift:]) + list(items[:shift])
