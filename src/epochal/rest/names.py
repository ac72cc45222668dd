"""Which job a reference names: its id, a unique prefix of its id, or its name.

The REST API (a path's ``{job_id}``) and the command line (``epochal info JOB``) resolve a
reference the same way, :func:`resolve`:

1. a job whose id is the reference;
2. else the jobs named so: one, or of several the one still running;
3. else the jobs whose id starts with it (at least :data:`MIN_PREFIX` characters): the same rule;
4. else none: :class:`UnknownJob`. Several left: :class:`AmbiguousJob`, which lists them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

#: The shortest id prefix that names a job (shorter ones would match by accident).
MIN_PREFIX = 4


class Nameable(Protocol):
    """What resolution reads of a job: its id, its name and whether it is still running."""

    @property
    def job_id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def running(self) -> bool: ...


J = TypeVar("J", bound=Nameable)


class UnknownJob(LookupError):
    """No job has that id, id prefix or name."""

    def __init__(self, reference: str, where: str = "") -> None:
        super().__init__(f"no job with id or name {reference!r}{where}")
        self.reference = reference


class AmbiguousJob(LookupError):
    """Several jobs match a name or id prefix; ``candidates`` describes each (``id (name)``)."""

    def __init__(self, reference: str, candidates: list[str]) -> None:
        super().__init__(f"{reference!r} names {len(candidates)} jobs: {', '.join(candidates)}; use a job id")
        self.reference = reference
        self.candidates = candidates


def describe(job: Nameable) -> str:
    """How a candidate is listed: ``<id> (<name>, running|ended)``."""
    return f"{job.job_id} ({job.name}, {'running' if job.running else 'ended'})"


def resolve(reference: str, jobs: Sequence[J], where: str = "") -> J:
    """The job ``reference`` names among ``jobs`` (rules in the module docstring); ``where`` ends
    the not-found message (e.g. `` on this machine``)."""
    for job in jobs:
        if job.job_id == reference:
            return job
    for matches in ([j for j in jobs if j.name == reference],
                    [j for j in jobs if len(reference) >= MIN_PREFIX and j.job_id.startswith(reference)]):
        if len(matches) == 1:
            return matches[0]
        running = [j for j in matches if j.running]
        if len(running) == 1:
            return running[0]
        if matches:
            raise AmbiguousJob(reference, [describe(j) for j in (running or matches)])
    raise UnknownJob(reference, where)
