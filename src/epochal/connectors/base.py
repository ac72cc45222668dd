"""The interfaces every source and sink implements.

A :class:`Source` is a picklable description built on the driver. When the job is planned it is
cut into :class:`SourceSplit` objects (a file, a slice of a sequence, a partition of a log); the
splits are shipped to the workers and divided among the source's subtasks. Every split reports
its read position and can seek back to one, which is what checkpoints record and recovery uses.

A :class:`Sink` is likewise a picklable description; each sink subtask creates one
:class:`SinkWriter` on its worker. Every sink states its delivery guarantee in
:attr:`Sink.guarantee`: what a reader of its output sees when workers crash and the job
restarts from a checkpoint.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class SourceSplit(ABC):
    """One independently readable part of a source, read by exactly one source subtask.

    The life cycle on the worker is ``open()``, optionally ``seek(position)``, then
    ``read_batch()`` until it returns ``None``, then ``close()``.
    """

    #: A name unique within its source, stable across runs (used as the key of its position).
    split_id: str

    def open(self) -> None:  # noqa: B027 - optional hook
        """Acquire resources (open files); called on the worker before the first read."""

    @abstractmethod
    def read_batch(self, max_records: int) -> list[Any] | None:
        """Return up to ``max_records`` next records.

        An empty list means "nothing available right now" (unbounded splits); ``None`` means the
        split is exhausted and will never return records again.
        """

    @abstractmethod
    def position(self) -> Any:
        """The read position of the next record to be returned: small and picklable."""

    @abstractmethod
    def seek(self, position: Any) -> None:
        """Continue reading at ``position``, a value returned earlier by :meth:`position`."""

    def progress(self, position: Any) -> tuple[int, int] | None:
        """How far a reader at ``position`` (a value of :meth:`position`) is through the split, and
        the split's whole size, in its source's :attr:`Source.progress_unit` (a text file's
        bytes): the console's progress line and the dashboard show it. None (the default):
        unknown. Called from the heartbeat thread while the split is read: read only."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; called once, also after a failure."""


@dataclass(frozen=True)
class JobSettings:
    """What a source or sink may check about the job at submit time (:meth:`Source.validate`)."""

    #: Seconds between checkpoints; None when the job takes none.
    checkpoint_interval: float | None
    #: The longest wait of the restart strategy before a restarted attempt (0: never restarts).
    restart_delay: float
    #: The job's default parallelism.
    parallelism: int


@dataclass(frozen=True)
class ReaderContext:
    """What a :class:`SplitReader` knows about the source subtask that runs it."""

    operator_name: str
    subtask_index: int
    parallelism: int
    #: True when the job restored a checkpoint: a split without a restored position is then one
    #: that appeared after the checkpoint was taken (a Kafka partition added since).
    restored: bool = False


class SplitReader(ABC):
    """Reads all the splits of one source subtask together (Flink's ``SourceReader``).

    A source whose splits never end (the partitions of a log) cannot be read one split after
    the other: such a source returns a reader from :meth:`Source.create_reader`, and the runtime
    asks it for batches instead of reading its splits in turn. The reader may add splits while it
    runs (partitions created after the job started); every split it ever reads must appear in
    :meth:`positions`, since those positions are the source's checkpointed state and a restore
    at any parallelism redistributes them by split id.
    """

    @abstractmethod
    def read_batch(self, max_records: int) -> list[Any] | None:
        """Up to ``max_records`` records, without blocking; ``[]``: none now; ``None``: ended."""

    @abstractmethod
    def positions(self) -> list[tuple[str, Any]]:
        """``(split id, position)`` of every split this reader owns, taken at a barrier."""

    def watermark(self) -> Any:
        """The subtask's event time (the minimum over its splits that are not idle), or None
        when the source makes no watermarks or has none yet. Must never go backwards."""
        return None

    def progress(self) -> tuple[int, int] | None:
        """How far the reader is through its splits and their whole size, in the source's
        :attr:`Source.progress_unit`, where it knows (a bounded Kafka source: records between the
        start and end offsets); None (the default): unknown. Called from the heartbeat thread."""
        return None

    def take_side_output(self) -> list[tuple[str, Any]]:
        """``(tag id, record)`` pairs for side outputs (records that failed to decode), emptied."""
        return []

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[tuple[str, Any]]) -> None:  # noqa: B027
        """Checkpoint ``checkpoint_id``, which recorded ``positions``, is complete (Kafka commits
        them to its consumer group here, for monitoring)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; called once, also after a failure."""


