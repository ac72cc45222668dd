"""HA services on ZooKeeper (the paper's choice, papers/001 §4.5), through ``kazoo``.

One job's znodes under ``<root>/<job id>/``:

- ``epoch``: the fencing token, as text; its version equals it (every claim sets it once, with
  the version it read), so every fenced write is a ZooKeeper transaction ``check(epoch, version
  = my epoch)`` + the write: atomic, refused once another leader claimed.
- ``leader``: an *ephemeral* node of the leader's session (its epoch and driver). ZooKeeper
  deletes it when the session expires (the leader's driver died, or paused past the session
  timeout), which is how a standby learns the lease is lost: leases do not expire by silence
  here. A claim is the transaction ``create(leader, ephemeral)`` + ``set(epoch, e + 1, version=e)``.
- ``checkpoint`` (the completed checkpoints), ``counter`` (the checkpoint id counter), ``job``
  and ``job-blob`` (the job store; the pickled plan only while under ZooKeeper's 1 MB limit),
  ``result`` (the job result store), ``contenders/<driver id>`` (ephemeral).

A renewal is a read of ``leader`` that finds this session its owner: a round trip proving the
session alive now (kazoo's own pings keep it alive between).
"""

from __future__ import annotations

import json
import logging
import threading
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

#: The pickled plan is kept in ZooKeeper only below this size (its znode limit is 1 MB).
BLOB_LIMIT = 900_000


def parse_uri(uri: str) -> tuple[str, str]:
    """``zookeeper://h1:2181,h2:2181/root`` -> (``h1:2181,h2:2181``, ``/root``)."""
    rest = uri.split("://", 1)[1]
    hosts, _, root = rest.partition("/")
    if not hosts:
        raise HighAvailabilityError(f"{uri} names no ZooKeeper server: zookeeper://host:2181/root")
    return hosts, "/" + root.strip("/") if root.strip("/") else "/epochal"


