"""The executors' Python: which interpreter Spark's executors start, and a check that it can
import epochal before the first job is submitted (one tiny Spark task, once per SparkContext).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from epochal.control.interrupts import deferred_interrupts
from epochal.control.slots import context_key, local_slots
from epochal.control.spark import is_local
from epochal.errors import EnvironmentSetupError, InsufficientSlotsError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_DEFAULT_PYTHON = "python3"  # what PySpark's SparkContext uses when PYSPARK_PYTHON is not set

_HOW_TO_FIX = (
    "Point the executors at a Python {minor} that has epochal installed, for example the driver's own: set "
    "PYSPARK_PYTHON={driver} before the SparkSession starts (spark-submit: --conf "
    "spark.pyspark.python={driver}); in local mode, leaving both unset makes epochal use the driver's "
    "Python. On a cluster, install epochal on every executor or ship a packed "
    "environment (venv-pack or conda-pack, spark-submit --archives env.tar.gz#env with "
    "PYSPARK_PYTHON=./env/bin/python). See 'With your own SparkSession' in epochal's docs/deploying.md")


def _how_to_fix(driver_python: str, driver_version: str) -> str:
    return _HOW_TO_FIX.format(driver=driver_python, minor=".".join(driver_version.split(".")[:2]))


def choose_worker_python(current: str, env_value: str | None, conf_value: str | None, local: bool,
                         driver_python: str) -> tuple[str | None, str]:
    """Which Python Spark's executors should start, and why.

    ``current`` is the SparkContext's ``pythonExec``: PySpark reads ``PYSPARK_PYTHON`` once, when
    the SparkContext starts, and falls back to ``python3`` (whatever ``python3`` is on the
    executors' PATH). ``spark.pyspark.python`` is applied by spark-submit only, never by a script
    that builds its own session. Returns ``(executable to set, or None to keep current, source)``.
    """
    if current != _DEFAULT_PYTHON:
        source = "PYSPARK_PYTHON" if env_value == current else "SparkContext.pythonExec"
        return None, f"{source}={current}"
    if env_value:
        # set after the SparkContext started (PySpark would ignore it): apply it as the user meant
        return (env_value if env_value != current else None), f"PYSPARK_PYTHON={env_value}"
    if conf_value:
        return conf_value, f"spark.pyspark.python={conf_value}"
    if local:
        return driver_python, "the driver's own Python (epochal's default in local mode, nothing else was set)"
    return None, "PySpark's default 'python3' from the executors' PATH (PYSPARK_PYTHON is not set)"


def configure_worker_python(spark: SparkSession) -> str:
    """Apply :func:`choose_worker_python` to the session; returns where the executable comes from."""
    sc = spark.sparkContext
    executable, source = choose_worker_python(
        sc.pythonExec, os.environ.get("PYSPARK_PYTHON"), sc.getConf().get("spark.pyspark.python"),
        is_local(spark), sys.executable)
    if executable is not None:
        sc.pythonExec = executable  # used by every RDD created from now on
    return source


# Built from source text so that its pickle (by value: its module is not importable) does not
# need epochal on the executor: it is what finds out whether epochal can be imported there.
_PROBE_SOURCE = """
def probe(_):
    import sys
    try:
        import epochal
        error, version, location = "", getattr(epochal, "__version__", "?"), getattr(epochal, "__file__", "")
    except BaseException as caught:
        error, version, location = f"{type(caught).__name__}: {caught}", "", ""
    yield {"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3],
           "error": error, "epochal_version": version, "epochal_file": location}
"""


def _probe_function() -> Any:
    namespace: dict[str, Any] = {"__name__": "epochal_executor_probe"}  # not in sys.modules
    exec(compile(_PROBE_SOURCE, "<epochal executor probe>", "exec"), namespace)
    return namespace["probe"]


_probe_lock = threading.Lock()
_probed: dict[tuple[str, str], dict[str, Any]] = {}  # (context, pythonExec) -> probe result


def _driver_version() -> str:
    return ".".join(map(str, sys.version_info[:3]))


def describe_probe(result: dict[str, Any], source: str, driver_python: str, driver_version: str) -> str | None:
    """The error message for an executor probe result, or None when the executors are fine."""
    where = f"{result['executable']}, Python {result['version']}"
    if result["version"].split(".")[:2] != driver_version.split(".")[:2]:
        return (f"Spark's executors run Python {result['version']} ({result['executable']}) but the driver runs "
                f"Python {driver_version} ({driver_python}): PySpark needs the same major.minor version on both.\n"
                f"The executors' Python comes from {source}.\n" + _how_to_fix(driver_python, driver_version))
    if result["error"]:
        return (f"Spark's executors cannot import epochal: their Python ({where}) raised {result['error']}.\n"
                f"The executors' Python comes from {source}.\n" + _how_to_fix(driver_python, driver_version))
    return None


def _mismatch(executors: str, executable: str, driver_python: str, driver_version: str) -> str:
    return (f"Spark's executors run Python {executors} ({executable}) but the driver runs Python {driver_version} "
            f"({driver_python}): PySpark needs the same major.minor version on both.")


def _python_worker_error(text: str) -> str | None:
    """The exception line of a Python traceback Spark quotes from a worker that failed to start."""
    if "Error from python worker:" not in text:
        return None
    quoted = text.split("Error from python worker:", 1)[1].split("PYTHONPATH was:", 1)[0]
    lines = [line.strip() for line in quoted.splitlines() if line.strip()]
    return lines[-1] if lines else None


def describe_probe_failure(error: BaseException, executable: str, source: str, driver_python: str,
                           driver_version: str, local_run: tuple[int, str] | None = None) -> str:
    """The error message when the probe task itself failed (Python missing, wrong version).

    ``local_run`` is ``(exit status, output)`` of running the executors' Python with a version
    print on the driver's machine (local mode only): the most precise diagnosis there is.
    """
    text = str(error)
    mismatch = re.search(r"different version:? (\d+\.\d+) than that in driver:? (\d+\.\d+)", text)
    missing = re.search(r'Cannot run program "([^"]*)": (error=\d+, [^\n]*)', text)
    if mismatch:
        first = _mismatch(mismatch.group(1), executable, driver_python, driver_version)
    elif missing:
        first = f"Spark's executors cannot start Python '{missing.group(1)}': {missing.group(2)}."
    elif local_run is not None and local_run[0] == 0 and \
            local_run[1].split(".")[:2] != driver_version.split(".")[:2]:
        first = _mismatch(local_run[1], executable, driver_python, driver_version)
    elif local_run is not None and local_run[0] != 0:
        lines = local_run[1].strip().splitlines() or ["no output"]
        output = lines[-1] if "Traceback" in local_run[1] else lines[0]  # an exception, or a launcher's complaint
        first = f"Spark's executors cannot start Python '{executable}': it exits with status {local_run[0]}: {output}"
    else:
        from epochal.control.jobmaster import summarize_spark_error

        cause = _python_worker_error(text) or summarize_spark_error(error)
        first = f"Spark's executors could not run a Python task with '{executable}': {cause}"
    return f"{first}\nThe executors' Python comes from {source}.\n" + _how_to_fix(driver_python, driver_version)


def _run_locally(executable: str) -> tuple[int, str]:
    """Run the executors' Python on this machine (local mode: the executors are here too)."""
    try:
        run = subprocess.run([executable, "-c", "import sys; print('.'.join(map(str, sys.version_info[:3])))"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return -1, str(error)
    return run.returncode, (run.stdout if run.returncode == 0 else (run.stderr or run.stdout)).strip()


@contextlib.contextmanager
def _quiet_task_failures(spark: SparkSession) -> Iterator[None]:
    """Silence Spark's JVM stack traces of failed tasks for a moment, then restore the logging
    configuration exactly (a logger that had no level of its own gets none again: the Spark shell's
    log filter treats an explicit level as a wish to see that logger's output)."""
    names = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
             "org.apache.spark.scheduler.TaskSchedulerImpl", "org.apache.spark.api.python.PythonRunner")
    saved: list[tuple[str, Any]] = []
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        context = jvm.org.apache.logging.log4j.core.LoggerContext.getContext(False)
        configured = context.getConfiguration().getLoggers()
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        for name in names:
            saved.append((name, configured.get(name).getLevel() if configured.containsKey(name) else None))
            configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.OFF)
    except Exception:
        pass  # another logging backend: keep Spark's own output
    try:
        yield
    finally:
        try:
            for name, level in saved:
                if level is not None:
                    configurator.setLevel(name, level)
                else:
                    context.getConfiguration().removeLogger(name)
            if saved:
                context.updateLoggers()
        except Exception:
            pass


def check_worker_python(spark: SparkSession, timeout: float) -> dict[str, Any]:
    """Make sure Spark's executors run a Python that can import epochal; once per SparkContext.

    Sets the executors' Python to the driver's in local mode when nothing else was chosen, then
    runs one tiny Spark task that reports its ``sys.executable``, version and whether ``import
    epochal`` works. Raises :class:`EnvironmentSetupError` saying which Python the executors used
    and how to point them at the right one.
    """
    with deferred_interrupts():  # Ctrl-C during the check: raised once it is over
        return _check_worker_python(spark, timeout)


def _check_worker_python(spark: SparkSession, timeout: float) -> dict[str, Any]:
    source = configure_worker_python(spark)
    sc = spark.sparkContext
    key = (context_key(spark), sc.pythonExec)
    with _probe_lock:
        if key in _probed:
            return _probed[key]
        executable = sc.pythonExec
        outcome: dict[str, Any] = {}
        finished = threading.Event()
        group = f"epochal-probe-{uuid.uuid4().hex[:8]}"

        def run() -> None:
            try:
                sc.setJobGroup(group, "epochal: can the executors' Python import epochal?", interruptOnCancel=True)
                outcome["result"] = sc.parallelize([0], 1).mapPartitions(_probe_function()).collect()[0]
            except BaseException as caught:  # noqa: BLE001 - turned into one readable error below
                outcome["error"] = caught
            finally:
                finished.set()

        from pyspark import InheritableThread

        with _quiet_task_failures(spark):
            InheritableThread(target=run, name="epochal-probe", daemon=True).start()
            if not finished.wait(timeout):
                try:
                    sc.cancelJobGroup(group)
                except Exception:
                    pass
                raise InsufficientSlotsError(
                    f"Spark did not run epochal's one-task check of the executors' Python within {timeout:g} s: "
                    f"no task slot became free{_slots_hint(spark)}. Give Spark more cores or executors, wait "
                    "for other jobs to finish, or raise registration_timeout")
        if "error" in outcome:
            local_run = _run_locally(executable) if is_local(spark) else None
            raise EnvironmentSetupError(describe_probe_failure(
                outcome["error"], executable, source, sys.executable, _driver_version(), local_run)) from None
        result = outcome["result"]
        message = describe_probe(result, source, sys.executable, _driver_version())
        if message is not None:
            raise EnvironmentSetupError(message)
        import epochal

        if result["epochal_version"] != getattr(epochal, "__version__", "?"):
            logging.getLogger("epochal").warning(
                "Spark's executors import epochal %s (%s) but the driver runs epochal %s: use the same version",
                result["epochal_version"], result["epochal_file"], getattr(epochal, "__version__", "?"))
        _probed[key] = result
        return result


def _slots_hint(spark: SparkSession) -> str:
    slots = local_slots(spark.sparkContext.master or "")
    return f" (master '{spark.sparkContext.master}' has {slots} slots)" if slots is not None else ""
