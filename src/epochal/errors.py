"""Every error epochal raises on purpose: one readable message that says what to do.

Users catch :class:`EpochalError` to handle any of them; the subclasses say which stage failed
(building the plan, starting Spark, running the job) so a caller can react precisely.
"""

from __future__ import annotations


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


class SinkInUseError(EpochalError):
    """A job's exactly-once sink is being written by another running job (two writers would repeat
    its output, e.g. a fork restored from a savepoint of a job that still runs); the job was not
    submitted. ``location``: the sink's directory; ``holder``: the other job's id, if known."""

    def __init__(self, message: str, *, location: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.location = location
        self.holder = holder


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


class SinkError(EpochalError):
    """A sink cannot write or commit: the external system is unreachable or refused the output (a
    missing table or column, a constraint violation, a schema that does not match, a conflicting
    commit). The message names the sink's target and, where one is to blame, the record."""


class UserFunctionError(Exception):
    """A user function raised; ``operator`` names the operator it ran in.

    ``where`` is how the error names the failing code to the user: ``operator 'Map'`` by
    default, or a more precise phrase such as ``the key selector of key_by into 'Count'`` when
    the function that raised is not the operator's own (key selectors, partitioners).
    """

    def __init__(self, operator: str, error: BaseException, where: str | None = None) -> None:
        self.where = where or f"operator '{operator}'"
        super().__init__(f"{self.where}: {type(error).__name__}: {error}")
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
