"""The PostgreSQL sink (psycopg 3): ``append`` exactly once by two-phase commit, ``upsert`` by key.

``append``: each subtask copies the records of a checkpoint epoch into its table inside one
transaction (``COPY``, in batches). On the barrier of checkpoint *n* the transaction is prepared,
``PREPARE TRANSACTION '<gid>'``: durable on the server, invisible to readers, surviving a crash of
the worker and of the server. When *n* completes it is committed, ``COMMIT PREPARED``. The global
transaction id names the sink (``transaction_prefix``), the job run, the attempt, the subtask and
the checkpoint. A restored attempt commits the prepared transactions of the restored checkpoint
(their ids are in its state: a repeated commit finds the transaction committed, which
``pg_xact_status`` confirms) and, when a subtask opens, rolls back every other prepared
transaction of this sink that it owns (subtask ``s % parallelism``): those of checkpoints after
the restored one, or all of them when the job starts from scratch. Two-phase commit needs the
server setting ``max_prepared_transactions`` above 0 (at least the sink's parallelism, twice that
with concurrent checkpoints; it takes a server restart).

``upsert``: ``INSERT ... ON CONFLICT (key) DO UPDATE`` in multi-row statements, committed at every
barrier. Writing a key's row again with the same value changes nothing, so a replay after a
restore is harmless: the table ends exactly as the oracle (each key's last value), while a reader
may see a key's value step back to an earlier one until the replay catches up (idempotent,
at-least-once writes). Key the stream by the upsert key, so one subtask writes each key in order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from epochal.connectors.base import AT_LEAST_ONCE, EXACTLY_ONCE, Sink, SinkContext, SinkWriter, TransactionalSinkWriter
from epochal.connectors.postgres import sql as pg
from epochal.errors import PlanError, SinkError
from epochal.postgres_client import first_line, table_identifier

__all__ = ["PostgresSink"]

_log = logging.getLogger("epochal")
#: Bind parameters per multi-row statement (PostgreSQL allows 65535).
_MAX_PARAMETERS = 30_000


def _sql(template: str, gid: str) -> Any:
    """A two-phase-commit statement naming the global transaction id ``gid`` as a literal."""
    from psycopg import sql

    return sql.SQL(template).format(sql.Literal(gid))


class _Writer:
    """What both modes share: the connection, the columns, records to rows, batched writes."""

    def __init__(self, sink: PostgresSink, context: SinkContext) -> None:
        self.sink = sink
        self.what = f"PostgresSink({sink.table})"
        self.conn = pg.connect(sink.conninfo, sink.connect_timeout, self.what)
        self.columns: list[str] | None = list(sink.columns) if sink.columns else None
        self.buffer: list[tuple[Any, ...]] = []
        self.records: list[Any] = []  # the buffered records as given, to name a rejected one

    def _rows(self, records: list[Any]) -> list[tuple[Any, ...]]:
        if self.columns is None:
            first = records[0]
            if not isinstance(first, dict):
                raise SinkError(f"{self.what}: records are {type(first).__name__}, not dicts: give the sink columns")
            self.columns = list(first)
            self._check_columns(self.columns)
        columns = self.columns
        rows = []
        for record in records:
            if isinstance(record, dict):
                if len(record) != len(columns) or any(c not in record for c in columns):
                    odd = [c for c in columns if c not in record] or [k for k in record if k not in columns]
                    raise SinkError(f"{self.what}: record {record!r} does not have the columns {columns} "
                                    f"(column {odd[0]!r})")
                rows.append(tuple(record[c] for c in columns))
            elif isinstance(record, (tuple, list)) and len(record) == len(columns):
                rows.append(tuple(record))
            else:
                raise SinkError(f"{self.what}: record {record!r} is not a dict or a tuple of the {len(columns)} "
                                f"columns {columns}")
        return rows

    def _check_columns(self, columns: list[str]) -> None:
        info = pg.table_info(self.conn, self.sink.table)
        if info is None:
            raise SinkError(f"{self.what}: table {self.sink.table} does not exist")
        missing = [c for c in columns if c not in info.columns]
        if missing:
            raise SinkError(f"{self.what}: column {missing[0]!r} does not exist in table {self.sink.table} "
                            f"(its columns: {', '.join(info.columns)})")

    def write_batch(self, records: list[Any]) -> None:
        if not records:
            return
        self.buffer.extend(self._rows(records))
        self.records.extend(records)
        if len(self.buffer) >= self.sink.batch_size:
            self._flush_buffer()

    def _flush_buffer(self) -> None:
        raise NotImplementedError

    def _copy(self) -> None:
        """COPY the buffered rows into the table (inside the caller's transaction)."""
        import psycopg
        from psycopg import sql

        if not self.buffer:
            return
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            table_identifier(self.sink.table), sql.SQL(", ").join(map(sql.Identifier, self.columns or [])))
        try:
            with self.conn.cursor() as cur, cur.copy(statement) as copy:
                for row in self.buffer:
                    copy.write_row(row)
        except psycopg.DatabaseError as exc:
            if exc.diag.sqlstate is None or isinstance(exc, psycopg.OperationalError):
                raise SinkError(f"{self.what}: lost the connection to PostgreSQL: {first_line(exc)}") from exc
            raise pg.rejected(exc, self.sink.table, self.records, self.what) from exc
        self.buffer, self.records = [], []

    def _execute(self, statement: Any, params: Any = None, conn: Any = None) -> None:
        import psycopg

        try:
            with (conn or self.conn).cursor() as cur:
                cur.execute(statement, params)
        except psycopg.OperationalError as exc:
            raise SinkError(f"{self.what}: lost the connection to PostgreSQL: {first_line(exc)}") from exc

    def close(self) -> None:
        try:
            self.conn.close()  # an open transaction is rolled back by the server
        except Exception:  # closing after a lost connection
            pass


