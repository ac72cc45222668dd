"""The jobs one REST server serves: their JobMasters, outlines, and savepoint requests made
through the API whose outcome no client has read yet.

Kept free of FastAPI and pydantic, so that starting a job imports neither until a server starts.
"""

from __future__ import annotations

import threading

from epochal.control.job_registry import Registry
from epochal.control.jobmaster import JobMaster
from epochal.control.savepoints import IN_PROGRESS
from epochal.rest import names
from epochal.rest.outline import JobOutline
from epochal.rest.rates import Rates

#: Ended jobs a server keeps listing (with their final status) while it serves others.
KEEP_ENDED = 100


class ServedJob:
    """A job a server serves: its JobMaster, its outline, and the savepoint requests made through
    the API whose outcome no client has read yet (a driver about to exit waits a little for those)."""

    def __init__(self, jobmaster: JobMaster, outline: JobOutline) -> None:
        self.jobmaster = jobmaster
        self.outline = outline
        self.unread: set[str] = set()
        #: records per second and busy time of its subtasks (:mod:`epochal.rest.rates`)
        self.rates = Rates()
        #: the registry its entry is in (None: not registered, or removed already)
        self.registry: Registry | None = None

    @property
    def job_id(self) -> str:
        return self.jobmaster.job_id

    @property
    def name(self) -> str:
        return self.jobmaster.job_name

    @property
    def running(self) -> bool:
        return not self.jobmaster.done.is_set()


class JobDirectory:
    """The jobs of one server, by id (thread safe)."""

    def __init__(self) -> None:
        self._jobs: dict[str, ServedJob] = {}
        self._lock = threading.Lock()

    def add(self, served: ServedJob) -> None:
        with self._lock:
            self._jobs[served.job_id] = served
            ended = [j for j in self._jobs.values() if not j.running]
            for old in ended[:max(len(ended) - KEEP_ENDED, 0)]:
                del self._jobs[old.job_id]

    def jobs(self) -> list[ServedJob]:
        """Every job served, in the order they started."""
        with self._lock:
            return list(self._jobs.values())

    def running(self) -> list[ServedJob]:
        return [j for j in self.jobs() if j.running]

    def find(self, reference: str) -> ServedJob:
        """The job ``reference`` names (id, unique id prefix or name: :func:`epochal.rest.names.resolve`)."""
        return names.resolve(reference, self.jobs())

    def unread_outcomes(self) -> bool:
        """Whether some savepoint requested through the API ended and no client read how."""
        for served in self.jobs():
            for request_id in list(served.unread):
                status = served.jobmaster.savepoint_status(request_id)
                if status is not None and status.status != IN_PROGRESS:
                    return True
        return False
