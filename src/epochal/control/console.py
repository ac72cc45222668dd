"""Keeping Spark's console noise out of the user's output (``Environment(quiet_spark=...)``).

What a Spark session prints on its own, mixed into a job's ``print()`` output: the JVM's
``WARNING: Using incubator modules: jdk.incubator.vector`` (Spark's launcher always adds that
module), log4j's banner (``Using Spark's default log4j profile``, ``Setting default log level``),
``WARN`` lines (``NativeCodeLoader``, ``Utils: Your hostname ... resolves to a loopback
address``), and ``[Stage 1:> (0 + 2) / 2]`` progress bars while the workers' Spark job runs.

A session epochal starts itself is quiet by default (:func:`quiet_launch`, applied before its
JVM starts): log4j writes only ERROR lines (a configuration of its own, given to the driver JVM
with ``-Dlog4j2.configurationFile``), the progress bar is off, and the JVM's standard error
passes through a filter that drops the lines above before they reach the user's terminal. A
session the user built and hands over is left as it is, unless asked (:func:`quiet_session`: its
log level to ERROR, its progress bar stopped; lines printed while it started are out of reach).
``quiet_spark=False`` keeps Spark's own output.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Lines of the JVM's standard error dropped in sessions epochal starts (prefixes, as bytes).
NOISE = (b"WARNING: Using incubator modules", b"Using Spark's default log4j profile",
         b"Setting default log level to", b"To adjust logging level use sc.setLogLevel")

#: log4j 2 configuration of a quiet driver: errors only, on standard error, in Spark's format.
QUIET_LOG4J = """\
# written by epochal (Environment(quiet_spark=True)): Spark's driver logs errors only
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""

#: Spark's loggers of failed tasks: a killed worker makes them log its JVM stack several times,
#: while the JobMaster reports the failure as one readable error.
TASK_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
                        "org.apache.spark.api.python.PythonRunner", "org.apache.spark.scheduler.DAGScheduler",
                        "org.apache.spark.util.Utils", "org.apache.spark.scheduler.TaskSchedulerImpl")


def quiet_log4j_file() -> str:
    """The path of a file holding :data:`QUIET_LOG4J` (written once, named by its content)."""
    digest = hashlib.sha256(QUIET_LOG4J.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"epochal-log4j2-quiet-{digest}.properties")
    if not os.path.exists(path):
        temporary = f"{path}.{os.getpid()}"
        with open(temporary, "w") as file:
            file.write(QUIET_LOG4J)
        os.replace(temporary, path)
    return path


def quiet_launch_conf(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` for a session about to start its JVM, made quiet: the quiet log4j configuration
    added to the driver's Java options (after the user's own), no console progress bar."""
    options = f"-Dlog4j2.configurationFile=file:{quiet_log4j_file()}"
    given = conf.get("spark.driver.extraJavaOptions")
    return {**conf, "spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": f"{given} {options}" if given else options}


def _forward(source: int, target: int) -> None:
    """Copy what arrives on ``source`` to ``target``, line by line, leaving out :data:`NOISE`
    lines; a partial line is passed on once nothing more arrives for 50 ms (prompts, progress)."""
    pending = b""
    try:
        while True:
            ready, _, _ = select.select([source], [], [], 0.05 if pending else None)
            if not ready:
                os.write(target, pending)
                pending = b""
                continue
            chunk = os.read(source, 1 << 16)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            kept = b"".join(line + b"\n" for line in lines if not line.lstrip(b"\r").startswith(NOISE))
            if kept:
                os.write(target, kept)
        if pending:
            os.write(target, pending)
    except OSError:
        pass  # the terminal went away: nothing left to show
    finally:
        os.close(source)
        os.close(target)


@contextlib.contextmanager
def filtered_child_stderr() -> Iterator[None]:
    """Processes started inside this block (the JVM) write their standard error into a pipe
    whose reader drops :data:`NOISE` lines and passes the rest on to this process's standard
    error; this process's own standard error is restored when the block ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    reader, writer = os.pipe()
    forwarder = threading.Thread(target=_forward, args=(reader, os.dup(saved)), name="epochal-jvm-stderr",
                                 daemon=True)
    os.dup2(writer, 2)
    os.close(writer)
    forwarder.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the JVM keeps the pipe; the forwarder ends when it exits
        os.close(saved)


def quiet_session(session: SparkSession) -> None:
    """Quiet a running session (the user's own, ``quiet_spark=True``): log level ERROR (no more
    WARN or INFO lines from the driver), the console progress bar stopped, and the loggers of
    failed tasks silenced. What the session printed while it started cannot be taken back."""
    context = session.sparkContext
    context.setLogLevel("ERROR")
    silence_task_failure_logs(session)
    try:
        bar = context._jsc.sc().progressBar()
        if bar.isDefined():
            bar.get().stop()
    except Exception:
        pass  # another Spark build: the bar stays


def silence_task_failure_logs(session: SparkSession) -> None:
    """Turn off :data:`TASK_FAILURE_LOGGERS` (sessions epochal starts, or ``quiet_spark=True``)."""
    try:
        jvm = session.sparkContext._jvm
        assert jvm is not None
        level = jvm.org.apache.logging.log4j.Level.OFF
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        for name in TASK_FAILURE_LOGGERS:
            configurator.setLevel(name, level)
    except Exception:
        pass  # another logging backend: keep Spark's own output
