"""How the barrier tasks of the build stage meet: an all-gather of small picklable values.

:class:`TaskGather` is the contract :class:`~epochal.graph.executors.build.WorkerBuild` relies on;
:class:`FileGather` carries it out through files in the staging directory (a unit test carries it
out with threads).
"""

from __future__ import annotations

import pickle
import time
from typing import Any

import pyarrow.fs as pafs

from epochal.filesystems import join, resolve


class TaskGather:
    """How the tasks of the build stage meet: ``barrier()`` and ``all_gather(value)`` (every
    task's value, in task order, once every task gave its own)."""

    def all_gather(self, value: Any) -> list[Any]:
        raise NotImplementedError


class FileGather(TaskGather):
    """The gather of the build stage's barrier tasks through the staging directory: each call
    writes this task's value as ``gather-<attempt>-<round>-<w>`` (under a temporary name, then
    renamed) and polls until every task's is there. The Spark barrier stage guarantees that the
    ``W`` tasks run at once and fails all of them if one fails; ``attempt`` (agreed once through
    ``BarrierTaskContext.allGather``) keeps a retried stage off an earlier attempt's files. Spark's
    ``allGather`` alone would do, but its JVM side polls once a second: about one second a call
    here, against a few milliseconds for this. ``timeout`` bounds a wait for tasks that never come."""

    def __init__(self, staging: str, attempt: int, worker: int, num_workers: int, timeout: float = 600.0) -> None:
        self.staging, self.attempt, self.worker, self.num_workers = staging, attempt, worker, num_workers
        self.timeout = timeout
        self.round = 0

    def _name(self, worker: int) -> str:
        return join(self.staging, f"gather-{self.attempt}-{self.round}-{worker:05d}")

    def all_gather(self, value: Any) -> list[Any]:
        fs, path = resolve(self._name(self.worker))
        with fs.open_output_stream(f"{path}.tmp", compression=None) as out:
            out.write(pickle.dumps(value, protocol=5))
        fs.move(f"{path}.tmp", path)
        deadline, pause = time.monotonic() + self.timeout, 0.002
        paths = [resolve(self._name(w))[1] for w in range(self.num_workers)]
        while True:
            if all(info.type == pafs.FileType.File for info in fs.get_file_info(paths)):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"build task {self.worker}: not every task reached round {self.round} within "
                                   f"{self.timeout:.0f} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        values = []
        for p in paths:
            with fs.open_input_stream(p, compression=None) as source:
                values.append(pickle.loads(source.read()))
        self.round += 1
        return values
