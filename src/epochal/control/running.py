"""Waiting for a started job as a user's blocking call does (``execute``, ``run_graph``).

:func:`wait` starts a job (Ctrl-C deferred while it talks to Spark) and waits for its result: a
timeout cancels the job and says whether its workers stopped, Ctrl-C cancels this job only. The
user's call that uses it (``Environment.execute``, ``run_graph``) re-raises epochal's errors
without the frames of epochal's internals.
"""

from __future__ import annotations

from collections.abc import Callable

from epochal.control import interrupts
from epochal.control.client import JobClient, JobResult
from epochal.control.jobmaster import JobStatus
from epochal.control.progress import ProgressLine
from epochal.control.progress import wanted as progress_wanted
from epochal.errors import JobTimeoutError


def wait(start: Callable[[], JobClient], job_name: str, timeout: float | None,
         progress: bool | None = False) -> tuple[JobClient, JobResult]:
    """Start a job with ``start`` (Ctrl-C deferred while it talks to Spark) and wait for its result,
    with the console's progress line where ``progress`` (``EngineConfig.progress``) and the
    terminal allow it (:mod:`epochal.control.progress`).

    Raises what :meth:`JobClient.result` raises; a timeout cancels the job and raises
    :class:`JobTimeoutError`; Ctrl-C cancels the job and raises ``KeyboardInterrupt``. The caller
    (the user's API call) re-raises epochal's errors without its inner frames."""
    client: JobClient | None = None
    line: ProgressLine | None = None
    try:
        with interrupts.deferred_interrupts():  # Ctrl-C waits for the Py4J calls of the start
            client = start()
        if progress_wanted(progress, client.prints):
            line = ProgressLine(client, job_name).start()
        with interrupts.plain_interrupts():  # Ctrl-C cancels this job only, not all of Spark's
            try:
                result = client.result(timeout)
            finally:
                if line is not None:
                    line.stop()
    except JobTimeoutError:
        assert client is not None
        with interrupts.plain_interrupts():
            how = client.cancel_and_describe(f"it did not finish within the timeout of {timeout:g} s")
        if client.status != JobStatus.FINISHED:
            raise JobTimeoutError(f"job '{job_name}' did not finish within {timeout:g} s and was cancelled: "
                                  f"{how}", cancelled=True) from None
        result = client.result(0)
    except KeyboardInterrupt:
        if client is None:
            raise KeyboardInterrupt(f"job '{job_name}' was not started (Ctrl-C)") from None
        with interrupts.plain_interrupts():  # a second Ctrl-C kills this job's Spark job only
            how = client.cancel_and_describe("interrupted by the user (Ctrl-C)")
        raise KeyboardInterrupt(f"job '{job_name}' was cancelled (Ctrl-C): {how}") from None
    return client, result
