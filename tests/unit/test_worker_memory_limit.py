"""EngineConfig.worker_memory_limit_bytes on a worker process (runtime/host/memory_limit.py): applied as the
RLIMIT_DATA soft limit (what the process held + the limit) for the task and restored after it,
also when it fails; an allocation that fails under it is reported as one readable error; a
checkpoint declined for it fails the job. No Spark: the limit is applied to this process."""

from __future__ import annotations

import platform
import resource

import pyarrow
import pytest

from epochal.config import EngineConfig
from epochal.dataflow.checkpointing.messages import Decline
from epochal.dataflow.worker import Worker
from epochal.errors import PlanError, UserFunctionError
from epochal.messages import Failed
from epochal.runtime.host import memory_limit
from epochal.runtime.host.links import Bootstrap
from epochal.runtime.host.mailbox import JobMasterLost
from epochal.runtime.host.memory_limit import MemoryLimit, WorkerMemoryLimitError, data_bytes
from epochal.runtime.host.reports import PeerLost, WorkerStopped
from epochal.runtime.host.shell import WorkerShell

LINUX = platform.system() == "Linux"
MIB = 1 << 20


@pytest.fixture
def fake_rlimit(monkeypatch):
    """RLIMIT_DATA of a pretend process holding 100 MiB: ``limits`` holds (soft, hard)."""
    limits = {"data": (resource.RLIM_INFINITY, resource.RLIM_INFINITY)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits["data"] if which == resource.RLIMIT_DATA
                        else pytest.fail("only RLIMIT_DATA"))

    def setrlimit(which, value):
        assert which == resource.RLIMIT_DATA
        limits["data"] = value

    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    monkeypatch.setattr(memory_limit, "data_bytes", lambda: 100 * MIB)
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    monkeypatch.setattr(platform, "release", lambda: "6.1.0-13-amd64")
    return limits


