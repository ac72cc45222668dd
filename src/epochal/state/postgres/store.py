"""The SQL of the PostgreSQL keyed-state backend (psycopg 3): its tables, and every statement
:mod:`epochal.state.postgres.backend` runs, in batches (arrays bound as binary parameters and expanded
with ``unnest``: one round trip per record batch, per checkpoint chunk, never per record).

Tables, named after the backend's ``table`` option ``T`` (created when a job is submitted,
:func:`epochal.state.postgres.schema.ensure_schema`)::

    T_operators (op serial, ns text, uid text, horizon)  one id per (namespace, operator uid); MVCC:
                                                         the oldest checkpoint of the operator whose
                                                         versions garbage collection keeps
    T_states    (state serial, op int, name text)        one id per state name of an operator
    T           (op, kg, key, state) -> value            non-MVCC: the state of the last completed
                                                         checkpoint (value: the pickled value)
    T_epochs    (op, kg) -> checkpoint, fence            non-MVCC: the checkpoint whose state each
                                                         key group's rows hold; both variants: the
                                                         fencing token of the subtask that owns the
                                                         key group now (an upload of an earlier
                                                         attempt's subtask is refused)
    T_versions  (op, kg, key, state, epoch) -> value     MVCC: every version, value NULL: removed
                                                         (indexed by (op, epoch) too: a restore
                                                         deletes a failed attempt's epochs
                                                         without reading the others)
    T_committed (ns) -> checkpoint                       MVCC: the last completed checkpoint of the
                                                         namespace (one row)

A row is keyed by (operator, key group, key, state): the operator and state ids stand for the
operator's uid and the state's name in a namespace, ``kg`` is the key's key group and ``key`` the
pickled key (:class:`epochal.state.canonical.KeyEncoder`, as RocksDB stores it). Every row of a
key sits next to the others of the key (one index descent reads all its states), and a key-group
range of an operator is one index range: a restore at another parallelism reads another range.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from epochal.errors import StateBackendError
from epochal.state.postgres.epochs import (
    Entry,
    EpochTransactionId,
    Session,
    parse_epoch_transaction_id,
    parse_session,
)
from epochal.state.postgres.schema import connect, describe, first_line, names, psycopg_sql

#: Rows per statement when an epoch or a restore is written.
WRITE_CHUNK = 20_000
#: Keys per statement when keys are read.
READ_CHUNK = 8192


class FencedUploadError(StateBackendError):
    """An upload of a subtask whose key groups a later attempt's subtask restored since: refused
    by the fence on its key groups, nothing written (that subtask's worker is a zombie of a failed
    attempt). Not the HA store's refusal of a deposed leader (:class:`epochal.control.ha.services.Fenced`)."""