class Source(ABC):
    """A picklable description of where records come from."""

    #: True when every split ends by itself; a job whose sources are all bounded finishes.
    bounded: bool = True
    #: True when the source's reader reports event time (``SplitReader.watermark``): event-time
    #: operators downstream then need no ``with_watermarks`` (planning checks that they get some).
    emits_watermarks: bool = False
    #: What its splits' (or its split reader's) ``progress`` counts ("bytes" for text files), for
    #: a source whose size is known in another unit than ``size_hint``'s records; None: none.
    progress_unit: str | None = None
    #: True when its records are ``pyarrow.RecordBatch``es (a batch stream's elements; a split's
    #: ``read_batch`` then returns a list of a few batches, whatever ``max_records``):
    #: ``from_source`` returns a :class:`~epochal.api.batches.BatchStream`.
    produces_batches: bool = False

    def batch_schema(self) -> Any:
        """The ``pyarrow.Schema`` of its record batches where known on the driver without reading
        (Parquet footers, a Delta log, Kafka's fixed columns), else None."""
        return None

    @abstractmethod
    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        """Cut the source into splits, on the driver, for ``parallelism`` reading subtasks.

        Errors here (a missing file, a bad pattern) surface at submit time, before Spark runs.
        """

    def create_reader(self, splits: list[SourceSplit], restored: dict[str, Any],
                      context: ReaderContext) -> SplitReader | None:
        """A reader of all of ``splits`` together, on the worker, or None (the default): the
        runtime then reads the splits one after the other. ``restored`` maps split ids to the
        positions of the restored checkpoint (every split of the source, not only these)."""
        return None

    def validate(self, settings: JobSettings) -> None:  # noqa: B027 - optional hook
        """Check the job's settings at submit time; raise a ``PlanError`` naming what to change."""

    def size_hint(self) -> int | None:
        """How many records the source produces in all, when it knows without reading (a
        collection, a generator or sequence with an end): the console's progress line and the
        dashboard show how far the job read. None (the default): unknown or unbounded."""
        return None


@dataclass
class SinkContext:
    """What a sink writer knows about the subtask that runs it."""

    operator_name: str
    subtask_index: int
    parallelism: int
    #: Sends a picklable payload to the driver over the control connection (used by collect).
    send_to_driver: Callable[[Any], None]
    #: The job attempt (0 first, +1 per restart): lets writers name files no earlier attempt used.
    attempt: int = 0
    #: Whether the job takes checkpoints: transactional writers then commit once per checkpoint,
    #: otherwise once when their input ends.
    checkpointing: bool = False
    #: The job's name (as given to ``execute``) and id (new for every ``execute``, the same for
    #: all attempts of one run): with :attr:`operator_uid` they name this sink in external
    #: systems (Delta transaction ids, PostgreSQL global transaction ids).
    job_name: str = ""
    job_id: str = ""
    #: The sink operator's uid: stable across runs of the same job (unlike ``operator_name``'s
    #: subtask-independent display name, it is what checkpoints key the operator's state by).
    operator_uid: str = ""
    #: Whether this attempt restored a checkpoint.
    restored: bool = False
    #: The sink's parallelism in the restored checkpoint (None: not restored, or not recorded).
    restored_parallelism: int | None = None
    #: The checkpoint this attempt restored (None: the attempt started from scratch). A
    #: transactional writer may abort here what earlier attempts pre-committed after it (their
    #: committables are in no checkpoint it will ever restore); the committables of the restored
    #: checkpoint itself are committed again by the sink operator after the writer is created.
    restored_checkpoint: int | None = None


class SinkWriter(ABC):
    """Writes the records of one sink subtask."""

    @abstractmethod
    def write_batch(self, records: list[Any]) -> None:
        """Write a batch of records, in order."""

    def flush(self) -> None:  # noqa: B027 - optional hook
        """Make everything written so far durable or visible.

        Called when the input ends and, for writers that are not transactional, at every
        checkpoint barrier before the snapshot: what was written before a checkpoint is then
        durable once it completes, so a restart from it repeats records but never loses any
        (at-least-once)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; called once, also after a failure."""