def test_apply_limits_what_the_process_held_plus_the_limit_and_restore_puts_it_back(fake_rlimit):
    pool = pyarrow.default_memory_pool()
    limit = MemoryLimit(64 * MIB, worker=1)
    limit.apply()
    assert limit.active and limit.at_start == 100 * MIB
    assert fake_rlimit["data"] == (164 * MIB, resource.RLIM_INFINITY)  # the hard limit is left alone
    assert pyarrow.default_memory_pool().backend_name == "system"  # no 1 GiB mimalloc arena under the limit
    limit.restore()
    assert not limit.active
    assert fake_rlimit["data"] == (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    assert pyarrow.default_memory_pool().backend_name == pool.backend_name
    fake_rlimit["data"] = (1, 2)
    limit.restore()  # once only: a second restore (or one without apply) changes nothing
    MemoryLimit(64 * MIB, worker=1).restore()
    assert fake_rlimit["data"] == (1, 2)


def test_a_stricter_limit_already_in_place_is_kept(fake_rlimit):
    fake_rlimit["data"] = (120 * MIB, 150 * MIB)
    limit = MemoryLimit(64 * MIB, worker=0)
    limit.apply()
    assert fake_rlimit["data"] == (120 * MIB, 150 * MIB)
    limit.restore()
    fake_rlimit["data"] = (resource.RLIM_INFINITY, 150 * MIB)
    limit.apply()
    assert fake_rlimit["data"] == (150 * MIB, 150 * MIB)
    limit.restore()
    assert fake_rlimit["data"] == (resource.RLIM_INFINITY, 150 * MIB)


def test_applying_it_on_an_old_kernel_or_another_system_is_a_readable_error(fake_rlimit, monkeypatch):
    monkeypatch.setattr(platform, "release", lambda: "4.4.0-generic")
    with pytest.raises(WorkerMemoryLimitError, match="needs Linux 4.7 or later"):
        MemoryLimit(64 * MIB, worker=0).apply()
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    with pytest.raises(WorkerMemoryLimitError, match="leave it unset"):
        MemoryLimit(64 * MIB, worker=0).apply()
    assert fake_rlimit["data"] == (resource.RLIM_INFINITY, resource.RLIM_INFINITY)


@pytest.mark.skipif(not LINUX, reason="RLIMIT_DATA bounds mmap'd memory on Linux only")
def test_the_real_limit_bounds_heap_memory_and_is_lifted_by_restore():
    before = resource.getrlimit(resource.RLIMIT_DATA)
    limit = MemoryLimit(64 * MIB, worker=0)
    limit.apply()
    try:
        assert resource.getrlimit(resource.RLIMIT_DATA)[0] == limit.at_start + 64 * MIB
        small = bytearray(8 * MIB)  # within the limit
        with pytest.raises(MemoryError):
            bytearray(128 * MIB)  # mmap'd by malloc: counted too (RLIMIT_DATA since Linux 4.7)
        assert data_bytes() <= limit.at_start + 64 * MIB
    finally:
        limit.restore()
    assert resource.getrlimit(resource.RLIMIT_DATA) == before
    assert len(bytearray(128 * MIB)) == 128 * MIB and len(small) == 8 * MIB


def test_which_errors_the_limit_caused(fake_rlimit):
    limit = MemoryLimit(64 * MIB, worker=0)
    memory = MemoryError()
    assert not limit.caused(memory)  # not applied: nothing is the limit's doing
    limit.apply()
    assert limit.caused(memory)
    assert limit.caused(UserFunctionError("Map", memory))
    assert limit.caused(PeerLost(1, "connection error: MemoryError: "))  # a reader thread's, as text
    assert limit.caused(RuntimeError("can't start new thread"))  # a thread's stack did not fit
    try:
        try:
            raise memory
        except MemoryError as inner:
            raise ValueError("while pickling") from inner
    except ValueError as chained:
        assert limit.caused(chained)
    assert not limit.caused(ValueError("bad record"))
    assert not limit.caused(UserFunctionError("Map", ZeroDivisionError("division by zero")))


def test_engine_config_checks_the_option():
    assert EngineConfig().worker_memory_limit_bytes is None
    assert EngineConfig(worker_memory_limit_bytes=256 * MIB).worker_memory_limit_bytes == 256 * MIB
    for wrong in (0, 1024, 1.5 * MIB, "1G", True):
        with pytest.raises(PlanError, match="worker_memory_limit_bytes"):
            EngineConfig(worker_memory_limit_bytes=wrong)


class _Link:
    def __init__(self) -> None:
        self.sent: list = []

    def send(self, message) -> None:
        self.sent.append(message)

    def close(self) -> None:
        pass


class _Body(WorkerShell):
    """A worker body whose job applies the limit, then does ``work`` (no sockets)."""

    def __init__(self, work, limit: int | None = 64 * MIB) -> None:
        super().__init__(Bootstrap("127.0.0.1", 1, b"token", "job", 1.0), index=1)
        self.work = work
        self.limit = limit
        self.rlimit_while_working = None

    def _register(self) -> None:
        self.link = _Link()  # type: ignore[assignment]
        self.mailbox.put(JobMasterLost("test"))  # a failure report does not wait for the cancel

    def _serve(self) -> None:
        self._limit_memory(self.limit)
        self.rlimit_while_working = resource.getrlimit(resource.RLIMIT_DATA)
        self.work(self)


class _DataflowBody(Worker):
    """A dataflow worker (the kind whose snapshots are declined) run as :class:`_Body`."""

    def __init__(self, work, limit: int | None = 64 * MIB) -> None:
        super().__init__(Bootstrap("127.0.0.1", 1, b"token", "job", 1.0), index=1)
        self.work = work
        self.limit = limit
        self.rlimit_while_working = None

    _register = _Body._register
    _serve = _Body._serve


def _fail_with(error):
    def work(body):
        raise error

    return work


@pytest.mark.parametrize("error", [MemoryError(), UserFunctionError("Count", MemoryError("out of memory")),
                                   PeerLost(0, "connection error: MemoryError: ")])
def test_a_body_that_runs_out_reports_one_readable_error_and_gets_its_limit_back(fake_rlimit, error):
    body = _Body(_fail_with(error))
    summary = body.run()
    assert summary["status"] == "failed"
    assert body.rlimit_while_working == (164 * MIB, resource.RLIM_INFINITY)
    assert fake_rlimit["data"] == (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    [report] = body.link.sent
    assert isinstance(report, Failed) and report.worker == 1 and not report.traceback
    assert report.error.startswith("worker 1 ran out of memory in ")
    assert "worker_memory_limit_bytes (64 MiB beyond the 100 MiB its Python process held" in report.error
    assert "set_state_backend('rocksdb')" in report.error
    if isinstance(error, UserFunctionError):
        assert "in operator 'Count' (MemoryError: out of memory)" in report.error


@pytest.mark.parametrize("work", [lambda body: None, _fail_with(WorkerStopped("cancelled")),
                                  _fail_with(ValueError("a bug"))], ids=["finished", "stopped", "other error"])
def test_the_limit_is_restored_however_the_task_ends(fake_rlimit, work):
    body = _Body(work)
    body.run()
    assert body.rlimit_while_working == (164 * MIB, resource.RLIM_INFINITY)
    assert fake_rlimit["data"] == (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    if body.link.sent:  # an ordinary error is reported as before
        assert "ValueError: a bug" in body.link.sent[0].error


def test_no_limit_set_changes_nothing(fake_rlimit):
    body = _Body(lambda body: None, limit=None)
    body.run()
    assert body.memory_limit is None and "memory_limit_bytes" not in body.metrics()
    assert fake_rlimit["data"] == (resource.RLIM_INFINITY, resource.RLIM_INFINITY)


def test_a_checkpoint_declined_for_lack_of_memory_fails_the_job(fake_rlimit):
    def work(body):
        body.send_control(Decline(3, 1, "the snapshot process failed: MemoryError: "))
        body.send_control(Decline(4, 1, "FileNotFoundError: gone"))  # any other decline stays one
        assert body.metrics()["memory_limit_bytes"] == 64 * MIB

    body = _DataflowBody(work)
    body.run()
    oom, other = body.link.sent
    assert isinstance(oom, Failed) and "worker 1 ran out of memory in the snapshot of checkpoint 3" in oom.error
    assert other == Decline(4, 1, "FileNotFoundError: gone")
