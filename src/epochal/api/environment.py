"""The Environment: where a job is built and from which it is executed on Spark."""

from __future__ import annotations

import copy
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, overload

from epochal.api.datastream import DataStream
from epochal.cec import job as cec_job
from epochal.config import (
    CEC,
    CRB,
    CecConfig,
    CheckpointConfig,
    EngineConfig,
    HighAvailabilityConfig,
    StateBackendConfig,
)
from epochal.connectors.base import Source
from epochal.connectors.memory import CollectionSource, GeneratorSource, SequenceSource
from epochal.control import interrupts, run_settings
from epochal.control.client import JobClient, JobResult
from epochal.control.ha.leadership import JobEndedElsewhere
from epochal.control.jobspec import JobSpec, SparkHandle
from epochal.control.restart import FixedDelayRestart, NoRestart, RestartStrategy
from epochal.control.running import wait
from epochal.dataflow import job as dataflow_job
from epochal.errors import EpochalError, PlanError
from epochal.plan.jobgraph import JobGraph, build_job_graph
from epochal.plan.logical import LogicalGraph
from epochal.runtime.host.hooks import Fault
from epochal.runtime.operators.base import Operator
from epochal.validation import check_number

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from epochal.api.batches import BatchStream

_log = logging.getLogger("epochal")