class Store:
    """The statements of one keyed operator subtask's backend over its own connections: ``read``
    for the processing thread (reads, commits, restores), ``write`` for the uploader thread (an
    epoch's transaction). Errors become :class:`StateBackendError`."""

    def __init__(self, dsn: str, table: str, mvcc: bool, what: str, session: Session | None = None) -> None:
        self.dsn = dsn
        self.table = table
        self.mvcc = mvcc
        self.what = what
        #: the name of both connections in ``pg_stat_activity`` (:meth:`end_earlier_sessions`)
        self.session = session
        self.t = names(table)
        self.read = connect(dsn, what, self._name)
        self._write: Any = None
        self.op = 0

    @property
    def write(self) -> Any:
        if self._write is None:
            self._write = connect(self.dsn, self.what, self._name)
        return self._write

    @property
    def _name(self) -> str | None:
        return None if self.session is None else str(self.session)

    def close(self) -> None:
        for conn in (self.read, self._write):
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass

    def _q(self, template: str, **extra: Any) -> Any:
        return psycopg_sql().SQL(template).format(**self.t, **extra)

    def _run(self, conn: Any, statement: Any, params: Any = None, *, fetch: bool = False,
             binary: bool = False) -> list[Any]:
        import psycopg

        try:
            cursor = conn.execute(statement, params, binary=binary)
            return cursor.fetchall() if fetch else []
        except psycopg.Error as exc:
            raise StateBackendError(f"{self.what}: PostgreSQL ({describe(self.dsn)}): {first_line(exc)}") from exc

    # ------------------------------------------------------------------ ids
    def register(self, namespace: str, uid: str) -> int:
        """The operator id of ``uid`` in ``namespace`` (created if new); sets :attr:`op`."""
        self._run(self.read, self._q("INSERT INTO {operators} (ns, uid) VALUES (%s, %s) ON CONFLICT DO NOTHING"),
                  (namespace, uid))
        self.op = self._run(self.read, self._q("SELECT op FROM {operators} WHERE ns = %s AND uid = %s"),
                            (namespace, uid), fetch=True)[0][0]
        return self.op

    def find(self, namespace: str, uid: str) -> int | None:
        """The operator id of ``uid`` in ``namespace`` if it has one (sets :attr:`op`), else None."""
        rows = self._run(self.read, self._q("SELECT op FROM {operators} WHERE ns = %s AND uid = %s"),
                         (namespace, uid), fetch=True)
        if not rows:
            return None
        self.op = rows[0][0]
        return self.op

    def state_id(self, name: str) -> int:
        self._run(self.read, self._q("INSERT INTO {states} (op, name) VALUES (%s, %s) ON CONFLICT DO NOTHING"),
                  (self.op, name))
        return self._run(self.read, self._q("SELECT state FROM {states} WHERE op = %s AND name = %s"),
                         (self.op, name), fetch=True)[0][0]

    def state_names(self, conn: Any = None) -> dict[int, str]:
        rows = self._run(conn or self.read, self._q("SELECT state, name FROM {states} WHERE op = %s"),
                         (self.op,), fetch=True)
        return {state: name for state, name in rows}

    # ------------------------------------------------------------------ reads
    def fetch(self, kgs: list[int], keys: list[bytes], committed: int) -> list[tuple[int, bytes, int, bytes]]:
        """``(kg, key, state, value)`` of every state of the given keys (``kgs[i]`` is ``keys[i]``'s
        key group); of the MVCC variant each key's newest version up to checkpoint ``committed``,
        removed ones left out."""
        out: list[tuple[int, bytes, int, bytes]] = []
        for start in range(0, len(keys), READ_CHUNK):
            part_kgs, part_keys = kgs[start:start + READ_CHUNK], keys[start:start + READ_CHUNK]
            if self.mvcc:
                rows = self._run(self.read, self._q(
                    "SELECT DISTINCT ON (s.kg, s.key, s.state) s.kg, s.key, s.state, s.value "
                    "FROM unnest(%b::int4[], %b::bytea[]) AS b(kg, key) JOIN {versions} s "
                    "ON s.op = %b AND s.kg = b.kg AND s.key = b.key AND s.epoch <= %b "
                    "ORDER BY s.kg, s.key, s.state, s.epoch DESC"),
                    (part_kgs, part_keys, self.op, committed), fetch=True, binary=True)
                out.extend(r for r in rows if r[3] is not None)
            else:
                out.extend(self._run(self.read, self._q(
                    "SELECT s.kg, s.key, s.state, s.value FROM unnest(%b::int4[], %b::bytea[]) AS b(kg, key) "
                    "JOIN {rows} s ON s.op = %b AND s.kg = b.kg AND s.key = b.key"),
                    (part_kgs, part_keys, self.op), fetch=True, binary=True))
        return out

    def scan(self, groups: range, committed: int, conn: Any = None) -> Iterator[tuple[int, bytes, int, bytes]]:
        """``(kg, key, state, value)`` of every row of the key groups ``groups``, in key-group
        order (MVCC: descending), streamed by a server-side cursor when ``conn`` is given (a
        connection in a transaction, for large ranges)."""
        import psycopg

        if self.mvcc:
            query = self._q("SELECT DISTINCT ON (kg, key, state) kg, key, state, value FROM {versions} "
                            "WHERE op = %b AND kg >= %b AND kg < %b AND epoch <= %b "
                            "ORDER BY kg DESC, key DESC, state DESC, epoch DESC")  # a backward index scan
            params: tuple[Any, ...] = (self.op, groups.start, groups.stop, committed)
        else:
            query = self._q("SELECT kg, key, state, value FROM {rows} WHERE op = %b AND kg >= %b AND kg < %b "
                            "ORDER BY kg")
            params = (self.op, groups.start, groups.stop)
        if conn is None:
            for row in self._run(self.read, query, params, fetch=True, binary=True):
                if row[3] is not None:
                    yield row
            return
        try:
            with conn.cursor(name="epochal_state_scan", binary=True) as cursor:
                cursor.itersize = 20_000
                cursor.execute(query, params)
                for row in cursor:
                    if row[3] is not None:
                        yield row
        except psycopg.Error as exc:
            raise StateBackendError(f"{self.what}: PostgreSQL ({describe(self.dsn)}): {first_line(exc)}") from exc

    # ------------------------------------------------------------------ writes
    def write_epoch(self, entries: Iterable[Entry], checkpoint_id: int, groups: range, gid: str | None,
                    fence: int) -> tuple[int, int]:
        """Write ``entries`` (an epoch's changes, in key-group order: :func:`epochal.state.postgres.spill.merge`,
        streamed ``WRITE_CHUNK`` at a time) in one transaction: non-MVCC, upserts and deletes, the
        key groups' marker set to ``checkpoint_id``, then ``PREPARE TRANSACTION gid``; MVCC,
        versions at epoch ``checkpoint_id``, committed. The transaction's first statement locks the
        key groups' markers and checks that ``fence`` still owns them all (:meth:`take_fence`),
        else it raises :class:`FencedUploadError`: a later attempt's subtask restored them. Returns (rows,
        bytes). On failure the transaction is rolled back (a lost connection rolls it back in the
        server) and the error raised."""
        conn = self.write
        rows = written = 0
        try:
            self._run(conn, "BEGIN")
            owned = self._run(conn, self._q(
                "UPDATE {epochs} SET checkpoint = CASE WHEN %s THEN checkpoint ELSE %s END "
                "WHERE op = %s AND kg >= %s AND kg < %s AND fence = %s RETURNING kg"),
                (self.mvcc, checkpoint_id, self.op, groups.start, groups.stop, fence), fetch=True)
            if len(owned) != len(groups):
                raise FencedUploadError(f"{self.what}: checkpoint {checkpoint_id} is not written: key groups "
                             f"{groups.start}-{groups.stop - 1} were restored by a later attempt (this subtask's "
                             "fencing token no longer owns them): a worker of a failed attempt still running")
            stream = iter(entries)
            while chunk := list(itertools.islice(stream, WRITE_CHUNK)):
                rows += len(chunk)
                written += sum(len(e[1]) + len(e[3] or b"") for e in chunk)
                self._write_chunk(conn, chunk, checkpoint_id)
            if self.mvcc:
                self._run(conn, "COMMIT")
            else:
                self._run(conn, psycopg_sql().SQL("PREPARE TRANSACTION {}").format(psycopg_sql().Literal(gid)))
            return rows, written
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except Exception:  # the connection is gone, and with it the transaction
                pass
            raise

    def _write_chunk(self, conn: Any, chunk: list[Entry], checkpoint_id: int) -> None:
        """One chunk of an epoch's entries: MVCC, versions of ``checkpoint_id`` (removals as NULL);
        else the removed rows deleted and the others upserted."""
        if self.mvcc:
            self._run(conn, self._q(
                "INSERT INTO {versions} (op, kg, key, state, epoch, value) "
                "SELECT %b, b.kg, b.key, b.state, %b, b.value "
                "FROM unnest(%b::int4[], %b::bytea[], %b::int4[], %b::bytea[]) AS b(kg, key, state, value) "
                "ON CONFLICT (op, kg, key, state, epoch) DO UPDATE SET value = EXCLUDED.value"),
                (self.op, checkpoint_id, [e[0] for e in chunk], [e[1] for e in chunk], [e[2] for e in chunk],
                 [e[3] for e in chunk]))
            return
        dels = [e for e in chunk if e[3] is None]
        puts = [e for e in chunk if e[3] is not None] if dels else chunk
        if dels:
            self._run(conn, self._q(
                "DELETE FROM {rows} s USING unnest(%b::int4[], %b::bytea[], %b::int4[]) AS b(kg, key, state) "
                "WHERE s.op = %b AND s.kg = b.kg AND s.key = b.key AND s.state = b.state"),
                ([e[0] for e in dels], [e[1] for e in dels], [e[2] for e in dels], self.op))
        if puts:
            self._run(conn, self._q(
                "INSERT INTO {rows} (op, kg, key, state, value) SELECT %b, b.kg, b.key, b.state, b.value "
                "FROM unnest(%b::int4[], %b::bytea[], %b::int4[], %b::bytea[]) AS b(kg, key, state, value) "
                "ON CONFLICT (op, kg, key, state) DO UPDATE SET value = EXCLUDED.value"),
                (self.op, [e[0] for e in puts], [e[1] for e in puts], [e[2] for e in puts], [e[3] for e in puts]))

    def write_restored(self, rows: Sequence[tuple[int, bytes, int, bytes]], epoch: int) -> None:
        """Load restored ``(kg, key, state, value)`` rows (autocommit: a restore that fails is
        redone from the start by the next attempt); MVCC: as versions of ``epoch``."""
        for start in range(0, len(rows), WRITE_CHUNK):
            part = rows[start:start + WRITE_CHUNK]
            arrays = ([r[0] for r in part], [r[1] for r in part], [r[2] for r in part], [r[3] for r in part])
            if self.mvcc:
                self._run(self.read, self._q(
                    "INSERT INTO {versions} (op, kg, key, state, epoch, value) SELECT %b, b.kg, b.key, b.state, %b, "
                    "b.value FROM unnest(%b::int4[], %b::bytea[], %b::int4[], %b::bytea[]) AS b(kg, key, state, value) "
                    "ON CONFLICT (op, kg, key, state, epoch) DO UPDATE SET value = EXCLUDED.value"),
                    (self.op, epoch, *arrays))
            else:
                self._run(self.read, self._q(
                    "INSERT INTO {rows} (op, kg, key, state, value) SELECT %b, b.kg, b.key, b.state, b.value "
                    "FROM unnest(%b::int4[], %b::bytea[], %b::int4[], %b::bytea[]) AS b(kg, key, state, value) "
                    "ON CONFLICT (op, kg, key, state) DO UPDATE SET value = EXCLUDED.value"),
                    (self.op, *arrays))

    # ------------------------------------------------------------------ two-phase commit
    def prepared(self, prefix: str) -> list[EpochTransactionId]:
        rows = self._run(self.read, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                                    "AND starts_with(gid, %s)", (prefix + ":",), fetch=True)
        found = [parse_epoch_transaction_id(r[0], prefix) for r in rows]
        return [g for g in found if g is not None]

    def finish_prepared(self, gid: str, commit: bool, conn: Any = None) -> bool:
        """``COMMIT PREPARED`` (or ``ROLLBACK PREPARED``) ``gid``; False if it no longer exists
        (another subtask resolved it first). A transaction another session is resolving right now
        ("busy") is waited for."""
        import psycopg

        sql = psycopg_sql()
        statement = sql.SQL("COMMIT PREPARED {}" if commit else "ROLLBACK PREPARED {}").format(sql.Literal(gid))
        deadline = time.monotonic() + 60
        while True:
            try:
                (conn or self.read).execute(statement)
                return True
            except psycopg.errors.UndefinedObject:
                return False
            except psycopg.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise StateBackendError(f"{self.what}: prepared transaction {gid} stayed busy for 60 s") from None
                time.sleep(0.05)
            except psycopg.Error as exc:
                raise StateBackendError(f"{self.what}: cannot {'commit' if commit else 'roll back'} prepared "
                                        f"transaction {gid}: {first_line(exc)}") from exc

    # ------------------------------------------------------------------ starting and restoring
    def clear(self, groups: range) -> None:
        """Remove every row (and marker) of this operator in ``groups``: a subtask that starts
        without a checkpoint of this backend starts empty."""
        if self.mvcc:
            self._run(self.read, self._q("DELETE FROM {versions} WHERE op = %s AND kg >= %s AND kg < %s"),
                      (self.op, groups.start, groups.stop))
        else:
            self._run(self.read, self._q("DELETE FROM {rows} WHERE op = %s AND kg >= %s AND kg < %s"),
                      (self.op, groups.start, groups.stop))
            self._run(self.read, self._q("UPDATE {epochs} SET checkpoint = 0 WHERE op = %s AND kg >= %s AND kg < %s"),
                      (self.op, groups.start, groups.stop))

    def take_fence(self, groups: range, fence: int, wait_s: float = 0.2) -> bool:
        """Make ``fence`` (a subtask's fencing token, new at each start) the owner of ``groups``
        (their marker rows are created if missing, checkpoint 0). From then on an upload with
        another token is refused (:meth:`write_epoch`). False when an upload of an earlier attempt
        held the markers for ``wait_s`` (it is writing, or prepared and keeps their locks): the
        caller resolves its prepared transactions and tries again."""
        import psycopg

        try:
            with self.read.transaction():
                self.read.execute(psycopg_sql().SQL("SET LOCAL lock_timeout = {}").format(
                    psycopg_sql().Literal(f"{max(1, int(wait_s * 1000))}ms")))
                self.read.execute(self._q(
                    "INSERT INTO {epochs} (op, kg, checkpoint, fence) SELECT %s, g, 0, %s "
                    "FROM generate_series(%s::int4, %s::int4) AS g "
                    "ON CONFLICT (op, kg) DO UPDATE SET fence = EXCLUDED.fence"),
                    (self.op, fence, groups.start, groups.stop - 1))
            return True
        except psycopg.errors.LockNotAvailable:
            return False
        except psycopg.Error as exc:
            raise StateBackendError(f"{self.what}: PostgreSQL ({describe(self.dsn)}): {first_line(exc)}") from exc

    def end_earlier_sessions(self) -> list[int]:
        """End (``pg_terminate_backend``) the connections of every earlier start of key groups
        this start (:attr:`session`) takes: a zombie's upload that holds their markers is rolled
        back at once and its locks released, instead of being waited for. Returns the server
        processes ended; none where the role may not signal them (then the caller waits)."""
        mine = self.session
        if mine is None:
            return []
        rows = self._run(self.read, "SELECT pid, application_name FROM pg_stat_activity WHERE datname = "
                                    "current_database() AND starts_with(application_name, %s) AND pid <> "
                                    "pg_backend_pid()", (mine.prefix + ":",), fetch=True)
        earlier = [pid for pid, name in rows
                   if (other := parse_session(name, mine.prefix)) is not None and other.earlier_than(mine)]
        if not earlier:
            return []
        ended = self._run(self.read, "SELECT pid FROM unnest(%s::int4[]) AS pid WHERE pg_terminate_backend(pid)",
                          (earlier,), fetch=True)
        return [pid for (pid,) in ended]

    def set_markers(self, groups: range, checkpoint_id: int) -> None:
        self._run(self.read, self._q(
            "INSERT INTO {epochs} (op, kg, checkpoint) SELECT %s, g, %s FROM generate_series(%s::int4, %s::int4) AS g "
            "ON CONFLICT (op, kg) DO UPDATE SET checkpoint = EXCLUDED.checkpoint"),
            (self.op, checkpoint_id, groups.start, groups.stop - 1))

    def markers(self, groups: range) -> dict[int, int]:
        rows = self._run(self.read, self._q("SELECT kg, checkpoint FROM {epochs} WHERE op = %s AND kg >= %s "
                                            "AND kg < %s"), (self.op, groups.start, groups.stop), fetch=True)
        return {kg: checkpoint for kg, checkpoint in rows}

    # ------------------------------------------------------------------ MVCC
    def drop_after(self, groups: range, checkpoint_id: int) -> int:
        """MVCC restore: the versions of epochs after ``checkpoint_id`` in ``groups`` (written by
        attempts that never completed them) are deleted. Returns how many."""
        rows = self._run(self.read, self._q("WITH gone AS (DELETE FROM {versions} WHERE op = %s AND kg >= %s AND "
                                            "kg < %s AND epoch > %s RETURNING 1) SELECT count(*) FROM gone"),
                         (self.op, groups.start, groups.stop, checkpoint_id), fetch=True)
        return int(rows[0][0])

    def committed_row(self, namespace: str) -> int | None:
        rows = self._run(self.read, self._q("SELECT checkpoint FROM {committed} WHERE ns = %s"),
                         (namespace,), fetch=True)
        return int(rows[0][0]) if rows else None

    def horizon(self) -> int:
        """MVCC: the oldest checkpoint of this operator whose versions are all kept."""
        rows = self._run(self.read, self._q("SELECT horizon FROM {operators} WHERE op = %s"), (self.op,), fetch=True)
        return int(rows[0][0]) if rows else 0

    def set_horizon(self, checkpoint_id: int) -> None:
        """MVCC: a start without a checkpoint of this backend begins a new history of the operator."""
        self._run(self.read, self._q("UPDATE {operators} SET horizon = %s WHERE op = %s"), (checkpoint_id, self.op))

    def set_committed(self, namespace: str, checkpoint_id: int, forward_only: bool) -> None:
        """The namespace's committed epoch becomes ``checkpoint_id`` (``forward_only``: unless it
        is newer already): the one row a completed checkpoint updates."""
        if forward_only:
            self._run(self.read, self._q(
                "INSERT INTO {committed} (ns, checkpoint) VALUES (%s, %s) ON CONFLICT (ns) DO UPDATE "
                "SET checkpoint = greatest({committed}.checkpoint, EXCLUDED.checkpoint)"), (namespace, checkpoint_id))
        else:
            self._run(self.read, self._q(
                "INSERT INTO {committed} (ns, checkpoint) VALUES (%s, %s) ON CONFLICT (ns) DO UPDATE "
                "SET checkpoint = EXCLUDED.checkpoint"), (namespace, checkpoint_id))

    def collect(self, entries: list[tuple[int, bytes, int, bool]], epoch: int, horizon: int) -> int:
        """MVCC garbage collection, on the uploader's connection: of each ``(kg, key, state,
        removed)`` last written at ``epoch`` (no retained checkpoint is older than ``epoch``), the
        versions before ``epoch`` are deleted, and the version of ``epoch`` too where it records a
        removal; the operator's horizon moves to ``horizon``. Returns the versions deleted."""
        conn = self.write
        deleted = 0
        for start in range(0, len(entries), WRITE_CHUNK):
            part = entries[start:start + WRITE_CHUNK]
            rows = self._run(conn, self._q(
                "WITH gone AS (DELETE FROM {versions} s USING unnest(%b::int4[], %b::bytea[], %b::int4[], %b::bool[]) "
                "AS b(kg, key, state, removed) WHERE s.op = %b AND s.kg = b.kg AND s.key = b.key AND s.state = b.state "
                "AND (s.epoch < %b OR (b.removed AND s.epoch = %b)) RETURNING 1) SELECT count(*) FROM gone"),
                ([e[0] for e in part], [e[1] for e in part], [e[2] for e in part], [e[3] for e in part],
                 self.op, epoch, epoch), fetch=True)
            deleted += int(rows[0][0])
        self._run(conn, self._q("UPDATE {operators} SET horizon = greatest(horizon, %s) WHERE op = %s"),
                  (horizon, self.op))
        return deleted