class _TwoPhaseAppendWriter(_Writer, TransactionalSinkWriter):
    """``append`` exactly once: one prepared transaction per subtask and checkpoint epoch."""

    def __init__(self, sink: PostgresSink, context: SinkContext) -> None:
        super().__init__(sink, context)
        self.prefix = sink.prefix_for(context)
        self.job_id = pg.clean_part(context.job_id or "nojob", 40)
        self.attempt = context.attempt
        self.subtask = context.subtask_index
        self.in_transaction = False
        #: COMMIT/ROLLBACK PREPARED cannot run inside a transaction block, and the next epoch's
        #: transaction may be open on ``conn`` when a checkpoint completes: they run on their own
        #: autocommit connection.
        self.control = pg.connect(sink.conninfo, sink.connect_timeout, self.what)
        self._roll_back_leftovers(context)

    def _roll_back_leftovers(self, context: SinkContext) -> None:
        """Roll back this sink's prepared transactions that no restore will commit: those of the
        subtasks this one stands for (``s % parallelism``), of checkpoints after the restored one."""
        for prepared in pg.prepared_transaction_ids(self.control, self.prefix):
            if prepared.subtask % context.parallelism != context.subtask_index:
                continue
            if context.restored_checkpoint is not None and prepared.checkpoint <= context.restored_checkpoint:
                continue  # the restored checkpoint's: committed by whoever restores its committable
            _log.info("%s: rolling back prepared transaction %s (not in the restored checkpoint %s)",
                      self.what, prepared, context.restored_checkpoint)
            self._execute(_sql("ROLLBACK PREPARED {}", str(prepared)), conn=self.control)

    def _flush_buffer(self) -> None:
        if not self.in_transaction:
            self._execute("BEGIN")
            self.in_transaction = True
        self._copy()

    def pre_commit(self, checkpoint_id: int) -> tuple[str, str] | None:
        if self.buffer:
            self._flush_buffer()
        if not self.in_transaction:
            return None
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_current_xact_id()::text")
            xid = cur.fetchone()[0]
        gid = str(pg.SinkTransactionId(self.prefix, self.job_id, self.attempt, self.subtask, checkpoint_id))
        self._execute(_sql("PREPARE TRANSACTION {}", gid))
        self.in_transaction = False
        return gid, xid

    def commit(self, committables: list[Any]) -> None:
        import psycopg

        for gid, xid in committables:
            try:
                self._execute(_sql("COMMIT PREPARED {}", gid), conn=self.control)
            except psycopg.errors.UndefinedObject:
                status = pg.transaction_status(self.control, xid)
                if status == "aborted":
                    raise SinkError(f"{self.what}: prepared transaction {gid} of a completed checkpoint was rolled "
                                    "back by someone else: its records are lost (did another job with the same "
                                    "name and sink write to this database?)") from None
                if status is None:
                    _log.warning("%s: prepared transaction %s is gone and too old to check; taken as committed",
                                 self.what, gid)
                # committed: a commit repeated after a restore

    def close(self) -> None:
        """Abort the open epoch: its transaction is rolled back (prepared ones stay for a commit)."""
        if self.in_transaction:
            try:
                self._execute("ROLLBACK")
            except Exception:  # the connection is gone: so is the transaction
                pass
        try:
            self.control.close()
        except Exception:  # closing after a lost connection
            pass
        super().close()


