"""What high availability stores about one job, as typed records (JSON on the wire and on disk).

- :class:`DriverInfo`: a driver taking part in a job's election (its id, host, pid, start time).
- :class:`Observation`: what a driver read of the job's leadership: the store's version, the
  leader's epoch (the fencing token: it grows by one with every leader), the leader if there is
  one, and whether the job has ended for good (its result is stored).
- :class:`CheckpointPointer`: the job's completed checkpoints a new leader resumes from (Flink's
  completed checkpoint store): their storage and ids, the latest last.
- :class:`JobRecord`: the job store's entry (Flink's job graph store): id, name, the plan's
  fingerprint and where the pickled job is.
- :class:`JobResultRecord`: the job result store's entry (Flink's JobResultStore): a job with one
  is never run again.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class DriverInfo:
    """A driver process contending for (or leading) a job."""

    driver_id: str
    host: str
    pid: int
    started_at: float

    @staticmethod
    def this_process() -> DriverInfo:
        return DriverInfo(uuid.uuid4().hex[:12], socket.gethostname(), os.getpid(), time.time())

    def describe(self) -> str:
        return f"driver {self.driver_id} (pid {self.pid} on {self.host})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any] | None) -> DriverInfo | None:
        return None if data is None else DriverInfo(**data)


@dataclass(frozen=True)
class Observation:
    """One read of a job's leadership. ``version`` changes with every write to it (a renewal too),
    so a standby of a store whose leases expire by silence sees a leader's heartbeat as a change."""

    version: int
    epoch: int
    leader: DriverInfo | None
    finished: bool = False


@dataclass(frozen=True)
class CheckpointPointer:
    """The job's retained completed checkpoints (ids oldest first) in ``storage`` (a run directory)."""

    storage: str
    ids: tuple[int, ...]

    @property
    def latest(self) -> int:
        return self.ids[-1]

    def to_json(self) -> dict[str, Any]:
        return {"storage": self.storage, "ids": list(self.ids)}

    @staticmethod
    def from_json(data: dict[str, Any] | None) -> CheckpointPointer | None:
        return None if not data else CheckpointPointer(data["storage"], tuple(data["ids"]))


@dataclass(frozen=True)
class JobRecord:
    """The job store's entry of one HA job (the pickled job lies beside it, ``job_file``)."""

    job_id: str
    name: str
    fingerprint: str
    created_at: float
    created_by: str
    job_file: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> JobRecord:
        return JobRecord(**data)


@dataclass(frozen=True)
class JobResultRecord:
    """How an HA job ended for good: ``status`` FINISHED, FAILED or CANCELLED, the error's text,
    when, and which driver ran it to its end."""

    status: str
    ended_at: float
    driver: str
    error: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any] | None) -> JobResultRecord | None:
        return None if data is None else JobResultRecord(**data)
