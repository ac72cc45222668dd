"""What epochal needs from Spark, checked the way users meet it: a script with its own
SparkSession, executors whose Python cannot import epochal, Ctrl-C, timeouts and busy slots.

The script tests run real Python processes with the venv's bin removed from PATH, so ``python3``
on PATH is an interpreter without epochal (as for a user who runs ``.venv/bin/python job.py``
without activating the venv).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import epochal

REPO = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = os.path.dirname(sys.executable)
JVM_OR_PY4J = ("at org.apache", "at java.", "py4j", "Py4J", "ERROR:root", "reentrant call")


def path_without_venv() -> str:
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and os.path.realpath(p) != os.path.realpath(VENV_BIN))


def script_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                                            "PYTHONPATH", "SPARK_HOME")}
    env["PATH"] = path_without_venv()
    env.update(extra)
    return env


def python_without_epochal() -> str:
    """``python3`` from the PATH the scripts get, which must not import epochal (else: skip)."""
    python = shutil.which("python3", path=path_without_venv())
    if python is None:
        pytest.skip("no python3 on PATH outside the venv")
    probe = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); import epochal"],
                           capture_output=True, text=True, timeout=60, env=script_env())
    if probe.returncode == 0:
        pytest.skip(f"{python} can import epochal: nothing to test")
    if probe.stdout.strip() != "{}.{}".format(*sys.version_info[:2]):
        pytest.skip(f"{python} is Python {probe.stdout.strip()}, not the driver's minor version")
    return python


def write_script(tmp_path, body: str) -> str:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


OWN_SESSION = """
    from pyspark.sql import SparkSession

    import epochal

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    env = epochal.Environment(parallelism=2, spark=spark)
    out = env.from_collection(["a b", "b c"]).flat_map(str.split).key_by(lambda w: w).count().collect()
    env.execute("wordcount", timeout=120)
    print("RESULT", sorted(out.get()))
"""


def test_own_session_in_local_mode_uses_the_driver_python(tmp_path):
    python_without_epochal()  # the situation of the bug: python3 on PATH has no epochal
    run = subprocess.run([sys.executable, write_script(tmp_path, OWN_SESSION)], capture_output=True, text=True,
                         timeout=300, env=script_env(), cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "RESULT [('a', 1), ('b', 1), ('b', 2), ('c', 1)]" in run.stdout


def assert_one_clean_error(stderr: str, error_class: str, first_line: str) -> list[str]:
    """The uncaught error is the last thing printed: one short traceback, no JVM or Py4J text,
    no frame of epochal's internals; returns the message's lines."""
    lines = stderr.rstrip("\n").split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{error_class}: "))
    assert lines[start] == f"{error_class}: {first_line}", stderr[-3000:]
    assert stderr.count("Traceback (most recent call last)") == 1, stderr[-3000:]
    for marker in JVM_OR_PY4J + ("/epochal/runtime/", "/epochal/control/", "During handling"):
        assert marker not in stderr, (marker, stderr[-3000:])
    assert len(lines) < 25, stderr  # Spark's start-up banner, 2 frames, the message
    return lines[start:]


def test_executors_without_epochal_fail_at_once_with_one_clear_error(tmp_path):
    python = python_without_epochal()
    started = time.monotonic()
    run = subprocess.run([sys.executable, write_script(tmp_path, OWN_SESSION)], capture_output=True, text=True,
                         timeout=300, env=script_env(PYSPARK_PYTHON=python), cwd=tmp_path)
    assert run.returncode == 1
    assert time.monotonic() - started < 240
    version = subprocess.run([python, "-c", "import sys; print(sys.executable, '%d.%d.%d' % sys.version_info[:3])"],
                             capture_output=True, text=True, env=script_env()).stdout.split()
    message = assert_one_clean_error(
        run.stderr, "epochal.errors.EnvironmentSetupError",
        f"Spark's executors cannot import epochal: their Python ({version[0]}, Python {version[1]}) raised "
        "ModuleNotFoundError: No module named 'epochal'.")
    assert message[1] == f"The executors' Python comes from PYSPARK_PYTHON={python}."
    assert f"PYSPARK_PYTHON={sys.executable}" in message[2] and "venv-pack" in message[2]
    assert "RESULT" not in run.stdout


def other_minor_python() -> str | None:
    """A working interpreter of another minor version than the driver's, if the machine has one."""
    for minor in range(9, 20):
        if minor == sys.version_info[1]:
            continue
        candidates = [shutil.which(f"python3.{minor}", path=path_without_venv()),
                      *sorted(pathlib.Path.home().glob(f".pyenv/versions/3.{minor}.*/bin/python3"))]
        for python in filter(None, candidates):
            check = subprocess.run([str(python), "-c", "import sys; print(sys.version_info[1])"],
                                   capture_output=True, text=True, timeout=60, env=script_env())
            if check.returncode == 0 and check.stdout.strip() == str(minor):
                return str(python)
    return None


