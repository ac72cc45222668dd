"""The high-availability services of one job, behind one interface (Flink's HighAvailabilityServices).

A driver opens them for a job id (:func:`~epochal.control.ha.stores.open_services`) and uses them for:

- **leader election** (:meth:`HaServices.observe`, :meth:`claim`, :meth:`renew`,
  :meth:`release`): the leader holds an *epoch*, the fencing token, which grows by one with
  every new leader. The decisions (when to claim, when a lease is lost) are the pure
  :class:`~epochal.control.ha.election.ElectionMachine`'s; these methods are only its I/O.
- **fenced writes**: every write a leader makes carries its epoch and is refused with
  :class:`Fenced` once another leader took over, atomically with the write (a compare-and-set on
  the store): the completed-checkpoint pointer (:meth:`publish_checkpoint`), the checkpoint id
  counter (:meth:`reserve_ids`: ids keep increasing across leaders), the job's result
  (:meth:`put_result`), and :meth:`check` before a deletion.
- the **job store** (:meth:`job`, :meth:`put_job`: the first driver's plan wins; another plan
  under the same id is refused) and the **job result store** (:meth:`result`: a job with one is
  never run again).
- the **contenders** (:meth:`join`, :meth:`contenders`): the drivers waiting as standbys, for
  ``epochal list``.

Two implementations: :class:`~epochal.control.ha.files.FileHaServices` (``file://`` or a path: a
local disk or a shared POSIX mount; leases expire by silence) and
:class:`~epochal.control.ha.zookeeper.ZooKeeperHaServices` (``zookeeper://host:port/root``;
sessions and ephemeral nodes).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from epochal.control.ha.records import (
    CheckpointPointer,
    DriverInfo,
    JobRecord,
    JobResultRecord,
    Observation,
)


class Fenced(Exception):
    """A write of a leader whose epoch is no longer the job's: refused, nothing written."""


class HaServices(ABC):
    """One job's HA services. Thread-safe: the election thread and the JobMaster's use them."""

    #: whether a standby takes a leader's lease as lost when the store did not change for the
    #: lease timeout (files: the leader renews by writing); False: the store ends it (ZooKeeper's
    #: sessions delete the leader's ephemeral node)
    expires_by_silence: ClassVar[bool]

    def __init__(self, uri: str, job_id: str) -> None:
        self.uri = uri
        self.job_id = job_id

    # ---------------------------------------------------------------- election
    @abstractmethod
    def observe(self) -> Observation:
        """Read the job's leadership now."""

    @abstractmethod
    def claim(self, seen: Observation, me: DriverInfo) -> int | None:
        """Become the leader, if the store is still as ``seen`` (or its leader is gone): returns
        the new epoch (``seen.epoch + 1``), or None when another driver got there first."""

    @abstractmethod
    def renew(self, epoch: int) -> bool:
        """Prove (files: and extend) the lease of epoch ``epoch`` by a round trip to the store:
        True while it is still the leader's, False once another leader took over. Raises
        ``OSError`` (or the client's error) when the store cannot be reached: no proof either way."""

    @abstractmethod
    def release(self, epoch: int) -> None:
        """Give the leadership up (a standby may claim at once); nothing if no longer the leader."""

    @abstractmethod
    def check(self, epoch: int) -> None:
        """Raise :class:`Fenced` unless ``epoch`` is still the job's (before a deletion)."""

    # ---------------------------------------------------------------- checkpoints (fenced)
    @abstractmethod
    def latest_checkpoints(self) -> CheckpointPointer | None:
        """The job's completed checkpoints (what a new leader resumes from), or None."""

    @abstractmethod
    def publish_checkpoint(self, epoch: int, pointer: CheckpointPointer) -> None:
        """Make ``pointer`` the job's completed checkpoints (the commit point of a checkpoint);
        raises :class:`Fenced` if ``epoch`` is stale."""

    @abstractmethod
    def checkpoint_counter(self) -> int:
        """The first checkpoint id nobody reserved yet (1 for a new job)."""

    @abstractmethod
    def reserve_ids(self, epoch: int, until: int) -> None:
        """Reserve every checkpoint id below ``until`` for the leader of ``epoch`` (the counter
        becomes at least ``until``); raises :class:`Fenced` if ``epoch`` is stale."""

    # ---------------------------------------------------------------- job and result stores
    @abstractmethod
    def job(self) -> JobRecord | None:
        """The job store's entry for this job id, or None."""

    @abstractmethod
    def put_job(self, record: JobRecord, blob: bytes) -> JobRecord:
        """Store the job (its record and pickled form) unless one is stored: returns the stored
        record (the caller compares fingerprints)."""

    @abstractmethod
    def result(self) -> JobResultRecord | None:
        """How the job ended for good, or None while it has not."""

    @abstractmethod
    def put_result(self, epoch: int, result: JobResultRecord) -> None:
        """Record the job's end (and give the leadership up); raises :class:`Fenced` if stale."""

    # ---------------------------------------------------------------- contenders
    @abstractmethod
    def join(self, me: DriverInfo) -> None:
        """Announce ``me`` as a contender (what ``epochal list`` shows); refreshed by :meth:`refresh`."""

    def refresh(self, me: DriverInfo) -> None:
        """Keep ``me``'s announcement alive (files: its time stamp)."""

    @abstractmethod
    def leave(self, me: DriverInfo) -> None:
        """Withdraw ``me``'s announcement."""

    @abstractmethod
    def contenders(self) -> list[DriverInfo]:
        """The drivers announced for this job (the leader among them)."""

    def close(self) -> None:
        """Let go of connections (a ZooKeeper session ends: its ephemeral nodes go)."""

    def describe(self) -> dict[str, Any]:
        """A summary for ``epochal list``: the leader, its epoch and the standbys."""
        seen = self.observe()
        leader = seen.leader.driver_id if seen.leader else None
        return {"uri": self.uri, "epoch": seen.epoch, "leader": seen.leader.to_json() if seen.leader else None,
                "standbys": [c.to_json() for c in self.contenders() if c.driver_id != leader],
                "finished": seen.finished}