class _AtLeastOnceAppendWriter(_Writer, SinkWriter):
    """``append`` without two-phase commit: each batch and barrier commits at once. After a
    restore, the records between the restored checkpoint and the crash are written again."""

    def _flush_buffer(self) -> None:
        with self.conn.transaction():
            self._copy()

    def flush(self) -> None:
        self._flush_buffer()


class _UpsertWriter(_Writer, SinkWriter):
    """``upsert``: each key's latest row, written by multi-row INSERT ... ON CONFLICT, committed
    at every barrier and whenever ``batch_size`` rows wait."""

    def __init__(self, sink: PostgresSink, context: SinkContext) -> None:
        super().__init__(sink, context)
        self.pending: dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] = {}

    def write_batch(self, records: list[Any]) -> None:
        if not records:
            return
        rows = self._rows(records)
        assert self.columns is not None
        if any(k not in self.columns for k in self.sink.key):
            raise SinkError(f"{self.what}: records such as {records[0]!r} lack the key {self.sink.key}")
        positions = [self.columns.index(k) for k in self.sink.key]
        for row, record in zip(rows, records, strict=True):
            self.pending[tuple(row[p] for p in positions)] = (row, record)  # the last row of a key wins
        if len(self.pending) >= self.sink.batch_size:
            self._flush_buffer()

    def flush(self) -> None:
        self._flush_buffer()

    def _flush_buffer(self) -> None:
        import psycopg
        from psycopg import sql

        if not self.pending:
            return
        columns = self.columns or []
        rows = list(self.pending.values())
        update = [c for c in columns if c not in self.sink.key]
        action = sql.SQL("DO NOTHING") if not update else sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in update))
        per_statement = max(1, _MAX_PARAMETERS // max(1, len(columns)))
        one_row = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(columns)))
        try:
            with self.conn.transaction(), self.conn.cursor() as cur:
                for start in range(0, len(rows), per_statement):
                    chunk = rows[start:start + per_statement]
                    statement = sql.SQL("INSERT INTO {} ({}) VALUES {} ON CONFLICT ({}) {}").format(
                        table_identifier(self.sink.table), sql.SQL(", ").join(map(sql.Identifier, columns)),
                        sql.SQL(", ").join([one_row] * len(chunk)),
                        sql.SQL(", ").join(map(sql.Identifier, self.sink.key)), action)
                    cur.execute(statement, [value for row, _ in chunk for value in row])
        except psycopg.DatabaseError as exc:
            if exc.diag.sqlstate is None or isinstance(exc, psycopg.OperationalError):
                raise SinkError(f"{self.what}: lost the connection to PostgreSQL: {first_line(exc)}") from exc
            raise pg.rejected(exc, self.sink.table, None, self.what) from exc
        self.pending.clear()


