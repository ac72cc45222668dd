"""One writer per exactly-once sink: a job claims its sinks' directories while it runs.

Two jobs writing one exactly-once sink break its promise: a job restored from a savepoint of a
job that still runs (a fork, papers/001 §3.3) writes again what the first job writes after the
savepoint, and a reader of the sink sees those records twice. epochal refuses the second job:
before a job is submitted its driver claims every directory its sinks name
(:meth:`~epochal.connectors.base.Sink.claim_location`), and a directory another running job
holds fails the submission with :class:`~epochal.errors.SinkInUseError`, naming that job and
what to do. Nothing is written before the claim holds, so the first job's output stays intact.

A claim is ``<directory>/_epochal_writer.json`` (hidden from readers, like ``_pending/``): the
holder's job id and name, host, pid, and when it claimed and last renewed.

- Local directories: the driver also holds an exclusive ``flock`` on
  ``<directory>/_epochal_writer.lock`` for the job's lifetime; the kernel drops it when the driver
  process dies, however it dies, so a crashed driver never blocks the next job, and two jobs
  claiming at once cannot both win.
- Other filesystems (``s3://`` ...): the claim is a lease the driver renews every
  ``LEASE_S / 3`` seconds; one not renewed for ``LEASE_S`` seconds (its driver is gone) may be
  taken over. Two drivers claiming within the same instant are not told apart there (object
  stores offer no exclusive create through pyarrow).

Restarts of a job happen inside its JobMaster and keep its claims; a claim ends when the job
ends, before its JobMaster's ``done`` is set.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from typing import IO

from epochal.errors import SinkInUseError
from epochal.filesystems import is_uri, join, resolve

CLAIM_FILE = "_epochal_writer.json"
LOCK_FILE = "_epochal_writer.lock"
#: How long a remote claim stays valid without renewal.
LEASE_S = 30.0


@dataclass(frozen=True)
class Holder:
    """Who holds a sink directory."""

    job_id: str
    job_name: str
    host: str
    pid: int
    claimed_at: float
    renewed_at: float

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.claimed_at))
        return f"job {self.job_name!r} (id {self.job_id}, pid {self.pid} on {self.host}, since {since})"


class SinkClaims:
    """The claims of one job; :meth:`acquire` takes them all or none."""

    def __init__(self, job_id: str, job_name: str, locations: dict[str, str], takeover: bool = False) -> None:
        #: sink directory -> the sink's name (for messages)
        self.locations = locations
        self.job_id = job_id
        self.job_name = job_name
        #: high availability: a claim of this same job id (a deposed leader still alive) is taken
        #: over, not refused; fencing keeps that leader from committing
        self.takeover = takeover
        self._locks: dict[str, IO[bytes]] = {}
        self._held: list[str] = []
        self._released = threading.Event()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        """Claim every directory, or raise :class:`SinkInUseError` (releasing those taken)."""
        try:
            for location, sink in sorted(self.locations.items()):
                self._claim(location, sink)
        except BaseException:
            with self._lock:
                self._give_up()
            raise

    def renew_while_held(self) -> None:
        """Renew the remote leases every ``LEASE_S / 3`` seconds until :meth:`release`; returns at
        once (a daemon thread renews; none without remote claims). Local claims need no renewal."""
        remote = [location for location in self._held if location not in self._locks]
        if not remote:
            return

        def renew() -> None:
            while not self._released.wait(LEASE_S / 3):
                with self._lock:
                    if self._released.is_set():
                        return
                    for location in remote:
                        self._write(location, renew=True)
        threading.Thread(target=renew, name=f"epochal-sink-claims-{self.job_id}", daemon=True).start()

    def release(self) -> None:
        """Give up every claim this job holds (a claim another job took over is left alone);
        called when the job ends. Idempotent."""
        with self._lock:
            self._released.set()
            self._give_up()

    def _give_up(self) -> None:
        for location in reversed(self._held):
            holder = read_holder(location)
            if holder is not None and holder.job_id == self.job_id:
                fs, path = resolve(join(location, CLAIM_FILE))
                try:
                    fs.delete_file(path)
                except OSError:
                    pass
            lock = self._locks.pop(location, None)
            if lock is not None:
                lock.close()  # drops the flock
        self._held = []

    # ------------------------------------------------------------------ one directory
    def _claim(self, location: str, sink: str) -> None:
        fs, path = resolve(location)
        fs.create_dir(path, recursive=True)
        if not is_uri(location):
            lock = open(os.path.join(path, LOCK_FILE), "ab")  # noqa: SIM115 - held for the job's lifetime
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                holder = read_holder(location)
                if not (self.takeover and holder is not None and holder.job_id == self.job_id):
                    raise self._in_use(location, sink, holder) from None
            else:
                self._locks[location] = lock
        else:
            holder = read_holder(location)
            if holder is not None and holder.job_id != self.job_id and time.time() - holder.renewed_at < LEASE_S:
                raise self._in_use(location, sink, holder)
        self._held.append(location)
        self._write(location, renew=False)

    def _write(self, location: str, renew: bool) -> None:
        now = time.time()
        previous = read_holder(location) if renew else None
        holder = Holder(self.job_id, self.job_name, socket.gethostname(), os.getpid(),
                        previous.claimed_at if previous is not None else now, now)
        fs, path = resolve(join(location, CLAIM_FILE))
        try:
            with fs.open_output_stream(path) as out:
                out.write(json.dumps(asdict(holder)).encode())
        except OSError:
            if not renew:
                raise
            # a lease not renewed now is renewed at the next round (LEASE_S is three rounds)

    def _in_use(self, location: str, sink: str, holder: Holder | None) -> SinkInUseError:
        who = holder.describe() if holder is not None else "another job"
        return SinkInUseError(
            f"{sink} {location} is being written by {who}. Two jobs writing one exactly-once sink would "
            f"repeat its output (a job restored from a savepoint of a job that still runs is a fork): stop "
            f"that job first (epochal stop {holder.job_name if holder else 'JOB'} --savepoint-dir DIR), or "
            "give this job another output directory. Nothing was written.", location=location,
            holder=holder.job_id if holder is not None else None)


def read_holder(location: str) -> Holder | None:
    """Who claims the sink directory ``location`` (None: nobody, or an unreadable claim)."""
    fs, path = resolve(join(location, CLAIM_FILE))
    try:
        with fs.open_input_stream(path) as source:
            return Holder(**json.loads(source.read()))
    except (OSError, ValueError, TypeError):
        return None