def test_executors_with_another_python_version_say_so(tmp_path):
    python = other_minor_python()
    if python is None:
        pytest.skip("no Python of another minor version on this machine")
    run = subprocess.run([sys.executable, write_script(tmp_path, OWN_SESSION)], capture_output=True, text=True,
                         timeout=300, env=script_env(PYSPARK_PYTHON=python), cwd=tmp_path)
    assert run.returncode == 1
    lines = run.stderr.rstrip("\n").split("\n")
    line = next(line for line in lines if line.startswith("epochal.errors.EnvironmentSetupError: "))
    assert f"({python}) but the driver runs Python {'.'.join(map(str, sys.version_info[:3]))}" in line
    assert "PySpark needs the same major.minor version on both" in line
    for marker in JVM_OR_PY4J:
        assert marker not in run.stderr, (marker, run.stderr[-3000:])


FOREVER = """
    import os
    import sys

    import epochal

    marker = sys.argv[1]

    def mark(x):
        if x == 1000:
            open(marker, "w").close()  # records are flowing
        return x

    env = epochal.Environment(parallelism=2)
    env.from_sequence(0, None).map(mark).key_by(lambda x: x % 10).count().discard()
    print("EXECUTING", flush=True)
    env.execute("forever")
"""


def session_processes(sid: int) -> list[str]:
    # -ww: whole command lines whatever COLUMNS says (CI sets it; a cut line hides "pyspark")
    out = subprocess.run(["ps", "-ww", "-e", "-o", "pid=,sid=,stat=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if line.split()[1] == str(sid) and not line.split()[2].startswith("Z")]  # zombies are gone


@pytest.mark.parametrize("when", ["running", "starting"])
def test_ctrl_c_cancels_the_job_with_a_short_clean_message(tmp_path, when):
    marker = tmp_path / "flowing"
    process = subprocess.Popen([sys.executable, write_script(tmp_path, FOREVER), str(marker)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                               env=script_env(), start_new_session=True)  # its own group, as in a terminal
    try:
        assert process.stdout.readline().strip() == "EXECUTING"
        if when == "running":
            deadline = time.monotonic() + 180
            while not marker.exists() and time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.1)
            assert marker.exists()
        else:
            time.sleep(1.0)  # Spark is starting: the main thread is inside Py4J calls
        assert any("pyspark" in p for p in session_processes(process.pid)) or when == "starting"
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group gets it
        started = time.monotonic()
        _, stderr = process.communicate(timeout=60)
        assert time.monotonic() - started < 30
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == -signal.SIGINT, stderr[-3000:]
    lines = stderr.rstrip("\n").split("\n")
    assert len(lines) < 15, stderr
    assert stderr.count("Traceback (most recent call last)") == 1, stderr
    for marker_text in JVM_OR_PY4J + ("/epochal/runtime/", "/epochal/control/", "During handling", "site-packages"):
        assert marker_text not in stderr, (marker_text, stderr)
    if when == "running":
        assert lines[-1] == ("KeyboardInterrupt: job 'forever' was cancelled (Ctrl-C): all 2 workers stopped and "
                             "its Spark job ended"), stderr
    else:
        assert lines[-1].startswith("KeyboardInterrupt: job 'forever' was "), stderr
    deadline = time.monotonic() + 20
    while session_processes(process.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert session_processes(process.pid) == []  # no JVM, no Python worker of the job is left


def unbounded(env):
    env.from_sequence(0, None).key_by(lambda x: x % 100).count().discard()


def no_spark_jobs(spark, timeout=30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not spark.sparkContext.statusTracker().getActiveJobsIds():
            return True
        time.sleep(0.1)
    return False


def test_execute_timeout_cancels_the_job_and_says_so(make_env, spark):
    env = make_env(2)
    unbounded(env)
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        env.execute("endless", timeout=3)
    assert time.monotonic() - started < 60
    error = info.value
    assert isinstance(error, epochal.EpochalError) and isinstance(error, epochal.JobTimeoutError)
    assert error.cancelled
    assert str(error) == ("job 'endless' did not finish within 3 s and was cancelled: all 2 workers stopped and its "
                          "Spark job ended")
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert frames == ["test_execute_timeout_cancels_the_job_and_says_so", "execute"]  # no inner frames
    assert no_spark_jobs(spark)


def test_result_timeout_leaves_the_job_running_and_says_so(make_env, spark):
    env = make_env(2)
    unbounded(env)
    client = env.execute_async("still-going")
    try:
        with pytest.raises(TimeoutError) as info:
            client.result(timeout=0.5)
        assert not info.value.cancelled
        assert f"job 'still-going' (id {client.job_id}) did not finish within 0.5 s and is still running" \
            in str(info.value)
        assert not client.status.is_terminal
    finally:
        client.cancel(timeout=60)
    assert client.status == epochal.JobStatus.CANCELLED
    assert no_spark_jobs(spark)


def test_second_job_fails_at_once_when_epochal_jobs_hold_every_slot(make_env, spark):
    first_env = make_env(4)  # the shared session is local[4]: this job holds every slot
    unbounded(first_env)
    first = first_env.execute_async("slot-hog")
    try:
        first.wait_until_running()
        second = make_env(2)
        second.from_sequence(0, 10).collect()
        started = time.monotonic()
        with pytest.raises(epochal.InsufficientSlotsError) as info:
            second.execute("latecomer", timeout=60)
        assert time.monotonic() - started < 10
        message = str(info.value)
        assert message.startswith(
            "job 'latecomer' needs 2 workers running at the same time, but 4 of the 4 task slots of Spark master "
            f"'local[4]' are held by running epochal job 'slot-hog' (job id {first.job_id}, 4 workers); 0 are free")
        assert "cancel it (JobClient.cancel())" in message
        assert first.status == epochal.JobStatus.RUNNING  # untouched
    finally:
        first.cancel(timeout=60)
    assert first.status == epochal.JobStatus.CANCELLED
    again = make_env(2)
    out = again.from_sequence(0, 10).collect()
    again.execute("after-the-hog", timeout=120)  # the slots are free again
    assert sorted(out.get()) == list(range(10))


def test_local_python_workers_are_forked_from_the_preloading_daemon(spark):
    """Workers of the shared local session come from epochal.daemon (so a replacement
    worker starts with numpy, pyarrow and epochal imported), and inherit its frozen garbage
    collector generation (so their full collections skip what the daemon imported) until a
    forked snapshot of the heap backend unfreezes the process (PySpark reuses worker processes:
    earlier tests' jobs ran in them); switched off, they would not."""
    def parent(_):
        import gc
        import os

        from epochal.dataflow.checkpointing import fork_snapshots
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            return [(f.read().replace(b"\0", b" ").decode(), gc.get_freeze_count(), fork_snapshots.unfroze)]

    workers = spark.sparkContext.parallelize(range(2), 2).mapPartitions(parent).collect()
    assert all("-m epochal.daemon" in line for line, _, _ in workers), workers
    assert all(frozen > 10_000 or unfroze for _, frozen, unfroze in workers), workers


def test_the_preloading_daemon_imports_the_worker_modules():
    """psycopg and the PostgreSQL state backend included; afterwards (nearly) nothing it imported
    is left for a collection to traverse; without the freeze, everything would be."""
    code = ("import gc, sys; from epochal import daemon; daemon.preload(); "
            "print(all(m in sys.modules for m in daemon.PRELOAD), 'psycopg' in sys.modules, "
            "len(gc.get_objects()) * 100 < gc.get_freeze_count())")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == ["True", "True", "True"], run.stderr
