"""Tuning knobs of the runtime, with defaults that suit Spark ``local[N]`` on a laptop.

One frozen dataclass travels from the driver to every worker inside the deployment, so the
driver and all workers always agree on batch sizes, credits and timeouts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from epochal.validation import check_number

#: Checkpoint modes (see :class:`CheckpointConfig`); the runtime's barrier handling implements them.
EXACTLY_ONCE = "exactly_once"
AT_LEAST_ONCE = "at_least_once"
SYNCHRONOUS = "synchronous"
NONE = "none"
MODES = (EXACTLY_ONCE, AT_LEAST_ONCE, SYNCHRONOUS, NONE)


#: The environment variables that give :class:`EngineConfig`'s REST settings their defaults
#: (a setting given in code wins).
REST_ENV, REST_HOST_ENV, REST_PORT_ENV = "EPOCHAL_REST", "EPOCHAL_REST_HOST", "EPOCHAL_REST_PORT"
PROGRESS_ENV = "EPOCHAL_PROGRESS"


@dataclass(frozen=True)
class EngineConfig:
    """Runtime settings of one job.

    Attributes:
        batch_size: the most records one batch holds: a source subtask's read (its records go
            through the chained operators as one batch) and a batch on a channel between
            subtasks (sent when it is full, or on ``buffer_timeout``). Batches amortise the cost
            of a Python call per operator and of a network message, so fast jobs want them large.
        batch_time: seconds of the downstream's work a batch may hold, besides ``batch_size``
            (None: batches are sized by count only). A source reads at most what its chained
            operators process in ``batch_time``, and the credits' worth of batches in flight on
            a channel hold about ``batch_time`` of its consumer's work; each subtask measures
            its cost per record and adapts (:mod:`epochal.dataflow.dataplane.batch_sizing`).
            So a barrier, and a record, waits about ``batch_time`` per slow operator in front of
            it instead of ``channel_credits * batch_size`` records of it; fast operators keep
            batches of ``batch_size``.
        buffer_timeout: seconds a partly filled batch may wait before it is flushed anyway
            (bounds latency when input is slow).
        channel_credits: batches a consumer lets one producer have in flight on one channel;
            this bounds the memory a channel can hold and is what creates backpressure.
        max_parallelism: number of key groups; the upper bound of any operator's parallelism
            and the unit in which keyed state is placed and, later, redistributed.
        registration_timeout: seconds the driver waits for all workers to start and register
            before it fails the job with a clear "too few Spark slots" error.
        heartbeat_interval: seconds between a worker's heartbeats to the JobMaster.
        heartbeat_timeout: seconds of silence after which the JobMaster declares a worker lost.
        cancel_timeout: seconds workers get to stop by themselves before the Spark job is killed.
        connect_timeout: seconds a worker waits for its data connections to peers.
        alignment_memory_bytes: serialised bytes of blocked inputs a worker keeps in memory
            during checkpoint alignment; beyond it they spill to a local file.
        alignment_max_bytes: bytes (memory and disk) of blocked inputs a worker may hold during
            one alignment before it declines the checkpoint; ``None`` for no limit.
        alignment_spill_dir: directory for the spill file; ``None`` uses Spark's local directory
            (``SPARK_LOCAL_DIRS``) or the system temp directory.
        spare_worker: for job kinds that replace a lost worker alone (CEC, graph jobs with
            replicas): keep one idle Spark Python worker warm, so that a replacement starts in
            ~0.05 s instead of forking a new process (~0.35 s); needs a free task slot to take
            effect (:mod:`epochal.control.spare`).
        iteration_log: log a loop's in-transit records in its snapshots (papers/000 Algorithm 2).
            Only for demonstrating why it is needed: without it, loops are snapshotted with the
            acyclic algorithm alone and records inside a loop are lost or repeated on restore.
        worker_memory_limit_bytes: dataflow jobs: how much data memory each worker's Python process
            may add, while it runs the job, to what it held when the job reached it (``None``: no
            limit; needs Linux 4.7 or later). Relative, because PySpark reuses the process and what
            it held before depends on the tasks that ran in it. Applied as the process's
            ``RLIMIT_DATA`` soft limit from when the worker receives the job until its Spark task
            ends, however it ends; then the previous limit is restored. It bounds the heap and
            every private writable mapping, by address space rather than resident pages: what
            Python, pickling, snapshots and RocksDB (memtables, block cache, thread stacks)
            allocate; not the page cache or files. An allocation beyond it fails with
            ``MemoryError``, and the job fails with one error that says so (a failure like any
            other: the restart strategy applies). Keyed state larger than the limit belongs in
            ``set_state_backend("rocksdb")``, which needs ~200 MiB of the limit itself (small
            memtables and cache); an allocation that fails inside RocksDB's own code ends the
            worker process instead (the job fails with the worker lost). See
            docs/state_backends.md, "Memory".
        rest_enabled: serve the job over HTTP from its driver (the REST API of
            :mod:`epochal.rest`; ``epochal list``, ``info``, ``savepoint``, ``stop`` reach it).
            Default: True, or the environment variable ``EPOCHAL_REST`` (``0``/``off``/``false``
            turn it off).
        rest_host: the address the REST server binds. Default ``127.0.0.1`` (this machine only),
            or ``EPOCHAL_REST_HOST``.
        rest_port: its port; 0 (the default, or ``EPOCHAL_REST_PORT``) picks a free one. Every
            job of one driver process that asks for the same host and port shares one server
            (and its token); the address and token are in the per-user job registry
            (:mod:`epochal.control.job_registry`).
        progress: the live progress line a blocking ``execute`` draws on a terminal
            (:mod:`epochal.control.progress`): ``None`` (the default, or ``EPOCHAL_PROGRESS``
            unset): when standard error is a terminal and the job has no ``print()`` sink
            writing there; ``True``: whenever standard error is a terminal; ``False``: never.
    """

    batch_size: int = 1024
    batch_time: float | None = 0.1
    buffer_timeout: float = 0.02
    channel_credits: int = 8
    max_parallelism: int = 128
    registration_timeout: float = 60.0
    heartbeat_interval: float = 0.5
    heartbeat_timeout: float = 20.0
    cancel_timeout: float = 10.0
    connect_timeout: float = 30.0
    alignment_memory_bytes: int = 64 << 20
    alignment_max_bytes: int | None = 4 << 30
    alignment_spill_dir: str | None = None
    iteration_log: bool = True
    spare_worker: bool = True
    worker_memory_limit_bytes: int | None = None
    rest_enabled: bool = field(default_factory=lambda: env_flag(REST_ENV, True))
    rest_host: str = field(default_factory=lambda: os.environ.get(REST_HOST_ENV) or "127.0.0.1")
    rest_port: int = field(default_factory=lambda: env_int(REST_PORT_ENV, 0))
    progress: bool | None = field(
        default_factory=lambda: env_flag(PROGRESS_ENV, True) if os.environ.get(PROGRESS_ENV, "").strip() else None)

    def __post_init__(self) -> None:
        from epochal.errors import PlanError

        check_number(self.batch_size, "batch_size", minimum=1, strict=False, integer=True)
        check_number(self.batch_time, "batch_time", optional=True)
        check_number(self.channel_credits, "channel_credits", minimum=1, strict=False, integer=True)
        check_number(self.max_parallelism, "max_parallelism", minimum=1, strict=False, integer=True)
        if self.max_parallelism > 32768:
            raise PlanError(f"max_parallelism must be in 1..32768, got {self.max_parallelism}")
        check_number(self.alignment_memory_bytes, "alignment_memory_bytes", strict=False, integer=True)
        check_number(self.alignment_max_bytes, "alignment_max_bytes", strict=False, integer=True, optional=True)
        check_number(self.worker_memory_limit_bytes, "worker_memory_limit_bytes", minimum=1 << 20, strict=False,
                     integer=True, optional=True)
        if self.alignment_max_bytes is not None and self.alignment_max_bytes < self.alignment_memory_bytes:
            raise PlanError("alignment_max_bytes must be >= alignment_memory_bytes (or None for no limit)")
        for name in ("buffer_timeout", "registration_timeout", "heartbeat_interval",
                     "heartbeat_timeout", "cancel_timeout", "connect_timeout"):
            check_number(getattr(self, name), name)
        check_number(self.rest_port, "rest_port", minimum=0, strict=False, integer=True)
        if self.rest_port > 65535:
            raise PlanError(f"rest_port must be in 0..65535, got {self.rest_port}")
        if not isinstance(self.rest_host, str) or not self.rest_host:
            raise PlanError(f"rest_host must be a host name or address, got {self.rest_host!r}")


def env_flag(name: str, default: bool) -> bool:
    """A yes/no environment variable: ``1``/``on``/``true``/``yes`` or ``0``/``off``/``false``/``no``
    (``default`` when unset or empty); anything else is a :class:`~epochal.errors.PlanError`."""
    from epochal.errors import PlanError

    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in ("1", "on", "true", "yes"):
        return True
    if value in ("0", "off", "false", "no"):
        return False
    raise PlanError(f"environment variable {name}={value!r}: use 1/on/true/yes or 0/off/false/no")


def env_int(name: str, default: int) -> int:
    """An integer environment variable (``default`` when unset or empty); anything else is a
    :class:`~epochal.errors.PlanError`."""
    from epochal.errors import PlanError

    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise PlanError(f"environment variable {name}={value!r} is not an integer") from None


#: Keyed-state backends (papers/001 §4.1): Python dicts per key group; RocksDB (out of core); an
#: external backend in a PostgreSQL database (committed with each checkpoint).
HEAP, ROCKSDB, POSTGRES = "heap", "rocksdb", "postgres"
#: How the heap backend takes the asynchronous part of a snapshot: in a forked child process
#: (copy-on-write, the processing thread only forks) or on a thread of the worker.
FORK, THREAD = "fork", "thread"


@dataclass(frozen=True)
class StateBackendConfig:
    """Where a job's keyed state lives and how its snapshots are taken (papers/001 §4.1-4.2).

    Attributes:
        kind: ``"heap"``: Python dicts per key group, in the worker's memory. ``"rocksdb"``:
            a RocksDB database per keyed operator subtask on the worker's local disk (state larger
            than memory); its checkpoints are always incremental (a flush and a local hard-link
            checkpoint at the barrier, new SST files uploaded by a thread;
            :mod:`epochal.state.rocksdb.checkpoints`), and ``snapshot``, ``incremental`` and
            ``full_every`` do not apply to it.
        snapshot: ``"fork"`` (the default where the platform has ``fork``): at the barrier the
            worker forks; the child sees the state as it was (copy-on-write), serialises and
            writes it with its own interpreter and reports the files, while the worker goes on
            processing (:mod:`epochal.dataflow.checkpointing.fork_snapshots`). ``"thread"``: the worker copies
            the state's per-key-group dicts at the barrier and a thread of the worker serialises
            and writes them (it shares the interpreter lock with processing). Loop heads, whose
            snapshot waits for their back-edge log, and the ``synchronous`` checkpoint mode always
            use the thread path.
        incremental: a checkpoint writes only the keys changed since the last completed one,
            as a delta that references the earlier files (:mod:`epochal.state.incremental`).
        full_every: with ``incremental``, a subtask's chain of files is at most this long: the
            checkpoint that would make it longer writes the whole state again (a restore reads
            at most ``full_every`` files per old subtask).
        local_dir: RocksDB: where the databases live (None: Spark's local directory, else the
            temp directory); local disk, with room for the state and its local checkpoints.
            PostgreSQL: where the write-ahead log spills.
        write_buffer_bytes, block_cache_bytes: RocksDB: memtable size per state, and the read
            cache per operator subtask (with the OS page cache, what bounds its memory).
        dsn: PostgreSQL (``kind="postgres"``): the libpq connection string or URI of the database
            that holds the state (:mod:`epochal.state.postgres.backend`); every worker connects to it.
        table: PostgreSQL: the name (``name`` or ``schema.name``) the backend's tables start with;
            created when the job is submitted if missing.
        namespace: PostgreSQL: what separates this job's state from other jobs' in the same
            tables (None: the job's name). A restore continues in the namespace of the checkpoint
            it restores, so the namespace only matters for a job started without a checkpoint
            (whose state in it is cleared first).
        mvcc: PostgreSQL: ``False`` (default): papers/001 §4.1 (1), the rows hold the state of the
            last completed checkpoint; each subtask's changes of a checkpoint epoch are written
            and pre-committed at the barrier as one prepared transaction, committed when the
            checkpoint completes (needs the server's ``max_prepared_transactions`` > 0).
            ``True``: §4.1 (2), every row carries the epoch that wrote it; completing a checkpoint
            advances the committed epoch, and any retained checkpoint can be restored.
        cache_entries: PostgreSQL: how many values of the database each keyed operator subtask
            keeps in its read cache (whole key groups are dropped when it is full).
        wal_memory_bytes: PostgreSQL: how many bytes of changes not yet committed (this epoch's
            write-ahead log and the epochs waiting for their checkpoint, estimated per key) each
            keyed operator subtask keeps in memory; past it they are spilled to local disk under
            ``local_dir`` (:mod:`epochal.state.postgres.spill`).
        retained: PostgreSQL with ``mvcc``: versions needed by the last ``retained`` completed
            checkpoints are kept, older ones collected (``execute`` sets it from
            ``enable_checkpointing(retained=...)``).
    """

    kind: str = HEAP
    snapshot: str = FORK if hasattr(os, "fork") else THREAD
    incremental: bool = False
    full_every: int = 8
    local_dir: str | None = None
    write_buffer_bytes: int = 64 << 20
    block_cache_bytes: int = 64 << 20
    dsn: str | None = None
    table: str = "epochal_state"
    namespace: str | None = None
    mvcc: bool = False
    cache_entries: int = 2_000_000
    retained: int = 1
    wal_memory_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        from epochal.errors import PlanError

        if self.kind not in (HEAP, ROCKSDB, POSTGRES):
            raise PlanError(f"state backend kind must be '{HEAP}', '{ROCKSDB}' or '{POSTGRES}', got {self.kind!r}")
        if self.kind == POSTGRES:
            if not isinstance(self.dsn, str) or not self.dsn.strip():
                raise PlanError("set_state_backend('postgres') needs dsn=, the connection string of the database "
                                "(e.g. 'host=db.example.com dbname=state user=epochal')")
            if not isinstance(self.table, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,39}"
                                                                   r"(\.[A-Za-z_][A-Za-z0-9_]{0,39})?", self.table):
                raise PlanError(f"table must be a plain SQL name ('name' or 'schema.name' of letters, digits and "
                                f"_, at most 40 characters each), got {self.table!r}")
            if self.namespace is not None and (not isinstance(self.namespace, str) or not self.namespace):
                raise PlanError(f"namespace must be a non-empty string, got {self.namespace!r}")
            if not isinstance(self.mvcc, bool):
                raise PlanError(f"mvcc must be True or False, got {self.mvcc!r}")
            check_number(self.cache_entries, "cache_entries", minimum=0, strict=False, integer=True)
            check_number(self.wal_memory_bytes, "wal_memory_bytes", minimum=0, strict=False, integer=True)
            check_number(self.retained, "retained", minimum=1, strict=False, integer=True)
        for name in ("write_buffer_bytes", "block_cache_bytes"):
            check_number(getattr(self, name), name, minimum=1 << 16, integer=True)
        if self.snapshot not in (FORK, THREAD):
            raise PlanError(f"snapshot must be '{FORK}' or '{THREAD}', got {self.snapshot!r}")
        check_number(self.full_every, "full_every", minimum=1, strict=False, integer=True)
        if self.snapshot == FORK and not hasattr(os, "fork"):
            raise PlanError("snapshot='fork' needs a platform with fork(); use snapshot='thread'")


@dataclass(frozen=True)
class CheckpointConfig:
    """How and when a job takes checkpoints (papers/000 §4, papers/001 §3.2).

    Attributes:
        interval: seconds between checkpoint triggers; ``None`` disables checkpointing.
        mode: ``exactly_once`` (aligned barriers), ``at_least_once`` (barriers tracked, never
            blocking), ``synchronous`` (the papers' baseline: sources halt until the checkpoint
            completed, state is written on the processing thread) or ``none``.
        timeout: seconds after which a pending checkpoint is aborted.
        min_pause: minimum seconds between the end of one checkpoint and the next trigger.
        max_concurrent: checkpoints that may be pending at the same time.
        tolerable_failures: consecutive failed checkpoints tolerated before the job fails.
        retained: completed checkpoints kept; older ones are deleted once a newer one completed.
        storage: root URI of checkpoint storage (a local path, ``file://`` or any pyarrow.fs URI);
            each job writes under ``<storage>/<job name>``.
        savepoint_dir: where savepoints go when a request names no directory (empty:
            ``<storage>/<job name>/savepoints``); each savepoint is a directory of its own in it.
    """

    interval: float | None = None
    mode: str = EXACTLY_ONCE
    timeout: float = 60.0
    min_pause: float = 0.0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    retained: int = 1
    storage: str = ""
    savepoint_dir: str = ""

    def __post_init__(self) -> None:
        from epochal.errors import PlanError

        if self.mode not in MODES:
            raise PlanError(f"checkpoint mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        check_number(self.interval, "checkpoint interval (seconds)", optional=True)
        check_number(self.timeout, "checkpoint timeout (seconds)")
        check_number(self.min_pause, "min_pause (seconds)", strict=False)
        check_number(self.max_concurrent, "max_concurrent", minimum=1, strict=False, integer=True)
        check_number(self.retained, "retained", minimum=1, strict=False, integer=True)
        check_number(self.tolerable_failures, "tolerable_failures", strict=False, integer=True)

    @property
    def enabled(self) -> bool:
        return self.interval is not None and self.mode != NONE


#: Recovery modes of jobs run as the ``cec`` job kind (papers/002): continuous eventual
#: checkpointing, and its baseline, instant checkpoints of every window plus input replay.
CEC, CRB = "cec", "crb"
#: The same job kind without fault tolerance: no control tuples, nothing persisted (a baseline).
NATIVE = "native"


@dataclass(frozen=True)
class CecConfig:
    """How a job recovers under CEC or CRB (``Environment.enable_cec`` / ``enable_crb``).

    Attributes:
        mode: ``"cec"`` or ``"crb"``.
        q_target, u_target: CEC's Q (extent target, output tuples) and U (replay target, input
            tuples): G_checks are emitted while the extent or the replay exceed them.
        interval, period: CEC's CI and CP: at most ``interval`` seconds of G_checks in every
            ``period`` seconds.
        g_check: False: G_open only (minimum recovery guarantees).
        snapshot_interval: CRB: seconds between checkpoints of every open window.
        log_dir: where workers keep their persisted output queues (a directory on each
            executor's local disk that outlives the worker process; a replacement must find its
            predecessor's queue there, which holds in local mode and on a cluster with a shared
            mount). Default ``<tmp>/epochal-cec``.
        commit_interval: seconds between a sink's commits.
        fsync: whether each frame of an output queue is fsync'd before it leaves the worker
            (survives a lost machine's page cache, not only a lost process).
        segment_bytes: the size of an output queue's segment files; output every consumer has
            confirmed is deleted a whole segment at a time.
        persist: False: frames are forwarded without being written (the paper's "G_open to
            network only" point of Fig. 5): a benchmark baseline, a lost worker cannot be rebuilt.
    """

    mode: str = CEC
    q_target: int = 1_000
    u_target: int = 1_000_000
    interval: float = 0.005
    period: float = 0.1
    g_check: bool = True
    snapshot_interval: float = 1.0
    log_dir: str = ""
    commit_interval: float = 0.5
    fsync: bool = False
    segment_bytes: int = 16 << 20
    persist: bool = True
    #: exist only to show each mechanism is needed: G_open off; per-window dedup off
    g_open: bool = True
    dedup: bool = True

    def __post_init__(self) -> None:
        from epochal.errors import PlanError

        if self.mode not in (CEC, CRB, NATIVE):
            raise PlanError(f"CEC mode must be '{CEC}', '{CRB}' or '{NATIVE}', got {self.mode!r}")
        check_number(self.q_target, "Q (q_target, output tuples)", integer=True, minimum=1, strict=False)
        check_number(self.u_target, "U (u_target, input tuples)", integer=True, minimum=1, strict=False)
        check_number(self.interval, "CI (interval, seconds)")
        check_number(self.period, "CP (period, seconds)")
        if self.interval > self.period:
            raise PlanError(f"CI ({self.interval} s) must not exceed CP ({self.period} s)")
        check_number(self.snapshot_interval, "snapshot_interval (seconds)")
        check_number(self.commit_interval, "commit_interval (seconds)")
        check_number(self.segment_bytes, "segment_bytes", integer=True, minimum=1024, strict=False)


@dataclass(frozen=True)
class HighAvailabilityConfig:
    """High availability of the driver (``Environment.enable_high_availability``; docs/high_availability.md).

    ``uri``: ``zookeeper://host:port[,host:port]/root`` or a directory (``file://`` or a path) on
    a local disk or shared POSIX mount. ``job_id``: the id every driver of the job shares (default:
    derived from the job's name). ``lease_timeout``: seconds after which a silent leader's lease
    is lost (files) or ZooKeeper's session timeout; a leader that could not renew for that long
    deposes itself. ``renew_interval`` (default a fifth of it) and ``poll_interval``: how often a
    leader renews and a standby looks. ``connect_timeout``: how long to wait for ZooKeeper at start.
    """

    uri: str
    job_id: str | None = None
    lease_timeout: float = 5.0
    renew_interval: float | None = None
    poll_interval: float = 0.25
    connect_timeout: float = 10.0

    def __post_init__(self) -> None:
        from epochal.errors import PlanError

        if not isinstance(self.uri, str) or not self.uri:
            raise PlanError(f"enable_high_availability() takes a zookeeper:// URI or a directory, got {self.uri!r}")
        check_number(self.lease_timeout, "lease_timeout (seconds)")
        check_number(self.renew_interval, "renew_interval (seconds)", optional=True)
        check_number(self.poll_interval, "poll_interval (seconds)")
        check_number(self.connect_timeout, "connect_timeout (seconds)")
        if self.job_id is not None and (not isinstance(self.job_id, str) or not self.job_id.replace("-", "").isalnum()):
            raise PlanError(f"job_id must be letters, digits and '-', got {self.job_id!r}")

    @property
    def renew_every(self) -> float:
        return self.renew_interval if self.renew_interval is not None else self.lease_timeout / 5
