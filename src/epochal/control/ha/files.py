"""The embedded HA services: a directory on a local disk or a shared POSIX mount.

Everything about a job's leadership is one *versioned register*: ``<dir>/<job id>/leadership/``
holds files ``<version>.json``, each the whole record (epoch, leader, heartbeat, completed
checkpoints, checkpoint id counter, result). A write reads the newest version ``v`` and creates
``v + 1`` with ``link(2)``, which fails if the name exists: an atomic compare-and-set. So two
drivers can never both write version ``v + 1``: a leader's fenced write (its epoch checked in
the record it read) and a standby's claim (epoch + 1) exclude each other, and the loser learns
it. The leader renews its lease by writing a new version (a heartbeat); a standby that sees no
new version for the lease timeout (on its own monotonic clock, so clocks of different machines
never meet) claims. Old versions are deleted as new ones are written.

The job store is ``job.json`` (created with ``link(2)`` too: the first plan wins) beside the
pickled job, and the contenders are ``contenders/<driver id>.json``, refreshed by their drivers.

What it does not guarantee: ``link(2)`` must be atomic and exclusive, and a file's content
visible once its name is (POSIX local file systems, NFSv4, CephFS, GPFS/Lustre do this; NFSv3
clients may retry a link whose reply was lost and report it failed). Object stores (S3, GCS,
ADLS through a FUSE mount or ``s3://``) have no atomic exclusive create or rename: use
ZooKeeper there. Only paths are accepted, never an object-store URI.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

from epochal.control.ha.records import (
    CheckpointPointer,
    DriverInfo,
    JobRecord,
    JobResultRecord,
    Observation,
)
from epochal.control.ha.services import Fenced, HaServices
from epochal.errors import HighAvailabilityError

#: Versions of the register kept behind the newest one.
KEEP = 16
#: Seconds after its last refresh a contender's announcement counts as gone.
CONTENDER_STALE_S = 10.0


def _path_of(uri: str) -> pathlib.Path:
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    elif "://" in uri:
        raise HighAvailabilityError(
            f"file-based high availability needs a local path or a shared POSIX mount, not {uri}: object stores "
            "have no atomic exclusive create; use zookeeper://host:2181/root there")
    return pathlib.Path(uri).expanduser().absolute()


class FileHaServices(HaServices):
    """One job's HA services in ``<uri>/<job id>/`` (see the module docstring)."""

    expires_by_silence: ClassVar[bool] = True

    def __init__(self, uri: str, job_id: str) -> None:
        super().__init__(uri, job_id)
        self.directory = _path_of(uri) / job_id
        self.register = self.directory / "leadership"
        self.contenders_dir = self.directory / "contenders"
        self._lock = threading.Lock()
        try:
            self.register.mkdir(parents=True, exist_ok=True)
            self.contenders_dir.mkdir(exist_ok=True)
            probe = self.directory / f".probe-{uuid.uuid4().hex[:8]}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as error:
            raise HighAvailabilityError(f"the high-availability storage {self.directory} is not writable: "
                                        f"{type(error).__name__}: {error.strerror or error}") from None
        if not self._versions():
            self._create(0, {"epoch": 0, "leader": None, "beat": 0, "checkpoint": None, "counter": 1,
                             "result": None})

    # ---------------------------------------------------------------- the register
    def _versions(self) -> list[int]:
        return sorted(int(n[:-5]) for n in os.listdir(self.register) if n.endswith(".json") and n[:-5].isdigit())

    def _latest(self) -> tuple[int, dict[str, Any]]:
        for _ in range(20):
            versions = self._versions()
            if not versions:
                break
            try:
                return versions[-1], json.loads((self.register / f"{versions[-1]:020d}.json").read_bytes())
            except FileNotFoundError:  # deleted as old between listing and reading: list again
                continue
        raise HighAvailabilityError(f"the high-availability register {self.register} is empty or unreadable")

    def _create(self, version: int, record: dict[str, Any], durable: bool = True) -> bool:
        """Create version ``version`` unless it exists (the compare-and-set); True if created.
        ``durable``: fsync it (not for a heartbeat, whose loss in a crash of the machine costs nothing:
        a slow disk must not starve the lease)."""
        temporary = self.register / f".tmp-{uuid.uuid4().hex}"
        try:
            with open(temporary, "wb") as out:
                out.write(json.dumps(record).encode())
                out.flush()
                if durable:
                    os.fsync(out.fileno())
            try:
                os.link(temporary, self.register / f"{version:020d}.json")
            except FileExistsError:
                return False
            if durable:
                descriptor = os.open(self.register, os.O_RDONLY)
                try:
                    os.fsync(descriptor)
                finally:
                    os.close(descriptor)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if version > KEEP:
            with contextlib.suppress(OSError):
                os.unlink(self.register / f"{version - KEEP:020d}.json")
        return True

    def _update(self, epoch: int, change: Callable[[dict[str, Any]], None], durable: bool = True) -> None:
        """A fenced write: apply ``change`` to the newest record if ``epoch`` leads it."""
        with self._lock:
            while True:
                version, record = self._latest()
                if record["epoch"] != epoch or record["leader"] is None:
                    raise Fenced(f"the leader epoch is {record['epoch']}"
                                 + ("" if record["leader"] else " (no leader)") + f", not {epoch}")
                change(record)
                record["beat"] = record.get("beat", 0) + 1
                if self._create(version + 1, record, durable):
                    return

    # ---------------------------------------------------------------- election
    def observe(self) -> Observation:
        version, record = self._latest()
        return Observation(version, record["epoch"], DriverInfo.from_json(record["leader"]),
                           record["result"] is not None)

    def claim(self, seen: Observation, me: DriverInfo) -> int | None:
        with self._lock:
            version, record = self._latest()
            if version != seen.version or record["result"] is not None:
                return None
            record.update(epoch=record["epoch"] + 1, leader=me.to_json(), beat=0)
            return record["epoch"] if self._create(version + 1, record) else None

    def renew(self, epoch: int) -> bool:
        try:
            self._update(epoch, lambda record: None, durable=False)
            return True
        except Fenced:
            return False

    def release(self, epoch: int) -> None:
        with contextlib.suppress(Fenced):
            self._update(epoch, lambda record: record.update(leader=None))

    def check(self, epoch: int) -> None:
        _, record = self._latest()
        if record["epoch"] != epoch or record["leader"] is None:
            raise Fenced(f"the leader epoch is {record['epoch']}, not {epoch}")

    # ---------------------------------------------------------------- checkpoints
    def latest_checkpoints(self) -> CheckpointPointer | None:
        return CheckpointPointer.from_json(self._latest()[1]["checkpoint"])

    def publish_checkpoint(self, epoch: int, pointer: CheckpointPointer) -> None:
        self._update(epoch, lambda record: record.update(checkpoint=pointer.to_json()))

    def checkpoint_counter(self) -> int:
        return int(self._latest()[1]["counter"])

    def reserve_ids(self, epoch: int, until: int) -> None:
        self._update(epoch, lambda record: record.update(counter=max(record["counter"], until)))

    # ---------------------------------------------------------------- job and result stores
    def job(self) -> JobRecord | None:
        try:
            return JobRecord.from_json(json.loads((self.directory / "job.json").read_bytes()))
        except FileNotFoundError:
            return None

    def put_job(self, record: JobRecord, blob: bytes) -> JobRecord:
        blob_name = f"job-{record.fingerprint[:16]}.pickle"
        blob_path = self.directory / blob_name
        if not blob_path.exists():
            temporary = self.directory / f".tmp-{uuid.uuid4().hex}"
            temporary.write_bytes(blob)
            os.replace(temporary, blob_path)
        stored = JobRecord(record.job_id, record.name, record.fingerprint, record.created_at, record.created_by,
                           blob_name)
        temporary = self.directory / f".tmp-{uuid.uuid4().hex}"
        temporary.write_text(json.dumps(stored.to_json()))
        try:
            os.link(temporary, self.directory / "job.json")
        except FileExistsError:
            existing = self.job()
            assert existing is not None
            return existing
        finally:
            temporary.unlink()
        return stored

    def result(self) -> JobResultRecord | None:
        return JobResultRecord.from_json(self._latest()[1]["result"])

    def put_result(self, epoch: int, result: JobResultRecord) -> None:
        self._update(epoch, lambda record: record.update(result=result.to_json(), leader=None))

    # ---------------------------------------------------------------- contenders
    def join(self, me: DriverInfo) -> None:
        temporary = self.contenders_dir / f".tmp-{uuid.uuid4().hex}"
        temporary.write_text(json.dumps(me.to_json()))
        os.replace(temporary, self.contenders_dir / f"{me.driver_id}.json")

    def refresh(self, me: DriverInfo) -> None:
        try:
            os.utime(self.contenders_dir / f"{me.driver_id}.json")
        except FileNotFoundError:
            self.join(me)

    def leave(self, me: DriverInfo) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.contenders_dir / f"{me.driver_id}.json").unlink()

    def contenders(self) -> list[DriverInfo]:
        found = []
        now = time.time()
        for path in self.contenders_dir.glob("*.json"):
            try:
                if now - path.stat().st_mtime > CONTENDER_STALE_S:
                    continue
                info = DriverInfo.from_json(json.loads(path.read_bytes()))
            except (OSError, ValueError):
                continue
            if info is not None:
                found.append(info)
        return sorted(found, key=lambda d: d.started_at)
