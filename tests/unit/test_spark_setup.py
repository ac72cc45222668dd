"""Pure helpers of epochal.control (executor_python, slots, interrupts): which Python the
executors get, the messages of the executor check and of busy slots, and holding Ctrl-C back
around Py4J calls (no Spark here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from epochal.control import executor_python
from epochal.control.executor_python import choose_worker_python, describe_probe, describe_probe_failure
from epochal.control.interrupts import deferred_interrupts, plain_interrupts
from epochal.control.slots import RunningJob, describe_busy_slots
from epochal.errors import EpochalError, JobTimeoutError

DRIVER = "/venv/bin/python"


def test_local_mode_defaults_to_the_driver_python_when_nothing_is_set():
    assert choose_worker_python("python3", None, None, True, DRIVER) == (
        DRIVER, "the driver's own Python (epochal's default in local mode, nothing else was set)")


def test_cluster_mode_keeps_pyspark_default_and_says_where_it_comes_from():
    executable, source = choose_worker_python("python3", None, None, False, DRIVER)
    assert executable is None
    assert "python3" in source and "PYSPARK_PYTHON is not set" in source


def test_explicit_choices_win_over_the_local_default():
    # PYSPARK_PYTHON read by PySpark when the context started: kept as it is
    assert choose_worker_python("/usr/bin/python3", "/usr/bin/python3", None, True, DRIVER) == (
        None, "PYSPARK_PYTHON=/usr/bin/python3")
    # PYSPARK_PYTHON=python3 explicitly: respected, even in local mode
    assert choose_worker_python("python3", "python3", None, True, DRIVER) == (None, "PYSPARK_PYTHON=python3")
    # set after the context started: PySpark would ignore it, epochal applies it
    assert choose_worker_python("python3", "/opt/py", None, True, DRIVER) == ("/opt/py", "PYSPARK_PYTHON=/opt/py")
    # spark.pyspark.python in a session built by a script (only spark-submit applies it)
    assert choose_worker_python("python3", None, "/opt/py", True, DRIVER) == (
        "/opt/py", "spark.pyspark.python=/opt/py")


def probe_result(version="3.11.2", error=""):
    return {"executable": "/usr/bin/python3", "version": version, "error": error, "epochal_version": "",
            "epochal_file": ""}


def test_probe_that_cannot_import_epochal_names_python_and_fix():
    message = describe_probe(probe_result(error="ModuleNotFoundError: No module named 'epochal'"),
                             "PYSPARK_PYTHON=python3", DRIVER, "3.11.7")
    first, source, fix = message.splitlines()
    assert first == ("Spark's executors cannot import epochal: their Python (/usr/bin/python3, Python 3.11.2) "
                     "raised ModuleNotFoundError: No module named 'epochal'.")
    assert source == "The executors' Python comes from PYSPARK_PYTHON=python3."
    assert f"PYSPARK_PYTHON={DRIVER}" in fix and f"spark.pyspark.python={DRIVER}" in fix
    assert "venv-pack" in fix and "--archives" in fix and "Python 3.11 " in fix


def test_probe_with_another_python_version_says_so():
    message = describe_probe(probe_result(version="3.12.1"), "PYSPARK_PYTHON=/x", DRIVER, "3.11.7")
    assert message.splitlines()[0] == (
        "Spark's executors run Python 3.12.1 (/usr/bin/python3) but the driver runs Python 3.11.7 "
        f"({DRIVER}): PySpark needs the same major.minor version on both.")


def test_probe_that_imports_epochal_is_fine():
    assert describe_probe(probe_result(version="3.11.2"), "x", DRIVER, "3.11.7") is None


def test_failed_probe_task_is_explained_without_jvm_stack():
    mismatch = RuntimeError(
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n  File \"worker.py\"\n"
        "pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python in worker has "
        "different version: 3.12 than that in driver: 3.11, PySpark cannot run with different minor versions.")
    text = describe_probe_failure(mismatch, "/py312", "PYSPARK_PYTHON=/py312", DRIVER, "3.11.7")
    assert text.splitlines()[0].startswith("Spark's executors run Python 3.12 (/py312) but the driver runs Python "
                                           "3.11.7")
    missing = RuntimeError(
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n: "
        "org.apache.spark.SparkException: Job aborted: java.io.IOException: Cannot run program \"/nope/python\": "
        "error=2, No such file or directory\n\tat java.base/java.lang.ProcessBuilder.start(ProcessBuilder.java:1143)")
    text = describe_probe_failure(missing, "/nope/python", "PYSPARK_PYTHON=/nope/python", DRIVER, "3.11.7")
    assert text.splitlines()[0] == ("Spark's executors cannot start Python '/nope/python': error=2, No such file "
                                    "or directory.")
    assert "\tat " not in text and "org.apache" not in text


def test_failed_probe_task_in_local_mode_runs_the_python_to_say_why():
    worker_failed = RuntimeError(
        "Job aborted: org.apache.spark.SparkException: \nError from python worker:\n  Traceback (most recent call "
        "last):\n    File \"runpy.py\", line 188\n  SyntaxError: invalid syntax\nPYTHONPATH was:\n  /x\n")
    old = describe_probe_failure(worker_failed, "/py39", "PYSPARK_PYTHON=/py39", DRIVER, "3.11.7", (0, "3.9.18"))
    assert old.splitlines()[0].startswith("Spark's executors run Python 3.9.18 (/py39) but the driver runs")
    shim = describe_probe_failure(worker_failed, "python3.9", "PYSPARK_PYTHON=python3.9", DRIVER, "3.11.7",
                                  (127, "pyenv: python3.9: command not found\n\nThe `python3.9' command exists"))
    assert shim.splitlines()[0] == ("Spark's executors cannot start Python 'python3.9': it exits with status 127: "
                                    "pyenv: python3.9: command not found")
    cluster = describe_probe_failure(worker_failed, "python3", "x", DRIVER, "3.11.7")
    assert cluster.splitlines()[0] == ("Spark's executors could not run a Python task with 'python3': "
                                       "SyntaxError: invalid syntax")


def test_busy_slots_message_names_the_jobs_and_the_ways_out():
    done = threading.Event()
    message = describe_busy_slots("second", 2, "local[4]", 4, [RunningJob("abc123", "first", 4, done)])
    assert message.startswith("job 'second' needs 2 workers running at the same time, but 4 of the 4 task slots "
                              "of Spark master 'local[4]' are held by running epochal job 'first' (job id abc123, "
                              "4 workers); 0 are free.")
    assert "cancel it (JobClient.cancel())" in message and "master 'local[6]'" in message
    assert "lower this job's parallelism" not in message  # nothing is free
    two = describe_busy_slots("third", 3, "local[4]", 4, [RunningJob("a", "x", 1, done), RunningJob("b", "y", 1, done)])
    assert "held by running epochal jobs 'x' (job id a, 1 workers), 'y' (job id b, 1 workers); 2 are free" in two
    assert "lower this job's parallelism to 2" in two


def test_timeout_error_is_both_epochal_and_builtin():
    error = JobTimeoutError("job 'x' did not finish within 1 s and was cancelled", cancelled=True)
    assert isinstance(error, EpochalError) and isinstance(error, TimeoutError)
    assert error.cancelled and str(error) == "job 'x' did not finish within 1 s and was cancelled"


def test_probe_function_is_pickled_by_value():
    """Unpickling the probe must not import epochal: it is what finds out whether it can be."""
    from pyspark import cloudpickle

    blob = cloudpickle.dumps(executor_python._probe_function())
    assert b"epochal.control" not in blob
    check = ("import sys; from pyspark import cloudpickle; probe = cloudpickle.loads(sys.stdin.buffer.read()); "
             "print('epochal' in sys.modules)")
    loaded = subprocess.run([sys.executable, "-c", check], input=blob, capture_output=True, timeout=60)
    assert loaded.stdout.decode().strip() == "False", loaded.stderr.decode()
    (result,) = list(cloudpickle.loads(blob)(iter([0])))
    assert result["error"] == "" and result["version"].count(".") == 2


def interrupt_me():
    os.kill(os.getpid(), signal.SIGINT)


@pytest.fixture
def default_sigint():
    """Python's own Ctrl-C handler during the test (a SparkContext of an earlier test in the same
    session may have installed PySpark's), and whatever was there before afterwards."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("default_sigint")
