"""The JobMaster's side of a job kind: the coordinator every kind plugs into the JobMaster's machine.

The JobMaster's machine (:mod:`epochal.control.jobmaster_machine`) does what every kind shares:
registration, deployment, heartbeats, failures, restarts, cancel, the lifecycle. Everything a
kind coordinates itself is its :class:`KindCoordinator`'s: a dataflow job's checkpoints, loops
and ``collect()`` ledger (:mod:`epochal.dataflow.coordination`), a graph job's global barrier
(:mod:`epochal.graph.coordination`), a CEC job's replacements (:mod:`epochal.cec.coordination`).
The machine asks it what an attempt restores, tells it when the job starts, hands it the kind's
own messages and reports and the passing of time, and tells it when every worker finished, when
an attempt failed and when the next one starts; a coordinator is pure (time is passed in) and
answers with :data:`KindOutput` values, which the machine carries out.

What a kind answers beyond what every kind shares is behind interfaces of its own, declared here
too: :class:`CheckpointedJob` (checkpoint statistics, paths, restored state: the ``dataflow``
kind) and :class:`CollectingJob` (``collect()`` sinks); readers ask through
:func:`checkpoints_of` and :func:`collected_of`, which answer "none" for a kind without them.

Recovery has one extension point, declared here: a coordinator's ``local_recovery``. None (the
default) means a lost worker fails the attempt and the restart strategy decides (the job
restarts from its latest checkpoint); a :class:`TaskLocalRecovery` recovers the lost worker while
the others keep running (Imitator's Rebirth and Migration, CEC's single-worker recovery).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from epochal.control.jobmaster_events import Instruction, ResolveRestore, SavepointDone, SavepointRequest
from epochal.messages import Failed, ToJobMaster, ToWorker


# ---------------------------------------------------------------------- what a coordinator returns
@dataclass(frozen=True)
class ReplaceWorker:
    """Start a new Spark task for lost worker ``worker`` while the others keep running; it
    registers, is deployed with ``Deploy(joining=True)``, and once it is ready the coordinator's
    ``local_recovery.worker_rejoined`` is called."""

    worker: int


@dataclass(frozen=True)
class RetireWorker:
    """Lost worker ``worker`` is not replaced; the job goes on (and finishes) without it
    (Imitator's Migration, papers/003 §5.2)."""

    worker: int


@dataclass(frozen=True)
class EndJob:
    """The job is done: its workers are told to shut down (``final_checkpoint``: the last
    checkpoint, which commits the sinks' final epoch, was committed by every worker)."""

    final_checkpoint: bool = False


#: What a coordinator returns: messages to broadcast to every registered worker, a failure of
#: the attempt, workers to replace or retire, the end of the job, and the driver's I/O
#: (checkpoint files), carried out off the JobMaster's lock.
KindOutput = ToWorker | Failed | ReplaceWorker | RetireWorker | EndJob | Instruction


class TaskLocalRecovery(Protocol):
    """Recovers a lost worker while the others keep running (papers/003 §5; CEC's single-worker
    recovery). The JobMaster's machine then does not fail the attempt when a running worker is
    lost: it forgets the worker and calls ``worker_lost``, and ``worker_rejoined`` once the
    replacement is ready; both return :data:`KindOutput` values.

    ``recovering`` is True while a recovery is under way after which every worker writes its
    output and reports ``Finished`` again (a graph job sends its ``Halt`` again: a survivor's
    partition may have changed). The machine then does not end the job: a loss that starts such
    a recovery clears every worker's finished mark, and ``Finished`` reports received while it
    runs are outdated and ignored. A kind whose workers' ``Finished`` stand across a recovery
    (CEC) keeps it False."""

    @property
    def recovering(self) -> bool: ...

    def worker_lost(self, worker: int, now: float) -> list[KindOutput]:
        """Running worker ``worker`` was lost (its control connection ended)."""
        ...

    def worker_rejoined(self, worker: int, now: float) -> list[KindOutput]:
        """The replacement of ``worker`` registered, connected to its peers and is ready."""
        ...


@dataclass(frozen=True)
class KindTable:
    """A table of a job kind's own numbers (:meth:`KindCoordinator.tables`): a title, the column
    names, and rows of plain values (str, int, float, bool or None), newest last."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True)
class KindMetric:
    """One number of a job kind's own (:meth:`KindCoordinator.kind_metrics`), as the REST job
    detail and the Prometheus endpoint show it: ``name`` a Prometheus metric name (a counter's
    without ``_total``, which the exposition adds), ``kind`` ``"counter"`` or ``"gauge"``,
    ``labels`` beside the job's own (``job_id``, ``job_name``), ``value`` finite."""

    name: str
    help: str
    kind: str
    labels: tuple[tuple[str, str], ...]
    value: float


class KindCoordinator:
    """A job kind's coordination on the JobMaster; subclasses override what their kind needs.

    Every method is called by the JobMaster's machine under its lock, with the time passed in;
    none may block or do I/O (return an I/O instruction instead). The defaults are those of a
    kind that needs nothing: no restore, no commands, the job ends when every worker finished.
    """

    #: The worker body each of the job's Spark tasks runs: ``Body(bootstrap, index, task_attempt).run()``.
    worker_body: ClassVar[type]
    #: The kind's own message types (beside those every kind shares), handed to :meth:`on_message`
    #: whatever the job's status; :class:`~epochal.messages.KindReport` reaches it only while the job runs.
    messages: ClassVar[frozenset[type]] = frozenset()
    #: How a lost worker is recovered: None restarts the job (see the module docstring).
    local_recovery: TaskLocalRecovery | None = None

    def restore_request(self, attempt: int) -> ResolveRestore:
        """What job attempt ``attempt``'s workers restore (asked once all registered)."""
        return ResolveRestore(None, None, None)

    def started(self, now: float, wall: float) -> list[KindOutput]:
        """Every worker is ready and was told to start: the first commands."""
        return []

    def on_message(self, worker: int, message: ToJobMaster, now: float, wall: float,
                   running: bool) -> list[KindOutput]:
        """Registered worker ``worker`` sent ``message`` (a :class:`~epochal.messages.KindReport`,
        or one of :attr:`messages`); ``running``: the job is RUNNING."""
        return []

    def tick(self, now: float, wall: float) -> list[KindOutput]:
        """Time passed while the job runs (after it started): timers."""
        return []

    def all_finished(self, now: float, wall: float) -> list[KindOutput]:
        """Every live worker reported ``Finished`` while the job runs."""
        return [EndJob()]

    def attempt_failed(self, reason: str, now: float) -> list[KindOutput]:
        """The attempt failed for good and another one will start (its workers are cancelled next)."""
        return []

    def restart_refusal(self) -> str | None:
        """Why the failed attempt must not be restarted, whatever the restart strategy allows
        (None: it may be). A dataflow job that stopped at a savepoint refuses: its output up to
        the savepoint is committed, and a restart from an older checkpoint would repeat it."""
        return None

    def new_attempt(self, attempt: int) -> None:
        """The failed attempt is gone; attempt ``attempt`` will register, restore and start."""

    def request_savepoint(self, request: SavepointRequest, now: float, wall: float) -> list[KindOutput]:
        """The user asked for a savepoint while the job runs (``SavepointDone`` answers it, now or
        when it ends). The default: this kind takes none."""
        return [SavepointDone(request.request_id, None, f"{self.kind_name} jobs do not take savepoints")]

    #: how errors name this kind's jobs
    kind_name: ClassVar[str] = "these"
    #: whether :meth:`request_savepoint` may take one (False: it always refuses; the dashboard
    #: shows no savepoint buttons for such a job)
    takes_savepoints: ClassVar[bool] = False

    def checkpoint_written(self, checkpoint_id: int, error: str | None, now: float) -> list[KindOutput]:
        """The driver carried out a :class:`~epochal.control.checkpoint_files.WriteCheckpoint`
        this coordinator returned: the metadata is written (``error`` None) or could not be."""
        return []

    def checkpoint_reserved(self, checkpoint_id: int, refused: str | None, now: float) -> list[KindOutput]:
        """The driver carried out a :class:`~epochal.control.checkpoint_files.ReserveCheckpointId`
        this coordinator returned: the id is reserved (``refused`` None) or may not be used."""
        return []

    def job_ended(self) -> list[Instruction]:
        """The job reached a terminal status: I/O to clean up (checkpoints that can no longer complete)."""
        return []

    def tables(self, metrics: dict[int, dict[str, Any]]) -> list[KindTable]:
        """What the REST API and the dashboard show of this kind beyond what every kind shares
        (a graph job's supersteps and recoveries, a CEC job's recoveries and its workers' counters);
        ``metrics``: each worker's latest heartbeat metrics. Read under the JobMaster's lock: copy."""
        return []

    def kind_metrics(self, metrics: dict[int, dict[str, Any]]) -> list[KindMetric]:
        """The kind's own numbers for the REST job detail and Prometheus (a CEC job's G_checks,
        extents, replay sizes and recoveries per worker); ``metrics`` as for :meth:`tables`. The
        same name always comes with the same kind, help and label names. Default: none."""
        return []


# ---------------------------------------------------------------------- what some kinds answer
@runtime_checkable
class CheckpointedJob(Protocol):
    """What a ``JobClient``, the REST API and Prometheus read of a kind whose jobs take the
    checkpoints and savepoints a user sees, restores and lists (the ``dataflow`` kind). A kind
    without them does not implement it: :func:`checkpoints_of` answers for it with none.
    Read under the JobMaster's lock (through ``JobMaster.query``): copies only."""

    def checkpoint_stats(self) -> list[dict[str, Any]]:
        """Statistics of the checkpoints so far."""
        ...

    @property
    def checkpoint_path(self) -> str:
        """Where the job's checkpoints are (empty without checkpoints)."""
        ...

    @property
    def default_savepoint_dir(self) -> str:
        """Where savepoints go when the user names no directory (empty: the user must name one)."""
        ...

    @property
    def records_base(self) -> int:
        """Source records read before the current attempt, covered by the checkpoint it restored."""
        ...

    @property
    def non_restored_state(self) -> list[dict[str, Any]]:
        """State of the user's ``restore_from`` checkpoint that no operator claimed (skipped)."""
        ...


@runtime_checkable
class CollectingJob(Protocol):
    """What a ``JobClient`` reads of a kind whose jobs have ``collect()`` sinks (``dataflow``):
    the records each published so far (copies, read under the JobMaster's lock)."""

    def published(self, collect_id: str) -> list[Any]:
        """The records ``collect()`` sink ``collect_id`` published so far."""
        ...

    def published_all(self) -> dict[str, list[Any]]:
        """Every ``collect()`` sink's published records."""
        ...


class _NoCheckpoints:
    """The answers of a kind that takes no checkpoints a user sees: none, nowhere."""

    checkpoint_path = ""
    default_savepoint_dir = ""
    records_base = 0

    def checkpoint_stats(self) -> list[dict[str, Any]]:
        return []

    @property
    def non_restored_state(self) -> list[dict[str, Any]]:
        return []


class _NothingCollected:
    """The answers of a kind without ``collect()`` sinks."""

    def published(self, collect_id: str) -> list[Any]:
        return []

    def published_all(self) -> dict[str, list[Any]]:
        return {}


def checkpoints_of(kind: KindCoordinator) -> CheckpointedJob:
    """``kind``'s checkpoint queries, or empty answers for a kind without user-visible checkpoints."""
    return kind if isinstance(kind, CheckpointedJob) else _NoCheckpoints()


def collected_of(kind: KindCoordinator) -> CollectingJob:
    """``kind``'s ``collect()`` queries, or empty answers for a kind without ``collect()`` sinks."""
    return kind if isinstance(kind, CollectingJob) else _NothingCollected()