class Environment:
    """Builds a dataflow and runs it as long-lived workers on Spark.

    Args:
        parallelism: default parallelism of every operator (each may set its own); default
            ``EPOCHAL_PARALLELISM`` or 2 (``epochal run --parallelism N`` sets it,
            :mod:`epochal.control.run_settings`).
        spark: an existing SparkSession to run on; by default one is started (or the active one
            reused) with master ``local[N]``.
        master: Spark master URL used when epochal starts the session itself (default
            ``EPOCHAL_MASTER``, else ``local[N]``).
        config: runtime tuning (batch size, credits, timeouts); keyword overrides are applied on top.
        quiet_spark: keep Spark's console noise out of the job's output. A session epochal starts
            is quiet unless this is False: its driver logs errors only (no log4j banner, no WARN
            lines), it shows no ``[Stage n:>`` progress bars, and the JVM's ``WARNING: Using
            incubator modules`` line is dropped. A session you pass as ``spark`` is left as it is
            unless this is True: its log level is set to ERROR and its progress bar is stopped
            (for the whole session: other Spark jobs of your program too).
    """

    def __init__(self, parallelism: int | None = None, *, spark: SparkSession | None = None,
                 master: str | None = None, config: EngineConfig | None = None, quiet_spark: bool | None = None,
                 **overrides: Any) -> None:
        if parallelism is None:
            parallelism = run_settings.parallelism()
        if not isinstance(parallelism, int) or parallelism < 1:
            raise PlanError(f"parallelism must be a positive int, got {parallelism!r}")
        self.parallelism = parallelism
        try:
            self.config = replace(config or EngineConfig(), **overrides)
        except TypeError as error:
            raise PlanError(f"unknown Environment option: {error}") from error
        if parallelism > self.config.max_parallelism:
            raise PlanError(f"parallelism {parallelism} exceeds max_parallelism {self.config.max_parallelism}")
        #: the SparkSession jobs run on: the one given, or one started on first use
        self.spark_handle = SparkHandle(spark, master=master if master is not None or spark is not None
                                        else run_settings.master(), parallelism=parallelism, quiet=quiet_spark)
        self.graph = LogicalGraph()
        #: The result of the environment's latest job that finished (``execute``, ``run_locally``).
        self.last_result: JobResult | None = None
        #: The client of the environment's latest job started on Spark (``execute_async``, ``execute``).
        self.last_client: JobClient | None = None
        self.checkpoint_config = CheckpointConfig()
        self.state_backend = StateBackendConfig()
        self.restart_strategy: RestartStrategy = NoRestart()
        #: CEC or CRB (``enable_cec`` / ``enable_crb``): the job runs as the ``cec`` job kind
        self.cec_config: CecConfig | None = None
        #: high availability of the driver (``enable_high_availability``), else None
        self.ha_config: HighAvailabilityConfig | None = None

    # ---------------------------------------------------------------- fault tolerance
    def enable_checkpointing(self, interval: float, mode: str = "exactly_once", *, storage: str | None = None,
                             timeout: float = 60.0, min_pause: float = 0.0, max_concurrent: int = 1,
                             tolerable_failures: int = 0, retained: int = 1,
                             savepoint_dir: str | None = None) -> Environment:
        """Take a checkpoint every ``interval`` seconds (see :class:`~epochal.config.CheckpointConfig`).

        Checkpoints go to ``<storage>/<job name>/<job id>/chk-<n>``; ``storage`` is a local path
        (a relative one is taken from the driver's working directory, which executors do not
        share) or any URI pyarrow.fs supports (default: ``<tmp>/epochal-checkpoints``). Savepoints
        the user asks for without a directory go to ``savepoint_dir`` (default:
        ``<storage>/<job name>/savepoints``).
        """
        check_number(interval, "checkpoint interval (seconds)")
        if storage is not None and "://" not in storage:
            storage = os.path.abspath(storage)
        if savepoint_dir and "://" not in savepoint_dir:
            savepoint_dir = os.path.abspath(savepoint_dir)
        self.checkpoint_config = CheckpointConfig(
            interval=interval, mode=mode, timeout=timeout, min_pause=min_pause, max_concurrent=max_concurrent,
            tolerable_failures=tolerable_failures, retained=retained,
            storage=storage or os.path.join(tempfile.gettempdir(), "epochal-checkpoints"),
            savepoint_dir=savepoint_dir or "")
        if isinstance(self.restart_strategy, NoRestart) and self.checkpoint_config.enabled:
            self.restart_strategy = FixedDelayRestart(attempts=3, delay=1.0)
        return self

    def enable_high_availability(self, uri: str, *, job_id: str | None = None, lease_timeout: float = 5.0,
                                 renew_interval: float | None = None, poll_interval: float = 0.25,
                                 connect_timeout: float = 10.0) -> Environment:
        """Survive the loss of this driver (papers/001 §4.5; docs/high_availability.md): start the
        same script on several machines (or twice on one); one driver leads and runs the job, the
        others wait as standbys. When the leader's driver dies, a standby becomes leader within
        ``lease_timeout`` seconds, starts its own Spark job and resumes from the latest completed
        checkpoint; a deposed leader still alive commits nothing more (fencing) and stops.

        ``uri``: ``zookeeper://host:2181/epochal`` (the ZooKeeper ensemble and a root path), or a
        directory every driver shares (``file://`` or a path: a local disk, an NFSv4 mount; not an
        object store). ``job_id``: what makes drivers the same job (default: derived from the job
        name given to ``execute``); a finished job is never run again under its id. Needs
        ``enable_checkpointing``. With it ``execute``/``execute_async`` first wait to lead the job,
        and ``execute`` returns a result with ``ended_elsewhere`` set when the job had already
        finished under another driver. A graph job (``run_graph(..., environment=env)``) runs with
        HA too, with ``fault_tolerance="checkpoint"`` and a shared ``work_dir``; a CEC or CRB job is
        refused (it has no job-wide checkpoint to resume from).
        """
        self.ha_config = HighAvailabilityConfig(uri, job_id, lease_timeout, renew_interval, poll_interval,
                                                connect_timeout)
        return self

    def set_state_backend(self, kind: str = "heap", *, snapshot: str | None = None, incremental: bool = False,
                          full_every: int = 8, local_dir: str | None = None, dsn: str | None = None,
                          table: str = "epochal_state", namespace: str | None = None, mvcc: bool = False,
                          cache_entries: int = 2_000_000, wal_memory_bytes: int = 256 << 20) -> Environment:
        """Choose where keyed state lives and how snapshots are taken (see
        :class:`~epochal.config.StateBackendConfig`): ``snapshot="fork"`` (default where the
        platform has it) writes each snapshot from a copy-on-write child process, so the
        processing thread only pays the fork; ``"thread"`` copies the state at the barrier and
        writes it from a thread of the worker. ``incremental=True``: checkpoints write only
        what changed since the last completed one; every ``full_every``-th is full again.
        ``kind="rocksdb"``: keyed state in RocksDB under ``local_dir`` (state larger than memory),
        checkpointed incrementally. ``kind="postgres"``: keyed state in the PostgreSQL database
        ``dsn`` (tables named after ``table``, this job's rows under ``namespace``, default the
        job's name), committed with each checkpoint by two-phase commit, or with ``mvcc=True`` as
        versions per checkpoint epoch (:mod:`epochal.state.postgres.backend`); a restore loads nothing.
        Its changes not yet committed stay in memory up to ``wal_memory_bytes`` per subtask, then
        spill to ``local_dir``."""
        self.state_backend = StateBackendConfig(kind, snapshot or StateBackendConfig().snapshot, incremental,
                                                full_every, local_dir, dsn=dsn, table=table, namespace=namespace,
                                                mvcc=mvcc, cache_entries=cache_entries,
                                                wal_memory_bytes=wal_memory_bytes)
        return self

    def enable_cec(self, *, q_target: int = 1_000, u_target: int = 1_000_000, interval: float = 0.005,
                   period: float = 0.1, g_check: bool = True, log_dir: str | None = None,
                   commit_interval: float = 0.5, fsync: bool = False, persist: bool = True) -> Environment:
        """Recover window aggregates by continuous eventual checkpointing (papers/002) instead of
        checkpoints: each operator instance persists its output, with per-window checkpoints
        (G_open when a window opens, G_check for the oldest windows while the extent exceeds
        ``q_target`` tuples or the replay ``u_target``, at most ``interval`` seconds in every
        ``period``; ``g_check=False``: G_open only), and a lost worker is replaced and rebuilt
        from its own output and its producers' replay while every other keeps running. The job
        must be a pipeline of sources, map/filter/flat_map, window aggregates and sinks (see
        :class:`~epochal.config.CecConfig` for the options); exactly-once sinks stay exactly once.
        ``persist=False`` forwards output without writing it: a benchmark baseline (the paper's
        "G_open to network only"), under which a lost worker cannot be rebuilt.
        """
        self.cec_config = CecConfig(CEC, q_target, u_target, interval, period, g_check,
                                    log_dir=log_dir or os.path.join(tempfile.gettempdir(), "epochal-cec"),
                                    commit_interval=commit_interval, fsync=fsync, persist=persist)
        return self

    def enable_crb(self, interval: float = 1.0, *, log_dir: str | None = None, commit_interval: float = 0.5,
                   fsync: bool = False) -> Environment:
        """CEC's baseline (papers/002 §IV, CRB): the same job kind and single-worker recovery, but
        a window operator checkpoints every open window at once every ``interval`` seconds, and
        a replacement reloads the newest such checkpoint and replays all input after it."""
        self.cec_config = CecConfig(CRB, snapshot_interval=interval,
                                    log_dir=log_dir or os.path.join(tempfile.gettempdir(), "epochal-cec"),
                                    commit_interval=commit_interval, fsync=fsync)
        return self

    def set_runtime_mode(self, mode: str) -> Environment:
        """``"streaming"`` (the default): keyed aggregations (``sum``, ``reduce``, ``count``...)
        emit every rolling update. ``"batch"`` (Flink's ``RuntimeExecutionMode.BATCH`` for
        bounded streams): every source must be bounded, and keyed aggregations emit only each
        key's final value when the input ends; windows emit once per window either way.
        Checkpoints and exactly-once sinks work the same in both modes."""
        if mode not in ("streaming", "batch"):
            raise PlanError(f"runtime mode must be 'streaming' or 'batch', got {mode!r}")
        self.graph.runtime_mode = mode
        return self

    def set_restart_strategy(self, strategy: RestartStrategy) -> Environment:
        """How often and after how long a failed job restarts from its latest checkpoint."""
        if not isinstance(strategy, RestartStrategy):
            raise PlanError(f"set_restart_strategy() takes a RestartStrategy, got {type(strategy).__name__}")
        self.restart_strategy = strategy
        return self

    @property
    def max_parallelism(self) -> int:
        return self.config.max_parallelism

    @property
    def spark(self) -> SparkSession:
        """The SparkSession jobs run on (started on first use)."""
        return self.spark_handle.get()

    @property
    def master(self) -> str | None:
        """The Spark master of a session epochal starts (None: ``local[parallelism]``)."""
        return self.spark_handle.master

    @property
    def quiet_spark(self) -> bool | None:
        """Spark's console noise kept out (see the class docstring); None: only for a session epochal starts."""
        return self.spark_handle.quiet

    # ---------------------------------------------------------------- sources
    def from_source(self, source: Source, name: str | None = None) -> DataStream:
        """A stream read from any :class:`Source` (files, sequences, your own)."""
        return self._from_source(source, name)

    def _from_source(self, source: Source, name: str | None, default_name: str | None = None) -> DataStream:
        if not isinstance(source, Source):
            raise PlanError(f"from_source() takes an epochal Source, got {type(source).__name__}")
        # a source's records pass through an identity operator first: its state holds the split positions
        node = self.graph.add("source", name or default_name or f"Source: {type(source).__name__}", [],
                              source=source, operator=Operator(), functions=[source], user_named=name is not None)
        if source.produces_batches:
            from epochal.api.batches import BatchStream, mark_batches

            mark_batches(node.operator)  # type: ignore[arg-type]
            return BatchStream(self, node, source.batch_schema())
        return DataStream(self, node)

    def from_collection(self, items: Sequence[Any]) -> DataStream:
        """A bounded stream of the given records."""
        return self._from_source(CollectionSource(items), None, "Source: collection")

    def from_sequence(self, start: int = 0, end: int | None = None, rate: float | None = None) -> DataStream:
        """The integers ``start .. end-1`` (unbounded if ``end`` is None), optionally paced at ``rate``/s."""
        return self._from_source(SequenceSource(start, end, rate), None, "Source: sequence")

    def from_generator(self, fn: Callable[[int], Any], count: int | None = None,
                       rate: float | None = None) -> DataStream:
        """``fn(i)`` for each index ``i < count`` (unbounded if None); ``fn`` must be deterministic."""
        if not callable(fn):
            raise PlanError(f"from_generator() takes a function of the index, got {type(fn).__name__}")
        return self._from_source(GeneratorSource(fn, count, rate), None, "Source: generator")

    def from_batches(self, fn: Callable[[int], Any], count: int | None = None,
                     rate: float | None = None) -> BatchStream:
        """A batch stream of ``fn(i)`` (a ``pyarrow.RecordBatch``) for each index ``i < count``
        (unbounded if None), ``rate`` batches per second in all if given. ``fn`` must be
        deterministic: a restored job asks it again for the batches after its checkpoint."""
        from epochal.connectors.memory import BatchGeneratorSource

        if not callable(fn):
            raise PlanError(f"from_batches() takes a function of the index, got {type(fn).__name__}")
        return self._from_source(BatchGeneratorSource(fn, count, rate), None,  # type: ignore[return-value]
                                 "Source: batches")

    def read_text(self, path: str) -> DataStream:
        """Lines of a text file, a directory of them, or a glob pattern."""
        from epochal.connectors.files import TextFileSource

        return self._from_source(TextFileSource(path), None, f"Source: text {path}")

    def read_csv(self, path: str, **options: Any) -> DataStream:
        """Rows of CSV files as dicts (see :class:`~epochal.connectors.files.CsvFileSource`)."""
        from epochal.connectors.files import CsvFileSource

        return self._from_source(CsvFileSource(path, **options), None, f"Source: csv {path}")

    @overload
    def read_parquet(self, path: str, *, batches: Literal[True], **options: Any) -> BatchStream: ...

    @overload
    def read_parquet(self, path: str, *, batches: Literal[False] = ..., **options: Any) -> DataStream: ...

    def read_parquet(self, path: str, *, batches: bool = False, **options: Any) -> DataStream:
        """Rows of Parquet files as dicts (see :class:`~epochal.connectors.files.ParquetFileSource`
        for ``columns``, ``as_dicts``); one split per file, a restored job continuing at the
        checkpointed row. With ``batches=True`` a :class:`~epochal.api.batches.BatchStream` of
        their record batches, ``batch_rows`` (65,536 by default) rows each, Arrow all the way
        (docs/columnar.md), whose schema (the first file's) is checked when the job is planned."""
        from epochal.connectors.files import ParquetFileSource

        return self._from_source(ParquetFileSource(path, batches=batches, **options), None, f"Source: parquet {path}")

    @overload
    def from_dataframe(self, df: Any, *, snapshot_dir: str | None = None, name: str | None = None,
                       batches: Literal[True], batch_rows: int = ...) -> BatchStream: ...

    @overload
    def from_dataframe(self, df: Any, *, snapshot_dir: str | None = None, name: str | None = None,
                       batches: Literal[False] = ..., batch_rows: int = ...) -> DataStream: ...

    def from_dataframe(self, df: Any, *, snapshot_dir: str | None = None, name: str | None = None,
                       batches: bool = False, batch_rows: int = 65_536) -> DataStream:
        """The rows of the Spark DataFrame ``df`` (of this environment's session), as
        ``pyspark.sql.Row`` objects with the values ``df.collect()`` gives: bounded, replayable,
        one split per Spark partition.

        With ``batches=True`` a :class:`~epochal.api.batches.BatchStream` of the snapshot's record
        batches (``batch_rows`` rows each at most) as Arrow reads the Parquet Spark wrote: Arrow
        all the way, no Python per row (Spark's types as Arrow's: timestamps ``timestamp[us,
        tz=UTC]``, not Python datetimes); its schema, from the snapshot, is checked when the job
        is planned (docs/columnar.md).

        Spark's executors write ``df`` once, now, as Parquet under ``snapshot_dir`` (a new
        directory in it; nothing is collected onto the driver) and the job's workers read that
        snapshot, so a restarted job reads the same rows. Without ``snapshot_dir`` a temporary
        local directory is used, which only works where driver and executors share a machine
        (``local[N]``); on a cluster give a path every executor can read (HDFS, S3, ...). The
        snapshot is left in place for restores from the job's checkpoints: remove it when done.
        """
        import uuid

        from epochal.connectors.dataframe_source import DataFrameSource
        from epochal.connectors.parquet_split import check_batch_rows

        check_batch_rows(batch_rows, "from_dataframe()")  # before Spark writes anything
        try:
            from pyspark.sql import DataFrame
        except ImportError as exc:  # pragma: no cover - pyspark is a dependency
            raise PlanError("from_dataframe() needs pyspark") from exc
        if not isinstance(df, DataFrame):
            raise PlanError(f"from_dataframe() takes a pyspark.sql.DataFrame, got {type(df).__name__}")
        if snapshot_dir is None:
            if not str(df.sparkSession.sparkContext.master).startswith("local"):
                raise PlanError("from_dataframe() on a cluster needs snapshot_dir=, a directory every executor "
                                "and epochal worker can read (HDFS, S3, a shared mount)")
            snapshot_dir = tempfile.mkdtemp(prefix="epochal-dataframe-")
        path = f"{snapshot_dir.rstrip('/')}/snapshot-{uuid.uuid4().hex[:12]}"
        conf = df.sparkSession.conf
        previous = conf.get("spark.sql.parquet.outputTimestampType")
        conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")  # pyarrow reads INT96 lossily
        try:
            with interrupts.deferred_interrupts():
                df.write.mode("errorifexists").parquet(path)
        except Exception as exc:
            raise PlanError(f"from_dataframe(): Spark could not write the DataFrame's snapshot to {path}: "
                            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}") from exc
        finally:
            if previous is None:
                conf.unset("spark.sql.parquet.outputTimestampType")
            else:
                conf.set("spark.sql.parquet.outputTimestampType", previous)
        return self._from_source(DataFrameSource(path, df.schema.json(), batches, batch_rows), name,
                                 "Source: DataFrame")

    # ---------------------------------------------------------------- planning and execution
    def plan(self) -> JobGraph:
        """The chained job graph the current streams would run as (see ``JobGraph.describe``)."""
        return build_job_graph(self.graph, self.parallelism, self.max_parallelism)

    def job_spec(self, job_name: str = "epochal job", *, restore_from: str | None = None,
                 allow_non_restored_state: bool = False, faults: list[Fault] | None = None,
                 streams: bool = True) -> JobSpec:
        """The frozen :class:`~epochal.control.jobspec.JobSpec` a job of this environment is
        submitted as: its plan (planned now: a :class:`PlanError` for a dataflow that cannot run)
        and a copy of every setting, so that what the environment records afterwards does not
        reach a job already submitted. Without ``restore_from`` a dataflow job restores what
        ``EPOCHAL_RESTORE_FROM`` names (``epochal run --restore``); a CEC job ignores it.
        ``streams=False``: the settings alone, without this environment's streams (a graph
        job's: :func:`epochal.graph.job.run_graph` takes its settings from here)."""
        if self.cec_config is None:
            restore_from, allow_non_restored_state = run_settings.restore(restore_from, allow_non_restored_state)
        graph = copy.copy(self.graph) if streams else None
        if graph is not None:
            graph.nodes = list(graph.nodes)  # streams added later are not this job's
        return JobSpec(job_name, self.parallelism, self.config, self.spark_handle,
                       restart=copy.deepcopy(self.restart_strategy), checkpoint=self.checkpoint_config,
                       state_backend=self.state_backend, cec=self.cec_config, ha=self.ha_config, graph=graph,
                       plan=build_job_graph(graph, self.parallelism, self.max_parallelism) if graph else None,
                       restore_from=restore_from, allow_non_restored_state=allow_non_restored_state,
                       faults=tuple(faults or ()))

    def execute_async(self, job_name: str = "epochal job", *, restore_from: str | None = None,
                      allow_non_restored_state: bool = False, faults: list[Fault] | None = None) -> JobClient:
        """Plan, ship and start the job; returns at once with a :class:`JobClient`.

        ``restore_from`` starts from a checkpoint: a ``chk-<n>`` directory or a job's checkpoint
        directory (its latest completed checkpoint). Its state is matched to this job's operators
        by uid; state that no operator claims fails the restore with a :class:`PlanError` naming
        it, unless ``allow_non_restored_state=True``, which skips it (listed in
        ``JobResult.non_restored_state`` and logged). Without ``restore_from`` the job restores
        what ``EPOCHAL_RESTORE_FROM`` names, if set (``epochal run --restore``,
        :mod:`epochal.control.run_settings`). ``faults`` (epochal.testing.Fault) crash chosen workers
        at chosen moments, for chaos tests.

        The job is served over REST by this process unless ``EngineConfig.rest_enabled`` is off
        (:mod:`epochal.rest`): ``epochal list`` shows it.
        """
        spec = self.job_spec(job_name, restore_from=restore_from, allow_non_restored_state=allow_non_restored_state,
                             faults=faults)
        client = cec_job.execute_async(spec) if spec.cec is not None else dataflow_job.execute_async(spec)
        self.last_client, self.last_result = client, None
        return client

    def execute(self, job_name: str = "epochal job", timeout: float | None = None, *,
                restore_from: str | None = None, allow_non_restored_state: bool = False,
                faults: list[Fault] | None = None, progress: bool | None = None) -> JobResult:
        """Run the job until it finishes (bounded sources) and return its result.

        ``restore_from`` and ``allow_non_restored_state``: see :meth:`execute_async`.
        ``progress``: the live progress line on a terminal (records per second, how far the
        sources are, checkpoints, restarts); None: ``EngineConfig.progress`` decides (see there).

        Raises:
            JobFailedError: a user function raised, a worker died, or Spark failed the job.
            InsufficientSlotsError: Spark cannot run all workers at once.
            EnvironmentSetupError: Spark's executors run a Python that cannot import epochal.
            JobTimeoutError: (a ``TimeoutError``) the job did not finish within ``timeout`` seconds;
                it was cancelled, and the message says whether all its workers stopped.
            KeyboardInterrupt: Ctrl-C; the job was cancelled first (the message says how it ended).
        """
        check_number(timeout, "execute timeout (seconds)", optional=True)
        ended: JobEndedElsewhere | None = None
        try:
            _, result = wait(lambda: self.execute_async(job_name, restore_from=restore_from,
                                                        allow_non_restored_state=allow_non_restored_state,
                                                        faults=faults), job_name, timeout,
                                 self.config.progress if progress is None else progress)
        except JobEndedElsewhere as error:
            ended = error
        except (EpochalError, KeyboardInterrupt) as error:  # shown from the user's call, without the frames
            raise error.with_traceback(None) from None      # of epochal's internals (control.running.wait)
        if ended is not None:  # high availability: another driver ran the job to its end
            try:
                result = ended.result()
            except EpochalError as error:
                raise error.with_traceback(None) from None
        self.last_result = result
        return result
