"""Copy-on-write snapshots by ``fork()``: the asynchronous part of a snapshot in a child process.

papers/001 §4.2: the synchronous part of a snapshot only has to *mark* a consistent version of
the state; a concurrent worker materialises it while processing goes on. A Python heap backend
cannot copy lazily per entry without slowing every access, and a thread that pickles the state
holds the interpreter's lock the processing thread needs (measured: an "asynchronous" snapshot of
1M keys cost as much as stopping the world). ``fork()`` gives the copy-on-write version from the
kernel: at the barrier the worker forks (the synchronous part: page tables, ~10 ms per GB); the
child sees the state exactly as it was, serialises and writes it with its own interpreter, reports
the file handles through a pipe and exits; the parent goes on at once and only waits for the
report on its uploader thread (:class:`ForkedSnapshot`, consumed by
:class:`~epochal.dataflow.checkpointing.uploads.Uploader`).

The hard parts, and what this module does about them:

- **Threads at fork time.** Only the forking thread exists in the child. The child uses no lock
  another thread could have held: no logging, no sockets, no queues; CPython re-initialises its
  import lock and glibc its allocator locks after ``fork``; the child opens its own checkpoint
  storage (:class:`~epochal.state.storage.CheckpointStorage`) instead of using the parent's.
- **Inherited sockets and files.** The child closes every inherited descriptor except its pipe
  and stdio first thing, so it never writes to the parent's connections and, once the parent is
  gone, does not keep them open (a peer would otherwise not see the worker's death).
- **A worker that dies while its child runs.** The child asks the kernel for SIGKILL when its
  parent dies (``prctl(PR_SET_PDEATHSIG)``) and checks it was not orphaned before that. A task
  that *ends* (its job cancelled or restarting) leaves its process alive in PySpark's pool, so
  the worker kills its running children when it closes (:func:`kill_running`).
- **A child that dies** (killed, out of memory, a bug): the pipe ends without a report; the
  uploader declines the checkpoint (:class:`~epochal.dataflow.checkpointing.messages.Decline`) and a
  later one completes. Files it wrote belong to a checkpoint that never completes and are deleted
  with it.
- **Memory while the child runs.** Pages are shared until written: the parent's writes copy the
  pages they touch, and the child's pickling touches the reference counts of every object it
  writes, so a snapshot can at worst double the state's memory for its duration. The parent
  freezes the garbage collector's generations before forking (:func:`gc.freeze`), so its own
  collections do not write to every object's header meanwhile, and unfreezes when the last child
  reported; the child never collects.
"""

from __future__ import annotations

import ctypes
import gc
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_PR_SET_PDEATHSIG = 1
_frozen = 0
_frozen_lock = threading.Lock()
#: whether this process unfroze the collector's generations after a snapshot: that unfreezes
#: what the preloading daemon froze too (:mod:`epochal.daemon`; ``gc.unfreeze`` has no partial
#: form), so a reused worker process keeps the daemon's frozen generation until its first one
unfroze = False
#: children still writing (a PySpark worker process outlives its task: on close they are killed)
_running: set[int] = set()


def fork_available() -> bool:
    """Whether this platform can take forked snapshots (POSIX ``fork``)."""
    return hasattr(os, "fork")


@dataclass
class ForkedSnapshot:
    """A snapshot whose asynchronous part runs in child ``pid``; its report arrives on ``pipe``."""

    checkpoint_id: int
    vertex: int
    subtask: int
    pid: int
    pipe: int
    #: alignment_s, sync_s (the fork), source_records, ...; the report adds async_s and bytes
    stats: dict[str, float] = field(default_factory=dict)


