"""Each failure ends in one clear error within a bounded time; nothing hangs."""

from __future__ import annotations

import os
import pickle
import socket
import threading
import time

import pytest

import epochal
from epochal.runtime.host import frames as protocol
from epochal.testing import kill_worker


def explode_on_seven(value):
    if value == 7:
        raise ValueError(f"bad record {value}")
    return value


def no_epochal_spark_jobs_running(spark, timeout=30.0) -> bool:
    deadline = time.monotonic() + timeout
    tracker = spark.sparkContext.statusTracker()
    while time.monotonic() < deadline:
        if not tracker.getActiveJobsIds():  # tests run one job at a time on the shared session
            return True
        time.sleep(0.1)
    return False


def unbounded_job(env):
    return env.from_sequence(0, None).key_by(lambda x: x % 100).count().discard()


def test_user_exception_names_operator_and_shows_user_traceback(make_env, spark):
    env = make_env(2)
    env.from_sequence(0, 1000).map(explode_on_seven).name("explode").collect()
    with pytest.raises(epochal.JobFailedError) as info:
        env.execute("user-error", timeout=120)
    message = str(info.value)
    assert "operator 'explode'" in message
    assert "ValueError: bad record 7" in message
    assert "explode_on_seven" in message and "test_failures.py" in message
    assert "py4j" not in message.lower() and "org.apache" not in message
    assert "epochal/runtime" not in message  # only the user's frames
    assert info.value.operator == "explode"
    assert no_epochal_spark_jobs_running(spark)


def test_exception_in_open_fails_the_job(make_env):
    class BrokenOpen(epochal.ProcessFunction):
        def open(self, context):
            raise RuntimeError("cannot reach lookup service")

    env = make_env(2)
    env.from_sequence(0, 10).process(BrokenOpen()).name("lookup").collect()
    with pytest.raises(epochal.JobFailedError, match="operator 'lookup'.*cannot reach lookup service"):
        env.execute("open-error", timeout=120)


def test_killed_worker_fails_the_job_promptly(make_env, spark):
    env = make_env(2)
    unbounded_job(env)
    client = env.execute_async("killed-worker")
    client.wait_until_running()
    deadline = time.monotonic() + 30
    while not client.metrics() and time.monotonic() < deadline:
        time.sleep(0.05)  # records are flowing once heartbeats carry metrics
    pid = kill_worker(client, 1)
    with pytest.raises(epochal.JobFailedError) as info:
        client.result(timeout=60)
    message = str(info.value)
    assert f"worker 1 (Spark task attempt 0, pid {pid}" in message
    assert "died" in message
    assert info.value.worker == 1
    assert no_epochal_spark_jobs_running(spark)


def test_unpicklable_function_fails_at_submit_naming_the_operator(make_env, spark):
    lock = threading.Lock()
    env = make_env(2)
    env.from_sequence(0, 10).map(lambda x: (x, lock.locked())).name("holds-a-lock").collect()
    with pytest.raises(epochal.PlanError, match="operator 'holds-a-lock' cannot be shipped"):
        env.execute("unpicklable", timeout=60)
    assert no_epochal_spark_jobs_running(spark, timeout=1)


def test_too_few_slots_fails_at_once(make_env):
    env = make_env(6)  # the shared session is local[4]
    env.from_sequence(0, 10).collect()
    with pytest.raises(epochal.InsufficientSlotsError, match="needs 6 workers.*only 4 task slots"):
        env.execute("too-wide", timeout=60)


def test_busy_slots_end_in_a_clear_error_not_a_hang(make_env, spark, tmp_path):
    """Three of the four slots are taken by another Spark job: two workers cannot both start."""
    marker_dir = str(tmp_path)
    sc = spark.sparkContext

    def occupy(index, _):
        open(os.path.join(marker_dir, f"started-{index}"), "w").close()
        time.sleep(120)
        return iter([])

    def run_blocker():
        sc.setJobGroup("blocker", "occupies slots", interruptOnCancel=True)
        try:
            sc.parallelize(range(3), 3).mapPartitionsWithIndex(occupy).collect()
        except Exception:
            pass

    from pyspark import InheritableThread

    blocker = InheritableThread(target=run_blocker, daemon=True)
    blocker.start()
    try:
        deadline = time.monotonic() + 60
        while len(os.listdir(marker_dir)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(os.listdir(marker_dir)) == 3
        env = make_env(2, registration_timeout=4.0, cancel_timeout=3.0)
        env.from_sequence(0, 10).collect()
        with pytest.raises(epochal.InsufficientSlotsError, match="needs 2 workers.*only 1 started within 4 s"):
            env.execute("no-free-slots", timeout=60)
    finally:
        sc.cancelJobGroup("blocker")
        blocker.join(30)
    assert no_epochal_spark_jobs_running(spark)


def test_cancel_stops_an_unbounded_job_and_its_spark_job(make_env, spark):
    env = make_env(2)
    unbounded_job(env)
    client = env.execute_async("to-cancel")
    client.wait_until_running()
    client.cancel(timeout=60)
    assert client.status == epochal.JobStatus.CANCELLED
    with pytest.raises(epochal.JobCancelledError):
        client.result(timeout=1)
    assert no_epochal_spark_jobs_running(spark)


class _Payload:
    """Creates a file if it is ever unpickled: proof that a stray frame was (not) decoded."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_stray_connections_cannot_inject_frames(make_env, tmp_path):
    env = make_env(2)
    out = env.from_sequence(0, None, rate=2000).map(lambda x: x).collect()
    client = env.execute_async("stray")
    client.wait_until_running()
    evil = str(tmp_path / "pwned")
    payload = pickle.dumps({"type": "finished", "x": _Payload(evil)})

    host, port = client.jobmaster_address()
    with socket.create_connection((host, port), timeout=5) as sock:
        protocol.send_frame(sock, protocol.HELLO, 0, protocol.hello_payload(b"\0" * protocol.TOKEN_BYTES, 0))
        try:
            protocol.send_frame(sock, protocol.CONTROL, 0, payload)
            sock.settimeout(5)
            assert sock.recv(1) == b""  # the JobMaster hung up
        except (ConnectionResetError, BrokenPipeError):
            pass
    for info in client.workers().values():
        try:
            with socket.create_connection((info["host"], info["data_port"]), timeout=5) as sock:
                protocol.send_frame(sock, protocol.DATA, 0, payload)
                sock.settimeout(5)
                assert sock.recv(1) == b""
        except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
            pass  # the data port closes once the worker mesh is complete

    time.sleep(1.0)
    assert not os.path.exists(evil)
    assert client.status == epochal.JobStatus.RUNNING
    seen = len(client.collected(out))
    time.sleep(0.5)
    assert len(client.collected(out)) > seen  # still processing
    client.cancel(timeout=60)
    assert client.status == epochal.JobStatus.CANCELLED
