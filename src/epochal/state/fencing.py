"""The leader epochs a job's workers check before they commit (high availability's fence).

When a driver becomes a job's leader with epoch *e* (the fencing token of
:mod:`epochal.control.ha`), before it starts anything it creates ``<run directory>/_fence/epoch-<e>``
in the job's checkpoint storage, which every worker can read. A worker told that checkpoint *n*
completed by the leader of epoch *e* (``CheckpointComplete.leader_epoch``) commits its sinks only
if no newer epoch is there (:meth:`LeaderFence.admits`): a deposed leader's workers, told late,
commit nothing. One file per epoch (never a counter rewritten) keeps it monotonic whatever the
order in which leaders write it.
"""

from __future__ import annotations

import pyarrow.fs as pafs

from epochal.filesystems import join, resolve

FENCE_DIR = "_fence"


class LeaderFence:
    """The fence of the job whose checkpoint run directory is ``storage_uri`` (picklable)."""

    def __init__(self, storage_uri: str) -> None:
        self.directory = join(storage_uri, FENCE_DIR)

    def raise_to(self, epoch: int) -> None:
        """Record that the leader of ``epoch`` took over (the new leader, before it starts)."""
        fs, path = resolve(self.directory)
        fs.create_dir(path, recursive=True)
        with fs.open_output_stream(f"{path}/epoch-{epoch:012d}") as out:
            out.write(b"")

    def newest(self) -> int:
        """The newest epoch recorded (0: none)."""
        fs, path = resolve(self.directory)
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        epochs = [int(i.base_name[6:]) for i in infos if i.base_name.startswith("epoch-") and i.base_name[6:].isdigit()]
        return max(epochs, default=0)

    def admits(self, epoch: int) -> bool:
        """Whether the leader of ``epoch`` is still the newest one."""
        return self.newest() <= epoch
