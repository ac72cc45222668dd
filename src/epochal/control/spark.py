"""Everything epochal asks of Spark: Java, a session, and one job of W tasks (task slots are
in :mod:`epochal.control.slots`, the executors' Python in :mod:`epochal.control.executor_python`).

The workers are the tasks of one Spark job, ``parallelize(range(W), W).mapPartitions(worker)``,
submitted from a background thread of the driver in its own job group so that it can be
cancelled as a unit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

from epochal.control import console
from epochal.control.spare import SpareWorker
from epochal.errors import EnvironmentSetupError, JavaNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from epochal.control.jobmaster import JobMaster
    from epochal.runtime.host.links import Bootstrap

MIN_JAVA = 17
_JAVA_HELP = ("Spark 4 needs a Java runtime, version 17 or newer. Install one (for example "
              "'apt-get install openjdk-17-jre-headless', or a JDK from adoptium.net) and make sure "
              "'java' is on PATH or JAVA_HOME points to it.")


def find_java() -> str | None:
    """Path of the java executable Spark will use: JAVA_HOME first, then PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


def check_java() -> int:
    """Return the major version of the Java runtime, or raise :class:`JavaNotFoundError`."""
    java = find_java()
    if java is None:
        raise JavaNotFoundError(f"no Java runtime found (JAVA_HOME unset or wrong, no 'java' on PATH). {_JAVA_HELP}")
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise JavaNotFoundError(f"'{java} -version' could not run ({error}). {_JAVA_HELP}") from error
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if match is None:
        raise JavaNotFoundError(f"cannot tell the version of {java}: {result.stderr.strip()[:200]!r}. {_JAVA_HELP}")
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))  # "1.8.0" style
    if major < MIN_JAVA:
        raise JavaNotFoundError(f"{java} is Java {major}. {_JAVA_HELP}")
    return major


def default_master(parallelism: int) -> str:
    """The embedded default: ``local[N]`` with at least as many slots as the job's workers."""
    return f"local[{max(parallelism, os.cpu_count() or 1, 4)}]"


#: PySpark's daemon with epochal's worker modules imported before it forks workers
PRELOADING_DAEMON = "epochal.daemon"


def create_session(master: str | None, parallelism: int, app_name: str = "epochal",
                   conf: dict[str, str] | None = None, quiet: bool = True) -> SparkSession:
    """Get the active SparkSession or start one with settings that suit long-running workers.

    ``quiet`` (the default) keeps Spark's console noise out of the user's output: log4j logs
    errors only, no progress bars, and the JVM's start-up lines are dropped
    (:mod:`epochal.control.console`); ``quiet=False`` leaves Spark's console as Spark makes it.

    On a local master (the embedded default) Python workers are forked from
    :mod:`epochal.daemon`, which has numpy, pyarrow and epochal's worker modules imported,
    so a worker that replaces a lost one starts in ~0.5 s instead of ~1 s, when they run the
    driver's own interpreter (``PYSPARK_PYTHON`` unset or ``sys.executable``); a ``conf`` entry
    for ``spark.python.daemon.module`` wins. On a cluster master, or with
    another worker Python, nothing changes (that Python may not have epochal at all, which the
    environment check then reports in words)."""
    check_java()
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master or default_master(parallelism))
    settings = {
        "spark.ui.enabled": "false",
        "spark.python.worker.reuse": "true",
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        **(conf or {}),
    }
    if master and not master.startswith("local"):
        settings.pop("spark.driver.host")
        settings.pop("spark.driver.bindAddress")
    elif os.environ["PYSPARK_PYTHON"] == sys.executable:  # workers run this very interpreter: fork
        settings.setdefault("spark.python.daemon.module", PRELOADING_DAEMON)  # them with epochal imported
    if quiet:
        settings = console.quiet_launch_conf(settings)
    for key, value in settings.items():
        builder = builder.config(key, value)
    from pyspark import SparkContext

    starts_jvm = quiet and SparkContext._gateway is None  # (else the JVM's stderr is decided already)
    try:
        with console.filtered_child_stderr() if starts_jvm else contextlib.nullcontext():
            session = builder.getOrCreate()
    except Exception as error:
        raise EnvironmentSetupError(f"Spark could not start: {error}") from error
    if quiet:
        console.quiet_session(session)
    else:  # a killed worker's JVM stacks stay out even so: the JobMaster reports it in one error
        console.silence_task_failure_logs(session)
    return session

