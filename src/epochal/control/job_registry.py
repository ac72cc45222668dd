"""The per-user registry of the jobs running on this machine: where each is served and its token.

A driver that serves a job over REST (:mod:`epochal.rest.server`) adds an entry when the job
starts and removes it when the job ends; the ``epochal`` command line reads it to find a job by
id or name. The file, ``jobs.json``, lives in a directory only its user may enter (mode 0700),
and is readable only by that user (mode 0600), since the tokens in it steer the jobs:

- the directory is ``$EPOCHAL_HOME`` if set (tests isolate themselves with it), else
  ``$XDG_RUNTIME_DIR/epochal`` where that exists, else ``~/.epochal``;
- every change is a read-modify-write under an exclusive ``fcntl`` lock on ``jobs.lock`` (so
  concurrent drivers never lose each other's entries), written to a temporary file and renamed
  over ``jobs.json`` (so a reader never sees half a file; readers take no lock);
- an entry whose process is gone (its driver was killed, or exited without cleaning up) is
  ignored by readers and dropped by the next change. A pid reused by another process keeps an
  entry alive until then; the command line then finds nothing at its address and says so.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pathlib
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from epochal.processes import alive

#: The environment variable naming the registry's directory.
HOME_ENV = "EPOCHAL_HOME"
FILE, LOCK = "jobs.json", "jobs.lock"
VERSION = 1


class RegistryError(OSError):
    """The registry's directory cannot be used (owned by another user, not a directory)."""


@dataclass(frozen=True)
class RegistryEntry:
    """A job served on this machine: ``address`` is ``host:port`` of its driver's REST server,
    ``token`` the bearer token every request needs, ``pid`` its driver process, ``started_at``
    the wall-clock time it started. With high availability (``ha``: the HA services' URI) ``role``
    is ``leader`` (the entry of the driver serving the job) or ``standby`` (a driver waiting to
    take over: no address, nothing served), and a job id has an entry per driver."""

    job_id: str
    name: str
    kind: str
    address: str
    token: str
    pid: int
    started_at: float
    role: str = ""
    ha: str = ""

    @property
    def running(self) -> bool:
        """An entry stands for a running job (what :mod:`~epochal.rest.names` asks)."""
        return True

    @property
    def served(self) -> bool:
        """Whether the job is served here (a standby's entry is not)."""
        return bool(self.address)

    @property
    def url(self) -> str:
        return f"http://{self.address}"


def home() -> pathlib.Path:
    """The registry's directory (see the module docstring); not created here."""
    given = os.environ.get(HOME_ENV)
    if given:
        return pathlib.Path(given).expanduser()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return pathlib.Path(runtime) / "epochal"
    return pathlib.Path.home() / ".epochal"


class Registry:
    """The registry file in ``directory`` (default :func:`home`)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = pathlib.Path(directory) if directory is not None else home()
        self.path = self.directory / FILE

    def entries(self) -> list[RegistryEntry]:
        """The entries of jobs whose driver process still lives, oldest first."""
        return [e for e in self._read() if alive(e.pid)]

    def add(self, entry: RegistryEntry) -> None:
        """Add (or replace, by job id and process) ``entry``; drops the entries of dead processes."""
        with self._change() as entries:
            entries[:] = [e for e in entries if (e.job_id, e.pid) != (entry.job_id, entry.pid)] + [entry]

    def remove(self, *job_ids: str, pid: int | None = None) -> None:
        """Remove the entries of ``job_ids`` (those absent are ignored), only process ``pid``'s if
        given; drops dead ones."""
        gone = set(job_ids)
        with self._change() as entries:
            entries[:] = [e for e in entries if e.job_id not in gone or (pid is not None and e.pid != pid)]

    # ------------------------------------------------------------------ the file
    def _read(self) -> list[RegistryEntry]:
        try:
            with open(self.path, encoding="utf-8") as source:
                document = json.load(source)
            return [RegistryEntry(**item) for item in document.get("jobs", [])]
        except FileNotFoundError:
            return []
        except (ValueError, TypeError, AttributeError):  # damaged: start afresh with the next change
            return []

    @contextlib.contextmanager
    def _change(self) -> Iterator[list[RegistryEntry]]:
        """Read the entries of live processes under the lock, let the caller change the list,
        write it back atomically."""
        self._prepare_directory()
        descriptor = os.open(self.directory / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            entries = [e for e in self._read() if alive(e.pid)]
            yield entries
            self._write(entries)
        finally:
            os.close(descriptor)  # releases the lock

    def _write(self, entries: list[RegistryEntry]) -> None:
        descriptor, temporary = tempfile.mkstemp(prefix=".jobs-", suffix=".tmp", dir=self.directory)  # mode 0600
        try:
            # no fsync: the file describes running processes, and after a crash of the machine none runs
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                json.dump({"version": VERSION, "jobs": [asdict(e) for e in entries]}, out, indent=1)
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def _prepare_directory(self) -> None:
        """Create the directory (mode 0700), or check that an existing one is this user's and
        make it 0700."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except FileExistsError as error:
            raise RegistryError(errno.ENOTDIR, f"the epochal job registry {self.directory} is not a "
                                "directory") from error
        info = self.directory.stat()
        if info.st_uid != os.getuid():
            raise RegistryError(errno.EPERM, f"the epochal job registry {self.directory} belongs to another user; "
                                f"set {HOME_ENV} to a directory of your own")
        if info.st_mode & 0o777 != 0o700:
            os.chmod(self.directory, 0o700)