class TransactionalSinkWriter(SinkWriter):
    """A writer taking part in two-phase commit (exactly-once output).

    ``pre_commit(n)`` closes the output of the epoch ending at checkpoint ``n`` and returns a
    small picklable *committable* (or ``None`` if there was no output); nothing of it is visible
    yet. ``commit(committables)`` makes them visible and must be idempotent: after a restore the
    same committables are committed again. ``close()`` without ``pre_commit`` aborts the open
    epoch: none of it may ever become visible.

    The sink operator keeps the committables in operator state (so they are in the checkpoint
    of epoch ``n``), commits them when ``n`` completes, commits those of the restored checkpoint
    again when a restarted attempt opens, and without checkpointing pre-commits and commits once
    when the input ends.
    """

    @abstractmethod
    def pre_commit(self, checkpoint_id: int) -> Any:
        """Finish the current epoch's output durably but invisibly; return its committable."""

    @abstractmethod
    def commit(self, committables: list[Any]) -> None:
        """Make pre-committed output visible (idempotent)."""

    def restore_committables(self, committables: list[Any]) -> None:
        """Called once when a restored attempt opens, with the committables of the restored
        checkpoint that this subtask was given (all of them, whichever subtask made them, when
        the parallelism changed). The default commits them again. A writer whose earlier attempts
        can leave open transactions behind also aborts those here."""
        if committables:
            self.commit(committables)


#: Values of :attr:`Sink.guarantee`.
EXACTLY_ONCE = "exactly_once"
AT_LEAST_ONCE = "at_least_once"
NO_OUTPUT = "none"
GUARANTEES = (EXACTLY_ONCE, AT_LEAST_ONCE, NO_OUTPUT)


class Sink(ABC):
    """A picklable description of where records go."""

    #: What a reader of the sink's output sees when workers crash and the job restarts from its
    #: latest checkpoint (``exactly_once`` checkpointing mode):
    #:
    #: * ``"exactly_once"``: every record once, never a record of an uncompleted checkpoint. The
    #:   sink's writer is a :class:`TransactionalSinkWriter` (two-phase commit): output becomes
    #:   visible when the checkpoint covering it completes (without checkpointing: when the
    #:   input ends).
    #: * ``"at_least_once"``: every record, and after a restart possibly some again (those
    #:   written after the restored checkpoint are written a second time). The default: a plain
    #:   :class:`SinkWriter` whose ``flush`` makes its output durable.
    #: * ``"none"``: the sink outputs nothing (``discard()``).
    #:
    #: A custom sink with a transactional writer should say ``guarantee = "exactly_once"``.
    guarantee: str = AT_LEAST_ONCE
    #: True when its writer takes a batch stream's ``pyarrow.RecordBatch``es as they are (a
    #: columnar format writes each at once); otherwise a batch stream reaches it as rows (tuples).
    accepts_batches: bool = False

    @abstractmethod
    def create_writer(self, context: SinkContext) -> SinkWriter:
        """Create the writer of one sink subtask, on its worker."""

    def validate(self, settings: JobSettings) -> None:  # noqa: B027 - optional hook
        """Check the job's settings at submit time; raise a ``PlanError`` naming what to change."""

    def size_hint(self) -> int | None:
        """How many records the source produces in all, when it knows without reading (a
        collection, a generator or sequence with an end): the console's progress line and the
        dashboard show how far the job read. None (the default): unknown or unbounded."""
        return None

    def claim_location(self) -> str | None:
        """A directory (path or URI) no other job may write while this job runs, or None.

        An exactly-once sink whose output a second writer would repeat (a job forked from a
        savepoint of a running job) names where its output goes; the driver claims it before
        the job is submitted (:mod:`epochal.control.sink_claims`) and refuses the job if another
        running job holds it."""
        return None


def assign_splits(splits: list[SourceSplit], subtask_index: int, parallelism: int) -> list[SourceSplit]:
    """The splits subtask ``subtask_index`` of ``parallelism`` reads: round robin by split order."""
    return splits[subtask_index::parallelism]