def is_local(spark: SparkSession) -> bool:
    return (spark.sparkContext.master or "").startswith("local")


def driver_host(spark: SparkSession) -> str:
    """Address at which executors reach the driver (loopback in local mode)."""
    if is_local(spark):
        return "127.0.0.1"
    return spark.sparkContext.getConf().get("spark.driver.host") or "127.0.0.1"


class SparkJobLauncher:
    """Runs the workers as one Spark job in its own job group, on a background thread; or, when
    ``independent``, each worker as a Spark job of one task (same group), so that a failed task
    does not make Spark cancel the others and a lost worker can be replaced alone
    (:meth:`submit_worker`). The JobMaster hears of the end once every task ended."""

    def __init__(self, spark: SparkSession, bootstrap: Bootstrap, num_workers: int, job_name: str,
                 independent: bool = False, spare: bool = False) -> None:
        self.spark = spark
        self.bootstrap = bootstrap
        self.num_workers = num_workers
        self.group = f"epochal-{bootstrap.job_id}"
        self.job_name = job_name
        self.independent = independent
        self._lock = threading.Lock()
        self._running = 0
        self._results: list[Any] = []
        self._error: BaseException | None = None
        self._incarnations: dict[int, int] = {}
        #: independent jobs: a warm idle Python worker for the next replacement (``spare``)
        self.spare: SpareWorker | None = SpareWorker(spark, self.group, bootstrap.job_id, bootstrap.worker_body) \
            if independent and spare else None

    def submit(self, jobmaster: JobMaster) -> None:
        """Start the Spark job (jobs); its end (results or the first error) is reported to ``jobmaster``."""
        if not self.independent:
            self._start(jobmaster, None, self.bootstrap)
            return
        for index in range(self.num_workers):
            self.submit_worker(index, jobmaster)
        if self.spare is not None:
            self.spare.start(lambda: jobmaster.registered_workers() >= self.num_workers)

    def submit_worker(self, index: int, jobmaster: JobMaster) -> None:
        """Start a Spark job of one task running worker ``index`` (its next incarnation)."""
        with self._lock:
            incarnation = self._incarnations.get(index, -1) + 1
            self._incarnations[index] = incarnation
        if self.spare is not None:
            self.spare.worker_submitted()
        self._start(jobmaster, index, dataclasses.replace(self.bootstrap, incarnation=incarnation))

    def _start(self, jobmaster: JobMaster, index: int | None, bootstrap: Bootstrap) -> None:
        from pyspark import InheritableThread

        with self._lock:
            self._running += 1
        thread = InheritableThread(target=self._run, args=(jobmaster, index, bootstrap), daemon=True,
                                   name="epochal-spark-job" if index is None else f"epochal-spark-task-{index}")
        thread.start()

    def _run(self, jobmaster: JobMaster, index: int | None, bootstrap: Bootstrap) -> None:
        from functools import partial

        from epochal.runtime.host.entry import run_worker_partition

        sc = self.spark.sparkContext
        results: list[Any] = []
        error: BaseException | None = None
        try:
            sc.setJobGroup(self.group, f"epochal job {self.job_name}", interruptOnCancel=True)
            if index is None:
                rdd = sc.parallelize(range(self.num_workers), self.num_workers)
                results = rdd.mapPartitions(partial(run_worker_partition, bootstrap)).collect()
            else:
                rdd = sc.parallelize([index], 1)
                results = rdd.mapPartitions(partial(run_worker_partition, bootstrap, index=index)).collect()
        except BaseException as caught:  # noqa: BLE001 - reported to the JobMaster, which decides
            error = caught
        with self._lock:
            self._running -= 1
            self._results.extend(results)
            self._error = self._error or error
            if self._running:
                return  # other tasks still run
            if self.spare is not None:
                self.spare.stop()
            final, first_error = list(self._results), self._error
        jobmaster.spark_finished(final if final or first_error is None else None, first_error)

    def cancel(self) -> None:
        """Kill the Spark job (jobs, their Python workers included)."""
        if self.spare is not None:
            self.spare.stop()
        try:
            self.spark.sparkContext.cancelJobGroup(self.group)
        except Exception:
            pass