def fork_snapshot(checkpoint_id: int, vertex: int, subtask: int, stats: dict[str, float],
                  write: Callable[[], dict[str, Any]], reach: Callable[[str], None]) -> ForkedSnapshot:
    """Fork; the child runs ``write()`` (serialise and write the state as it is now; returns the
    file handles) and reports them, or the error, to the parent. ``reach(point)`` is the fault
    hook, called in the child at ``snapshot_child`` once it wrote the files (where a chaos test
    kills the child before it reports).
    Returns at once in the parent with the running snapshot; the caller must hand it to
    :func:`wait_report` (once), which reaps the child."""
    global _frozen
    with _frozen_lock:
        if _frozen == 0:
            gc.freeze()
        _frozen += 1
    read_end, write_end = os.pipe()
    parent = os.getpid()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        _child(parent, read_end, write_end, write, reach)
    os.close(write_end)
    _running.add(pid)
    return ForkedSnapshot(checkpoint_id, vertex, subtask, pid, read_end,
                          {**stats, "fork_s": time.monotonic() - started})


def kill_running() -> None:
    """SIGKILL every snapshot child still writing. When a worker's task ends (cancelled, failed,
    or its job restarting), the checkpoints those children write will never complete, and the
    process itself lives on in PySpark's pool, so the children would not die with it: they would
    write files into checkpoint directories the JobMaster already deleted. Their reports then
    end in :func:`wait_report` as a decline."""
    for pid in list(_running):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill(snapshot: ForkedSnapshot) -> None:
    """SIGKILL the child of ``snapshot`` if it is still writing: its checkpoint was aborted, and
    what it writes would never be read. Its report then ends in :func:`wait_report` as a refusal;
    the caller must still hand it there (once), which reaps the child."""
    if snapshot.pid in _running:
        try:
            os.kill(snapshot.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_report(snapshot: ForkedSnapshot) -> tuple[dict[str, Any] | None, str]:
    """Block until the child of ``snapshot`` reported and exited (on the uploader thread, which
    releases the interpreter lock while it reads); returns ``(handles, "")`` or ``(None, why)``."""
    global _frozen, unfroze
    chunks = []
    try:
        while chunk := os.read(snapshot.pipe, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(snapshot.pipe)
        _, status = os.waitpid(snapshot.pid, 0)
        _running.discard(snapshot.pid)
        with _frozen_lock:
            _frozen -= 1
            if _frozen == 0:
                gc.unfreeze()
                unfroze = True
    if chunks:
        try:
            kind, value = pickle.loads(b"".join(chunks))
        except Exception as error:  # noqa: BLE001 - a torn report: the child died writing it
            return None, f"the snapshot process's report is unreadable ({error})"
        if kind == "ok":
            return value, ""
        return None, f"the snapshot process failed: {value}"
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return None, f"the snapshot process {snapshot.pid} was killed by {name} before it reported"
    return None, f"the snapshot process {snapshot.pid} exited with status {os.waitstatus_to_exitcode(status)} " \
                 "without a report"


def _child(parent: int, read_end: int, write_end: int, write: Callable[[], dict[str, Any]],
           reach: Callable[[str], None]) -> None:
    code = 1
    try:
        _die_with(parent)
        gc.disable()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        os.close(read_end)
        _close_inherited(keep=write_end)
        try:
            handles = write()
            reach("snapshot_child")  # a chaos test kills the child here: files written, nothing reported
            report: tuple[str, Any] = ("ok", handles)
        except BaseException as error:  # noqa: BLE001 - reported to the parent, which declines
            report = ("error", f"{type(error).__name__}: {error}")
        data = pickle.dumps(report)
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view):]
        code = 0
    finally:
        os._exit(code)  # never the parent's cleanup (atexit, finally blocks, PySpark's worker loop)


def _die_with(parent: int) -> None:
    """SIGKILL this process when ``parent`` dies (Linux); exit now if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the orphan check below still bounds it
        pass
    if os.getppid() != parent:
        os._exit(1)


def _close_inherited(keep: int) -> None:
    """Close every descriptor but stdio and ``keep`` (the parent's sockets, logs, listeners)."""
    try:
        limit = os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        limit = 65536
    os.closerange(3, keep)
    os.closerange(keep + 1, limit)
