"""What a job kind is given to run a job: the frozen :class:`JobSpec` the user API builds.

The API layer (:class:`~epochal.api.environment.Environment`) records what the user asks for;
when a job is submitted it builds one :class:`JobSpec` (the plan, the engine, state, checkpoint,
high-availability and restore settings, and the handle of the Spark session) and hands it to the
job kind (:mod:`epochal.dataflow.job`, :mod:`epochal.cec.job`, :mod:`epochal.graph.job`). A kind
reads only the spec: no module below the API imports it, and a later change to the environment
(another stream, another setting) does not reach a job already submitted.

A graph job's program and graph are its own arguments (:func:`epochal.graph.job.run_graph`); it
takes the rest of its settings from a :class:`JobSpecSource` (an ``Environment``), or from
:func:`default_spec` when it is given none.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from epochal.config import CecConfig, CheckpointConfig, EngineConfig, HighAvailabilityConfig, StateBackendConfig
from epochal.control import interrupts, run_settings
from epochal.control import spark as spark_support
from epochal.control.restart import NoRestart, RestartStrategy
from epochal.plan.jobgraph import JobGraph
from epochal.plan.logical import LogicalGraph
from epochal.runtime.host.hooks import Fault

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkHandle:
    """The SparkSession jobs run on: the one given, or one started on first use (the active one
    reused, else ``master`` or ``local[parallelism]``). Thread-safe: :meth:`get` starts at most
    one session, also when a high-availability standby warms Spark up on a thread of its own.

    ``quiet`` (see :class:`~epochal.api.environment.Environment`): True keeps Spark's console
    noise out of the job's output (a given session is quieted at once); None: only for a session
    this handle starts; False: Spark's console as Spark makes it."""

    def __init__(self, session: SparkSession | None = None, *, master: str | None = None, parallelism: int = 2,
                 quiet: bool | None = None) -> None:
        self._session = session
        self.master = master
        self.parallelism = parallelism
        self.quiet = quiet
        self._lock = threading.Lock()
        if session is not None and quiet:
            spark_support.console.quiet_session(session)

    @property
    def started(self) -> bool:
        """Whether a session is at hand (given, or started by :meth:`get`)."""
        return self._session is not None

    def get(self) -> SparkSession:
        """The session (started now if there is none yet)."""
        with self._lock:
            if self._session is None:
                with interrupts.deferred_interrupts():  # a Ctrl-C inside a Py4J call prints tracebacks
                    self._session = spark_support.create_session(self.master, self.parallelism,
                                                                 quiet=self.quiet is not False)
            return self._session


@dataclass(frozen=True)
class JobSpec:
    """One job as submitted: everything a job kind reads to run it, fixed at submission.

    ``graph`` and ``plan``: the dataflow the user's streams recorded (its transformations, whose
    nodes carry the user functions to ship and the ``collect()`` ids) and its chained job graph;
    both None for a graph job (its program and graph are its own arguments). ``restore_from`` and
    ``allow_non_restored_state``: the checkpoint or savepoint the job starts from, as the user
    (or ``epochal run --restore``) named it; ``faults``: crashes chaos tests inject."""

    name: str
    parallelism: int
    engine: EngineConfig
    spark: SparkHandle
    restart: RestartStrategy = field(default_factory=NoRestart)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    state_backend: StateBackendConfig = field(default_factory=StateBackendConfig)
    cec: CecConfig | None = None
    ha: HighAvailabilityConfig | None = None
    graph: LogicalGraph | None = None
    plan: JobGraph | None = None
    restore_from: str | None = None
    allow_non_restored_state: bool = False
    faults: tuple[Fault, ...] = ()

    @property
    def max_parallelism(self) -> int:
        """The key groups of the job's keyed state (``EngineConfig.max_parallelism``)."""
        return self.engine.max_parallelism

    @property
    def job_graph(self) -> JobGraph:
        """The plan of a dataflow or CEC job (a spec without one is a graph job's)."""
        if self.plan is None:
            raise ValueError(f"job '{self.name}': this spec has no dataflow plan (a graph job's settings)")
        return self.plan

    @property
    def logical_graph(self) -> LogicalGraph:
        """The recorded transformations of a dataflow or CEC job."""
        if self.graph is None:
            raise ValueError(f"job '{self.name}': this spec has no dataflow (a graph job's settings)")
        return self.graph


class JobSpecSource(Protocol):
    """What gives a job kind that runs its own program (a graph job) its settings: an
    ``Environment``. ``streams=False``: the spec without the environment's streams (no plan)."""

    def job_spec(self, job_name: str = ..., *, restore_from: str | None = None,
                 allow_non_restored_state: bool = False, faults: list[Fault] | None = None,
                 streams: bool = True) -> JobSpec: ...


def default_spec(job_name: str, parallelism: int) -> JobSpec:
    """The settings of a job given no environment: an ``Environment(parallelism)``'s defaults
    (the Spark master from ``EPOCHAL_MASTER``, else ``local[parallelism]``; no restarts)."""
    return JobSpec(job_name, parallelism, EngineConfig(),
                   SparkHandle(master=run_settings.master(), parallelism=parallelism))
