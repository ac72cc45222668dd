"""One running job per PostgreSQL state namespace, and nothing left prepared when a job ends
(the driver's side of :mod:`epochal.state.postgres.backend`).

**The claim.** Two jobs whose keyed state is in one namespace of the same tables destroy each
other's state: a job that starts without a checkpoint of the namespace clears its rows, and any
start takes its key groups' fences, after which the other job's uploads are refused and its
restore finds the markers of another history. That happens by mistake (the same job started
twice: the namespace defaults to the job's name) and by design (a job forked from a checkpoint of
a job that still runs continues in that checkpoint's namespace). So before a job is submitted its
driver claims every namespace its keyed operators will use: a session-level advisory lock
(``pg_try_advisory_lock``) that one connection of the driver holds while the job runs, restarts
included. It ends with the job, or with the driver's connection if the driver dies: no lease to
expire, nothing to clean up. A namespace another running job holds refuses the job at once, with
:class:`~epochal.errors.StateNamespaceInUseError` naming that job, before anything runs. A driver
taking over a job with high availability takes the claim of the same job id over (the deposed
leader's connection is ended; its workers are fenced anyway).

**The end.** Without MVCC every checkpoint's epoch is a prepared transaction until the checkpoint
completes, and the workers of a job that is cancelled, fails or restarts leave the epoch in flight
prepared: it holds its rows' locks and the server's oldest transaction (VACUUM keeps every dead row
behind it), until a later start of the namespace resolves it, if any ever comes. So when the job
ends the driver resolves what its workers left as a restart would (:func:`resolve_left`): each
keyed operator's key groups fenced (a worker still running is refused and its connections ended),
the transactions of checkpoints up to the job's last completed one committed, later ones rolled
back. Then it lets go of the claim. A thin driver around the database: what to commit and what
to roll back is decided by :func:`~epochal.state.postgres.epochs.resolve`, as for a restore.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
from collections.abc import Iterable
from typing import Any

from epochal.errors import StateNamespaceInUseError
from epochal.state.postgres.epochs import Session, gid_prefix
from epochal.state.postgres.restore import resolve_prepared, take_fence
from epochal.state.postgres.schema import connect, describe
from epochal.state.postgres.snapshots import POSTGRES_FORMAT
from epochal.state.postgres.store import Store

__all__ = ["JobStateClaim", "NamespaceClaim", "lock_key", "resolve_left"]

log = logging.getLogger(__name__)
#: seconds between the claim connection's checks (a connection the server ended is made again)
CHECK_S = 5.0
#: how long a takeover waits for a deposed leader's claim to go
TAKEOVER_S = 15.0


class JobStateClaim:
    """What a job's driver does for its PostgreSQL keyed state: claim the namespaces of its keyed
    operators before submitting (:meth:`acquire`), hold them while it runs, and when it ended
    resolve what its workers left prepared, then let go (:meth:`end`)."""

    def __init__(self, config: Any, uids: Iterable[str], restore: Any | None, max_parallelism: int,
                 job_id: str, job_name: str, takeover: bool = False) -> None:
        """``config``: the job's :class:`~epochal.config.StateBackendConfig` (kind postgres, its
        namespace set); ``uids``: its keyed operators; ``restore``: the
        :class:`~epochal.state.snapshot.RestoreSource` it starts from, if any (an operator
        restored from this backend's checkpoint continues in that checkpoint's namespace)."""
        self.config = config
        self.max_parallelism = max_parallelism
        self.restored = None if restore is None else int(restore.checkpoint_id)
        #: (table, namespace, uid) of every keyed operator, where its workers will keep its state
        self.operators: list[tuple[str, str, str]] = []
        for uid in uids:
            own = [h for h in (restore.keyed_handles(uid, range(max_parallelism)) if restore is not None else [])
                   if h.get("format") == POSTGRES_FORMAT]
            self.operators.append((own[0].get("table", config.table), own[0]["namespace"], uid) if own
                                  else (config.table, config.namespace, uid))
        self.claim = NamespaceClaim(config.dsn or "", [(t, n) for t, n, _ in self.operators], job_id, job_name,
                                    takeover)

    def acquire(self) -> None:
        self.claim.acquire()
        self.claim.hold()

    def release(self) -> None:
        """Let go of the claims without resolving anything (the job was never submitted)."""
        self.claim.release()

    def end(self, completed: int | None) -> None:
        """The job ended, with ``completed`` its last completed checkpoint (None: none in this run):
        resolve what its workers left prepared (non-MVCC) while it still holds the claims (a job
        that lost them, a deposed leader, leaves that to the holder), then let go of them."""
        try:
            if not self.config.mvcc and self.operators:
                if not self.claim.held():  # another job (a new leader of this one) works in the namespace now
                    log.warning("job %s ended without its claim on PostgreSQL state namespaces %s: what its workers "
                                "left prepared is left to the job that holds them", self.claim.job_name,
                                self.claim.namespaces)
                    return
                cutoff = completed if completed is not None else self.restored
                resolved = resolve_left(self.config.dsn or "", self.operators, self.max_parallelism, cutoff)
                if resolved:
                    log.info("job %s ended: resolved the prepared transactions its workers left: %s",
                             self.claim.job_name, ", ".join(resolved))
        finally:
            self.release()


def lock_key(table: str, namespace: str) -> int:
    """The advisory lock (a signed 64-bit key) of ``namespace`` in the tables named ``table``."""
    digest = hashlib.sha1(f"epochal-state\0{table}\0{namespace}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class NamespaceClaim:
    """The claims of one job on the namespaces ``namespaces`` (``(table, namespace)`` pairs) of
    the database ``dsn``; :meth:`acquire` takes them all or none."""

    def __init__(self, dsn: str, namespaces: Iterable[tuple[str, str]], job_id: str, job_name: str,
                 takeover: bool = False) -> None:
        self.dsn = dsn
        self.namespaces = sorted(set(namespaces))
        self.job_id = job_id
        self.job_name = job_name
        self.takeover = takeover
        #: what the claim connection is called in ``pg_stat_activity`` (at most 63 bytes)
        self.application_name = f"epochal-job:{job_id}:{job_name}"[:63]
        self._conn: Any = None
        self._lock = threading.Lock()
        self._released = threading.Event()

    def acquire(self) -> None:
        """Take every namespace's lock, or raise :class:`StateNamespaceInUseError` (none kept)."""
        with self._lock:
            self._take_all()

    def _take_all(self) -> None:
        """Over a new connection, every namespace's lock, or none (the connection closed)."""
        self._conn = connect(self.dsn, "the PostgreSQL state backend's namespace claim", self.application_name)
        try:
            for table, namespace in self.namespaces:
                self._take(table, namespace)
        except BaseException:
            self._close()
            raise

    def hold(self) -> None:
        """Check the claim connection every :data:`CHECK_S` seconds until :meth:`release`, and take
        the claims again over a new one if the server ended it (a restart of the server); returns at
        once (a daemon thread checks)."""

        def check() -> None:
            while not self._released.wait(CHECK_S):
                with self._lock:
                    if self._released.is_set():
                        return
                    try:
                        self._conn.execute("SELECT 1")
                        continue
                    except Exception:  # noqa: BLE001 - the connection is gone: make it again
                        self._close()
                    try:
                        self._take_all()
                    except Exception as error:  # noqa: BLE001 - logged; tried again at the next check
                        log.warning("job %s: its claim on PostgreSQL state namespaces %s was lost and cannot be "
                                    "taken again yet: %s", self.job_name, self.namespaces, error)
        threading.Thread(target=check, name=f"epochal-namespace-claim-{self.job_id}", daemon=True).start()

    def held(self) -> bool:
        """Whether this claim still holds every namespace (not when the server ended its connection
        and another job, or a new leader of this one, took a namespace meanwhile)."""
        with self._lock:
            if self._conn is None:
                return False
            try:
                held = self._conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                                          "AND pid = pg_backend_pid()").fetchone()[0]
            except Exception:  # noqa: BLE001 - a broken connection holds nothing
                return False
            return held >= len(self.namespaces)

    def release(self) -> None:
        """Let go of every claim (closing the connection ends the locks). Idempotent."""
        with self._lock:
            self._released.set()
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
            self._conn = None

    def _take(self, table: str, namespace: str) -> None:
        key = lock_key(table, namespace)
        deadline = time.monotonic() + (TAKEOVER_S if self.takeover else 0.0)
        while True:
            if self._conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                return
            holders = self._holders(key)
            mine = [pid for pid, name, _ in holders if name.startswith(f"epochal-job:{self.job_id}:")]
            if not self.takeover or not mine or time.monotonic() > deadline:
                raise self._in_use(table, namespace, holders)
            self._conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int4[]) AS pid", (mine,))
            time.sleep(0.1)

    def _holders(self, key: int) -> list[tuple[int, str, Any]]:
        unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
        return [tuple(row) for row in self._conn.execute(
            "SELECT a.pid, coalesce(a.application_name, ''), a.backend_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid = %s::int8::oid AND l.objid = %s::int8::oid AND l.objsubid = 1",
            (unsigned >> 32, unsigned & 0xFFFF_FFFF)).fetchall()]

    def _in_use(self, table: str, namespace: str, holders: list[tuple[int, str, Any]]) -> StateNamespaceInUseError:
        name = holders[0][1] if holders else ""
        parts = name.split(":", 2)
        holder_id = parts[1] if len(parts) == 3 and parts[0] == "epochal-job" else None
        who = (f"job {parts[2]!r} (id {holder_id}, PostgreSQL backend pid {holders[0][0]}, connected since "
               f"{holders[0][2]:%Y-%m-%d %H:%M:%S %Z})" if holder_id is not None
               else f"another session (application_name {name!r})" if holders else "another job")
        return StateNamespaceInUseError(
            f"the keyed state namespace '{namespace}' in {table} ({describe(self.dsn)}) is in use by {who}. Two "
            "jobs in one namespace destroy each other's state (a job started again under the same name, or "
            "restored from a checkpoint of a job that still runs): stop that job first, or give this one "
            "another namespace (set_state_backend('postgres', namespace=...)). Nothing was started.",
            namespace=namespace, table=table, holder=holder_id)


def resolve_left(dsn: str, operators: Iterable[tuple[str, str, str]], max_parallelism: int,
                 completed: int | None) -> list[str]:
    """After a job ended (its claim still held): resolve the prepared transactions its workers left
    for ``operators`` (``(table, namespace, uid)`` of each keyed operator, non-MVCC), as a restart
    from checkpoint ``completed`` would (those of checkpoints up to it committed, later ones rolled
    back; None: the job has no checkpoint of this backend, all rolled back), every key group
    fenced first, so that a worker still running can prepare nothing more and its connections
    are ended. Returns the transactions resolved."""
    resolved: list[str] = []
    groups = range(max_parallelism)
    for table, namespace, uid in operators:
        prefix = gid_prefix(table, namespace, uid)
        fence = secrets.randbits(62) + 1
        store = Store(dsn, table, False, f"PostgreSQL state of {uid}", Session(prefix, 0, max_parallelism, fence))
        try:
            if store.find(namespace, uid) is None:
                continue  # no worker of it ever started
            resolved += take_fence(store, prefix, groups, fence, completed)
            commit, rollback = resolve_prepared(store, prefix, groups, completed)
            resolved += commit + rollback
        finally:
            store.close()
    return resolved
