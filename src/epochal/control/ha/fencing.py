"""A leader's fence: what this driver may still write once it leads an HA job.

:class:`Leadership` is made when the election chose this driver. It reads what the job resumes
from (the completed checkpoints and the checkpoint id counter) and is the
:class:`~epochal.control.checkpoint_files.CheckpointFence` of the JobMaster's checkpoint I/O:
every checkpoint id is taken from the store's counter (a fenced write) before its trigger reaches
a worker, every metadata write and deletion is checked against the store with this leader's
epoch, and a checkpoint completes only once the store took its pointer in a fenced
compare-and-set (:meth:`commit`). A refusal deposes the driver (the election hears of it).

The counter is exact, as Flink's ``CheckpointIDCounter``: it holds the last id a leader started
plus one, so a new leader continues right after the last id its predecessors may have used (one
whose trigger reached a worker, whose transactions a 2PC sink may have begun), never reusing
one, and without skipping any other.

With ``fencing=False`` (``EPOCHAL_HA_UNSAFE_NO_FENCING=1``, for the test that shows fencing is
needed) nothing is checked and a deposed leader goes on: two leaders then commit the same input.
"""

from __future__ import annotations

import logging
from typing import Protocol

from epochal.control.ha.driver import ElectionDriver
from epochal.control.ha.records import CheckpointPointer
from epochal.control.ha.services import Fenced, HaServices

_log = logging.getLogger("epochal")


class LeaderStamped(Protocol):
    """What a leadership sets on the job's checkpoint coordinator (a dataflow job's
    :class:`~epochal.dataflow.checkpointing.coordinator.CheckpointCoordinator`): the epoch every
    ``CheckpointComplete`` carries (None: fencing off), and that ids are reserved before triggers."""

    leader_epoch: int | None
    reserve_ids: bool


class Leadership:
    """This driver's leadership of job ``services.job_id`` with ``epoch``."""

    def __init__(self, services: HaServices, election: ElectionDriver, epoch: int, retained: int,
                 fencing: bool = True) -> None:
        self.services = services
        self.election = election
        self.epoch = epoch
        self.retained = max(retained, 1)
        self.fencing = fencing
        #: the job's completed checkpoints when this driver took over (None: start afresh)
        self.pointer = services.latest_checkpoints()
        latest = self.pointer.latest if self.pointer else 0
        #: the first checkpoint id of this leader: right after the last one an earlier leader started
        self.first_id = max(services.checkpoint_counter(), latest + 1)
        self._ids: list[int] = list(self.pointer.ids) if self.pointer else []
        self.coordinator: LeaderStamped | None = None

    def attach(self, coordinator: LeaderStamped) -> None:
        """Let the job's checkpoint coordinator stamp its epoch on every ``CheckpointComplete``,
        and reserve each checkpoint's id in the HA store before triggering it."""
        self.coordinator = coordinator
        coordinator.leader_epoch = self.epoch if self.fencing else None
        coordinator.reserve_ids = True

    # ---------------------------------------------------------------- CheckpointFence
    def allows(self, action: str) -> str | None:
        if not self.fencing:
            return None
        try:
            self.services.check(self.epoch)
            return None
        except Fenced as error:
            return self._fenced(action, str(error))
        except Exception as error:  # noqa: BLE001 - unreachable: this driver cannot prove it still leads
            return f"the HA store could not be reached ({type(error).__name__}: {error})"

    def reserve(self, checkpoint_id: int) -> str | None:
        try:
            self.services.reserve_ids(self.epoch, checkpoint_id + 1)
        except Fenced as error:
            if not self.fencing:
                return None
            return self._fenced(f"starting checkpoint {checkpoint_id}", str(error))
        except Exception as error:  # noqa: BLE001 - not started: it times out, a later one may do
            return f"the HA store could not be reached ({type(error).__name__}: {error})"
        return None

    def commit(self, storage_uri: str, checkpoint_id: int) -> str | None:
        ids = [*self._ids, checkpoint_id][-self.retained:]
        try:
            self.services.publish_checkpoint(self.epoch, CheckpointPointer(storage_uri, tuple(ids)))
        except Fenced as error:
            if not self.fencing:
                return None
            return self._fenced(f"completing checkpoint {checkpoint_id}", str(error))
        except Exception as error:  # noqa: BLE001 - the checkpoint is aborted; a later one may do
            return f"the HA store could not be reached ({type(error).__name__}: {error})"
        self._ids = ids
        return None

    def _fenced(self, action: str, why: str) -> str:
        reason = f"{action} was refused: {why} (another driver leads job {self.services.job_id})"
        self.election.fenced(reason)
        return reason