def test_ctrl_c_is_held_back_until_the_block_ends():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupts():
            interrupt_me()
            reached.append("after the signal")  # not interrupted here
    assert reached == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.usefixtures("default_sigint")
def test_nested_blocks_raise_at_the_innermost_end_and_second_ctrl_c_at_once():
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupts():
            with deferred_interrupts():
                interrupt_me()
                steps.append("inner")
            steps.append("not reached")
    assert steps == ["inner"]
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupts():
            interrupt_me()
            interrupt_me()  # the user insists
            steps.append("not reached either")
    assert steps == ["inner"]


@pytest.mark.usefixtures("default_sigint")
def test_handler_installed_inside_the_block_takes_effect_after_it():
    def pyspark_like(signum, frame):
        raise KeyboardInterrupt("from the installed handler")

    try:
        with deferred_interrupts():
            signal.signal(signal.SIGINT, pyspark_like)  # as SparkContext.__init__ does
            assert signal.getsignal(signal.SIGINT) is not pyspark_like  # still holding
        assert signal.getsignal(signal.SIGINT) is pyspark_like
        with plain_interrupts():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGINT) is pyspark_like
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.mark.usefixtures("default_sigint")
def test_outside_the_main_thread_nothing_changes():
    seen = []

    def body():
        with deferred_interrupts():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]
