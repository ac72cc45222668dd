"""Forked snapshots (dataflow/checkpointing/fork_snapshots.py) without Spark: the child sees the state as it was
at the fork while the parent changes it, reports its handles, closes what it inherited, and dies
with its parent; a killed or failing child yields a reason to decline, never handles."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from epochal.dataflow.checkpointing.fork_snapshots import fork_available, fork_snapshot, wait_report

pytestmark = pytest.mark.skipif(not fork_available(), reason="needs fork()")


def nothing(point: str) -> None:
    pass


def test_the_child_writes_the_state_as_it_was_at_the_fork(tmp_path):
    state = {"a": 1, "b": [1, 2]}
    out = tmp_path / "snapshot.json"

    def write():
        time.sleep(0.2)  # the parent changes its state meanwhile
        out.write_text(json.dumps(state))
        return {"file": out.name, "keys": sorted(state)}

    snapshot = fork_snapshot(7, 1, 0, {"alignment_s": 0.0}, write, nothing)
    state["a"] = 2
    state["b"].append(3)
    state["c"] = 4
    handles, why = wait_report(snapshot)
    assert why == "" and handles == {"file": "snapshot.json", "keys": ["a", "b"]}
    assert json.loads(out.read_text()) == {"a": 1, "b": [1, 2]}
    assert snapshot.stats["fork_s"] < 1.0 and snapshot.checkpoint_id == 7


def test_a_child_that_fails_or_is_killed_gives_a_reason_and_no_handles():
    def fail():
        raise ValueError("disk full")

    handles, why = wait_report(fork_snapshot(1, 0, 0, {}, fail, nothing))
    assert handles is None and "ValueError: disk full" in why

    def kill_self(point: str) -> None:
        if point == "snapshot_child":
            os.kill(os.getpid(), signal.SIGKILL)

    handles, why = wait_report(fork_snapshot(2, 0, 0, {}, lambda: {"file": "x"}, kill_self))
    assert handles is None and "SIGKILL" in why


def test_the_child_closes_inherited_descriptors(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    fd = listener.fileno()

    def write():
        try:
            os.fstat(fd)
            return {"open": True}
        except OSError:
            return {"open": False}

    try:
        handles, why = wait_report(fork_snapshot(1, 0, 0, {}, write, nothing))
        assert why == "" and handles == {"open": False}
        os.fstat(fd)  # still open in the parent
    finally:
        listener.close()


def test_the_child_dies_with_its_parent(tmp_path):
    """A worker killed while its snapshot child runs takes the child with it (no orphan keeps
    writing, or keeps the worker's connections open)."""
    pid_file = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import os, time
        from epochal.dataflow.checkpointing.fork_snapshots import fork_snapshot

        def write():
            time.sleep(60)
            return {{}}

        snapshot = fork_snapshot(1, 0, 0, {{}}, write, lambda point: None)
        open({str(pid_file)!r}, "w").write(str(snapshot.pid))
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        child = int(pid_file.read_text())
        os.kill(child, 0)  # running
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            if _zombie(child):
                break
            time.sleep(0.02)
        else:
            pytest.fail(f"snapshot child {child} outlived its parent")
    finally:
        parent.kill()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_kill_running_stops_children_whose_task_ended():
    """A task that ends leaves its process alive in PySpark's pool: its children must not keep
    writing into checkpoints that will never complete."""
    from epochal.dataflow.checkpointing.fork_snapshots import kill_running

    def write():
        time.sleep(60)
        return {}

    snapshot = fork_snapshot(1, 0, 0, {}, write, nothing)
    started = time.monotonic()
    kill_running()
    handles, why = wait_report(snapshot)
    assert handles is None and "SIGKILL" in why and time.monotonic() - started < 5
