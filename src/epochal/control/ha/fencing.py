"""A leader's fence: what this driver may still write once it leads an HA job.

:class:`Leadership` is made when the election chose this driver. It reads what the job resumes
from (the completed checkpoints and the checkpoint id counter), reserves the first block of
checkpoint ids, and is the :class:`~epochal.control.checkpointing.files.CheckpointFence` of the
JobMaster's checkpoint I/O: every metadata write and deletion is checked against the store with
this leader's epoch, and a checkpoint completes only once the store took its pointer in a fenced
compare-and-set (:meth:`commit`). A refusal deposes the driver (the election hears of it).

With ``fencing=False`` (``EPOCHAL_HA_UNSAFE_NO_FENCING=1``, for the test that shows fencing is
needed) nothing is checked and a deposed leader goes on: two leaders then commit the same input.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from epochal.control.ha.driver import ElectionDriver
from epochal.control.ha.records import CheckpointPointer
from epochal.control.ha.services import Fenced, HaServices

if TYPE_CHECKING:
    from epochal.control.checkpointing import CheckpointCoordinator

_log = logging.getLogger("epochal")

#: Checkpoint ids reserved at a time in the HA store (a new leader's ids start past them).
ID_BLOCK = 20


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
        #: the first checkpoint id of this leader: past every id an earlier leader reserved
        self.first_id = max(services.checkpoint_counter(), latest + 1)
        self.id_limit = self.first_id + ID_BLOCK
        services.reserve_ids(epoch, self.id_limit)
        self._ids: list[int] = list(self.pointer.ids) if self.pointer else []
        self.coordinator: CheckpointCoordinator | None = None

    def attach(self, coordinator: CheckpointCoordinator) -> None:
        """Let the job's checkpoint coordinator stamp its epoch and keep below the reserved ids."""
        self.coordinator = coordinator
        coordinator.leader_epoch = self.epoch if self.fencing else None
        coordinator.id_limit = self.id_limit

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

    def commit(self, storage_uri: str, checkpoint_id: int) -> str | None:
        ids = [*self._ids, checkpoint_id][-self.retained:]
        try:
            self.services.publish_checkpoint(self.epoch, CheckpointPointer(storage_uri, tuple(ids)))
            if self.id_limit - checkpoint_id <= ID_BLOCK // 2:
                limit = checkpoint_id + ID_BLOCK
                self.services.reserve_ids(self.epoch, limit)
                self.id_limit = limit
                if self.coordinator is not None:
                    self.coordinator.id_limit = limit  # an int: read under the JobMaster's lock
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
