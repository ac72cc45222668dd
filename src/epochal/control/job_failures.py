"""Why a job attempt failed, in words: the failures the JobMaster detects itself, and the ranking.

Owns the texts of the failures the JobMaster's machine records itself (a lost worker, a missed
heartbeat, a failed or early-ended Spark job, failing checkpoints, too few task slots) as
:class:`~epochal.messages.Failed` values beside the workers' own reports, and the ranking that
picks, among one attempt's failures, the one that explains it best (``FAILURE_RANK``; lower is
more specific) and turns it into the user's :class:`~epochal.errors.JobFailedError`. Pure
functions: no state, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from epochal.errors import InsufficientSlotsError, JobFailedError
from epochal.messages import Failed

#: Which failure explains a job best when several arrive together (lower is more specific).
#: A damaged checkpoint ("restore") explains everything after it and is never restarted.
FAILURE_RANK = {"restore": -1, "user": 0, "worker_lost": 1, "internal": 2, "checkpoint": 3, "spark": 4,
                "heartbeat": 5, "peer_lost": 6}


def failure_error(failures: Iterable[Failed], job_name: str, restore_hint: str) -> JobFailedError:
    """The error that explains ``failures`` (at least one) best; ``restore_hint`` says what to
    restore instead should the cause be a damaged checkpoint."""
    failure = min(_own_reports_first(list(failures)), key=lambda f: FAILURE_RANK.get(f.category, 9))
    worker = failure.worker
    if failure.category == "user":
        where = failure.where or f"operator '{failure.operator}'"
        shown = failure.user_traceback.format() if failure.user_traceback else failure.traceback
        on = f" on record {failure.record}" if failure.record else ""
        message = f"job '{job_name}' failed: {where} (worker {worker}) raised {failure.error}{on}\n{shown}".rstrip()
        return JobFailedError(message, operator=failure.operator, worker=worker, category="user")
    text = f"job '{job_name}' failed: {failure.error}"
    if failure.category == "restore":
        text += f"\n{restore_hint}\n(a damaged checkpoint is not a transient failure: the job was not restarted)"
    if failure.category == "internal" and failure.traceback:
        text += f"\n{failure.traceback}".rstrip()
    return JobFailedError(text, worker=worker, category=failure.category)


def _own_reports_first(failures: list[Failed]) -> list[Failed]:
    """``failures`` without the loss of a worker that reported its own failure first: a worker
    that sent a ``Failed`` (an internal error, say) and then exited is explained by its report,
    not by the closed connection that followed it. Another worker's loss still ranks as usual."""
    reported = {f.worker for f in failures if f.category not in ("worker_lost", "heartbeat") and f.worker is not None}
    kept = [f for f in failures if not (f.category in ("worker_lost", "heartbeat") and f.worker in reported)]
    return kept or failures


def worker_lost(index: int, task_attempt: int, pid: int, hostname: str) -> Failed:
    return Failed("worker_lost", worker=index, error=(
        f"worker {index} (Spark task attempt {task_attempt}, pid {pid} on {hostname}) died or lost its "
        "connection to the driver"))


def replacement_missing(index: int, timeout: float, slots_hint: str) -> Failed:
    return Failed("worker_lost", worker=index, error=(
        f"the replacement of lost worker {index} did not start within {timeout:g} s: Spark has no free "
        f"task slot for it{slots_hint}. Give Spark a spare slot (e.g. master 'local[N]' with N above the "
        "parallelism) or recover by migration, which needs none"))


def heartbeat_missed(index: int, pid: int, hostname: str, timeout: float) -> Failed:
    return Failed("heartbeat", worker=index, error=(
        f"worker {index} (pid {pid} on {hostname}) sent no heartbeat for {timeout:g} s; it is hung or "
        "unreachable"))


def spark_failed(summary: str) -> Failed:
    return Failed("spark", f"the Spark job running the workers failed: {summary}")


def spark_ended_early() -> Failed:
    return Failed("internal", "the Spark job ended before the workers reported finished")


def checkpoint_declined(checkpoint_id: int, reason: str, tolerable_failures: int) -> Failed:
    return Failed("checkpoint", (
        f"checkpoint {checkpoint_id} failed ({reason}) and more than {tolerable_failures} consecutive "
        "checkpoint failures are tolerated"))


def checkpoints_failing(tolerable_failures: int) -> Failed:
    return Failed("checkpoint", (
        f"checkpoints keep failing (more than {tolerable_failures} consecutive timeouts or declines)"))


def too_few_slots(job_name: str, num_workers: int, registered: int, timeout: float,
                  slots_hint: str) -> InsufficientSlotsError:
    """Not every worker registered within the registration timeout."""
    return InsufficientSlotsError(
        f"job '{job_name}' needs {num_workers} workers running at the same time, but only "
        f"{registered} started within {timeout:g} s: Spark has too few free task slots{slots_hint}. "
        "Lower the parallelism, give Spark more cores or executors (e.g. master 'local[N]' with N >= the "
        "parallelism), wait for other jobs to finish, or raise registration_timeout")
