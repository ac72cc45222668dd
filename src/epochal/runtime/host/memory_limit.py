"""A worker's memory limit (``EngineConfig.worker_memory_limit_bytes``): the data memory a job
may add to what the worker's Python process held when the job reached it, enforced by the kernel
as ``RLIMIT_DATA`` while the task runs, and the one readable error when it is exceeded."""

from __future__ import annotations

import re
from typing import Any

#: Texts by which an error reported as text (a lost peer, a declined checkpoint) shows that an
#: allocation failed: a ``MemoryError``, or a thread whose stack could not be mapped.
OUT_OF_MEMORY = ("MemoryError", "can't start new thread")


def data_bytes() -> int:
    """This process's data memory as ``RLIMIT_DATA`` counts it (Linux: ``VmData``; 0 elsewhere)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB"


class WorkerMemoryLimitError(Exception):
    """``EngineConfig.worker_memory_limit_bytes`` was exceeded or cannot be applied here; the
    message says what to do. Reported as the worker's one failure."""


class MemoryLimit:
    """``EngineConfig.worker_memory_limit_bytes`` on this process while one task runs: the data
    memory the job may add to what the process held when the job reached it.

    It is applied as the ``RLIMIT_DATA`` soft limit (held + limit; the hard limit is left alone,
    so the previous soft one can always be restored). Since Linux 4.7 that bounds the heap *and*
    every private writable mapping: malloc'd memory of any size (large blocks are mmap'd),
    RocksDB's memtables and block cache, thread stacks; an allocation beyond it fails, which
    Python raises as ``MemoryError``. ``RLIMIT_AS`` would bound all address space instead,
    including the 64 MiB reservations of glibc's per-thread arenas (``PROT_NONE`` until used),
    shared libraries and mapped files, which grow with threads and not with state. Not bounded:
    the page cache and other processes (a forked snapshot child inherits the limit).

    Relative, because PySpark reuses the process: what it holds before the job depends on what ran
    in it before. The limit counts address space mapped writable, used or not, so an allocator
    that reserves ahead is charged for its reservation: pyarrow's default pool (mimalloc) maps a
    1 GiB arena on its first allocation. While the limit is applied, pyarrow's default pool is
    its system pool (glibc malloc, as Python and RocksDB use)."""

    def __init__(self, limit: int, worker: int) -> None:
        self.limit = limit
        self.worker = worker
        #: the soft and hard limits found, restored by :meth:`restore`; None while not applied
        self.previous: tuple[int, int] | None = None
        #: :func:`data_bytes` when the limit was applied, and the ``RLIMIT_DATA`` set then
        self.at_start = 0
        self.rlimit = 0
        self.previous_pool: Any = None

    @property
    def active(self) -> bool:
        return self.previous is not None

    def apply(self) -> None:
        """Limit this process (raises :class:`WorkerMemoryLimitError` where that is impossible)."""
        import platform
        import resource

        release = tuple(int(p) for p in re.findall(r"\d+", platform.release())[:2])
        if platform.system() != "Linux" or release < (4, 7):
            raise WorkerMemoryLimitError(
                "worker_memory_limit_bytes needs Linux 4.7 or later (RLIMIT_DATA bounds all private memory "
                f"there), but worker {self.worker} runs on {platform.system()} {platform.release()}: leave it unset")
        import pyarrow

        held = data_bytes()
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        self.rlimit = min([held + self.limit] + [v for v in (soft, hard) if v != resource.RLIM_INFINITY])
        self.previous, self.previous_pool, self.at_start = (soft, hard), pyarrow.default_memory_pool(), held
        pyarrow.set_memory_pool(pyarrow.system_memory_pool())
        resource.setrlimit(resource.RLIMIT_DATA, (self.rlimit, hard))

    def restore(self) -> None:
        """Put back the limit and pyarrow pool found by :meth:`apply` (once; no-op if not applied)."""
        previous, self.previous = self.previous, None
        if previous is not None:
            import resource

            import pyarrow

            resource.setrlimit(resource.RLIMIT_DATA, previous)
            pyarrow.set_memory_pool(self.previous_pool)

    def caused(self, error: BaseException) -> bool:
        """Whether ``error`` (an exception, what it wraps, or what it reports as text) is an
        allocation that failed while the limit was applied."""
        if not self.active:
            return False
        seen: set[int] = set()
        pending: list[Any] = [error]
        while pending:
            current = pending.pop()
            if not isinstance(current, BaseException) or id(current) in seen:
                continue
            seen.add(id(current))
            if isinstance(current, MemoryError) or any(text in str(current) for text in OUT_OF_MEMORY):
                return True
            pending += [getattr(current, "error", None), current.__cause__, current.__context__]
        return False

    def exceeded(self, where: str) -> WorkerMemoryLimitError:
        """The error of a worker whose allocation in ``where`` failed under the limit."""
        return WorkerMemoryLimitError(
            f"worker {self.worker} ran out of memory in {where}: the job reached worker_memory_limit_bytes "
            f"({_mib(self.limit)} beyond the {_mib(self.at_start)} its Python process held when the job started; "
            f"RLIMIT_DATA {_mib(self.rlimit)}). Keep large keyed state out of the worker's memory with "
            "set_state_backend('rocksdb'), raise worker_memory_limit_bytes, or raise the parallelism so that each "
            "worker holds less")