class PostgresSink(Sink):
    """Writes records into the PostgreSQL table ``table`` (``name`` or ``schema.name``).

    Records are dicts (column -> value) or tuples in ``columns`` order; without ``columns``
    dicts name their columns (the first record's keys, the same for every record) and tuples
    fill every column of the table in order.

    * ``mode="append"`` inserts every record (``COPY``, ``batch_size`` rows at a time). With
      ``exactly_once=True`` (the default) by two-phase commit, visible once per checkpoint: needs
      ``max_prepared_transactions`` > 0 on the server. ``exactly_once=False`` commits at every
      barrier instead (at-least-once: a restore writes some records again).
    * ``mode="upsert"`` keeps each ``key``'s latest row (``INSERT ... ON CONFLICT (key) DO
      UPDATE``); the key needs a primary key or unique constraint on exactly its columns.
      Idempotent writes, committed at every barrier: the table ends exact after restores.

    ``conninfo`` is a libpq connection string or URI. The table and its columns are checked when
    the sink is created (on the driver): an unreachable server, a missing table or column, a key
    without a unique constraint or a server without prepared transactions fail at once with a
    :class:`~epochal.errors.PlanError`. ``transaction_prefix`` names this sink's prepared
    transactions (default: from the job's name and the sink's uid); jobs writing to the same
    database at the same time need different ones.
    """

    def __init__(self, conninfo: str, table: str, *, mode: str = "append", key: Sequence[str] = (),
                 columns: Sequence[str] | None = None, exactly_once: bool = True, batch_size: int = 5000,
                 transaction_prefix: str | None = None, connect_timeout: float = 10.0) -> None:
        if mode not in ("append", "upsert"):
            raise PlanError(f"PostgresSink: mode must be 'append' or 'upsert', got {mode!r}")
        if not isinstance(table, str) or not table:
            raise PlanError(f"PostgresSink: table must be a table name, got {table!r}")
        self.conninfo = conninfo
        self.table = table
        self.mode = mode
        self.key = [key] if isinstance(key, str) else list(key)
        self.columns = list(columns) if columns is not None else None
        self.exactly_once = bool(exactly_once) and mode == "append"
        self.batch_size = max(1, int(batch_size))
        self.transaction_prefix = transaction_prefix
        self.connect_timeout = float(connect_timeout)
        self.guarantee = EXACTLY_ONCE if self.exactly_once else AT_LEAST_ONCE
        if mode == "upsert" and not self.key:
            raise PlanError("PostgresSink: mode='upsert' needs key=[column, ...]")
        if self.columns is not None and any(k not in self.columns for k in self.key):
            raise PlanError(f"PostgresSink: key {self.key} must be among the columns {self.columns}")
        try:
            self._check()
        except SinkError as exc:
            raise PlanError(str(exc)) from exc

    def _check(self) -> None:
        """At submit time: the server answers, the table and columns exist, and what the mode
        needs is there (a unique key for upsert, prepared transactions for exactly-once)."""
        what = f"PostgresSink({self.table})"
        conn = pg.connect(self.conninfo, self.connect_timeout, what)
        try:
            info = pg.table_info(conn, self.table)
            if info is None:
                raise SinkError(f"{what}: table {self.table} does not exist")
            for column in (self.columns or []) + self.key:
                if column not in info.columns:
                    raise SinkError(f"{what}: column {column!r} does not exist in table {self.table} "
                                    f"(its columns: {', '.join(info.columns)})")
            if self.mode == "upsert" and set(self.key) not in info.unique_keys:
                raise SinkError(f"{what}: upsert needs a primary key or unique constraint on exactly {self.key}")
            if self.exactly_once and pg.max_prepared_transactions(conn) < 1:
                raise SinkError(f"{what}: the server has max_prepared_transactions = 0, and exactly-once append "
                                "needs prepared transactions: set it (e.g. to 64) in postgresql.conf and restart "
                                "the server, or use exactly_once=False (at-least-once)")
        finally:
            conn.close()

    def prefix_for(self, context: SinkContext) -> str:
        """The prefix of this sink's global transaction ids in ``context``'s job."""
        if self.transaction_prefix:
            return pg.clean_part(self.transaction_prefix, 80)
        return f"epochal:{pg.clean_part(context.job_name or 'job', 60)}:{pg.clean_part(context.operator_uid, 40)}"

    def create_writer(self, context: SinkContext) -> SinkWriter:
        if self.mode == "upsert":
            return _UpsertWriter(self, context)
        if self.exactly_once:
            return _TwoPhaseAppendWriter(self, context)
        return _AtLeastOnceAppendWriter(self, context)