class ZooKeeperHaServices(HaServices):
    """One job's HA services in a ZooKeeper ensemble (see the module docstring)."""

    expires_by_silence: ClassVar[bool] = False

    def __init__(self, uri: str, job_id: str, *, session_timeout: float = 5.0, connect_timeout: float = 10.0) -> None:
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        super().__init__(uri, job_id)
        hosts, root = parse_uri(uri)
        self.path = f"{root}/{job_id}"
        self.client = KazooClient(hosts=hosts, timeout=session_timeout,
                                  connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
                                  logger=logging.getLogger("epochal.kazoo"))
        try:
            self.client.start(timeout=connect_timeout)
        except KazooTimeoutError:
            self.client.stop()
            self.client.close()
            raise HighAvailabilityError(f"ZooKeeper at {hosts} did not answer within {connect_timeout:g} s "
                                        f"({uri}): is it running and reachable from this driver?") from None
        self._lock = threading.Lock()
        for name, data in (("epoch", b"0"), ("counter", b"1"), ("checkpoint", b""), ("contenders", b"")):
            self.client.ensure_path(self.path)
            if self.client.exists(f"{self.path}/{name}") is None:
                try:
                    self.client.create(f"{self.path}/{name}", data)
                except self._errors().NodeExistsError:
                    pass

    @staticmethod
    def _errors() -> Any:
        from kazoo import exceptions

        return exceptions

    def _node(self, name: str) -> str:
        return f"{self.path}/{name}"

    def _fenced(self, epoch: int, *writes: Any) -> None:
        """Commit ``writes`` (``(op, args, kwargs)``) in one transaction with ``check(epoch, epoch)``."""
        transaction = self.client.transaction()
        transaction.check(self._node("epoch"), epoch)
        for op, args, kwargs in writes:
            getattr(transaction, op)(*args, **kwargs)
        results = transaction.commit()
        errors = self._errors()
        if results and isinstance(results[0], Exception):
            if isinstance(results[0], errors.BadVersionError | errors.NoNodeError):
                current = self.client.get(self._node("epoch"))[0].decode()
                raise Fenced(f"the leader epoch is {current}, not {epoch}")
            raise results[0]
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, errors.RolledBackError):
                raise result

    # ---------------------------------------------------------------- election
    def observe(self) -> Observation:
        data, stat = self.client.get(self._node("epoch"))
        leader = None
        try:
            leader = DriverInfo.from_json(json.loads(self.client.get(self._node("leader"))[0])["driver"])
        except self._errors().NoNodeError:
            pass
        finished = self.client.exists(self._node("result")) is not None
        return Observation(stat.version, int(data.decode()), leader, finished)

    def claim(self, seen: Observation, me: DriverInfo) -> int | None:
        epoch = seen.epoch + 1
        transaction = self.client.transaction()
        transaction.create(self._node("leader"), json.dumps({"epoch": epoch, "driver": me.to_json()}).encode(),
                           ephemeral=True)
        transaction.set_data(self._node("epoch"), str(epoch).encode(), version=seen.version)
        results = transaction.commit()
        if any(isinstance(r, Exception) for r in results):
            return None
        return epoch

    def renew(self, epoch: int) -> bool:
        try:
            data, stat = self.client.get(self._node("leader"))
        except self._errors().NoNodeError:
            return False
        return stat.ephemeralOwner == self.client.client_id[0] and json.loads(data)["epoch"] == epoch

    def release(self, epoch: int) -> None:
        try:
            self._fenced(epoch, ("delete", (self._node("leader"),), {}))
        except (Fenced, self._errors().NoNodeError):
            pass

    def check(self, epoch: int) -> None:
        data, _ = self.client.get(self._node("epoch"))
        if int(data.decode()) != epoch:
            raise Fenced(f"the leader epoch is {data.decode()}, not {epoch}")

    # ---------------------------------------------------------------- checkpoints
    def latest_checkpoints(self) -> CheckpointPointer | None:
        data = self.client.get(self._node("checkpoint"))[0]
        return CheckpointPointer.from_json(json.loads(data)) if data else None

    def publish_checkpoint(self, epoch: int, pointer: CheckpointPointer) -> None:
        self._fenced(epoch, ("set_data", (self._node("checkpoint"), json.dumps(pointer.to_json()).encode()), {}))

    def checkpoint_counter(self) -> int:
        return int(self.client.get(self._node("counter"))[0].decode())

    def reserve_ids(self, epoch: int, until: int) -> None:
        with self._lock:  # one writer of the counter per driver; another leader's epoch fences us
            data, stat = self.client.get(self._node("counter"))
            value = max(int(data.decode()), until)
            self._fenced(epoch, ("set_data", (self._node("counter"), str(value).encode()), {"version": stat.version}))

    # ---------------------------------------------------------------- job and result stores
    def job(self) -> JobRecord | None:
        try:
            return JobRecord.from_json(json.loads(self.client.get(self._node("job"))[0]))
        except self._errors().NoNodeError:
            return None

    def put_job(self, record: JobRecord, blob: bytes) -> JobRecord:
        stored = JobRecord(record.job_id, record.name, record.fingerprint, record.created_at, record.created_by,
                           "job-blob" if len(blob) <= BLOB_LIMIT else "")
        transaction = self.client.transaction()
        transaction.create(self._node("job"), json.dumps(stored.to_json()).encode())
        if stored.job_file:
            transaction.create(self._node("job-blob"), blob)
        if any(isinstance(r, Exception) for r in transaction.commit()):
            existing = self.job()
            assert existing is not None
            return existing
        return stored

    def result(self) -> JobResultRecord | None:
        try:
            return JobResultRecord.from_json(json.loads(self.client.get(self._node("result"))[0]))
        except self._errors().NoNodeError:
            return None

    def put_result(self, epoch: int, result: JobResultRecord) -> None:
        writes: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
            ("create", (self._node("result"), json.dumps(result.to_json()).encode()), {})]
        if self.client.exists(self._node("leader")) is not None:
            writes.append(("delete", (self._node("leader"),), {}))
        self._fenced(epoch, *writes)

    # ---------------------------------------------------------------- contenders
    def join(self, me: DriverInfo) -> None:
        try:
            self.client.create(self._node(f"contenders/{me.driver_id}"), json.dumps(me.to_json()).encode(),
                               ephemeral=True)
        except self._errors().NodeExistsError:
            pass

    def leave(self, me: DriverInfo) -> None:
        try:
            self.client.delete(self._node(f"contenders/{me.driver_id}"))
        except Exception:  # noqa: BLE001 - gone with the session anyway
            pass

    def contenders(self) -> list[DriverInfo]:
        found = []
        for name in self.client.get_children(self._node("contenders")):
            try:
                info = DriverInfo.from_json(json.loads(self.client.get(self._node(f"contenders/{name}"))[0]))
            except self._errors().NoNodeError:
                continue
            if info is not None:
                found.append(info)
        return sorted(found, key=lambda d: d.started_at)

    def close(self) -> None:
        try:
            self.client.stop()
            self.client.close()
        except Exception:  # noqa: BLE001 - closing what may already be lost
            pass
