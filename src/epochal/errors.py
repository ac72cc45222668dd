"""Every error epochal raises on purpose: one readable message that says what to do.

Users catch :class:`EpochalError` to handle any of them; the subclasses say which stage failed
(building the plan, starting Spark, running the job) so a caller can react precisely.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class EpochalError(Exception):
    """Base class of every error epochal raises deliberately."""


class PlanError(EpochalError):
    """The dataflow cannot be built: a bad parameter, an invalid edge, an unpicklable function."""


class EnvironmentSetupError(EpochalError):
    """Spark or Java cannot be started or is unsuitable (missing Java, too few task slots, executors
    whose Python cannot import epochal)."""


class JavaNotFoundError(EnvironmentSetupError):
    """No Java 17+ runtime was found; Spark cannot start without one."""


class InsufficientSlotsError(EnvironmentSetupError):
    """Spark cannot run all workers of a job at the same time."""


class JobFailedError(EpochalError):
    """The job failed while running; the message names the cause (operator, worker, traceback)."""

    def __init__(self, message: str, *, operator: str | None = None, worker: int | None = None,
                 category: str = "internal"):
        super().__init__(message)
        self.operator = operator
        self.worker = worker
        #: What failed: user, worker_lost, peer_lost, heartbeat, spark, checkpoint, internal, restore
        #: (a damaged checkpoint: never restarted).
        self.category = category

    @property
    def kind(self) -> str:
        """Deprecated name of :attr:`category` (a job *kind* is dataflow, graph or cec)."""
        return self.category


class SavepointError(EpochalError):
    """A savepoint could not be taken: the message says why (the job keeps running unless it was
    being stopped and had already ended)."""


class StateNamespaceInUseError(EpochalError):
    """The PostgreSQL keyed-state namespace a job would use is held by another running job (two
    jobs in one namespace destroy each other's state); the job was not submitted. ``namespace``
    and ``table``: where; ``holder``: the other job's id, if known."""

    def __init__(self, message: str, *, namespace: str, table: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.namespace = namespace
        self.table = table
        self.holder = holder


class SinkInUseError(EpochalError):
    """A job's exactly-once sink is being written by another running job (two writers would repeat
    its output, e.g. a fork restored from a savepoint of a job that still runs); the job was not
    submitted. ``location``: the sink's directory; ``holder``: the other job's id, if known."""

    def __init__(self, message: str, *, location: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.location = location
        self.holder = holder


class HighAvailabilityError(EpochalError):
    """High availability cannot be set up or used: its storage is not writable, ZooKeeper does not
    answer, or the job id is taken by a job with another plan (the message says which)."""


class LeadershipLostError(EpochalError):
    """This driver led a job with high availability and lost the leadership to another driver (or
    could no longer prove it held it): it stopped its workers and committed nothing more."""


class JobCancelledError(EpochalError):
    """The job was cancelled before it finished; results of a cancelled job are incomplete."""


class JobTimeoutError(EpochalError, TimeoutError):
    """A job did not finish within the time it was given (also a built-in :class:`TimeoutError`).

    ``cancelled`` says what became of the job: ``Environment.execute(timeout=...)`` cancels it
    (True); ``JobClient.result(timeout)`` leaves it running (False).
    """

    def __init__(self, message: str, *, cancelled: bool = False) -> None:
        super().__init__(message)
        self.cancelled = cancelled


class SourceError(EpochalError):
    """A source cannot be read (missing file, malformed record, bad position)."""


class QueryableStateError(EpochalError):
    """A query of a running job's state failed (docs/queryable_state.md). ``retriable``: asking
    again later may succeed (the job is restarting, or the worker owning the key is not there yet)."""

    retriable = False


class UnknownQueryableStateError(QueryableStateError, KeyError):
    """No state of the job is queryable by that name (the message lists the names that are)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class QueryUnauthorizedError(QueryableStateError):
    """The query did not carry the job's token (or the REST server refused the token given)."""


class QueryKeyTypeError(QueryableStateError, TypeError):
    """A key of a type that cannot be a key of keyed state (unhashable, or without a stable encoding)."""


class StateUnavailableError(QueryableStateError):
    """The state could not be read before the query's timeout: the job is deploying, restarting or
    rescaling, or a worker did not answer. Retriable."""

    retriable = True


class SinkError(EpochalError):
    """A sink cannot write or commit: the external system is unreachable or refused the output (a
    missing table or column, a constraint violation, a schema that does not match, a conflicting
    commit). The message names the sink's target and, where one is to blame, the record."""


class StateBackendError(EpochalError):
    """A keyed-state backend cannot read or write its state: an external store (the PostgreSQL
    backend's database) is unreachable or refused a statement. Transient: the job restarts from its
    latest checkpoint, whose state the store still holds."""


#: The most characters of a record an error message shows.
RECORD_TEXT_LIMIT = 120
#: The attribute :func:`note_record` sets on a user's exception.
_RECORD = "__epochal_record__"


def record_text(record: object, limit: int = RECORD_TEXT_LIMIT) -> str:
    """``repr(record)``, cut to ``limit`` characters (``...`` marks a cut)."""
    try:
        text = repr(record)
    except Exception as error:  # a user's __repr__ may raise too
        text = f"<{type(record).__name__} whose repr() raised {type(error).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def note_record(error: BaseException, record: object) -> None:
    """Remember on ``error`` (a user function's exception) the record it raised on, as text, so
    that the :class:`UserFunctionError` wrapping it names the record. The first note stays (the
    innermost caller knows best)."""
    if not hasattr(error, _RECORD):
        try:
            setattr(error, _RECORD, record_text(record))
        except (AttributeError, TypeError):
            pass  # an exception type without a __dict__: the message goes without the record


def each(fn: Callable[[Any], Any], batch: list[Any], over: Callable[..., Any] = map) -> list[Any]:
    """``list(over(fn, batch))`` (``over``: ``map`` or ``filter``); when ``fn`` raises, the record
    it raised on is noted on the error (:func:`note_record`), at no cost when it does not."""
    records = iter(batch)
    try:
        return list(over(fn, records))
    except Exception as error:
        state: Any = records.__reduce__()  # a list iterator pickles as (iter, (list,), next index)
        index = state[2] if len(state) > 2 else len(batch)
        if 0 < index <= len(batch):  # the record the iterator handed out last
            note_record(error, batch[index - 1])
        raise


def record_named(error: BaseException) -> BaseException:
    """Mark ``error`` as naming its record in its own message (no second mention); returns it."""
    try:
        setattr(error, _RECORD, "")
    except (AttributeError, TypeError):
        pass
    return error


class UserFunctionError(Exception):
    """A user function raised; ``operator`` names the operator it ran in.

    ``where`` is how the error names the failing code to the user: ``operator 'Map'`` by
    default, or a more precise phrase such as ``the key selector of key_by into 'Count'`` when
    the function that raised is not the operator's own (key selectors, partitioners). ``record``
    is the record it raised on, as text cut to :data:`RECORD_TEXT_LIMIT` characters, where the
    operator knows it (:func:`note_record`), else None.
    """

    def __init__(self, operator: str, error: BaseException, where: str | None = None) -> None:
        self.where = where or f"operator '{operator}'"
        self.record: str | None = getattr(error, _RECORD, None) or None
        on = f" (on record {self.record})" if self.record else ""
        super().__init__(f"{self.where}: {type(error).__name__}: {error}{on}")
        self.operator = operator
        self.error = error


class RestoreError(Exception):
    """Restoring state on a worker found a missing, truncated or corrupt state file (a
    ``CheckpointError`` at ``path``): every attempt would fail the same way, so the JobMaster
    fails the job at once. Internal: the user sees a ``JobFailedError`` naming the checkpoint."""

    def __init__(self, message: str, path: str | None, checkpoint_id: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.checkpoint_id = checkpoint_id
